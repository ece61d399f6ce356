//! The rewrite rules, by topic; `README.md` beside this file is the rulebook.

pub mod algebra;
pub mod composites;
pub mod transpose;
pub mod views;

use crate::eqsat::{Rule, View};
use crate::lang::Node;
use egg::Id;
use irc_ir::{DType, OpKind};

/// Every rule of every topic, for documentation.
pub fn all() -> Vec<&'static [Rule]> {
    vec![
        transpose::RULES,
        views::RULES,
        algebra::RULES,
        composites::RULES,
    ]
}

/// `perm` swaps the last two axes and keeps the others.
pub fn is_swap_last_two(perm: &[i64]) -> bool {
    let r = perm.len();
    r >= 2
        && perm[..r - 2]
            .iter()
            .enumerate()
            .all(|(i, &p)| p == i as i64)
        && perm[r - 2] == (r - 1) as i64
        && perm[r - 1] == (r - 2) as i64
}

pub fn is_identity(perm: &[i64]) -> bool {
    perm.iter().enumerate().all(|(i, &p)| p == i as i64)
}

/// The operand of a node in `op` class `id`, with the node: every node of class `id` of kind `op`.
pub fn inner<'a>(v: &'a View, id: Id, op: OpKind) -> impl Iterator<Item = &'a Node> {
    v.nodes(id, op)
}

pub fn is_16bit(d: DType) -> bool {
    matches!(d, DType::F16 | DType::BF16)
}

/// The axes of a reduction node, normalized to `0..rank` and sorted, and its keepdims flag.
pub fn reduce_axes(v: &View, n: &Node) -> Option<(Vec<usize>, bool)> {
    let rank = v.rank(*n.children.first()?);
    let axes = irc_ir::infer::reduction_axes(rank, &n.to_attrs()).ok()?;
    Some((axes, n.flag("keepdims")))
}

/// The axis of a composite node, normalized to `0..rank`.
pub fn composite_axis(v: &View, n: &Node) -> Option<usize> {
    let rank = v.rank(*n.children.first()?);
    let a = n.attr("axis").and_then(|a| a.as_int()).unwrap_or(-1);
    irc_ir::infer::normalize_axis(a, rank)
}
