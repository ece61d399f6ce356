//! Algebra: identities, constant folding, division by a constant, and row/column scaling
//! moved across matmul (which turns `rmsnorm(x, g) @ W` into a matmul and a row scale).

use super::composite_axis;
use crate::eqsat::{Rhs, Rule, View};
use crate::lang::Node;
use egg::Id;
use irc_ir::{Attr, Attrs, DType, OpKind, ops::Category};

#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    // x · 1 = x, 1 · x = x   (when the 1 does not broadcast x to a larger shape)
    Rule { name: "mul-one", equation: "x · 1 = x", apply: mul_one },
    // x + (-0) = x, and x + 0 = x for integers (for floats -0 + 0 is +0)
    Rule { name: "add-zero", equation: "x + (-0) = x", apply: add_zero },
    // x - x = 0 for integers only (for floats, inf - inf and NaN - NaN are NaN)
    Rule { name: "sub-self", equation: "x - x = 0 (integers)", apply: sub_self },
    // x / c = x · (1/c) when 1/c is exact in the dtype, or the dtype is f32/f64
    Rule { name: "div-by-constant", equation: "x / c = x · (1/c)", apply: div_const },
    // u(c) = u(c) folded, for constants holding one value
    Rule { name: "fold-unary-constant", equation: "u(c) = [u(c)]", apply: fold_unary },
    // f(c1, c2) = [f(c1, c2)], for constants holding one value
    Rule { name: "fold-binary-constant", equation: "f(c1, c2) = [f(c1, c2)]", apply: fold_binary },
    // exp(log(x)) = x   when x is known non-negative (exact at 0, inf and NaN too)
    Rule { name: "exp-of-log-nonneg", equation: "exp(log(x)) = x for x ≥ 0", apply: exp_log },
    // -(-x) = x   (exact for floats, NaN's sign aside, and for wrapping integers)
    Rule { name: "neg-neg", equation: "-(-x) = x", apply: neg_neg },
    // cast(x : d -> d) = x, and cast(cast(x : a -> b) -> a) = x where b holds every value of a
    Rule { name: "cast-round-trip", equation: "cast(cast(x : a -> b) -> a) = x for b ⊇ a", apply: cast_round_trip },
    // matmul(x · r[:, None], W) = matmul(x, W) · r[:, None]   (not f16: see spec/passes.md)
    Rule { name: "row-scale-past-matmul", equation: "matmul(x · r[:,None], W) = matmul(x, W) · r[:,None]", apply: row_scale },
    // matmul(x · g[None, :], W) = matmul(x, g[:, None] · W)   (not f16)
    Rule { name: "col-scale-into-weight", equation: "matmul(x · g[None,:], W) = matmul(x, g[:,None] · W)", apply: col_scale },
    // matmul(rmsnorm(x, g), W) = matmul(x, g[:,None] · W) · rsqrt(mean(x²) + eps)   (not f16)
    Rule { name: "rmsnorm-into-matmul", equation: "rmsnorm(x, g) @ W = (x @ (g[:,None]·W)) · rsqrt(mean(x²)+eps)", apply: rmsnorm_matmul },
];

fn splat_is(v: &View, id: Id, x: f64) -> bool {
    v.splat(id)
        .is_some_and(|c| c == x && (c != 0.0 || c.is_sign_negative() == x.is_sign_negative()))
}

fn mul_one(v: &View, id: Id, n: &Node) -> Vec<Rhs> {
    if !n.is(OpKind::Mul) {
        return vec![];
    }
    let (a, b) = (n.children[0], n.children[1]);
    let mut out = vec![];
    if splat_is(v, b, 1.0) && v.ty(a) == v.ty(id) {
        out.push(Rhs::Class(a));
    }
    if splat_is(v, a, 1.0) && v.ty(b) == v.ty(id) {
        out.push(Rhs::Class(b));
    }
    out
}

fn add_zero(v: &View, id: Id, n: &Node) -> Vec<Rhs> {
    if !n.is(OpKind::Add) {
        return vec![];
    }
    let int = !v.ty(id).dtype.is_float();
    let zero = |c: Id| splat_is(v, c, -0.0) || (int && splat_is(v, c, 0.0));
    let (a, b) = (n.children[0], n.children[1]);
    let mut out = vec![];
    if zero(b) && v.ty(a) == v.ty(id) {
        out.push(Rhs::Class(a));
    }
    if zero(a) && v.ty(b) == v.ty(id) {
        out.push(Rhs::Class(b));
    }
    out
}

