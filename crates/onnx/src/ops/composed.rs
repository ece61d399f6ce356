//! Handlers of ops written with a few others, as ONNX's own function bodies define them or as
//! short compositions: Tan, Shrink, LpNormalization, MeanVarianceNormalization, LRN, Hardmax
//! and ReduceProd.

use super::Node;
use super::math::{
    axis, bin, broadcast_to, down, extremum_index, one, reduce, reduce_axes, reshape_to, sc,
    select, un, up,
};
use super::pad::slice_axis;
use crate::ctx::{Ctx, R, Val};
use irc_ir::{Attr, Attrs, DType, OpKind};

/// `sin(x) / cos(x)`.
pub fn tan(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let s = un(cx, OpKind::Sin, &x)?;
    let c = un(cx, OpKind::Cos, &x)?;
    one(bin(cx, OpKind::Div, &s, &c)?)
}

/// `x + bias` below `-lambd`, `x - bias` above `lambd`, else 0.
pub fn shrink(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let (lambd, bias) = (n.float("lambd", 0.5) as f64, n.float("bias", 0.0) as f64);
    let (lo, hi) = (sc(cx, -lambd, &x), sc(cx, lambd, &x));
    let b = sc(cx, bias, &x);
    let below = bin(cx, OpKind::Lt, &x, &lo)?;
    let above = bin(cx, OpKind::Gt, &x, &hi)?;
    let up = bin(cx, OpKind::Add, &x, &b)?;
    let down = bin(cx, OpKind::Sub, &x, &b)?;
    let zero = sc(cx, 0.0, &x);
    let inner = select(cx, &above, &down, &zero)?;
    one(select(cx, &below, &up, &inner)?)
}

/// `x / ||x||_p` along `axis` (p 1 or 2), 0 where the norm is 0 (as ONNX defines it).
pub fn lp_normalization(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let rank = cx.ty(&x).rank();
    let a = axis(n.int("axis", -1), rank)? as i64;
    let norm = match n.int("p", 2) {
        1 => {
            let ab = un(cx, OpKind::Abs, &x)?;
            reduce(cx, OpKind::ReduceSum, &ab, &[a], true)?
        }
        2 => {
            let sq = bin(cx, OpKind::Mul, &x, &x)?;
            let s = reduce(cx, OpKind::ReduceSum, &sq, &[a], true)?;
            un(cx, OpKind::Sqrt, &s)?
        }
        p => return Err(format!("p = {p} (1 or 2)")),
    };
    let zero = sc(cx, 0.0, &x);
    let none = bin(cx, OpKind::Eq, &norm, &zero)?;
    let q = bin(cx, OpKind::Div, &x, &norm)?;
    one(select(cx, &none, &zero, &q)?)
}

/// `(x - mean) / (sqrt(mean(x²) - mean²) + 1e-9)` over `axes` (default `[0, 2, 3]`).
pub fn mean_variance_normalization(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let rank = cx.ty(&x).rank();
    let axes = n.ints("axes").unwrap_or_else(|| vec![0, 2, 3]);
    let axes: Vec<i64> = axes
        .iter()
        .map(|&a| axis(a, rank).map(|a| a as i64))
        .collect::<R<_>>()?;
    let mean = reduce(cx, OpKind::ReduceMean, &x, &axes, true)?;
    let sq = bin(cx, OpKind::Mul, &x, &x)?;
    let sq_mean = reduce(cx, OpKind::ReduceMean, &sq, &axes, true)?;
    let mean_sq = bin(cx, OpKind::Mul, &mean, &mean)?;
    let var = bin(cx, OpKind::Sub, &sq_mean, &mean_sq)?;
    let std = un(cx, OpKind::Sqrt, &var)?;
    let eps = sc(cx, 1e-9, &x);
    let den = bin(cx, OpKind::Add, &std, &eps)?;
    let c = bin(cx, OpKind::Sub, &x, &mean)?;
    one(bin(cx, OpKind::Div, &c, &den)?)
}

