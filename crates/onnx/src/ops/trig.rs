//! The hyperbolic functions and their inverses, and the inverse trigonometric functions, which
//! irc has no op for, written with `exp`, `log`, `sqrt` and arithmetic in forms that keep
//! their accuracy where the textbook formula loses it (16-bit floats computed in f32):
//!
//! - `sinh`: its Taylor series to `x¹³` below 1/2 (where `eˣ - e⁻ˣ` cancels), else
//!   `eᵃ/2 - e⁻ᵃ/2` of `a = |x|`, the first as `(e^(a/2) / 2) · e^(a/2)` (which does not
//!   overflow before `sinh` does); `cosh` the sum of the same two terms.
//! - `asinh`, `acosh`, `atanh` through `log1p`, itself computed as `log(u) · y / (u - 1)` with
//!   `u = 1 + y` (exact where `u` rounds: the rounding error of `u` cancels in the quotient):
//!   `asinh |x| = log1p(|x| + x² / (1 + √(1 + x²)))`, `acosh x = log1p(d + √(d · (2 + d)))`
//!   with `d = x - 1`, `atanh |x| = log1p(2|x| / (1 - |x|)) / 2`; past `2²⁸` `asinh` and
//!   `acosh` are `log(x) + ln 2`.
//! - `atan` of `|x| ≤ 1` (else `π/2 - atan(1/|x|)`) halved twice by `atan t = 2 atan(t / (1 +
//!   √(1 + t²)))` to at most `tan(π/16)`, then its series to `t¹⁵`; `asin x = atan(x /
//!   √((1 - x)(1 + x)))`, `acos x = 2 atan(√((1 - x) / (1 + x)))`.
//!
//! Odd functions are computed on `|x|` and take `x`'s sign back.

use super::Node;
use super::math::{bin, down, sc, select, un, up};
use crate::ctx::{Ctx, R, Val};
use irc_ir::OpKind;
use std::f64::consts::{FRAC_PI_2, LN_2};

/// `a ∘ c` for a known scalar `c`.
fn opc(cx: &mut Ctx, op: OpKind, a: &Val, c: f64) -> R<Val> {
    let k = sc(cx, c, a);
    bin(cx, op, a, &k)
}

/// `c ∘ a` for a known scalar `c`.
fn cop(cx: &mut Ctx, op: OpKind, c: f64, a: &Val) -> R<Val> {
    let k = sc(cx, c, a);
    bin(cx, op, &k, a)
}

/// `Σ coef[k] · t^(2k)` times `t` (an odd series in Horner form over `t²`).
fn odd_series(cx: &mut Ctx, t: &Val, coef: &[f64]) -> R<Val> {
    let t2 = bin(cx, OpKind::Mul, t, t)?;
    let (&last, rest) = coef.split_last().ok_or("an empty series")?;
    let mut acc = sc(cx, last, t);
    for &c in rest.iter().rev() {
        acc = bin(cx, OpKind::Mul, &acc, &t2)?;
        acc = opc(cx, OpKind::Add, &acc, c)?;
    }
    bin(cx, OpKind::Mul, &acc, t)
}

/// `r` with `x`'s sign (`r ≥ 0`).
fn signed(cx: &mut Ctx, x: &Val, r: &Val) -> R<Val> {
    let neg = opc(cx, OpKind::Lt, x, 0.0)?;
    let m = un(cx, OpKind::Neg, r)?;
    select(cx, &neg, &m, r)
}

/// `log(1 + y)`, accurate for small `y`: `log(u) · y / (u - 1)` with `u = 1 + y`; `y` where `u`
/// rounds to 1, `u` where it is infinite.
fn log1p(cx: &mut Ctx, y: &Val) -> R<Val> {
    let u = opc(cx, OpKind::Add, y, 1.0)?;
    let l = un(cx, OpKind::Log, &u)?;
    let um1 = opc(cx, OpKind::Sub, &u, 1.0)?;
    let q = bin(cx, OpKind::Div, y, &um1)?;
    let r = bin(cx, OpKind::Mul, &l, &q)?;
    let inf = opc(cx, OpKind::Eq, &u, f64::INFINITY)?;
    let r = select(cx, &inf, &u, &r)?;
    let one = opc(cx, OpKind::Eq, &u, 1.0)?;
    select(cx, &one, y, &r)
}

