//! Handlers of ops written with a few others, as ONNX's own function bodies define them: Tan,
//! Shrink, LpNormalization and MeanVarianceNormalization.

use super::Node;
use super::math::{axis, bin, one, reduce, sc, select, un};
use crate::ctx::{Ctx, R, Val};
use irc_ir::OpKind;

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