/// LRN: `x / (bias + alpha / size · Σ x²)^beta`, the sum over the `size` channels around each
/// (`⌊(size - 1)/2⌋` before, the rest after, clipped at the edges): the squares padded with
/// zeros along the channel axis and `size` slices of them added.
pub fn lrn(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    super::math::require_float(cx, &n.x(0)?, "LRN")?;
    let (x, d) = up(cx, &n.x(0)?)?;
    let shape = cx.ty(&x).shape;
    if shape.len() < 2 {
        return Err(format!("the input {shape:?} must be [N, C, ...]"));
    }
    let size = n.int("size", 0);
    if !(1..=4096).contains(&size) {
        return Err(format!("size = {size} (a positive window of channels)"));
    }
    let c = shape[1];
    let (before, after) = ((size - 1) / 2, size - 1 - (size - 1) / 2);
    let sq = bin(cx, OpKind::Mul, &x, &x)?;
    let mut parts = vec![];
    for (k, pad) in [(0, before), (1, after)] {
        if pad > 0 {
            let mut zs = shape.clone();
            zs[1] = pad as u64;
            let z = sc(cx, 0.0, &x);
            parts.push((k, broadcast_to(cx, &z, &zs)?));
        }
    }
    let mut all: Vec<&Val> = parts.iter().filter(|p| p.0 == 0).map(|p| &p.1).collect();
    all.push(&sq);
    all.extend(parts.iter().filter(|p| p.0 == 1).map(|p| &p.1));
    let padded = cx.op(
        OpKind::Concat,
        &all,
        Attrs::new().with("axis", Attr::Int(1)),
    )?;
    let mut sum: Option<Val> = None;
    for k in 0..size {
        let s = slice_axis(cx, &padded, 1, k, k + c as i64, 1)?;
        sum = Some(match sum {
            Some(a) => bin(cx, OpKind::Add, &a, &s)?,
            None => s,
        });
    }
    let sum = sum.ok_or("an empty window")?;
    let alpha = sc(cx, n.float("alpha", 1e-4) as f64 / size as f64, &x);
    let bias = sc(cx, n.float("bias", 1.0) as f64, &x);
    let beta = sc(cx, n.float("beta", 0.75) as f64, &x);
    let base = bin(cx, OpKind::Mul, &sum, &alpha)?;
    let base = bin(cx, OpKind::Add, &base, &bias)?;
    let den = bin(cx, OpKind::Pow, &base, &beta)?;
    let y = bin(cx, OpKind::Div, &x, &den)?;
    down(cx, d, y)
}

/// Hardmax: 1 at the first maximum along `axis`, 0 elsewhere (ArgMax's composition, then
/// `eq` against the index).
pub fn hardmax(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let ty = cx.ty(&x);
    let a = axis(n.int("axis", -1), ty.rank())?;
    let (idx, first) = extremum_index(cx, &x, a, OpKind::ReduceMax, false, true)?;
    let at = bin(cx, OpKind::Eq, &idx, &first)?;
    let (hi, lo) = (sc(cx, 1.0, &x), sc(cx, 0.0, &x));
    one(select(cx, &at, &hi, &lo)?)
}

/// The product along axis `a` as a tree of `mul`s of the axis's halves (a dim of 1 kept).
fn prod_axis(cx: &mut Ctx, x: &Val, a: usize) -> R<Val> {
    let mut x = x.clone();
    loop {
        let len = cx.ty(&x).shape[a] as i64;
        if len <= 1 {
            return Ok(x);
        }
        let h = len / 2;
        let lo = slice_axis(cx, &x, a, 0, h, 1)?;
        let hi = slice_axis(cx, &x, a, h, 2 * h, 1)?;
        let p = bin(cx, OpKind::Mul, &lo, &hi)?;
        x = if len % 2 == 1 {
            let rest = slice_axis(cx, &x, a, 2 * h, len, 1)?;
            let attrs = Attrs::new().with("axis", Attr::Int(a as i64));
            cx.op(OpKind::Concat, &[&p, &rest], attrs)?
        } else {
            p
        };
    }
}

/// ReduceProd: per reduced axis a tree of `mul`s over halves of the axis (exact for zeros,
/// negatives and integers, unlike `exp(Σ log)`).
pub fn reduce_prod(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let ty = cx.ty(&x);
    let Some((axes, keep)) = reduce_axes(cx, n)? else {
        return one(x);
    };
    if ty.rank() == 0 {
        return one(x);
    }
    if ty.dtype == DType::I1 {
        return Err("ReduceProd of bool is not an ONNX type".into());
    }
    let mut set = vec![false; ty.rank()];
    for &a in &axes {
        set[axis(a, ty.rank())?] = true;
    }
    let mut y = x;
    for (a, _) in set.iter().enumerate().filter(|p| *p.1) {
        y = prod_axis(cx, &y, a)?;
    }
    if keep {
        return one(y);
    }
    let out: Vec<u64> = (0..ty.rank())
        .filter(|&a| !set[a])
        .map(|a| ty.shape[a])
        .collect();
    one(reshape_to(cx, &y, &out)?)
}
