//! Composites recognised again after decomposition (written by hand or by `decompose`), so
//! that later passes and fusion see `softmax`, `log_softmax`, `rmsnorm` and `layernorm` whichever way the
//! user wrote them.

use super::reduce_axes;
use crate::eqsat::{Rhs, Rule, View};
use crate::lang::Node;
use egg::Id;
use irc_ir::{Attr, Attrs, DType, OpKind, ops::Category};

#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    // exp(x - max(x)) / sum(exp(x - max(x))) = softmax(x)
    Rule { name: "recognize-softmax", equation: "e / sum(e), e = exp(x - max(x)) = softmax(x)", apply: softmax },
    // (x - max(x)) - log(sum(exp(x - max(x)))) = log_softmax(x)
    Rule { name: "recognize-log-softmax", equation: "s - log(sum(exp(s))), s = x - max(x) = log_softmax(x)", apply: log_softmax },
    // x · rsqrt(mean(x·x) + eps) = rmsnorm(x)
    Rule { name: "recognize-rmsnorm", equation: "x · rsqrt(mean(x²) + eps) = rmsnorm(x)", apply: rmsnorm },
    // c · rsqrt(mean(c·c) + eps), c = x - mean(x) = layernorm(x)
    Rule { name: "recognize-layernorm", equation: "c · rsqrt(mean(c²) + eps), c = x - mean(x) = layernorm(x)", apply: layernorm },
    // rmsnorm(x) · w[axis] = rmsnorm(x, w); layernorm(x) · w = layernorm(x, w); layernorm(x, w) + b = layernorm(x, w, b)
    Rule { name: "absorb-norm-affine", equation: "norm(x) · w = norm(x, w), layernorm(x, w) + b = layernorm(x, w, b)", apply: affine },
    // cast(C(cast(x, f32), ..), d) = C(x, ..) when x is d: composites compute in f32 and round once
    Rule { name: "fold-composite-opmath-casts", equation: "cast(C(cast(x, f32)), dtype(x)) = C(x)", apply: opmath_casts },
];

/// The single reduced axis of a keepdims reduction `op` node of class `id` over `x`.
fn single_axis_reduction(v: &View, id: Id, op: OpKind) -> Vec<(Id, usize)> {
    v.nodes(id, op)
        .filter_map(|r| match reduce_axes(v, r)? {
            (axes, true) if axes.len() == 1 => Some((r.children[0], axes[0])),
            _ => None,
        })
        .collect()
}

fn axis_attr(v: &View, x: Id, axis: usize) -> i64 {
    axis as i64 - v.rank(x) as i64
}

fn softmax(v: &View, _: Id, n: &Node) -> Vec<Rhs> {
    if !n.is(OpKind::Div) {
        return vec![];
    }
    let (e, z) = (n.children[0], n.children[1]);
    let mut out = vec![];
    for (ez, axis) in single_axis_reduction(v, z, OpKind::ReduceSum) {
        if ez != e {
            continue;
        }
        for ex in v.nodes(e, OpKind::Exp) {
            for s in v.nodes(ex.children[0], OpKind::Sub) {
                let (x, m) = (s.children[0], s.children[1]);
                if single_axis_reduction(v, m, OpKind::ReduceMax).contains(&(x, axis)) {
                    let attrs = Attrs::new().with("axis", Attr::Int(axis_attr(v, x, axis)));
                    out.push(Rhs::op(OpKind::Softmax, attrs, vec![Rhs::Class(x)]));
                }
            }
        }
    }
    out
}

fn log_softmax(v: &View, _: Id, n: &Node) -> Vec<Rhs> {
    if !n.is(OpKind::Sub) {
        return vec![];
    }
    let (s, l) = (n.children[0], n.children[1]);
    let mut out = vec![];
    for sub in v.nodes(s, OpKind::Sub) {
        let (x, m) = (sub.children[0], sub.children[1]);
        for log in v.nodes(l, OpKind::Log) {
            for (e, axis) in single_axis_reduction(v, log.children[0], OpKind::ReduceSum) {
                let exp_of_s = v.nodes(e, OpKind::Exp).any(|ex| ex.children[0] == s);
                if exp_of_s && single_axis_reduction(v, m, OpKind::ReduceMax).contains(&(x, axis)) {
                    let attrs = Attrs::new().with("axis", Attr::Int(axis_attr(v, x, axis)));
                    out.push(Rhs::op(OpKind::LogSoftmax, attrs, vec![Rhs::Class(x)]));
                }
            }
        }
    }
    out
}

/// `r` is `rsqrt(mean(c·c, axis) + eps)`: yields (axis, eps).
fn inv_rms_of(v: &View, r: Id, c: Id) -> Vec<(usize, f64)> {
    let mut out = vec![];
    for rs in v.nodes(r, OpKind::Rsqrt) {
        for add in v.nodes(rs.children[0], OpKind::Add) {
            let (ms, eps) = (add.children[0], add.children[1]);
            let Some(eps) = v.splat(eps).filter(|_| v.rank(add.children[1]) == 0) else {
                continue;
            };
            // The attribute as the shortest decimal f32 reads back to the same value (the
            // constant holds its dtype's value, and an f32 constant of 1e-6 holds
            // 9.99999997e-7: `eps = 1e-6`).
            let eps = match v.ty(add.children[1]).dtype {
                DType::F32 | DType::F16 | DType::BF16 => {
                    (eps as f32).to_string().parse().unwrap_or(eps)
                }
                _ => eps,
            };
            for (sq, axis) in single_axis_reduction(v, ms, OpKind::ReduceMean) {
                if v.nodes(sq, OpKind::Mul)
                    .any(|m| m.children[0] == c && m.children[1] == c)
                {
                    out.push((axis, eps));
                }
            }
        }
    }
    out
}

