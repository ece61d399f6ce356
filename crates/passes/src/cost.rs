//! The cost model: what a selected graph costs to run on a target, in picoseconds.
//!
//! # Units and arithmetic
//!
//! A [`Cost`] is a time in **picoseconds** (`u64`): fine enough that one byte of HBM traffic
//! (0.33 ps on an H100) still counts once summed over a tensor, and wide enough for any graph
//! (2^64 ps is seven months). Sums saturate, and [`INFINITY`] (`u64::MAX`) is the cost of what
//! cannot be lowered — an ill-typed node or a cyclic selection — so nothing finite ever
//! prefers it.
//!
//! # The model
//!
//! A first-order roofline over kernels. The graph is cut into kernels by the fusion policy
//! that lowering uses ([`irc_fused::policy::decide`]: parameters and constant arrays are in
//! memory, results, anchors, shared elementwise values and computed matmul operands are stored,
//! a matmul whose single reader chain reaches a stored value is that value's epilogue, views and
//! single-use elementwise ops are computed where they are read), so the kernels priced here are
//! the kernels lowering builds (a test checks their number and bytes on every example and on
//! random graphs).
//!
//! Each materialized statement closes one kernel, whose time is
//! `launch + max(bytes / bandwidth, tensor-core flops / tensor rate + other flops / CUDA-core rate)`,
//! where bytes are the kernel's output plus each distinct materialized tensor it reads. The
//! graph's cost is the sum over kernels: kernels run one after the other.
//!
//! The target's numbers are `irc_target`'s (MISSION.md's H100 ceilings by default,
//! [`Target::h100`]), the same the benchmark's roofline and the verifier's limits use.

use crate::lang::{Head, Node};
use irc_fused::policy::{self, Home, NodeKind, splat_of};
use irc_ir::{DType, OpKind, TensorType, ops::Category};
use std::borrow::Cow;

/// Picoseconds.
pub type Cost = u64;

/// The cost of what cannot be lowered.
pub const INFINITY: Cost = u64::MAX;

pub use irc_target::Target;

/// One statement of a selected graph; children index earlier entries. The node and its type
/// are borrowed from the e-graph where they can be (extraction builds many small DAGs).
#[derive(Clone, Debug)]
pub struct DagNode<'a> {
    pub node: Cow<'a, Node>,
    /// `None` for an ill-typed node (costs [`INFINITY`]).
    pub ty: Option<&'a TensorType>,
    pub children: Vec<usize>,
}

/// A selected graph in topological order, with its results.
#[derive(Clone, Debug, Default)]
pub struct Dag<'a> {
    pub nodes: Vec<DagNode<'a>>,
    pub results: Vec<usize>,
}

/// A selected graph as the fusion policy sees it.
struct PolicyDag<'d, 'a> {
    d: &'d Dag<'a>,
    kinds: Vec<NodeKind>,
}

