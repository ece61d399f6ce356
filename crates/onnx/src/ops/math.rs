//! Handlers of the elementwise ops, activations, matmuls and reductions, with the small helpers
//! every handler shares (softmax and the normalizations: `norm.rs`).

use super::Node;
use crate::ctx::{Ctx, R, Val};
use irc_ir::{Attr, Attrs, DType, OpKind, TensorType, ints};

// ---- helpers --------------------------------------------------------------------------------

pub(super) fn one(v: Val) -> R<Vec<Val>> {
    Ok(vec![v])
}

pub(super) fn un(cx: &mut Ctx, op: OpKind, x: &Val) -> R<Val> {
    cx.op(op, &[x], Attrs::new())
}

pub(super) fn bin(cx: &mut Ctx, op: OpKind, a: &Val, b: &Val) -> R<Val> {
    cx.op(op, &[a, b], Attrs::new())
}

/// A known scalar of `like`'s dtype.
pub(super) fn sc(cx: &Ctx, x: f64, like: &Val) -> Val {
    cx.scalar(x, cx.ty(like).dtype)
}

pub(super) fn select(cx: &mut Ctx, c: &Val, a: &Val, b: &Val) -> R<Val> {
    cx.op(OpKind::Select, &[c, a, b], Attrs::new())
}

pub(super) fn cast_to(cx: &mut Ctx, x: &Val, d: DType) -> R<Val> {
    if cx.ty(x).dtype == d {
        return Ok(x.clone());
    }
    cx.op(
        OpKind::Cast,
        &[x],
        Attrs::new().with("dtype", Attr::DType(d)),
    )
}

pub(super) fn reshape_to(cx: &mut Ctx, x: &Val, shape: &[u64]) -> R<Val> {
    if cx.ty(x).shape == shape {
        return Ok(x.clone());
    }
    let s: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    cx.op(OpKind::Reshape, &[x], Attrs::new().with("shape", ints(&s)))
}

/// `x` broadcast to `shape`.
pub(super) fn broadcast_to(cx: &mut Ctx, x: &Val, shape: &[u64]) -> R<Val> {
    let s: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    cx.op(
        OpKind::Broadcast,
        &[x],
        Attrs::new().with("shape", ints(&s)),
    )
}

pub(super) fn reduce(cx: &mut Ctx, op: OpKind, x: &Val, axes: &[i64], keep: bool) -> R<Val> {
    let attrs = Attrs::new()
        .with("axes", ints(axes))
        .with("keepdims", Attr::Bool(keep));
    cx.op(op, &[x], attrs)
}

/// The integers of a known value (shapes, axes, starts...): irc needs them at import time.
pub(super) fn known_ints(cx: &Ctx, v: &Val, what: &str) -> R<Vec<i64>> {
    match cx.known(v) {
        Some(t) => Ok(t.data.to_i64()),
        None => Err(format!(
            "{what} must be known at import time (an initializer, a Constant, or computed from Shape); irc shapes are static"
        )),
    }
}

/// A normalized axis of a rank-`rank` tensor.
pub(super) fn axis(a: i64, rank: usize) -> R<usize> {
    irc_ir::infer::normalize_axis(a, rank)
        .ok_or_else(|| format!("axis {a} is out of range for rank {rank}"))
}

pub(crate) fn require_float(cx: &Ctx, x: &Val, what: &str) -> R<()> {
    let d = cx.ty(x).dtype;
    if d.is_float() {
        Ok(())
    } else {
        Err(format!(
            "{what} of {d} is not supported (float inputs only)"
        ))
    }
}

fn unary(cx: &mut Ctx, n: &Node, op: OpKind) -> R<Vec<Val>> {
    let x = n.x(0)?;
    one(un(cx, op, &x)?)
}

fn binary(cx: &mut Ctx, n: &Node, op: OpKind) -> R<Vec<Val>> {
    let (a, b) = (n.x(0)?, n.x(1)?);
    one(bin(cx, op, &a, &b)?)
}

/// A variadic op folded left with a binary irc op.
fn variadic(cx: &mut Ctx, n: &Node, op: OpKind) -> R<Val> {
    let mut acc = n.x(0)?;
    for i in 1..n.n_in() {
        let b = n.x(i)?;
        acc = bin(cx, op, &acc, &b)?;
    }
    Ok(acc)
}

