//! Transposes: folded into matmul operands and results, composed, and sunk through
//! elementwise ops and reductions until a consumer absorbs them.

use super::{is_identity, is_swap_last_two};
use crate::eqsat::{Rhs, Rule, View};
use crate::lang::Node;
use egg::Id;
use irc_ir::{Attrs, OpKind, ops::Category};

#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    // matmul(a, transpose(b, p)) = matmul{tb: !tb}(a, transpose(b, p·swap))   (and the same for a)
    Rule { name: "fold-transpose-into-matmul", equation: "matmul(a, transpose(b, p)) = matmul{transpose_b}(a, transpose(b, p with its last two swapped))", apply: fold_into_matmul },
    // transpose(matmul(a, b), swap) = matmul{ta: !tb, tb: !ta}(b, a)
    Rule { name: "fold-transpose-of-matmul", equation: "(a·b)ᵀ = bᵀ·aᵀ, carried as operand flags", apply: fold_of_matmul },
    // transpose(transpose(x, p), q) = transpose(x, p∘q), and x when p∘q is the identity
    Rule { name: "compose-transposes", equation: "transpose(transpose(x, p), q) = transpose(x, [p[q[i]]])", apply: compose },
    // transpose(x, identity) = x
    Rule { name: "remove-identity-transpose", equation: "transpose(x, [0, 1, ..]) = x", apply: identity },
    // u(transpose(x, p)) = transpose(u(x), p)   for unary ops and casts
    Rule { name: "sink-transpose-through-unary", equation: "u(transpose(x, p)) = transpose(u(x), p)", apply: through_unary },
    // f(transpose(a, p), transpose(b, p)) = transpose(f(a, b), p); a rank-0 operand stays
    Rule { name: "sink-transpose-through-binary", equation: "f(aᵖ, bᵖ) = f(a, b)ᵖ, f(aᵖ, s) = f(a, s)ᵖ", apply: through_binary },
    // reduce(transpose(x, p), axes, keepdims) = transpose(reduce(x, p[axes], keepdims), p')
    Rule { name: "sink-transpose-through-reduction", equation: "reduce(xᵖ, A) = reduce(x, p[A])ᵖ'", apply: through_reduction },
];

/// A transpose's `perm`, negative entries (which count from the end) made non-negative, so that
/// `[0, 1, -1]` is recognised as the identity and composes like `[0, 1, 2]`.
fn perm(n: &Node) -> Option<Vec<i64>> {
    if n.is(OpKind::Transpose) {
        let p = n.ints("perm")?;
        let r = p.len() as i64;
        Some(
            p.into_iter()
                .map(|x| if x < 0 { x + r } else { x })
                .collect(),
        )
    } else {
        None
    }
}

/// A transpose of `x` by `perm` with its last two axes swapped again: `transpose(x, perm)ᵀ`
/// as one term (`x` itself when that is the identity).
fn swapped(x: Id, perm: &[i64]) -> Option<Rhs> {
    let r = perm.len();
    if r < 2 {
        return None;
    }
    let mut p = perm.to_vec();
    p.swap(r - 2, r - 1);
    Some(if is_identity(&p) {
        Rhs::Class(x)
    } else {
        Rhs::transpose(Rhs::Class(x), &p)
    })
}

fn fold_into_matmul(v: &View, _: Id, n: &Node) -> Vec<Rhs> {
    let mut out = Vec::new();
    if !n.is(OpKind::Matmul) {
        return out;
    }
    let (a, b) = (n.children[0], n.children[1]);
    let (ta, tb) = (n.flag("transpose_a"), n.flag("transpose_b"));
    for t in v.nodes(b, OpKind::Transpose) {
        if let Some(bt) = perm(t).and_then(|p| swapped(t.children[0], &p)) {
            out.push(Rhs::matmul(Rhs::Class(a), bt, ta, !tb));
        }
    }
    for t in v.nodes(a, OpKind::Transpose) {
        if let Some(at) = perm(t).and_then(|p| swapped(t.children[0], &p)) {
            out.push(Rhs::matmul(at, Rhs::Class(b), !ta, tb));
        }
    }
    out
}

fn fold_of_matmul(v: &View, _: Id, n: &Node) -> Vec<Rhs> {
    let Some(p) = perm(n) else { return vec![] };
    if !is_swap_last_two(&p) {
        return vec![];
    }
    v.nodes(n.children[0], OpKind::Matmul)
        .filter(|m| v.rank(m.children[0]) >= 2 && v.rank(m.children[1]) >= 2)
        .map(|m| {
            let (ta, tb) = (m.flag("transpose_a"), m.flag("transpose_b"));
            Rhs::matmul(
                Rhs::Class(m.children[1]),
                Rhs::Class(m.children[0]),
                !tb,
                !ta,
            )
        })
        .collect()
}