fn constant_like(v: &View, id: Id, value: f64) -> Rhs {
    let t = v.ty(id);
    let mut n = Node::op(
        OpKind::Constant,
        &Attrs::new().with("value", Attr::Float(value)),
        vec![],
    );
    if t.dtype.is_int() || t.dtype == DType::I1 {
        n = Node::op(
            OpKind::Constant,
            &Attrs::new().with("value", Attr::Int(value as i64)),
            vec![],
        );
    }
    n.written_ty = Some((t.shape.clone(), t.dtype));
    Rhs::Node(Box::new(n), vec![])
}

fn sub_self(v: &View, id: Id, n: &Node) -> Vec<Rhs> {
    if n.is(OpKind::Sub) && n.children[0] == n.children[1] && v.ty(id).dtype.is_int() {
        vec![constant_like(v, id, 0.0)]
    } else {
        vec![]
    }
}

/// `1/c` may replace a division by `c` in `d`: a power of two within the normal range for
/// f16/bf16 (exact), any normal value of the dtype in f32/f64 (one rounding of difference).
fn exact_reciprocal(c: f64, d: DType) -> bool {
    let r = 1.0 / c;
    if !r.is_finite() || r == 0.0 {
        return false;
    }
    match d {
        // The reciprocal rounded to the dtype must be a normal value of it: 1/1e-39 is an f32
        // infinity, and x · inf is not x / 1e-39.
        DType::F32 => (f64::from(f32::MIN_POSITIVE)..=f64::from(f32::MAX)).contains(&r.abs()),
        DType::F64 => r.abs() >= f64::MIN_POSITIVE,
        DType::F16 => {
            r.abs().log2().fract() == 0.0 && (2f64.powi(-14)..=32768.0).contains(&r.abs())
        }
        DType::BF16 => {
            r.abs().log2().fract() == 0.0 && (2f64.powi(-126)..=2f64.powi(127)).contains(&r.abs())
        }
        _ => false,
    }
}

fn div_const(v: &View, _: Id, n: &Node) -> Vec<Rhs> {
    if !n.is(OpKind::Div) {
        return vec![];
    }
    let (a, b) = (n.children[0], n.children[1]);
    match v.splat(b) {
        Some(c) if v.rank(b) == 0 && exact_reciprocal(c, v.ty(b).dtype) => {
            vec![Rhs::binary(
                OpKind::Mul,
                Rhs::Class(a),
                Rhs::scalar(1.0 / c, v.ty(b).dtype),
            )]
        }
        _ => vec![],
    }
}

fn unary_value(op: OpKind, x: f64) -> Option<f64> {
    Some(match op {
        OpKind::Neg => -x,
        OpKind::Abs => x.abs(),
        OpKind::Exp => x.exp(),
        OpKind::Log => x.ln(),
        OpKind::Sqrt => x.sqrt(),
        OpKind::Rsqrt => 1.0 / x.sqrt(),
        OpKind::Tanh => x.tanh(),
        OpKind::Sin => x.sin(),
        OpKind::Cos => x.cos(),
        OpKind::Floor => x.floor(),
        OpKind::Ceil => x.ceil(),
        OpKind::Round => x.round_ties_even(),
        OpKind::Recip => 1.0 / x,
        OpKind::Relu => {
            if x.is_nan() {
                x
            } else {
                x.max(0.0)
            }
        }
        _ => return None,
    })
}

fn binary_value(op: OpKind, a: f64, b: f64) -> Option<f64> {
    Some(match op {
        OpKind::Add => a + b,
        OpKind::Sub => a - b,
        OpKind::Mul => a * b,
        OpKind::Div => a / b,
        _ => return None,
    })
}

/// Folding is done only for floats computed in f32/f64 op math: the constant rounds the f64
/// result once to the dtype, which is what the interpreter does up to one rounding of the
/// f32 intermediate.
fn foldable(v: &View, id: Id) -> bool {
    v.ty(id).dtype.is_float()
}

fn fold_unary(v: &View, id: Id, n: &Node) -> Vec<Rhs> {
    let Some(op) = n.kind() else { return vec![] };
    if op.category() != Category::Unary || !foldable(v, id) {
        return vec![];
    }
    match v.splat(n.children[0]).and_then(|c| unary_value(op, c)) {
        Some(r) => vec![constant_like(v, id, r)],
        None => vec![],
    }
}

