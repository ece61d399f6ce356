//! Equality saturation: rules as small Rust functions over the e-graph, run to saturation or
//! to a limit, on egg's e-graph (hash-consing, congruence closure, rebuilding).
//!
//! A rule looks at one e-node of one e-class (and, through [`View`], at its operands' classes,
//! types and constant values) and proposes equal terms ([`Rhs`]). Attributes are data, so a
//! rule's condition is ordinary code (`perm` composition, shape checks), not a pattern
//! language. Every proposed term is type-checked with the verifier's own rule before it is
//! added, and must have the class's type; a proposal that does not is dropped and counted.

use crate::lang::{EGraph, Head, Node, node_type};
use egg::{Id, StopReason};
use irc_ir::{Attr, Attrs, DType, OpKind, TensorType};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A term to add: an existing class, or a new node over sub-terms.
#[derive(Clone, Debug)]
pub enum Rhs {
    Class(Id),
    Node(Box<Node>, Vec<Rhs>),
}

impl Rhs {
    pub fn op(op: OpKind, attrs: Attrs, children: Vec<Rhs>) -> Rhs {
        Rhs::Node(Box::new(Node::op(op, &attrs, vec![])), children)
    }
    pub fn unary(op: OpKind, x: Rhs) -> Rhs {
        Rhs::op(op, Attrs::new(), vec![x])
    }
    pub fn binary(op: OpKind, a: Rhs, b: Rhs) -> Rhs {
        Rhs::op(op, Attrs::new(), vec![a, b])
    }
    pub fn transpose(x: Rhs, perm: &[i64]) -> Rhs {
        Rhs::op(
            OpKind::Transpose,
            Attrs::new().with("perm", irc_ir::ints(perm)),
            vec![x],
        )
    }
    pub fn reshape(x: Rhs, shape: &[i64]) -> Rhs {
        Rhs::op(
            OpKind::Reshape,
            Attrs::new().with("shape", irc_ir::ints(shape)),
            vec![x],
        )
    }
    pub fn cast(x: Rhs, d: DType) -> Rhs {
        Rhs::op(
            OpKind::Cast,
            Attrs::new().with("dtype", Attr::DType(d)),
            vec![x],
        )
    }
    pub fn matmul(a: Rhs, b: Rhs, ta: bool, tb: bool) -> Rhs {
        let attrs = Attrs::new()
            .with("transpose_a", Attr::Bool(ta))
            .with("transpose_b", Attr::Bool(tb));
        Rhs::op(OpKind::Matmul, attrs, vec![a, b])
    }
    /// A rank-0 constant.
    pub fn scalar(value: f64, d: DType) -> Rhs {
        let mut n = Node::op(
            OpKind::Constant,
            &Attrs::new().with("value", Attr::Float(value)),
            vec![],
        );
        n.written_ty = Some((vec![], d));
        Rhs::Node(Box::new(n), vec![])
    }
}

/// What a rule sees: the e-graph, read-only.
pub struct View<'a> {
    pub eg: &'a EGraph,
}

impl View<'_> {
    pub fn ty(&self, id: Id) -> &TensorType {
        static NONE: std::sync::OnceLock<TensorType> = std::sync::OnceLock::new();
        self.eg[id]
            .data
            .ty
            .as_ref()
            .unwrap_or_else(|| NONE.get_or_init(|| TensorType::scalar(DType::I1)))
    }
    pub fn rank(&self, id: Id) -> usize {
        self.ty(id).rank()
    }
    /// The value of a class that is a constant with one value everywhere.
    pub fn splat(&self, id: Id) -> Option<f64> {
        self.eg[id].data.splat
    }
    /// The nodes of a class with this op.
    pub fn nodes(&self, id: Id, op: OpKind) -> impl Iterator<Item = &Node> {
        self.eg[id].nodes.iter().filter(move |n| n.is(op))
    }
    pub fn is_param(&self, id: Id) -> bool {
        self.eg[id]
            .nodes
            .iter()
            .any(|n| matches!(n.head, Head::Param(_)))
    }
}

/// One rewrite: a kebab-case name, its equation, and the function finding its matches.
pub struct Rule {
    pub name: &'static str,
    pub equation: &'static str,
    pub apply: fn(&View, Id, &Node) -> Vec<Rhs>,
}