/// A decomposition's input in op math: 16-bit floats computed in f32 and rounded once at the
/// end ([`down`]), as ONNX's reference and PyTorch's fused kernels do.
pub(super) fn up(cx: &mut Ctx, x: &Val) -> R<(Val, DType)> {
    let d = cx.ty(x).dtype;
    if matches!(d, DType::F16 | DType::BF16) {
        Ok((cast_to(cx, x, DType::F32)?, d))
    } else {
        Ok((x.clone(), d))
    }
}

/// The result of a decomposition begun with [`up`], in the input's dtype.
pub(super) fn down(cx: &mut Ctx, d: DType, y: Val) -> R<Vec<Val>> {
    one(cast_to(cx, &y, d)?)
}

// ---- elementwise ----------------------------------------------------------------------------

pub fn abs(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, OpKind::Abs)
}
pub fn neg(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, OpKind::Neg)
}
pub fn exp(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, OpKind::Exp)
}
pub fn log(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, OpKind::Log)
}
pub fn sqrt(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, OpKind::Sqrt)
}
pub fn tanh(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, OpKind::Tanh)
}
pub fn sigmoid(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, OpKind::Sigmoid)
}
pub fn relu(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, OpKind::Relu)
}
pub fn erf(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, OpKind::Erf)
}
pub fn sin(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, OpKind::Sin)
}
pub fn cos(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, OpKind::Cos)
}
pub fn floor(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, OpKind::Floor)
}
pub fn ceil(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, OpKind::Ceil)
}
pub fn round(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, OpKind::Round)
}
pub fn reciprocal(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    unary(cx, n, OpKind::Recip)
}
pub fn add(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    binary(cx, n, OpKind::Add)
}
pub fn sub(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    binary(cx, n, OpKind::Sub)
}
pub fn mul(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    binary(cx, n, OpKind::Mul)
}
pub fn equal(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    binary(cx, n, OpKind::Eq)
}
pub fn less(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    binary(cx, n, OpKind::Lt)
}
pub fn less_or_equal(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    binary(cx, n, OpKind::Le)
}
pub fn greater(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    binary(cx, n, OpKind::Gt)
}
pub fn greater_or_equal(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    binary(cx, n, OpKind::Ge)
}
pub fn xor(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    binary(cx, n, OpKind::Ne)
}
pub fn max(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    one(variadic(cx, n, OpKind::Max)?)
}
pub fn min(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    one(variadic(cx, n, OpKind::Min)?)
}
pub fn sum(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    one(variadic(cx, n, OpKind::Add)?)
}

pub fn mean(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let s = variadic(cx, n, OpKind::Add)?;
    let k = sc(cx, n.n_in() as f64, &s);
    one(bin(cx, OpKind::Div, &s, &k)?)
}

pub fn div(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (a, b) = (n.x(0)?, n.x(1)?);
    let d = cx.ty(&a).dtype;
    if d.is_float() {
        return one(bin(cx, OpKind::Div, &a, &b)?);
    }
    // Integer division truncates toward zero, as the ONNX reference does (exact below 2^53).
    let (fa, fb) = (cast_to(cx, &a, DType::F64)?, cast_to(cx, &b, DType::F64)?);
    let q = bin(cx, OpKind::Div, &fa, &fb)?;
    one(cast_to(cx, &q, d)?)
}