fn fold_binary(v: &View, id: Id, n: &Node) -> Vec<Rhs> {
    let Some(op) = n.kind() else { return vec![] };
    if op.category() != Category::Binary || !foldable(v, id) {
        return vec![];
    }
    match (v.splat(n.children[0]), v.splat(n.children[1])) {
        (Some(a), Some(b)) => binary_value(op, a, b)
            .map(|r| vec![constant_like(v, id, r)])
            .unwrap_or_default(),
        _ => vec![],
    }
}

/// The class holds an op whose result is never negative (NaN aside).
fn nonneg(v: &View, id: Id) -> bool {
    v.eg[id].nodes.iter().any(|n| {
        matches!(
            n.kind(),
            Some(
                OpKind::Abs
                    | OpKind::Relu
                    | OpKind::Exp
                    | OpKind::Sqrt
                    | OpKind::Sigmoid
                    | OpKind::Softmax
            )
        )
    }) || v.splat(id).is_some_and(|c| c >= 0.0)
}

fn exp_log(v: &View, _: Id, n: &Node) -> Vec<Rhs> {
    if !n.is(OpKind::Exp) {
        return vec![];
    }
    v.nodes(n.children[0], OpKind::Log)
        .filter(|l| nonneg(v, l.children[0]))
        .map(|l| Rhs::Class(l.children[0]))
        .collect()
}

fn neg_neg(v: &View, id: Id, n: &Node) -> Vec<Rhs> {
    if !n.is(OpKind::Neg) {
        return vec![];
    }
    v.nodes(n.children[0], OpKind::Neg)
        .map(|inner| inner.children[0])
        .filter(|&x| v.ty(x) == v.ty(id))
        .map(Rhs::Class)
        .collect()
}

/// Every value of `a` is exactly a value of `b` (so a cast `a -> b -> a` is the identity).
fn holds_every_value(b: DType, a: DType) -> bool {
    use DType::*;
    a == b
        || matches!(
            (a, b),
            (F16 | BF16, F32 | F64) | (F32, F64) | (I32, I64 | F64) | (I1, _)
        )
}

fn cast_round_trip(v: &View, id: Id, n: &Node) -> Vec<Rhs> {
    if !n.is(OpKind::Cast) {
        return vec![];
    }
    let (x, to) = (n.children[0], v.ty(id).dtype);
    let mut out = vec![];
    if v.ty(x) == v.ty(id) {
        out.push(Rhs::Class(x));
    }
    for inner in v.nodes(x, OpKind::Cast) {
        let y = inner.children[0];
        if v.ty(y) == v.ty(id) && holds_every_value(v.ty(x).dtype, to) {
            out.push(Rhs::Class(y));
        }
    }
    out
}

/// The scaling rules keep the unnormalized product `x @ W` in the dtype; in f16 (max 65504)
/// that product can overflow where the normalized one does not, so they skip f16.
fn scaling_allowed(d: DType) -> bool {
    matches!(d, DType::BF16 | DType::F32 | DType::F64)
}

/// `mul(x, s)` or `mul(s, x)` with the result shaped like `x`: yields (x, s).
fn scaled(v: &View, m: &Node) -> Vec<(Id, Id)> {
    let (a, b) = (m.children[0], m.children[1]);
    let mut out = vec![];
    let res = irc_ir::infer::broadcast_shapes(&v.ty(a).shape, &v.ty(b).shape);
    if res.as_ref() == Some(&v.ty(a).shape) {
        out.push((a, b));
    }
    if res.as_ref() == Some(&v.ty(b).shape) && a != b {
        out.push((b, a));
    }
    out
}

fn plain_matmul(v: &View, n: &Node) -> bool {
    n.is(OpKind::Matmul)
        && !n.flag("transpose_a")
        && v.rank(n.children[0]) >= 2
        && v.rank(n.children[1]) >= 2
        && scaling_allowed(v.ty(n.children[0]).dtype)
}

