//! The reference of the v2 ops that move or choose elements rather than compute them
//! (`slice`, `concat`, `gather`, `select`, `iota`) and of the comparisons.
//!
//! Every data-moving op is one gather: a list of (operand, element offset) pairs, one per
//! result element, read out of the operands' vectors ([`pick`]). Offsets are computed from the
//! verified types, and `gather`'s indices are range-checked before any read, so no op reads out
//! of bounds.

use crate::InterpError;
use crate::tensor::{Data, Tensor};
use crate::walk::{broadcast_strides, contiguous_strides, par_map};
use irc_ir::indexing::slice_windows;
use irc_ir::infer::normalize_axis;
use irc_ir::{Attr, Attrs, OpKind, TensorType};
use rayon::prelude::*;

fn bad(msg: String) -> InterpError {
    InterpError::BadInput(msg)
}

/// Reads, for each `(operand, offset)` of `src`, that element of `parts[operand]`. Every part
/// has the same dtype (the verifier guarantees it for the ops that call this).
fn pick(parts: &[&Data], src: &[(u32, usize)]) -> Result<Data, InterpError> {
    macro_rules! variant {
        ($V:ident) => {{
            let vs = parts
                .iter()
                .map(|d| match d {
                    Data::$V(v) => Some(v.as_slice()),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("operands of one dtype expected".into()))?;
            Data::$V(src.par_iter().map(|&(p, o)| vs[p as usize][o]).collect())
        }};
    }
    Ok(match parts.first() {
        Some(Data::F16(_)) => variant!(F16),
        Some(Data::BF16(_)) => variant!(BF16),
        Some(Data::F32(_)) => variant!(F32),
        Some(Data::F64(_)) => variant!(F64),
        Some(Data::I32(_)) => variant!(I32),
        Some(Data::I64(_)) => variant!(I64),
        Some(Data::I1(_)) => variant!(I1),
        None => return Err(bad("no operands".into())),
    })
}

/// Visits every coordinate of `shape` in row-major order.
fn for_each_coord(shape: &[u64], mut f: impl FnMut(&[u64])) {
    let n: u64 = shape.iter().product();
    let mut idx = vec![0u64; shape.len()];
    for _ in 0..n {
        f(&idx);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

pub fn slice(x: &Tensor, attrs: &Attrs) -> Result<Data, InterpError> {
    let windows = slice_windows(&x.ty.shape, attrs).map_err(|e| bad(e.message))?;
    let strides = contiguous_strides(&x.ty.shape);
    let out: Vec<u64> = windows.iter().map(|w| w.len).collect();
    let mut src = Vec::with_capacity(out.iter().product::<u64>() as usize);
    for_each_coord(&out, |c| {
        let off = c
            .iter()
            .zip(&windows)
            .zip(&strides)
            .map(|((&i, w), &s)| w.index(i) as usize * s)
            .sum();
        src.push((0, off));
    });
    pick(&[&x.data], &src)
}

/// The sizes before, along and after `axis` of `shape`.
fn split3(shape: &[u64], axis: usize) -> (usize, usize, usize) {
    let outer: u64 = shape[..axis].iter().product();
    let inner: u64 = shape[axis + 1..].iter().product();
    (outer as usize, shape[axis] as usize, inner as usize)
}

fn axis_attr(attrs: &Attrs, default: i64, rank: usize) -> Result<usize, InterpError> {
    let a = attrs.get("axis").and_then(Attr::as_int).unwrap_or(default);
    normalize_axis(a, rank).ok_or_else(|| bad(format!("axis {a} is out of range for rank {rank}")))
}

pub fn concat(xs: &[&Tensor], attrs: &Attrs) -> Result<Data, InterpError> {
    let axis = axis_attr(attrs, 0, xs[0].ty.rank())?;
    let (outer, _, inner) = split3(&xs[0].ty.shape, axis);
    let total: usize = xs.iter().map(|x| x.numel()).sum();
    let mut src = Vec::with_capacity(total);
    for o in 0..outer {
        for (p, x) in xs.iter().enumerate() {
            let run = x.ty.shape[axis] as usize * inner;
            src.extend((o * run..(o + 1) * run).map(|k| (p as u32, k)));
        }
    }
    let parts: Vec<&Data> = xs.iter().map(|x| &x.data).collect();
    pick(&parts, &src)
}

pub fn gather(x: &Tensor, indices: &Tensor, attrs: &Attrs) -> Result<Data, InterpError> {
    let axis = axis_attr(attrs, 0, x.ty.rank())?;
    let (outer, n, inner) = split3(&x.ty.shape, axis);
    let idx = indices.data.to_i64();
    let mut rows = Vec::with_capacity(idx.len());
    for (k, &i) in idx.iter().enumerate() {
        let wrapped = if i < 0 { i + n as i64 } else { i };
        if !(0..n as i64).contains(&wrapped) {
            return Err(bad(format!(
                "'gather' index {i} (element {k} of the indices) is out of range for axis {axis} of size {n}; indices must be in [-{n}, {n})"
            )));
        }
        rows.push(wrapped as usize);
    }
    let mut src = Vec::with_capacity(outer * rows.len() * inner);
    for o in 0..outer {
        for &r in &rows {
            let base = (o * n + r) * inner;
            src.extend((base..base + inner).map(|k| (0, k)));
        }
    }
    pick(&[&x.data], &src)
}

pub fn select(c: &Tensor, a: &Tensor, b: &Tensor, out: &TensorType) -> Result<Data, InterpError> {
    let cond = c.data.to_bool();
    let sc = broadcast_strides(&c.ty.shape, &out.shape);
    let sa = broadcast_strides(&a.ty.shape, &out.shape);
    let sb = broadcast_strides(&b.ty.shape, &out.shape);
    let src = par_map(&out.shape, [&sc, &sa, &sb], |[i, j, k]| {
        if cond[i] { (0u32, j) } else { (1u32, k) }
    });
    pick(&[&a.data, &b.data], &src)
}

pub fn iota(ty: &TensorType, attrs: &Attrs) -> Result<Data, InterpError> {
    let axis = axis_attr(attrs, 0, ty.rank())?;
    let (_, n, inner) = split3(&ty.shape, axis);
    let vals: Vec<i64> = (0..ty.numel() as usize)
        .map(|k| ((k / inner) % n) as i64)
        .collect();
    Ok(Data::from_i64(ty.dtype, vals))
}

fn compare_with<T: PartialOrd>(op: OpKind, a: T, b: T) -> bool {
    match op {
        OpKind::Eq => a == b,
        OpKind::Ne => a != b,
        OpKind::Lt => a < b,
        OpKind::Le => a <= b,
        OpKind::Gt => a > b,
        _ => a >= b,
    }
}

pub fn compare(op: OpKind, a: &Tensor, b: &Tensor, out: &TensorType) -> Result<Data, InterpError> {
    let sa = broadcast_strides(&a.ty.shape, &out.shape);
    let sb = broadcast_strides(&b.ty.shape, &out.shape);
    Ok(Data::I1(if a.ty.dtype.is_float() {
        // f64 holds every value of every float dtype exactly.
        let (x, y) = (a.data.to_f64(), b.data.to_f64());
        par_map(&out.shape, [&sa, &sb], |[i, j]| {
            compare_with(op, x[i], y[j])
        })
    } else {
        let (x, y) = (a.data.to_i64(), b.data.to_i64());
        par_map(&out.shape, [&sa, &sb], |[i, j]| {
            compare_with(op, x[i], y[j])
        })
    }))
}