/// Mod, computed in f64 (exact for integers below 2^53): `fmod=1` is C's `fmod`, `a - b · q`
/// with the quotient truncated (the sign of `a`; `a` itself where `b` is infinite and `a`
/// finite); `fmod=0` is Python's `%` (numpy's `remainder`): that, plus `b` where it is nonzero
/// and its sign is not `b`'s, and a zero signed as `b`.
pub fn modulo(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (a, b) = (n.x(0)?, n.x(1)?);
    let d = cx.ty(&a).dtype;
    let f64s = |cx: &mut Ctx, x: f64| cx.scalar(x, DType::F64);
    let (fa, fb) = (cast_to(cx, &a, DType::F64)?, cast_to(cx, &b, DType::F64)?);
    let q = bin(cx, OpKind::Div, &fa, &fb)?;
    let zero = f64s(cx, 0.0);
    let neg = bin(cx, OpKind::Lt, &q, &zero)?;
    let up = un(cx, OpKind::Ceil, &q)?;
    let down = un(cx, OpKind::Floor, &q)?;
    let t = select(cx, &neg, &up, &down)?;
    let bt = bin(cx, OpKind::Mul, &fb, &t)?;
    let r = bin(cx, OpKind::Sub, &fa, &bt)?;
    // fmod(a, ±inf) = a for a finite (b · 0 would be NaN), NaN for a infinite.
    let inf = f64s(cx, f64::INFINITY);
    let nan = f64s(cx, f64::NAN);
    let (abs_a, abs_b) = (un(cx, OpKind::Abs, &fa)?, un(cx, OpKind::Abs, &fb)?);
    let b_inf = bin(cx, OpKind::Eq, &abs_b, &inf)?;
    let a_finite = bin(cx, OpKind::Lt, &abs_a, &inf)?;
    let at_inf = select(cx, &a_finite, &fa, &nan)?;
    let mut r = select(cx, &b_inf, &at_inf, &r)?;
    if n.int("fmod", 0) == 0 {
        let nonzero = bin(cx, OpKind::Ne, &r, &zero)?;
        let r_neg = bin(cx, OpKind::Lt, &r, &zero)?;
        let b_neg = bin(cx, OpKind::Lt, &fb, &zero)?;
        let other = bin(cx, OpKind::Ne, &r_neg, &b_neg)?;
        let shifted = bin(cx, OpKind::Add, &r, &fb)?;
        let moved = select(cx, &other, &shifted, &r)?;
        let neg_zero = f64s(cx, -0.0);
        let signed_zero = select(cx, &b_neg, &neg_zero, &zero)?;
        r = select(cx, &nonzero, &moved, &signed_zero)?;
    }
    one(cast_to(cx, &r, d)?)
}

pub fn pow(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (a, b) = (n.x(0)?, n.x(1)?);
    let d = cx.ty(&a).dtype;
    if d.is_float() {
        let b = cast_to(cx, &b, d)?;
        return one(bin(cx, OpKind::Pow, &a, &b)?);
    }
    let (fa, fb) = (cast_to(cx, &a, DType::F64)?, cast_to(cx, &b, DType::F64)?);
    let p = bin(cx, OpKind::Pow, &fa, &fb)?;
    one(cast_to(cx, &p, d)?)
}

pub fn and(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (a, b) = (n.x(0)?, n.x(1)?);
    let f = cx.scalar(0.0, DType::I1);
    one(select(cx, &a, &b, &f)?)
}

pub fn or(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (a, b) = (n.x(0)?, n.x(1)?);
    let t = cx.scalar(1.0, DType::I1);
    one(select(cx, &a, &t, &b)?)
}

pub fn not(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let f = cx.scalar(0.0, DType::I1);
    one(bin(cx, OpKind::Eq, &x, &f)?)
}

pub fn where_(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (c, a, b) = (n.x(0)?, n.x(1)?, n.x(2)?);
    one(select(cx, &c, &a, &b)?)
}

pub fn is_nan(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    one(bin(cx, OpKind::Ne, &x, &x)?)
}

pub fn is_inf(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let (pos, neg) = (n.int("detect_positive", 1), n.int("detect_negative", 1));
    let p = sc(cx, f64::INFINITY, &x);
    let m = sc(cx, f64::NEG_INFINITY, &x);
    let is_p = bin(cx, OpKind::Eq, &x, &p)?;
    let is_m = bin(cx, OpKind::Eq, &x, &m)?;
    let f = cx.scalar(0.0, DType::I1);
    let r = match (pos != 0, neg != 0) {
        (true, true) => {
            let t = cx.scalar(1.0, DType::I1);
            select(cx, &is_p, &t, &is_m)?
        }
        (true, false) => is_p,
        (false, true) => is_m,
        (false, false) => bin(cx, OpKind::Ne, &x, &x).and_then(|v| select(cx, &v, &f, &f))?,
    };
    one(r)
}

pub fn sign(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let (z, p, m) = (sc(cx, 0.0, &x), sc(cx, 1.0, &x), sc(cx, -1.0, &x));
    let gt = bin(cx, OpKind::Gt, &x, &z)?;
    let lt = bin(cx, OpKind::Lt, &x, &z)?;
    let neg = select(cx, &lt, &m, &z)?;
    one(select(cx, &gt, &p, &neg)?)
}

pub fn cast_op(cx: &mut Ctx, x: &Val, code: i64) -> R<Val> {
    let d = crate::tensor::dtype_of(code as i32)?;
    cast_to(cx, x, d)
}

pub fn clip(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let mut x = n.x(0)?;
    if let Some(lo) = n.opt(1) {
        x = bin(cx, OpKind::Max, &x, &lo)?;
    }
    if let Some(hi) = n.opt(2) {
        x = bin(cx, OpKind::Min, &x, &hi)?;
    }
    one(x)
}