fn norm(op: OpKind, v: &View, x: Id, axis: usize, eps: f64) -> Rhs {
    let attrs = Attrs::new()
        .with("axis", Attr::Int(axis_attr(v, x, axis)))
        .with("eps", Attr::Float(eps));
    Rhs::op(op, attrs, vec![Rhs::Class(x)])
}

fn rmsnorm(v: &View, id: Id, n: &Node) -> Vec<Rhs> {
    if !n.is(OpKind::Mul) {
        return vec![];
    }
    let mut out = vec![];
    for (x, r) in [
        (n.children[0], n.children[1]),
        (n.children[1], n.children[0]),
    ] {
        if v.ty(x) != v.ty(id) {
            continue;
        }
        for (axis, eps) in inv_rms_of(v, r, x) {
            out.push(norm(OpKind::Rmsnorm, v, x, axis, eps));
        }
    }
    out
}

fn layernorm(v: &View, id: Id, n: &Node) -> Vec<Rhs> {
    if !n.is(OpKind::Mul) {
        return vec![];
    }
    let mut out = vec![];
    for (c, r) in [
        (n.children[0], n.children[1]),
        (n.children[1], n.children[0]),
    ] {
        if v.ty(c) != v.ty(id) {
            continue;
        }
        for s in v.nodes(c, OpKind::Sub) {
            let (x, mu) = (s.children[0], s.children[1]);
            for (mx, axis) in single_axis_reduction(v, mu, OpKind::ReduceMean) {
                if mx != x {
                    continue;
                }
                for (axis2, eps) in inv_rms_of(v, r, c) {
                    if axis2 == axis {
                        out.push(norm(OpKind::Layernorm, v, x, axis, eps));
                    }
                }
            }
        }
    }
    out
}

/// `p` is a per-axis parameter laid along `axis` of a rank-`rank` tensor: `[D]` when the axis is
/// last, else `reshape(w [D], [D, 1, ..])`. Yields the `[D]` class.
fn along_axis(v: &View, p: Id, axis: usize, rank: usize, d: u64) -> Vec<Id> {
    let mut out = vec![];
    if axis + 1 == rank && v.ty(p).shape == [d] {
        out.push(p);
    }
    for r in v.nodes(p, OpKind::Reshape) {
        let mut want = vec![d];
        want.extend(std::iter::repeat_n(1, rank - 1 - axis));
        if v.ty(r.children[0]).shape == [d] && v.ty(p).shape == want {
            out.push(r.children[0]);
        }
    }
    out
}

fn affine(v: &View, id: Id, n: &Node) -> Vec<Rhs> {
    let Some(op) = n.kind() else { return vec![] };
    if !matches!(op, OpKind::Mul | OpKind::Add) {
        return vec![];
    }
    let mut out = vec![];
    for (y, p) in [
        (n.children[0], n.children[1]),
        (n.children[1], n.children[0]),
    ] {
        if v.ty(y) != v.ty(id) {
            continue;
        }
        for norm in v.eg[y].nodes.iter() {
            let Some(kind) = norm.kind() else { continue };
            let arity = norm.children.len();
            let fits = match (op, kind) {
                (OpKind::Mul, OpKind::Rmsnorm | OpKind::Layernorm) => arity == 1,
                (OpKind::Add, OpKind::Layernorm) => arity == 2,
                _ => false,
            };
            if !fits {
                continue;
            }
            let x = norm.children[0];
            let rank = v.rank(x);
            let Some(axis) = super::composite_axis(v, norm) else {
                continue;
            };
            let d = v.ty(x).shape[axis];
            for w in along_axis(v, p, axis, rank, d) {
                let mut kids: Vec<Rhs> = norm.children.iter().map(|&c| Rhs::Class(c)).collect();
                kids.push(Rhs::Class(w));
                out.push(Rhs::op(kind, norm.to_attrs(), kids));
            }
        }
    }
    out
}

fn opmath_casts(v: &View, _: Id, n: &Node) -> Vec<Rhs> {
    if !n.is(OpKind::Cast) {
        return vec![];
    }
    let Some(d) = n.attr("dtype").and_then(|a| a.as_dtype()) else {
        return vec![];
    };
    let mut out = vec![];
    for c in v.eg[n.children[0]].nodes.iter() {
        let Some(kind) = c.kind().filter(|k| k.category() == Category::Composite) else {
            continue;
        };
        if v.ty(n.children[0]).dtype != irc_ir::opmath_dtype(d) || irc_ir::opmath_dtype(d) == d {
            continue;
        }
        // Every operand is a cast up from d; pick the first such source for each.
        let sources: Option<Vec<Id>> = c
            .children
            .iter()
            .map(|&k| {
                v.nodes(k, OpKind::Cast)
                    .map(|up| up.children[0])
                    .find(|&s| v.ty(s).dtype == d)
            })
            .collect();
        if let Some(sources) = sources {
            let mut attrs = c.to_attrs();
            if c.is(OpKind::Rmsnorm) && attrs.get("eps").is_none() {
                // The f32 composite's default eps is f32's; keep it explicit.
                attrs.insert(
                    "eps",
                    Attr::Float(irc_ir::DType::F32.epsilon().unwrap_or(1e-6)),
                );
            }
            out.push(Rhs::op(
                kind,
                attrs,
                sources.into_iter().map(Rhs::Class).collect(),
            ));
        }
    }
    out
}