fn compose(v: &View, _: Id, n: &Node) -> Vec<Rhs> {
    let Some(q) = perm(n) else { return vec![] };
    v.nodes(n.children[0], OpKind::Transpose)
        .filter_map(|t| {
            let p = perm(t)?;
            let pq: Vec<i64> = q
                .iter()
                .map(|&i| p.get(i as usize).copied())
                .collect::<Option<_>>()?;
            let x = Rhs::Class(t.children[0]);
            Some(if is_identity(&pq) {
                x
            } else {
                Rhs::transpose(x, &pq)
            })
        })
        .collect()
}

fn identity(_: &View, _: Id, n: &Node) -> Vec<Rhs> {
    match perm(n) {
        Some(p) if is_identity(&p) => vec![Rhs::Class(n.children[0])],
        _ => vec![],
    }
}

fn through_unary(v: &View, _: Id, n: &Node) -> Vec<Rhs> {
    let Some(op) = n.kind() else { return vec![] };
    if !matches!(op.category(), Category::Unary | Category::Cast) {
        return vec![];
    }
    v.nodes(n.children[0], OpKind::Transpose)
        .filter_map(|t| {
            let p = perm(t)?;
            let inner = Rhs::op(op, n.to_attrs(), vec![Rhs::Class(t.children[0])]);
            Some(Rhs::transpose(inner, &p))
        })
        .collect()
}

fn through_binary(v: &View, _: Id, n: &Node) -> Vec<Rhs> {
    let Some(op) = n.kind() else { return vec![] };
    if op.category() != Category::Binary {
        return vec![];
    }
    let (a, b) = (n.children[0], n.children[1]);
    let mut out = Vec::new();
    for ta in v.nodes(a, OpKind::Transpose) {
        let Some(p) = perm(ta) else { continue };
        if v.rank(b) == 0 {
            out.push(Rhs::transpose(
                Rhs::binary(op, Rhs::Class(ta.children[0]), Rhs::Class(b)),
                &p,
            ));
        }
        for tb in v.nodes(b, OpKind::Transpose) {
            if perm(tb).as_ref() == Some(&p)
                && v.ty(ta.children[0]).shape == v.ty(tb.children[0]).shape
            {
                out.push(Rhs::transpose(
                    Rhs::binary(op, Rhs::Class(ta.children[0]), Rhs::Class(tb.children[0])),
                    &p,
                ));
            }
        }
    }
    if v.rank(a) == 0 {
        for tb in v.nodes(b, OpKind::Transpose) {
            if let Some(p) = perm(tb) {
                out.push(Rhs::transpose(
                    Rhs::binary(op, Rhs::Class(a), Rhs::Class(tb.children[0])),
                    &p,
                ));
            }
        }
    }
    out
}

fn through_reduction(v: &View, _: Id, n: &Node) -> Vec<Rhs> {
    let Some(op) = n.kind() else { return vec![] };
    if op.category() != Category::Reduction {
        return vec![];
    }
    let Some((axes, keepdims)) = super::reduce_axes(v, n) else {
        return vec![];
    };
    v.nodes(n.children[0], OpKind::Transpose)
        .filter_map(|t| {
            let p = perm(t)?;
            // Result axis i of the transpose is input axis p[i].
            let mut inner_axes: Vec<i64> = axes.iter().map(|&a| p[a]).collect();
            inner_axes.sort();
            let attrs = Attrs::new()
                .with("axes", irc_ir::ints(&inner_axes))
                .with("keepdims", irc_ir::Attr::Bool(keepdims));
            let reduced = Rhs::op(op, attrs, vec![Rhs::Class(t.children[0])]);
            let outer: Vec<i64> = if keepdims {
                p.clone()
            } else {
                // The kept axes in order, renumbered among the kept input axes.
                let kept: Vec<i64> = (0..p.len())
                    .filter(|i| !axes.contains(i))
                    .map(|i| p[i])
                    .collect();
                kept.iter().map(|&x| kept_rank(&inner_axes, x)).collect()
            };
            Some(if is_identity(&outer) {
                reduced
            } else {
                Rhs::transpose(reduced, &outer)
            })
        })
        .collect()
}

/// The position of input axis `x` among the axes a reduction over `removed` keeps.
fn kept_rank(removed: &[i64], x: i64) -> i64 {
    x - removed.iter().filter(|&&r| r < x).count() as i64
}