/// `select(x < 0, f(x), x)`.
fn negative_branch(cx: &mut Ctx, x: &Val, f: &Val) -> R<Val> {
    let z = sc(cx, 0.0, x);
    let lt = bin(cx, OpKind::Lt, x, &z)?;
    select(cx, &lt, f, x)
}

pub fn leaky_relu(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let a = sc(cx, n.float("alpha", 0.01) as f64, &x);
    let ax = bin(cx, OpKind::Mul, &x, &a)?;
    one(negative_branch(cx, &x, &ax)?)
}

pub fn prelu(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, slope) = (n.x(0)?, n.x(1)?);
    let sx = bin(cx, OpKind::Mul, &x, &slope)?;
    one(negative_branch(cx, &x, &sx)?)
}

/// `alpha · (exp(x) - 1)`.
fn expm1_scaled(cx: &mut Ctx, x: &Val, alpha: f64) -> R<Val> {
    let e = un(cx, OpKind::Exp, x)?;
    let one_ = sc(cx, 1.0, x);
    let d = bin(cx, OpKind::Sub, &e, &one_)?;
    let a = sc(cx, alpha, x);
    bin(cx, OpKind::Mul, &d, &a)
}

pub fn elu(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, d0) = up(cx, &n.x(0)?)?;
    let e = expm1_scaled(cx, &x, n.float("alpha", 1.0) as f64)?;
    let y = negative_branch(cx, &x, &e)?;
    down(cx, d0, y)
}

pub fn selu(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, d0) = up(cx, &n.x(0)?)?;
    let alpha = n.float("alpha", 1.673_263_2) as f64;
    let gamma = n.float("gamma", 1.050_701) as f64;
    let e = expm1_scaled(cx, &x, alpha)?;
    let z = sc(cx, 0.0, &x);
    let le = bin(cx, OpKind::Le, &x, &z)?;
    let s = select(cx, &le, &e, &x)?;
    let g = sc(cx, gamma, &x);
    let y = bin(cx, OpKind::Mul, &s, &g)?;
    down(cx, d0, y)
}

pub fn celu(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, d0) = up(cx, &n.x(0)?)?;
    let alpha = n.float("alpha", 1.0) as f64;
    let a = sc(cx, alpha, &x);
    let xa = bin(cx, OpKind::Div, &x, &a)?;
    let e = expm1_scaled(cx, &xa, alpha)?;
    let z = sc(cx, 0.0, &x);
    let pos = bin(cx, OpKind::Max, &x, &z)?;
    let neg = bin(cx, OpKind::Min, &e, &z)?;
    let y = bin(cx, OpKind::Add, &pos, &neg)?;
    down(cx, d0, y)
}

pub fn thresholded_relu(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let a = sc(cx, n.float("alpha", 1.0) as f64, &x);
    let z = sc(cx, 0.0, &x);
    let gt = bin(cx, OpKind::Gt, &x, &a)?;
    one(select(cx, &gt, &x, &z)?)
}

fn hard_sigmoid_of(cx: &mut Ctx, x: &Val, alpha: f64, beta: f64) -> R<Val> {
    let (a, b) = (sc(cx, alpha, x), sc(cx, beta, x));
    let ax = bin(cx, OpKind::Mul, x, &a)?;
    let y = bin(cx, OpKind::Add, &ax, &b)?;
    let (z, o) = (sc(cx, 0.0, x), sc(cx, 1.0, x));
    let y = bin(cx, OpKind::Min, &y, &o)?;
    bin(cx, OpKind::Max, &y, &z)
}

pub fn hard_sigmoid(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, d0) = up(cx, &n.x(0)?)?;
    let (alpha, beta) = (n.float("alpha", 0.2) as f64, n.float("beta", 0.5) as f64);
    let y = hard_sigmoid_of(cx, &x, alpha, beta)?;
    down(cx, d0, y)
}

pub fn hard_swish(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, d0) = up(cx, &n.x(0)?)?;
    let h = hard_sigmoid_of(cx, &x, 1.0 / 6.0, 0.5)?;
    let y = bin(cx, OpKind::Mul, &x, &h)?;
    down(cx, d0, y)
}

fn softplus_of(cx: &mut Ctx, x: &Val) -> R<Val> {
    let e = un(cx, OpKind::Exp, x)?;
    let o = sc(cx, 1.0, x);
    let s = bin(cx, OpKind::Add, &e, &o)?;
    un(cx, OpKind::Log, &s)
}

