//! The fusion policy: which values a graph keeps in memory, and why.
//!
//! One function, [`decide`], over any DAG of graph-IR ops ([`Dag`]): the fusion planner runs it
//! on a [`Graph`](irc_ir::Graph) and the e-graph cost model on each candidate selection, so the
//! kernels the cost model prices are exactly the kernels lowering builds.
//!
//! The rules, in order (each stored value is one kernel, its *group*):
//!
//! 1. Parameters and constant arrays are in memory already; splat constants are immediates.
//! 2. A graph result is stored (a view or constant that is a result is a copy kernel).
//! 3. An anchor (matmul, reduction, row composite) is stored: its consumers start new kernels.
//! 4. An elementwise value read by two or more statements is stored (no recomputation).
//! 5. A computed matmul operand (an elementwise op, possibly behind views) is stored: every
//!    tile would otherwise recompute it.
//! 6. A matmul read once, whose single chain of same-shape elementwise consumers (each read
//!    once) reaches a stored value, is not stored: it is that value's kernel, the chain its
//!    epilogue.
//! 7. A view is read through a layout; a view that cannot be composed with its reader's access
//!    is *forced* into memory by lowering (the caller passes it in `forced`).
//!
//! Everything else (single-use elementwise ops, views, immediates) is computed inside the
//! kernel of each value that reads it.

use irc_ir::infer::flatten_value;
use irc_ir::{Attr, Attrs, OpKind, ops::Category};

/// What a node is, for fusion.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NodeKind {
    Param,
    /// A constant; `splat` when all its elements are equal (an immediate).
    Constant {
        splat: bool,
    },
    View,
    Elementwise,
    Anchor(OpKind),
}

impl NodeKind {
    /// The kind of a statement of `op` with `attrs`.
    pub fn of(op: OpKind, attrs: &Attrs) -> NodeKind {
        match op.category() {
            Category::Constant => NodeKind::Constant {
                splat: is_splat(attrs),
            },
            Category::View => NodeKind::View,
            Category::Unary | Category::Binary | Category::Cast => NodeKind::Elementwise,
            Category::Matmul | Category::Reduction | Category::Composite => NodeKind::Anchor(op),
        }
    }
}

/// Whether a constant's `value` attribute has all elements equal.
pub fn is_splat(attrs: &Attrs) -> bool {
    splat_value(attrs).is_some()
}

/// The value of a constant whose elements are all equal.
pub fn splat_value(attrs: &Attrs) -> Option<f64> {
    splat_of(attrs.get("value").unwrap_or(&Attr::Int(0)))
}

/// The element of a constant `value` attribute whose elements are all equal.
pub fn splat_of(value: &Attr) -> Option<f64> {
    let mut flat = vec![];
    flatten_value(value, &mut flat);
    let num = |a: &Attr| match a {
        Attr::Bool(b) => f64::from(u8::from(*b)),
        other => other.as_f64().unwrap_or(0.0),
    };
    let first = num(flat.first()?);
    flat.iter()
        .all(|v| num(v).to_bits() == first.to_bits())
        .then_some(first)
}

/// A DAG in topological order: node `i`'s operands are earlier nodes.
pub trait Dag {
    fn len(&self) -> usize;
    fn kind(&self, i: usize) -> NodeKind;
    fn operands(&self, i: usize) -> &[usize];
    fn shape(&self, i: usize) -> &[u64];
    /// The graph's results (a node may appear more than once).
    fn results(&self) -> &[usize];
}

/// Why a value is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    /// A graph result.
    Result,
    /// A matmul, reduction or composite: its readers start new kernels (a reduction boundary).
    Anchor,
    /// Read by this many statements, which would each recompute it.
    SharedBy(usize),
    /// Read as an operand by the matmul at this node: each tile would recompute it.
    MatmulOperand(usize),
    /// A view that lowering could not compose with its reader's access layout.
    Forced,
}

/// Where a node's value lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Home {
    /// A parameter or constant array: in memory before any kernel runs.
    Memory,
    /// A splat constant: a literal in the code.
    Immediate,
    /// Computed inside the kernels that read it.
    Inline,
    /// Stored to a buffer by its own kernel.
    Stored(Why),
    /// A matmul computed in the kernel of the stored node `root`, its epilogue.
    Epilogue { root: usize },
}

impl Home {
    /// Whether reading the node reads memory (it is a buffer or a constant array).
    pub fn in_memory(&self) -> bool {
        matches!(self, Home::Memory | Home::Stored(_))
    }
}

/// Decides the home of every node; `forced[i]` marks views lowering must store (rule 7).
pub fn decide(d: &impl Dag, forced: &[bool]) -> Vec<Home> {
    let n = d.len();
    // Readers by distinct statements (`mul %x, %x` reads %x once) and by results.
    let mut uses = vec![0usize; n];
    for i in 0..n {
        let ops = d.operands(i);
        for (k, &o) in ops.iter().enumerate() {
            if !ops[..k].contains(&o) {
                uses[o] += 1;
            }
        }
    }
    let mut is_result = vec![false; n];
    for &r in d.results() {
        uses[r] += 1;
        is_result[r] = true;
    }
    let forced_at = |i: usize| forced.get(i).copied().unwrap_or(false);
    let mut home: Vec<Home> = (0..n)
        .map(|i| match d.kind(i) {
            NodeKind::Param => Home::Memory,
            _ if is_result[i] => Home::Stored(Why::Result),
            _ if forced_at(i) => Home::Stored(Why::Forced),
            NodeKind::Constant { splat: true } => Home::Immediate,
            NodeKind::Constant { splat: false } => Home::Memory,
            NodeKind::Anchor(_) => Home::Stored(Why::Anchor),
            NodeKind::Elementwise if uses[i] > 1 => Home::Stored(Why::SharedBy(uses[i])),
            NodeKind::Elementwise | NodeKind::View => Home::Inline,
        })
        .collect();
    // Rule 5: computed matmul operands.
    for i in 0..n {
        if d.kind(i) != NodeKind::Anchor(OpKind::Matmul) {
            continue;
        }
        for &o in d.operands(i) {
            let mut v = o;
            loop {
                match d.kind(v) {
                    NodeKind::View if home[v] == Home::Inline => v = d.operands(v)[0],
                    NodeKind::Elementwise if home[v] == Home::Inline => {
                        home[v] = Home::Stored(Why::MatmulOperand(i));
                        break;
                    }
                    _ => break,
                }
            }
        }
    }
    // Rule 6: epilogues. The single reader of each node, where there is one.
    let mut reader = vec![usize::MAX; n];
    for i in 0..n {
        for &o in d.operands(i) {
            reader[o] = i;
        }
    }
    let mut claimed = vec![false; n];
    for m in 0..n {
        if d.kind(m) != NodeKind::Anchor(OpKind::Matmul)
            || uses[m] != 1
            || is_result[m]
            || forced_at(m)
        {
            continue;
        }
        let mut v = m;
        while reader[v] != usize::MAX {
            let r = reader[v];
            if d.kind(r) != NodeKind::Elementwise || d.shape(r) != d.shape(m) {
                break;
            }
            if matches!(home[r], Home::Stored(_)) {
                // One mainloop per kernel: a second matmul reaching the same root stays stored.
                if !std::mem::replace(&mut claimed[r], true) {
                    home[m] = Home::Epilogue { root: r };
                }
                break;
            }
            if uses[r] != 1 {
                break;
            }
            v = r;
        }
    }
    home
}