impl<'d, 'a> PolicyDag<'d, 'a> {
    /// `None` when a node is ill-typed.
    fn new(d: &'d Dag<'a>) -> Option<Self> {
        let kinds = d
            .nodes
            .iter()
            .map(|n| {
                n.ty?;
                Some(match n.node.head {
                    Head::Param(_) => NodeKind::Param,
                    Head::Op(OpKind::Constant) => NodeKind::Constant {
                        splat: n.node.attr("value").is_some_and(|v| splat_of(&v).is_some()),
                    },
                    Head::Op(op) => NodeKind::of(op, &irc_ir::Attrs::new()),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(PolicyDag { d, kinds })
    }
}

impl policy::Dag for PolicyDag<'_, '_> {
    fn len(&self) -> usize {
        self.kinds.len()
    }
    fn kind(&self, i: usize) -> NodeKind {
        self.kinds[i]
    }
    fn operands(&self, i: usize) -> &[usize] {
        &self.d.nodes[i].children
    }
    fn shape(&self, i: usize) -> &[u64] {
        self.d.nodes[i].ty.map_or(&[], |t| &t.shape)
    }
    fn results(&self) -> &[usize] {
        &self.d.results
    }
    fn dtype(&self, i: usize) -> Option<DType> {
        self.d.nodes[i].ty.map(|t| t.dtype)
    }
    fn attr(&self, i: usize, name: &str) -> Option<irc_ir::Attr> {
        self.d.nodes[i].node.attr(name)
    }
    fn op(&self, i: usize) -> Option<OpKind> {
        match self.d.nodes[i].node.head {
            Head::Op(op) => Some(op),
            Head::Param(_) => None,
        }
    }
}

/// Where each statement's value lives (see the module doc); `None` when a node is ill-typed.
pub fn homes(d: &Dag) -> Option<Vec<Home>> {
    let p = PolicyDag::new(d)?;
    Some(policy::decide(&p, &[]))
}

/// Flops of one statement: (tensor-core, CUDA-core).
fn flops(d: &Dag, i: usize) -> (f64, f64) {
    let n = &d.nodes[i];
    let Some(ty) = n.ty else { return (0.0, 0.0) };
    let out = ty.numel() as f64;
    let input = |k: usize| d.nodes[n.children[k]].ty.map_or(0.0, |t| t.numel() as f64);
    let Head::Op(op) = n.node.head else {
        return (0.0, 0.0);
    };
    match op.category() {
        Category::Matmul => {
            let a = d.nodes[n.children[0]].ty;
            let k = a.and_then(|a| {
                let r = a.rank();
                let ta = n.node.flag("transpose_a");
                if r == 1 {
                    a.shape.first()
                } else if ta {
                    a.shape.get(r - 2)
                } else {
                    a.shape.last()
                }
            });
            let f = 2.0 * out * k.copied().unwrap_or(1) as f64;
            if matches!(ty.dtype, DType::F16 | DType::BF16) {
                (f, 0.0)
            } else {
                (0.0, f)
            }
        }
        Category::Reduction => (0.0, input(0)),
        Category::Composite => (0.0, 8.0 * input(0)),
        Category::Unary => {
            let w = if matches!(op, OpKind::Neg | OpKind::Abs | OpKind::Relu) {
                1.0
            } else {
                4.0
            };
            (0.0, w * out)
        }
        Category::Binary => (
            0.0,
            if matches!(op, OpKind::Div | OpKind::Pow) {
                4.0
            } else {
                1.0
            } * out,
        ),
        Category::Cast | Category::Compare | Category::Select | Category::Iota => (0.0, out),
        // Data movement: bytes, no flops.
        Category::View
        | Category::Constant
        | Category::Slice
        | Category::Concat
        | Category::Gather => (0.0, 0.0),
    }
}

/// A transpose that moves the last (contiguous) axis: a matmul cannot read it as a strided
/// operand, only through its transpose flags.
fn moves_last_axis(n: &Node) -> bool {
    n.is(OpKind::Transpose)
        && n.ints("perm").is_some_and(|p| {
            // Negative entries count from the end: -1 is the last axis.
            p.last()
                .is_some_and(|&l| l != -1 && l != p.len() as i64 - 1)
        })
}

/// The cost of running `d` on `t`.
pub fn dag_cost(t: &Target, d: &Dag) -> Cost {
    let Some(p) = PolicyDag::new(d) else {
        return INFINITY;
    };
    let home = policy::decide(&p, &[]);
    // One picosecond per statement breaks ties toward the smaller graph, and one more per
    // division toward multiplication (a division costs several multiplies where compute shows).
    let statements = d
        .nodes
        .iter()
        .filter(|n| !matches!(n.node.head, Head::Param(_)))
        .map(|n| if n.node.is(OpKind::Div) { 2 } else { 1 })
        .sum::<usize>();
    // And toward the matmul flags over a transpose that a matmul reads (fused into its
    // producer's store it may cost no kernel, but the flag form is never worse).
    let mut read_by_matmul = vec![false; d.nodes.len()];
    for n in d.nodes.iter().filter(|n| n.node.is(OpKind::Matmul)) {
        for &c in &n.children {
            read_by_matmul[c] = true;
        }
    }
    let flaggable = d
        .nodes
        .iter()
        .enumerate()
        .filter(|&(i, n)| read_by_matmul[i] && moves_last_axis(&n.node))
        .count();
    let mut total: Cost = (statements + flaggable) as Cost;
    for k in policy_kernels(&p, &home) {
        let mem = k.bytes as f64 / (t.peak_gbps * 1e9);
        let compute =
            k.tensor_flops / (t.peak_tflops * 1e12) + k.cuda_flops / (t.cuda_tflops * 1e12);
        let ps = (mem.max(compute) * 1e12) as Cost;
        total = total
            .saturating_add((t.launch_us * 1e6) as Cost)
            .saturating_add(ps);
    }
    total
}

/// One kernel as the cost model sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelCost {
    /// The node the kernel stores.
    pub root: usize,
    /// Bytes it moves: its output, and each distinct tensor in memory it reads once.
    pub bytes: u64,
    pub tensor_flops: f64,
    pub cuda_flops: f64,
}

/// The kernels of `d` given each node's home: one per stored node, computing every node
/// reached from it that is not in memory.
pub fn kernels(d: &Dag, home: &[Home]) -> Vec<KernelCost> {
    PolicyDag::new(d).map_or(vec![], |p| policy_kernels(&p, home))
}

fn policy_kernels(p: &PolicyDag, home: &[Home]) -> Vec<KernelCost> {
    let d = p.d;
    let size = |j: usize| d.nodes[j].ty.map_or(0, |t| t.size_bytes());
    let mut out = vec![];
    let mut seen = vec![usize::MAX; d.nodes.len()];
    for (k, stores) in policy::kernels(p, home) {
        let (mut tf, mut cf) = (0.0, 0.0);
        let mut bytes = 0u64;
        let mut stack: Vec<usize> = vec![];
        for &s in &stores {
            bytes = bytes.saturating_add(size(s));
            // A constant array stored as a result is read, then written.
            if d.nodes[s].node.is(OpKind::Constant) && home_is_array(d, s) {
                bytes = bytes.saturating_add(size(s));
            }
            stack.push(s);
        }
        while let Some(j) = stack.pop() {
            if std::mem::replace(&mut seen[j], k) == k {
                continue;
            }
            let own = home[j].kernel() == Some(k);
            if home[j].in_memory() && !own {
                bytes = bytes.saturating_add(size(j));
            } else {
                let (a, b) = flops(d, j);
                tf += a;
                cf += b;
                stack.extend(d.nodes[j].children.iter().copied());
            }
        }
        out.push(KernelCost {
            root: k,
            bytes,
            tensor_flops: tf,
            cuda_flops: cf,
        });
    }
    out
}

fn home_is_array(d: &Dag, i: usize) -> bool {
    d.nodes[i]
        .node
        .attr("value")
        .is_some_and(|v| splat_of(&v).is_none())
}

/// The kernels the cost model assumes for a graph as written (`None` if a node is ill-typed).
pub fn graph_kernels(g: &irc_ir::Graph) -> Option<Vec<KernelCost>> {
    let d = graph_dag(g);
    let home = homes(&d)?;
    Some(kernels(&d, &home))
}

/// The cost of a graph as written.
pub fn graph_cost(t: &Target, g: &irc_ir::Graph) -> Cost {
    dag_cost(t, &graph_dag(g))
}

/// A graph as a [`Dag`].
fn graph_dag(g: &irc_ir::Graph) -> Dag<'_> {
    let mut d = Dag::default();
    let mut index = vec![usize::MAX; g.values.len()];
    for (i, &p) in g.params.iter().enumerate() {
        index[p.index()] = d.nodes.len();
        let node = Node {
            head: Head::Param(i as u32),
            attrs: vec![],
            written_ty: None,
            children: vec![],
        };
        d.nodes.push(DagNode {
            node: Cow::Owned(node),
            ty: Some(g.ty(p)),
            children: vec![],
        });
    }
    for inst in &g.insts {
        let children: Vec<usize> = inst.operands.iter().map(|o| index[o.index()]).collect();
        let node = Node::of_inst(g, inst, vec![]);
        index[inst.result.index()] = d.nodes.len();
        d.nodes.push(DagNode {
            node: Cow::Owned(node),
            ty: Some(g.ty(inst.result)),
            children,
        });
    }
    d.results = g.results.iter().map(|r| index[r.index()]).collect();
    d
}