pub fn softplus(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, d0) = up(cx, &n.x(0)?)?;
    let y = softplus_of(cx, &x)?;
    down(cx, d0, y)
}

pub fn softsign(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, d0) = up(cx, &n.x(0)?)?;
    let a = un(cx, OpKind::Abs, &x)?;
    let o = sc(cx, 1.0, &x);
    let d = bin(cx, OpKind::Add, &a, &o)?;
    let y = bin(cx, OpKind::Div, &x, &d)?;
    down(cx, d0, y)
}

pub fn mish(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, d0) = up(cx, &n.x(0)?)?;
    let s = softplus_of(cx, &x)?;
    let t = un(cx, OpKind::Tanh, &s)?;
    let y = bin(cx, OpKind::Mul, &x, &t)?;
    down(cx, d0, y)
}

pub fn gelu(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    match n.string("approximate").as_deref().unwrap_or("none") {
        "none" => one(un(cx, OpKind::Gelu, &x)?),
        "tanh" => {
            // 0.5 · x · (1 + tanh(sqrt(2/π) · (x + 0.044715 · x³)))
            let (x, d0) = up(cx, &x)?;
            let x3 = bin(cx, OpKind::Mul, &x, &x)?;
            let x3 = bin(cx, OpKind::Mul, &x3, &x)?;
            let c = sc(cx, 0.044715, &x);
            let t = bin(cx, OpKind::Mul, &x3, &c)?;
            let t = bin(cx, OpKind::Add, &x, &t)?;
            let k = sc(cx, (2.0 / std::f64::consts::PI).sqrt(), &x);
            let t = bin(cx, OpKind::Mul, &t, &k)?;
            let t = un(cx, OpKind::Tanh, &t)?;
            let o = sc(cx, 1.0, &x);
            let t = bin(cx, OpKind::Add, &t, &o)?;
            let h = sc(cx, 0.5, &x);
            let hx = bin(cx, OpKind::Mul, &x, &h)?;
            let y = bin(cx, OpKind::Mul, &hx, &t)?;
            down(cx, d0, y)
        }
        other => Err(format!(
            "approximate='{other}' is not one of 'none', 'tanh'"
        )),
    }
}

// ---- matmul ---------------------------------------------------------------------------------

pub fn matmul(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (a, b) = (n.x(0)?, n.x(1)?);
    require_float(cx, &a, "MatMul")?;
    one(bin(cx, OpKind::Matmul, &a, &b)?)
}

pub fn gemm(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (a, b) = (n.x(0)?, n.x(1)?);
    require_float(cx, &a, "Gemm")?;
    let attrs = Attrs::new()
        .with("transpose_a", Attr::Bool(n.int("transA", 0) != 0))
        .with("transpose_b", Attr::Bool(n.int("transB", 0) != 0));
    let mut y = cx.op(OpKind::Matmul, &[&a, &b], attrs)?;
    let alpha = n.float("alpha", 1.0) as f64;
    if alpha != 1.0 {
        let s = sc(cx, alpha, &y);
        y = bin(cx, OpKind::Mul, &y, &s)?;
    }
    if let Some(c) = n.opt(2) {
        let beta = n.float("beta", 1.0) as f64;
        let c = if beta != 1.0 {
            let s = sc(cx, beta, &c);
            bin(cx, OpKind::Mul, &c, &s)?
        } else {
            c
        };
        y = bin(cx, OpKind::Add, &y, &c)?;
    }
    one(y)
}

// ---- reductions -----------------------------------------------------------------------------

/// The reduced axes and keepdims of a Reduce* node (axes from the attribute before opset 18,
/// or from input 1), or `None` for a no-op (`noop_with_empty_axes` and no axes).
pub(super) fn reduce_axes(cx: &Ctx, n: &Node) -> R<Option<(Vec<i64>, bool)>> {
    let keep = n.int("keepdims", 1) != 0;
    let axes = match (n.ints("axes"), n.opt(1)) {
        (Some(a), _) => a,
        (None, Some(v)) => known_ints(cx, &v, "the axes input")?,
        (None, None) => vec![],
    };
    if axes.is_empty() {
        if n.int("noop_with_empty_axes", 0) != 0 {
            return Ok(None);
        }
        let rank = cx.ty(&n.x(0)?).rank() as i64;
        return Ok(Some(((0..rank).collect(), keep)));
    }
    Ok(Some((axes, keep)))
}

