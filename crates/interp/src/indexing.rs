//! The reference of the v2 ops that move or choose elements rather than compute them
//! (`slice`, `concat`, `gather`, `select`, `iota`) and of the comparisons.
//!
//! Every data-moving op is one gather: for each result element, an (operand, element offset)
//! pair computed from its index and read out of the operands' vectors ([`pick`]). Offsets are computed from the
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

/// Builds a result of `n` elements whose `k`-th is element `src(k).1` of `parts[src(k).0]`,
/// without materializing the index list. Every part has the same dtype (the verifier
/// guarantees it for the ops that call this) and every offset is in range (the callers derive
/// them from verified types and range-checked indices).
fn pick(
    parts: &[&Data],
    n: usize,
    src: impl Fn(usize) -> (usize, usize) + Sync,
) -> Result<Data, InterpError> {
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
            Data::$V(
                (0..n)
                    .into_par_iter()
                    .map(|k| {
                        let (p, o) = src(k);
                        vs[p][o]
                    })
                    .collect(),
            )
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

pub fn slice(x: &Tensor, attrs: &Attrs) -> Result<Data, InterpError> {
    let windows = slice_windows(&x.ty.shape, attrs).map_err(|e| bad(e.message))?;
    let strides = contiguous_strides(&x.ty.shape);
    let out: Vec<usize> = windows.iter().map(|w| w.len as usize).collect();
    let n = out.iter().product();
    pick(&[&x.data], n, |k| {
        let (mut rem, mut off) = (k, 0);
        for d in (0..out.len()).rev() {
            off += windows[d].index((rem % out[d]) as u64) as usize * strides[d];
            rem /= out[d];
        }
        (0, off)
    })
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
    let (_, _, inner) = split3(&xs[0].ty.shape, axis);
    // Where each operand starts along the axis.
    let mut starts = vec![0usize];
    for x in xs {
        starts.push(starts[starts.len() - 1] + x.ty.shape[axis] as usize);
    }
    let total = starts[xs.len()];
    let n: usize = xs.iter().map(|x| x.numel()).sum();
    let parts: Vec<&Data> = xs.iter().map(|x| &x.data).collect();
    pick(&parts, n, |k| {
        let (o, r) = (k / (total * inner), k % (total * inner));
        let (a, i) = (r / inner, r % inner);
        let p = starts.partition_point(|&s| s <= a) - 1;
        let len = starts[p + 1] - starts[p];
        (p, (o * len + a - starts[p]) * inner + i)
    })
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
    let m = rows.len();
    pick(&[&x.data], outer * m * inner, |k| {
        let (o, j, i) = (k / (m * inner), (k / inner) % m, k % inner);
        (0, (o * n + rows[j]) * inner + i)
    })
}

pub fn select(c: &Tensor, a: &Tensor, b: &Tensor, out: &TensorType) -> Result<Data, InterpError> {
    let cond = c.data.to_bool();
    let sc = broadcast_strides(&c.ty.shape, &out.shape);
    let sa = broadcast_strides(&a.ty.shape, &out.shape);
    let sb = broadcast_strides(&b.ty.shape, &out.shape);
    let src = par_map(&out.shape, [&sc, &sa, &sb], |[i, j, k]| {
        if cond[i] { (0usize, j) } else { (1usize, k) }
    });
    pick(&[&a.data, &b.data], src.len(), |k| src[k])
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
