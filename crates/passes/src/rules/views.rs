//! Views: reshape and broadcast chains collapsed, identities removed. (Transpose, reshape and
//! broadcast are layout views: the cost model charges nothing for one its consumer absorbs.)

use crate::eqsat::{Rhs, Rule, View};
use crate::lang::Node;
use egg::Id;
use irc_ir::{Attrs, OpKind};

#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    // reshape(reshape(x, s1), s2) = reshape(x, s2)
    Rule { name: "compose-reshapes", equation: "reshape(reshape(x, s1), s2) = reshape(x, s2)", apply: compose_reshapes },
    // reshape(x, shape(x)) = x
    Rule { name: "remove-identity-reshape", equation: "reshape(x, shape(x)) = x", apply: identity_view },
    // broadcast(broadcast(x, s1), s2) = broadcast(x, s2)
    Rule { name: "compose-broadcasts", equation: "broadcast(broadcast(x, s1), s2) = broadcast(x, s2)", apply: compose_broadcasts },
    // broadcast(x, shape(x)) = x
    Rule { name: "remove-identity-broadcast", equation: "broadcast(x, shape(x)) = x", apply: identity_view },
];

fn result_shape(v: &View, id: Id) -> Vec<i64> {
    v.ty(id).shape.iter().map(|&d| d as i64).collect()
}

fn compose_reshapes(v: &View, id: Id, n: &Node) -> Vec<Rhs> {
    if !n.is(OpKind::Reshape) {
        return vec![];
    }
    let shape = result_shape(v, id);
    v.nodes(n.children[0], OpKind::Reshape)
        .map(|inner| Rhs::reshape(Rhs::Class(inner.children[0]), &shape))
        .collect()
}

fn compose_broadcasts(v: &View, id: Id, n: &Node) -> Vec<Rhs> {
    if !n.is(OpKind::Broadcast) {
        return vec![];
    }
    let shape = result_shape(v, id);
    v.nodes(n.children[0], OpKind::Broadcast)
        .map(|inner| {
            let attrs = Attrs::new().with("shape", irc_ir::ints(&shape));
            Rhs::op(
                OpKind::Broadcast,
                attrs,
                vec![Rhs::Class(inner.children[0])],
            )
        })
        .collect()
}

fn identity_view(v: &View, id: Id, n: &Node) -> Vec<Rhs> {
    if (n.is(OpKind::Reshape) || n.is(OpKind::Broadcast)) && v.ty(n.children[0]) == v.ty(id) {
        vec![Rhs::Class(n.children[0])]
    } else {
        vec![]
    }
}