fn row_scale(v: &View, _: Id, n: &Node) -> Vec<Rhs> {
    if !plain_matmul(v, n) {
        return vec![];
    }
    let (lhs, w) = (n.children[0], n.children[1]);
    let xr = v.rank(lhs);
    let mut out = vec![];
    for m in v.nodes(lhs, OpKind::Mul) {
        for (x, r) in scaled(v, m) {
            let rs = &v.ty(r).shape;
            // r is [.., M, 1] with no batch dims beyond x's and a batch that matmul keeps.
            if rs.len() == xr && rs[xr - 1] == 1 && v.rank(w) == 2 {
                let flags = (false, n.flag("transpose_b"));
                let mm = Rhs::matmul(Rhs::Class(x), Rhs::Class(w), flags.0, flags.1);
                out.push(Rhs::binary(OpKind::Mul, mm, Rhs::Class(r)));
            }
        }
    }
    out
}

fn col_scale(v: &View, _: Id, n: &Node) -> Vec<Rhs> {
    if !plain_matmul(v, n) || v.rank(n.children[1]) != 2 {
        return vec![];
    }
    let (lhs, w) = (n.children[0], n.children[1]);
    let tb = n.flag("transpose_b");
    let mut out = vec![];
    for m in v.nodes(lhs, OpKind::Mul) {
        for (x, g) in scaled(v, m) {
            let gs = &v.ty(g).shape;
            let k = *v.ty(x).shape.last().unwrap_or(&0);
            // g is [K] or [1, .., 1, K]: one factor per column of x.
            let col = gs.last() == Some(&k) && k > 1 && gs[..gs.len() - 1].iter().all(|&d| d == 1);
            if !col {
                continue;
            }
            let gk = Rhs::reshape(Rhs::Class(g), &[k as i64, 1]);
            let gw = if tb {
                Rhs::binary(
                    OpKind::Mul,
                    Rhs::Class(w),
                    Rhs::reshape(Rhs::Class(g), &[k as i64]),
                )
            } else {
                Rhs::binary(OpKind::Mul, gk, Rhs::Class(w))
            };
            out.push(Rhs::matmul(Rhs::Class(x), gw, false, tb));
        }
    }
    out
}

/// `rsqrt(mean(x², axis) + eps)` computed as the rmsnorm composite does (in f32, or f64),
/// rounded to x's dtype, keeping the axis as size 1.
pub fn inv_rms(v: &View, x: Id, axis: usize, eps: f64) -> Rhs {
    let d = v.ty(x).dtype;
    let calc = irc_ir::opmath_dtype(d);
    let xf = if calc == d {
        Rhs::Class(x)
    } else {
        Rhs::cast(Rhs::Class(x), calc)
    };
    let sq = Rhs::binary(OpKind::Mul, xf.clone(), xf);
    let attrs = Attrs::new()
        .with("axes", irc_ir::ints(&[axis as i64]))
        .with("keepdims", Attr::Bool(true));
    let ms = Rhs::op(OpKind::ReduceMean, attrs, vec![sq]);
    let r = Rhs::unary(
        OpKind::Rsqrt,
        Rhs::binary(OpKind::Add, ms, Rhs::scalar(eps, calc)),
    );
    if calc == d { r } else { Rhs::cast(r, d) }
}

pub fn rmsnorm_eps(v: &View, n: &Node) -> f64 {
    let d = v.ty(n.children[0]).dtype;
    n.attr("eps")
        .and_then(|a| a.as_f64())
        .unwrap_or_else(|| d.epsilon().unwrap_or(1e-6))
}

fn rmsnorm_matmul(v: &View, _: Id, n: &Node) -> Vec<Rhs> {
    if !plain_matmul(v, n) || v.rank(n.children[1]) != 2 {
        return vec![];
    }
    let (lhs, w) = (n.children[0], n.children[1]);
    let tb = n.flag("transpose_b");
    let mut out = vec![];
    for r in v.nodes(lhs, OpKind::Rmsnorm) {
        let x = r.children[0];
        let rank = v.rank(x);
        if composite_axis(v, r) != Some(rank - 1) {
            continue;
        }
        let k = v.ty(x).shape[rank - 1] as i64;
        let weight = match r.children.get(1) {
            None => Rhs::Class(w),
            Some(&g) if tb => Rhs::binary(OpKind::Mul, Rhs::Class(w), Rhs::Class(g)),
            Some(&g) => Rhs::binary(
                OpKind::Mul,
                Rhs::reshape(Rhs::Class(g), &[k, 1]),
                Rhs::Class(w),
            ),
        };
        let mm = Rhs::matmul(Rhs::Class(x), weight, false, tb);
        out.push(Rhs::binary(
            OpKind::Mul,
            mm,
            inv_rms(v, x, rank - 1, rmsnorm_eps(v, r)),
        ));
    }
    out
}
