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
//! A first-order roofline over kernels. The graph is cut into kernels by deciding which
//! tensors are **materialized** (written to global memory):
//!
//! - parameters and array constants are in memory already (read, never written); splat
//!   constants are immediates and cost nothing;
//! - a graph result is materialized;
//! - a value read by two or more statements is materialized (no recomputation);
//! - **views** (transpose, reshape, broadcast) are free: the consumer reads its input through
//!   a strided layout. The exceptions are a view that is a graph result, and a transpose read
//!   by a matmul that moves the last axis (a matmul reads batch and row dims at any stride, but
//!   its operands' inner dim must stay contiguous; a swap of the last two dims is absorbed only
//!   through the `transpose_a`/`transpose_b` flags, which the rules set): those are copy
//!   kernels;
//! - elementwise ops and casts fuse into their single consumer (prologue) or producer
//!   (epilogue) and are not materialized;
//! - anchors (matmul, reductions, composites) end a kernel when read by another anchor; read
//!   by an elementwise op they keep going (an epilogue). A matmul's operands may carry fused
//!   elementwise prologues, but an anchor feeding a matmul operand is materialized: its result
//!   must be complete before the mainloop starts (a reduction can only ride along in the
//!   epilogue, which is what the row-scaling rules exploit).
//!
//! Each materialized statement closes one kernel, whose time is
//! `launch + max(bytes / bandwidth, tensor-core flops / tensor rate + other flops / CUDA-core rate)`,
//! where bytes are the kernel's output plus each distinct materialized tensor it reads. The
//! graph's cost is the sum over kernels: kernels run one after the other.
//!
//! The target's numbers default to MISSION.md's H100 ceilings ([`Target::h100`]).

use crate::lang::{Head, Node};
use irc_ir::{DType, OpKind, TensorType, ops::Category};

/// Picoseconds.
pub type Cost = u64;

/// The cost of what cannot be lowered.
pub const INFINITY: Cost = u64::MAX;

/// A machine description: the rates the cost model divides by.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub name: &'static str,
    /// Global memory bandwidth, bytes per second (read + write).
    pub bandwidth: f64,
    /// Tensor-core rate for 16-bit matmuls, flop/s.
    pub tensor_flops: f64,
    /// CUDA-core rate for everything else (f32), flop/s.
    pub cuda_flops: f64,
    /// Fixed cost of one kernel launch, picoseconds.
    pub launch: Cost,
}

impl Target {
    /// H100 80GB HBM3: 3006 GB/s copy bandwidth and 737 TFLOP/s bf16 matmul (MISSION.md's
    /// measured ceilings), 67 TFLOP/s f32 on CUDA cores (the data sheet), 3 µs per launch.
    pub fn h100() -> Target {
        Target {
            name: "h100",
            bandwidth: 3006e9,
            tensor_flops: 737e12,
            cuda_flops: 67e12,
            launch: 3_000_000,
        }
    }
}

impl Default for Target {
    fn default() -> Target {
        Target::h100()
    }
}

/// One statement of a selected graph; children index earlier entries.
#[derive(Clone, Debug)]
pub struct DagNode {
    pub node: Node,
    /// `None` for an ill-typed node (costs [`INFINITY`]).
    pub ty: Option<TensorType>,
    pub children: Vec<usize>,
}