/// `post(reduce(op, pre(x)))` over the node's axes.
fn reduction(
    cx: &mut Ctx,
    n: &Node,
    op: OpKind,
    pre: fn(&mut Ctx, &Val) -> R<Val>,
    post: fn(&mut Ctx, &Val) -> R<Val>,
) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let Some((axes, keep)) = reduce_axes(cx, n)? else {
        return one(x);
    };
    if cx.ty(&x).rank() == 0 {
        return one(x);
    }
    let p = pre(cx, &x)?;
    // Max and min of booleans (any, all) through i32.
    let boolean = cx.ty(&p).dtype == DType::I1;
    let p = if boolean {
        cast_to(cx, &p, DType::I32)?
    } else {
        p
    };
    let r = reduce(cx, op, &p, &axes, keep)?;
    let r = if boolean {
        cast_to(cx, &r, DType::I1)?
    } else {
        r
    };
    one(post(cx, &r)?)
}

fn same(_: &mut Ctx, x: &Val) -> R<Val> {
    Ok(x.clone())
}
fn square(cx: &mut Ctx, x: &Val) -> R<Val> {
    bin(cx, OpKind::Mul, x, x)
}
fn abs_of(cx: &mut Ctx, x: &Val) -> R<Val> {
    un(cx, OpKind::Abs, x)
}
fn exp_of(cx: &mut Ctx, x: &Val) -> R<Val> {
    un(cx, OpKind::Exp, x)
}
fn log_of(cx: &mut Ctx, x: &Val) -> R<Val> {
    un(cx, OpKind::Log, x)
}
fn sqrt_of(cx: &mut Ctx, x: &Val) -> R<Val> {
    un(cx, OpKind::Sqrt, x)
}

pub fn reduce_sum(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    reduction(cx, n, OpKind::ReduceSum, same, same)
}
pub fn reduce_mean(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    reduction(cx, n, OpKind::ReduceMean, same, same)
}
pub fn reduce_max(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    reduction(cx, n, OpKind::ReduceMax, same, same)
}
pub fn reduce_min(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    reduction(cx, n, OpKind::ReduceMin, same, same)
}
pub fn reduce_sum_square(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    reduction(cx, n, OpKind::ReduceSum, square, same)
}
pub fn reduce_l1(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    reduction(cx, n, OpKind::ReduceSum, abs_of, same)
}
pub fn reduce_l2(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    reduction(cx, n, OpKind::ReduceSum, square, sqrt_of)
}
pub fn reduce_log_sum(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    reduction(cx, n, OpKind::ReduceSum, same, log_of)
}
pub fn reduce_log_sum_exp(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    reduction(cx, n, OpKind::ReduceSum, exp_of, log_of)
}

/// ArgMax/ArgMin: the first (or last) index along the axis where x equals its extremum.
fn arg_extremum(cx: &mut Ctx, n: &Node, op: OpKind) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let a = axis(n.int("axis", 0), cx.ty(&x).rank())?;
    let keep = n.int("keepdims", 1) != 0;
    let last = n.int("select_last_index", 0) != 0;
    one(extremum_index(cx, &x, a, op, last, keep)?.1)
}

/// The index along axis `a` of the first (or `last`) maximum or minimum (`op`: ReduceMax or
/// ReduceMin) of `x`, beside the `iota` of the indices along `a` it was picked from.
pub(crate) fn extremum_index(
    cx: &mut Ctx,
    x: &Val,
    a: usize,
    op: OpKind,
    last: bool,
    keep: bool,
) -> R<(Val, Val)> {
    let ty = cx.ty(x);
    let m = reduce(cx, op, x, &[a as i64], true)?;
    let hit = bin(cx, OpKind::Eq, x, &m)?;
    let idx_ty = TensorType::new(ty.shape.clone(), DType::I64);
    let attrs = Attrs::new().with("axis", Attr::Int(a as i64));
    let idx = cx.op_typed(OpKind::Iota, &[], attrs, Some(&idx_ty))?;
    let (miss, pick) = if last {
        (-1.0, OpKind::ReduceMax)
    } else {
        (ty.shape[a] as f64, OpKind::ReduceMin)
    };
    let miss = cx.scalar(miss, DType::I64);
    let cand = select(cx, &hit, &idx, &miss)?;
    let at = reduce(cx, pick, &cand, &[a as i64], keep)?;
    Ok((idx, at))
}

pub fn argmax(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    arg_extremum(cx, n, OpKind::ReduceMax)
}
pub fn argmin(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    arg_extremum(cx, n, OpKind::ReduceMin)
}
