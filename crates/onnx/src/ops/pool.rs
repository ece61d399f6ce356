//! ONNX `MaxPool`, `AveragePool` and `LpPool` as the taps of their window: the input is padded
//! (with -inf for a maximum, zeros for a sum; a `ceil_mode` window's overhang past the padding
//! likewise), each kernel tap is a strided `slice` of it (a view, shared with `Conv`), and
//! the taps are combined elementwise (`max`, or `add` and a divide), so one fused kernel reads
//! each input element once per tap and writes the pooled result.

use super::Node;
use super::conv::{Geometry, geometry, pad_spatial, positive, windows};
use super::math::{bin, cast_to, one, un};
use crate::ctx::{Ctx, R, Val};
use irc_ir::{Attrs, DType, OpKind};

/// The input `[N, C, spatial...]` (a float) and its window geometry.
fn window(cx: &mut Ctx, n: &Node) -> R<(Val, Geometry)> {
    let x = n.x(0)?;
    let ty = cx.ty(&x);
    if ty.rank() < 3 {
        return Err(format!(
            "the input {:?} must be [N, C, spatial...]",
            ty.shape
        ));
    }
    if !ty.dtype.is_float() {
        return Err(format!(
            "pooling {} is not supported (float inputs only)",
            ty.dtype
        ));
    }
    let kernel = n.ints("kernel_shape").ok_or("kernel_shape is required")?;
    let kernel = positive(kernel, "kernel_shape")?;
    let ceil = n.int("ceil_mode", 0) != 0;
    let g = geometry(n, &ty.shape[2..], kernel, ceil)?;
    Ok((x, g))
}

/// The taps combined with `op`, left to right.
fn fold(cx: &mut Ctx, op: OpKind, taps: Vec<Val>) -> R<Val> {
    let mut it = taps.into_iter();
    let mut acc = it.next().ok_or("the kernel has no taps")?;
    for t in it {
        acc = bin(cx, op, &acc, &t)?;
    }
    Ok(acc)
}

/// A sum pooling's input in f32 for 16-bit floats (rounded once at the end, as PyTorch's
/// kernels accumulate).
fn widened(cx: &mut Ctx, x: &Val) -> R<Val> {
    match cx.ty(x).dtype {
        DType::F16 | DType::BF16 => cast_to(cx, x, DType::F32),
        _ => Ok(x.clone()),
    }
}

pub fn max_pool(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    if n.proto.output.get(1).is_some_and(|o| !o.is_empty()) {
        return Err("the Indices output is not supported".into());
    }
    if n.int("storage_order", 0) != 0 {
        return Err("storage_order=1 (column-major indices) is not supported".into());
    }
    let (x, g) = window(cx, n)?;
    let p = pad_spatial(cx, &x, &g, f64::NEG_INFINITY, f64::NEG_INFINITY)?;
    let taps = windows(cx, &p, &g)?;
    one(fold(cx, OpKind::Max, taps)?)
}

pub fn average_pool(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, g) = window(cx, n)?;
    let d = cx.ty(&x).dtype;
    let xw = widened(cx, &x)?;
    let p = pad_spatial(cx, &xw, &g, 0.0, 0.0)?;
    let taps = windows(cx, &p, &g)?;
    let sum = fold(cx, OpKind::Add, taps)?;
    let include_pad = n.int("count_include_pad", 0) != 0;
    let padded = g.pads.iter().any(|&(b, a)| b + a > 0);
    let overhang = g.overhang.iter().any(|&o| o > 0);
    let wd = cx.ty(&xw).dtype;
    let y = if overhang || (padded && !include_pad) {
        // The count of each window's elements: the same taps over a mask of ones `[1, 1,
        // spatial...]` padded with ones where padding counts and zeros elsewhere (known at
        // import time, so folded).
        let mut shape = vec![1i64, 1];
        shape.extend(cx.ty(&x).shape[2..].iter().map(|&s| s as i64));
        // Written into the graph, so the counts are computed in the kernel from indices
        // rather than folded into a weight.
        let ones = cx.scalar(1.0, wd);
        let ones = Val::Dyn(cx.value(&ones)?);
        let ones = cx.op(
            OpKind::Broadcast,
            &[&ones],
            Attrs::new().with("shape", irc_ir::ints(&shape)),
        )?;
        let fill = if include_pad { 1.0 } else { 0.0 };
        let mask = pad_spatial(cx, &ones, &g, fill, 0.0)?;
        let taps = windows(cx, &mask, &g)?;
        let count = fold(cx, OpKind::Add, taps)?;
        bin(cx, OpKind::Div, &sum, &count)?
    } else {
        let k: u64 = g.kernel.iter().product();
        let k = cx.scalar(k as f64, wd);
        bin(cx, OpKind::Div, &sum, &k)?
    };
    one(cast_to(cx, &y, d)?)
}

pub fn lp_pool(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, g) = window(cx, n)?;
    let d = cx.ty(&x).dtype;
    let p_norm = n.int("p", 2);
    if p_norm < 1 {
        return Err(format!("p = {p_norm} must be at least 1"));
    }
    let xw = widened(cx, &x)?;
    let wd = cx.ty(&xw).dtype;
    let a = un(cx, OpKind::Abs, &xw)?;
    let powered = match p_norm {
        1 => a,
        2 => bin(cx, OpKind::Mul, &a, &a)?,
        p => {
            let e = cx.scalar(p as f64, wd);
            bin(cx, OpKind::Pow, &a, &e)?
        }
    };
    let padded = pad_spatial(cx, &powered, &g, 0.0, 0.0)?;
    let taps = windows(cx, &padded, &g)?;
    let sum = fold(cx, OpKind::Add, taps)?;
    let y = match p_norm {
        1 => sum,
        2 => un(cx, OpKind::Sqrt, &sum)?,
        p => {
            let e = cx.scalar(1.0 / p as f64, wd);
            bin(cx, OpKind::Pow, &sum, &e)?
        }
    };
    one(cast_to(cx, &y, d)?)
}