/// A selected graph in topological order, with its results.
#[derive(Clone, Debug, Default)]
pub struct Dag {
    pub nodes: Vec<DagNode>,
    pub results: Vec<usize>,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum Kind {
    Memory,
    Immediate,
    View,
    Elementwise,
    Anchor,
}

fn kind(n: &Node) -> Kind {
    match n.head {
        Head::Param(_) => Kind::Memory,
        Head::Op(op) => match op.category() {
            Category::Constant => {
                if crate::lang::splat_value(n).is_some() {
                    Kind::Immediate
                } else {
                    Kind::Memory
                }
            }
            Category::View => Kind::View,
            Category::Unary | Category::Binary | Category::Cast => Kind::Elementwise,
            Category::Matmul | Category::Reduction | Category::Composite => Kind::Anchor,
        },
    }
}

/// Flops of one statement: (tensor-core, CUDA-core).
fn flops(d: &Dag, i: usize) -> (f64, f64) {
    let n = &d.nodes[i];
    let Some(ty) = &n.ty else { return (0.0, 0.0) };
    let out = ty.numel() as f64;
    let input = |k: usize| {
        d.nodes[n.children[k]]
            .ty
            .as_ref()
            .map_or(0.0, |t| t.numel() as f64)
    };
    let Head::Op(op) = n.node.head else {
        return (0.0, 0.0);
    };
    match op.category() {
        Category::Matmul => {
            let a = d.nodes[n.children[0]].ty.as_ref();
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
        Category::Cast => (0.0, out),
        Category::View | Category::Constant => (0.0, 0.0),
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

/// Which statements are materialized (see the module doc).
pub fn materialized(d: &Dag) -> Vec<bool> {
    let n = d.nodes.len();
    // Per statement: how many distinct statements read it, and whether a matmul or an anchor
    // is among them.
    let mut readers = vec![0u32; n];
    let mut read_by_matmul = vec![false; n];
    let mut read_by_anchor = vec![false; n];
    for node in &d.nodes {
        let anchor = kind(&node.node) == Kind::Anchor;
        let matmul = node.node.is(OpKind::Matmul);
        for (k, &c) in node.children.iter().enumerate() {
            if node.children[..k].contains(&c) {
                continue;
            }
            readers[c] += 1;
            read_by_matmul[c] |= matmul;
            read_by_anchor[c] |= anchor;
        }
    }
    let mut is_result = vec![false; n];
    for &r in &d.results {
        is_result[r] = true;
    }
    let kinds: Vec<Kind> = d.nodes.iter().map(|x| kind(&x.node)).collect();
    let mut mat = vec![false; n];
    for i in 0..n {
        mat[i] = match kinds[i] {
            Kind::Memory => true,
            Kind::Immediate => false,
            Kind::View => is_result[i] || (moves_last_axis(&d.nodes[i].node) && read_by_matmul[i]),
            Kind::Elementwise => is_result[i] || readers[i] >= 2,
            Kind::Anchor => is_result[i] || readers[i] >= 2 || read_by_anchor[i],
        };
    }
    // An anchor reached from a matmul operand through fused prologue ops is materialized.
    for i in 0..n {
        if !d.nodes[i].node.is(OpKind::Matmul) {
            continue;
        }
        let mut stack: Vec<usize> = d.nodes[i].children.clone();
        while let Some(j) = stack.pop() {
            if kinds[j] == Kind::Anchor {
                mat[j] = true;
            } else if !mat[j] {
                stack.extend(d.nodes[j].children.iter().copied());
            }
        }
    }
    mat
}

/// The cost of running `d` on `t`.
pub fn dag_cost(t: &Target, d: &Dag) -> Cost {
    if d.nodes.iter().any(|n| n.ty.is_none()) {
        return INFINITY;
    }
    let mat = materialized(d);
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
    let mut seen = vec![usize::MAX; d.nodes.len()];
    for i in 0..d.nodes.len() {
        if !mat[i] || kind(&d.nodes[i].node) == Kind::Memory {
            continue;
        }
        let bytes_out = d.nodes[i].ty.as_ref().map_or(0, |t| t.size_bytes());
        let (mut tf, mut cf) = flops(d, i);
        let mut bytes = bytes_out as f64;

        let mut stack: Vec<usize> = d.nodes[i].children.clone();
        while let Some(j) = stack.pop() {
            if std::mem::replace(&mut seen[j], i) == i {
                continue;
            }
            if mat[j] {
                bytes += d.nodes[j].ty.as_ref().map_or(0, |t| t.size_bytes()) as f64;
            } else {
                let (a, b) = flops(d, j);
                tf += a;
                cf += b;
                stack.extend(d.nodes[j].children.iter().copied());
            }
        }
        let mem = bytes / t.bandwidth;
        let compute = tf / t.tensor_flops + cf / t.cuda_flops;
        let ps = (mem.max(compute) * 1e12) as Cost;
        total = total.saturating_add(t.launch).saturating_add(ps);
    }
    total
}

/// The cost of a graph as written.
pub fn graph_cost(t: &Target, g: &irc_ir::Graph) -> Cost {
    let mut d = Dag::default();
    let mut index = vec![usize::MAX; g.values.len()];
    for (i, &p) in g.params.iter().enumerate() {
        index[p.index()] = d.nodes.len();
        let node = Node {
            head: Head::Param(i as u32),
            attrs: vec![],
            const_ty: None,
            children: vec![],
        };
        d.nodes.push(DagNode {
            node,
            ty: Some(g.ty(p).clone()),
            children: vec![],
        });
    }
    for inst in &g.insts {
        let children: Vec<usize> = inst.operands.iter().map(|o| index[o.index()]).collect();
        let mut node = Node::op(inst.op, &inst.attrs, vec![]);
        if inst.op == OpKind::Constant {
            let ty = g.ty(inst.result);
            node.const_ty = Some((ty.shape.clone(), ty.dtype));
        }
        index[inst.result.index()] = d.nodes.len();
        d.nodes.push(DagNode {
            node,
            ty: Some(g.ty(inst.result).clone()),
            children,
        });
    }
    d.results = g.results.iter().map(|r| index[r.index()]).collect();
    dag_cost(t, &d)
}