/// `eᵃ/2` as `(e^(a/2) / 2) · e^(a/2)` (finite as far as `sinh a` is, with `a` not rounded by a
/// shift) and `e⁻ᵃ/2`.
fn half_exps(cx: &mut Ctx, a: &Val) -> R<(Val, Val)> {
    let h = opc(cx, OpKind::Mul, a, 0.5)?;
    let h = un(cx, OpKind::Exp, &h)?;
    let hh = opc(cx, OpKind::Mul, &h, 0.5)?;
    let p = bin(cx, OpKind::Mul, &hh, &h)?;
    let m = un(cx, OpKind::Neg, a)?;
    let m = un(cx, OpKind::Exp, &m)?;
    let m = opc(cx, OpKind::Mul, &m, 0.5)?;
    Ok((p, m))
}

/// A unary function of the node's input, computed in f32 for 16-bit floats.
fn unary(cx: &mut Ctx, n: &Node, f: fn(&mut Ctx, &Val) -> R<Val>) -> R<Vec<Val>> {
    let (x, d) = up(cx, &n.x(0)?)?;
    if !cx.ty(&x).dtype.is_float() {
        return Err(format!(
            "{} of {} (float inputs only)",
            n.proto.op_type,
            cx.ty(&x).dtype
        ));
    }
    let y = f(cx, &x)?;
    down(cx, d, y)
}

fn sinh_of(cx: &mut Ctx, x: &Val) -> R<Val> {
    let a = un(cx, OpKind::Abs, x)?;
    // 1/(2k+1)! for k = 0..6
    let mut coef = vec![1.0];
    for k in 1..7 {
        let prev = coef[k - 1];
        coef.push(prev / ((2 * k) * (2 * k + 1)) as f64);
    }
    let series = odd_series(cx, &a, &coef)?;
    let (p, m) = half_exps(cx, &a)?;
    let diff = bin(cx, OpKind::Sub, &p, &m)?;
    let small = opc(cx, OpKind::Lt, &a, 0.5)?;
    let r = select(cx, &small, &series, &diff)?;
    signed(cx, x, &r)
}

fn cosh_of(cx: &mut Ctx, x: &Val) -> R<Val> {
    let a = un(cx, OpKind::Abs, x)?;
    let (p, m) = half_exps(cx, &a)?;
    bin(cx, OpKind::Add, &p, &m)
}

/// `log(x) + ln 2` where `x > 2²⁸`, else `near`.
fn far_log(cx: &mut Ctx, x: &Val, near: &Val) -> R<Val> {
    let big = opc(cx, OpKind::Gt, x, 2f64.powi(28))?;
    let l = un(cx, OpKind::Log, x)?;
    let l = opc(cx, OpKind::Add, &l, LN_2)?;
    select(cx, &big, &l, near)
}

fn asinh_of(cx: &mut Ctx, x: &Val) -> R<Val> {
    let a = un(cx, OpKind::Abs, x)?;
    let a2 = bin(cx, OpKind::Mul, &a, &a)?;
    let s = opc(cx, OpKind::Add, &a2, 1.0)?;
    let s = un(cx, OpKind::Sqrt, &s)?;
    let s = opc(cx, OpKind::Add, &s, 1.0)?;
    let q = bin(cx, OpKind::Div, &a2, &s)?;
    let y = bin(cx, OpKind::Add, &a, &q)?;
    let near = log1p(cx, &y)?;
    let r = far_log(cx, &a, &near)?;
    signed(cx, x, &r)
}