/// Limits of one saturation run. The default limits are counts of work (iterations, e-nodes),
/// so a run's result never depends on the machine or its load; a wall-clock limit is opt-in.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_iters: usize,
    /// E-nodes the e-graph may grow by beyond the input's own: a bound on the rewriting work
    /// that does not stop a graph larger than it before its first rewrite.
    pub max_nodes: usize,
    /// `None` (the default): no wall-clock limit.
    pub time_limit: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_iters: 16,
            max_nodes: 200_000,
            time_limit: None,
        }
    }
}

/// What a saturation run did.
#[derive(Clone, Debug)]
pub struct Report {
    pub iterations: usize,
    pub stop_reason: StopReason,
    /// How many times each rule added a new equality.
    pub fired: BTreeMap<&'static str, u64>,
    /// Proposals dropped because they did not type-check (a rule bug; should stay 0).
    pub rejected: u64,
    pub nodes: usize,
    pub classes: usize,
    pub time: Duration,
}

/// Adds a term, returning its class, or `None` when some node of it does not type-check.
pub fn add_rhs(eg: &mut EGraph, rhs: &Rhs) -> Option<Id> {
    match rhs {
        Rhs::Class(id) => Some(*id),
        Rhs::Node(n, kids) => {
            let mut n = (**n).clone();
            n.children = kids
                .iter()
                .map(|k| add_rhs(eg, k))
                .collect::<Option<Vec<_>>>()?;
            let ty = node_type(eg, &n).ok()?;
            Some(crate::lang::add_typed(eg, n, ty))
        }
    }
}

/// Runs `rules` on `eg` until nothing changes or a limit is hit.
pub fn saturate(eg: &mut EGraph, rules: &[Rule], limits: &Limits) -> Report {
    let start = Instant::now();
    let node_cap = eg.total_size().saturating_add(limits.max_nodes);
    let mut fired: BTreeMap<&'static str, u64> = rules.iter().map(|r| (r.name, 0)).collect();
    let mut rejected = 0;
    let mut iterations = 0;
    let stop_reason = loop {
        if iterations >= limits.max_iters {
            break StopReason::IterationLimit(limits.max_iters);
        }
        if let Some(t) = limits.time_limit
            && start.elapsed() >= t
        {
            break StopReason::TimeLimit(t.as_secs_f64());
        }
        iterations += 1;
        // Search on a frozen e-graph (classes in parallel, their matches kept in class order),
        // then apply every match.
        let matches: Vec<(usize, Id, Rhs)> = {
            use rayon::prelude::*;
            let view = View { eg };
            let classes: Vec<&egg::EClass<Node, crate::lang::ClassData>> = eg.classes().collect();
            let found: Vec<Vec<(usize, Id, Rhs)>> = classes
                .par_iter()
                .map(|class| {
                    let mut found = vec![];
                    for n in &class.nodes {
                        for (ri, r) in rules.iter().enumerate() {
                            for rhs in (r.apply)(&view, class.id, n) {
                                found.push((ri, class.id, rhs));
                            }
                        }
                    }
                    found
                })
                .collect();
            found.into_iter().flatten().collect()
        };
        let mut changed = false;
        let mut hit_node_limit = false;
        for (ri, class, rhs) in matches {
            if eg.total_size() >= node_cap {
                hit_node_limit = true;
                break;
            }
            let before = eg.total_size();
            let Some(new) = add_rhs(eg, &rhs) else {
                rejected += 1;
                continue;
            };
            let class_ty = eg[eg.find(class)].data.ty.clone();
            if eg[new].data.ty != class_ty {
                rejected += 1;
                continue;
            }
            let merged = eg.union(class, new);
            if merged || eg.total_size() != before {
                *fired.entry(rules[ri].name).or_default() += u64::from(merged);
                changed = true;
            }
        }
        eg.rebuild();
        if hit_node_limit {
            break StopReason::NodeLimit(limits.max_nodes);
        }
        if !changed {
            break StopReason::Saturated;
        }
    };
    Report {
        iterations,
        stop_reason,
        fired,
        rejected,
        nodes: eg.total_size(),
        classes: eg.number_of_classes(),
        time: start.elapsed(),
    }
}