fn acosh_of(cx: &mut Ctx, x: &Val) -> R<Val> {
    let d = opc(cx, OpKind::Sub, x, 1.0)?;
    let t = opc(cx, OpKind::Add, &d, 2.0)?;
    let t = bin(cx, OpKind::Mul, &d, &t)?;
    let t = un(cx, OpKind::Sqrt, &t)?;
    let y = bin(cx, OpKind::Add, &d, &t)?;
    let near = log1p(cx, &y)?;
    let r = far_log(cx, x, &near)?;
    // NaN below 1 (where d · (2 + d) is positive again below -1).
    let inside = opc(cx, OpKind::Ge, x, 1.0)?;
    let nan = sc(cx, f64::NAN, x);
    select(cx, &inside, &r, &nan)
}

fn atanh_of(cx: &mut Ctx, x: &Val) -> R<Val> {
    let a = un(cx, OpKind::Abs, x)?;
    let den = cop(cx, OpKind::Sub, 1.0, &a)?;
    let num = bin(cx, OpKind::Add, &a, &a)?;
    let y = bin(cx, OpKind::Div, &num, &den)?;
    let l = log1p(cx, &y)?;
    let r = opc(cx, OpKind::Mul, &l, 0.5)?;
    signed(cx, x, &r)
}

/// `t / (1 + √(1 + t²))`: `tan(atan(t) / 2)`.
fn halve(cx: &mut Ctx, t: &Val) -> R<Val> {
    let t2 = bin(cx, OpKind::Mul, t, t)?;
    let s = opc(cx, OpKind::Add, &t2, 1.0)?;
    let s = un(cx, OpKind::Sqrt, &s)?;
    let s = opc(cx, OpKind::Add, &s, 1.0)?;
    bin(cx, OpKind::Div, t, &s)
}

fn atan_of(cx: &mut Ctx, x: &Val) -> R<Val> {
    let a = un(cx, OpKind::Abs, x)?;
    let inv = opc(cx, OpKind::Gt, &a, 1.0)?;
    let ra = cop(cx, OpKind::Div, 1.0, &a)?;
    let y = select(cx, &inv, &ra, &a)?;
    let y = halve(cx, &y)?;
    let y = halve(cx, &y)?;
    // atan t = t - t³/3 + t⁵/5 - ... to t¹⁵
    let coef: Vec<f64> = (0..8)
        .map(|k| {
            let sign = if k % 2 == 0 { 1.0 } else { -1.0 };
            sign / (2 * k + 1) as f64
        })
        .collect();
    let p = odd_series(cx, &y, &coef)?;
    let p = opc(cx, OpKind::Mul, &p, 4.0)?;
    let q = cop(cx, OpKind::Sub, FRAC_PI_2, &p)?;
    let r = select(cx, &inv, &q, &p)?;
    signed(cx, x, &r)
}

fn asin_of(cx: &mut Ctx, x: &Val) -> R<Val> {
    let lo = cop(cx, OpKind::Sub, 1.0, x)?;
    let hi = opc(cx, OpKind::Add, x, 1.0)?;
    let c = bin(cx, OpKind::Mul, &lo, &hi)?;
    let c = un(cx, OpKind::Sqrt, &c)?;
    let t = bin(cx, OpKind::Div, x, &c)?;
    atan_of(cx, &t)
}

fn acos_of(cx: &mut Ctx, x: &Val) -> R<Val> {
    let lo = cop(cx, OpKind::Sub, 1.0, x)?;
    let hi = opc(cx, OpKind::Add, x, 1.0)?;
    let q = bin(cx, OpKind::Div, &lo, &hi)?;
    let q = un(cx, OpKind::Sqrt, &q)?;
    let t = atan_of(cx, &q)?;
    opc(cx, OpKind::Mul, &t, 2.0)
}

pub fn sinh(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, sinh_of)
}
pub fn cosh(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, cosh_of)
}
pub fn asinh(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, asinh_of)
}
pub fn acosh(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, acosh_of)
}
pub fn atanh(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, atanh_of)
}
pub fn atan(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, atan_of)
}
pub fn asin(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, asin_of)
}
pub fn acos(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, acos_of)
}
