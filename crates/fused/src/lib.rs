//! The Fused IR: level 3 of the pipeline, between the graph IR and the kernel IR.
//!
//! A [`Module`] says which kernels a graph becomes and what each computes. It has the device
//! buffers (graph parameters, results, and intermediates kept in memory) and an ordered list of
//! [`Group`]s, one per kernel. A group is a small SSA region over graph-IR ops:
//!
//! - **loads** name a buffer's value (`%x = load @x`);
//! - **ops** are graph-IR statements with their types and source locations; views (transpose,
//!   reshape, broadcast) stay statements here and become layouts when the group is lowered;
//! - **stores** write a value to a buffer (one or more per group).
//!
//! Each group has an **anchor** ([`Anchor`]): the one matmul, reduction or row composite it is
//! built around, or none for a pointwise group. Relative to a matmul anchor the statements fall
//! into roles ([`Role`]): the operand *prologue* (what is computed while an operand is read), the
//! anchor, and the *epilogue*: an epilogue visitor tree in the sense of CUTLASS's EVT —
//! accumulator fetch, auxiliary loads (with scalar/row/column/full broadcast, [`Broadcast`]),
//! compute nodes, reductions and stores. [`Group::evt`] reads that tree off the region.
//!
//! Text form (`irc --emit=fused`), parsed by [`parse_module`] to an equal module:
//!
//! ```text
//! fused @gemm_bias_relu flops=... min_bytes=... {
//!   buffer @a = %a : tensor<64x32xf16> input
//!   buffer @b = %b : tensor<32x48xf16> input
//!   buffer @bias = %bias : tensor<48xf16> input
//!   buffer @out = %out : tensor<64x48xf16> output
//!   group @gemm_bias_relu_k0_matmul matmul {
//!     %a = load @a
//!     %b = load @b
//!     %mm = matmul %a, %b : tensor<64x48xf16> at "gemm_bias_relu.ir:3:3"
//!     %bias = load @bias
//!     %out = add %mm, %bias : tensor<64x48xf16> at "gemm_bias_relu.ir:4:3"
//!     store %out -> @out
//!   }
//!   return @out
//! }
//! ```
//!
//! The module is built by the fusion planner ([`plan`]), whose decisions ([`policy`]) the
//! e-graph cost model calls too, so the kernels the cost model prices are the kernels lowering
//! builds. [`verify_module`] checks the invariants listed in its module doc.

pub mod attention;
pub mod evt;
mod parse;
pub mod plan;
pub mod policy;
mod print;
pub mod prologue;
pub mod reduce_epilogue;
mod taps;
mod verify;

pub use evt::{Broadcast, Evt, EvtNode, Role};
pub use parse::{ParseError, parse_module};
pub use plan::{GraphDag, Remark, SourceInfo, Work, group_work, plan_graph};
pub use policy::AttentionMatch;
pub use print::{print_module, print_with_remarks};
pub use verify::{VerifyError, verify_module};

use irc_ir::{Attrs, OpKind, TensorType, ops::Category};

/// A graph's kernels.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    /// The graph's name (without `@`).
    pub name: String,
    /// Floating-point operations of the graph (a multiply-add counts 2).
    pub flops: u64,
    /// Bytes every implementation must move: each parameter read and each result written once.
    pub min_bytes: u64,
    pub buffers: Vec<Buffer>,
    /// Kernels, in launch order.
    pub groups: Vec<Group>,
    /// The buffers holding the graph's results, in order (an input buffer when a result is a
    /// parameter).
    pub results: Vec<String>,
}

/// One device buffer and the graph value it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub name: String,
    /// The graph value (`%name`) the buffer holds.
    pub value: String,
    pub ty: TensorType,
    pub kind: BufferKind,
}

/// What a buffer holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BufferKind {
    /// A graph parameter.
    Input,
    /// A graph result.
    Output,
    /// An intermediate between kernels.
    Temp,
}

impl BufferKind {
    pub fn name(self) -> &'static str {
        match self {
            BufferKind::Input => "input",
            BufferKind::Output => "output",
            BufferKind::Temp => "temp",
        }
    }
}

/// One kernel: an SSA region of loads, ops and stores.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// The kernel's name.
    pub name: String,
    pub stmts: Vec<Stmt>,
}

/// A statement of a group.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `%value = load @buffer`: the buffer's value, of the buffer's type.
    Load { value: String, buffer: String },
    /// `%value = op %operands... {attrs} : type at "file:line:col"`.
    Op(OpStmt),
    /// `store %value -> @buffer`.
    Store { value: String, buffer: String },
}

/// A graph-IR statement inside a group.
#[derive(Clone, Debug, PartialEq)]
pub struct OpStmt {
    pub value: String,
    pub op: OpKind,
    pub operands: Vec<String>,
    pub attrs: Attrs,
    pub ty: TensorType,
    /// Where the graph statement was written (`file:line:col`), if known.
    pub loc: Option<String>,
}

/// What a group is built around.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Anchor {
    /// Elementwise work (and views) only: one thread per output element.
    Pointwise,
    /// A `reduce_*` op.
    Reduction,
    /// A row composite: `softmax`, `rmsnorm`, `layernorm`.
    Row,
    /// A `matmul`, with its prologue and epilogue.
    Matmul,
    /// `matmul(softmax(prologue(matmul(Q, Kᵀ))), V)`: three anchors in one group, the scores
    /// and probabilities kept in registers tile by tile (flash attention). Derived from the
    /// group's ops ([`Group::attention`]).
    Attention,
}

impl Anchor {
    pub fn name(self) -> &'static str {
        match self {
            Anchor::Pointwise => "pointwise",
            Anchor::Reduction => "reduction",
            Anchor::Row => "row",
            Anchor::Matmul => "matmul",
            Anchor::Attention => "attention",
        }
    }

    pub fn from_name(s: &str) -> Option<Anchor> {
        [
            Anchor::Pointwise,
            Anchor::Reduction,
            Anchor::Row,
            Anchor::Matmul,
            Anchor::Attention,
        ]
        .into_iter()
        .find(|a| a.name() == s)
    }

    /// The anchor an op is, if it is one.
    pub fn of(op: OpKind) -> Option<Anchor> {
        match op.category() {
            Category::Matmul => Some(Anchor::Matmul),
            Category::Reduction => Some(Anchor::Reduction),
            Category::Composite => Some(Anchor::Row),
            _ => None,
        }
    }
}

/// The three anchors of an attention group, as statement indices.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AttentionStmts {
    /// `matmul(Q, Kᵀ)`: the scores.
    pub scores: usize,
    /// The `softmax` over the key axis of the scores after their prologue.
    pub softmax: usize,
    /// `matmul(P, V)`: the output.
    pub output: usize,
}

impl Group {
    /// The index of the anchor statement, if the group has one (an attention group's is its
    /// output matmul, a norm prologue's group its matmul).
    pub fn anchor_index(&self) -> Option<usize> {
        if let Some(a) = self.attention() {
            return Some(a.output);
        }
        if let Some((_, m)) = self.norm_prologue() {
            return Some(m);
        }
        self.stmts
            .iter()
            .position(|s| matches!(s, Stmt::Op(o) if Anchor::of(o.op).is_some()))
    }

    /// What the group is built around.
    pub fn anchor(&self) -> Anchor {
        if self.attention().is_some() {
            return Anchor::Attention;
        }
        match self.anchor_index().map(|i| &self.stmts[i]) {
            Some(Stmt::Op(o)) => Anchor::of(o.op).unwrap_or(Anchor::Pointwise),
            _ => Anchor::Pointwise,
        }
    }

    /// The anchors of an attention group: exactly three anchor statements, a matmul, a
    /// `softmax` over the last axis and a matmul whose first operand is that softmax (or a cast
    /// of it), the
    /// softmax's operand computed from the first matmul (through elementwise statements).
    pub fn attention(&self) -> Option<AttentionStmts> {
        let anchors: Vec<usize> = (0..self.stmts.len())
            .filter(|&i| matches!(&self.stmts[i], Stmt::Op(o) if Anchor::of(o.op).is_some()))
            .collect();
        let op = |i: usize| match &self.stmts[i] {
            Stmt::Op(o) => Some(o),
            _ => None,
        };
        let [s, p, o] = anchors[..] else {
            return None;
        };
        let (so, po, oo) = (op(s)?, op(p)?, op(o)?);
        let last_axis = po
            .attrs
            .get("axis")
            .and_then(irc_ir::Attr::as_int)
            .is_none_or(|a| a == -1 || a == po.ty.rank() as i64 - 1);
        // P·V reads the softmax, or a cast of it (an f32 softmax rounded back).
        let reads_p = oo.operands.first().is_some_and(|a| {
            *a == po.value
                || self.ops().any(|c| {
                    c.value == *a && c.op == OpKind::Cast && c.operands.first() == Some(&po.value)
                })
        });
        let ok = so.op == OpKind::Matmul
            && po.op == OpKind::Softmax
            && last_axis
            && oo.op == OpKind::Matmul
            && reads_p
            && self.depends(p, &so.value);
        ok.then_some(AttentionStmts {
            scores: s,
            softmax: p,
            output: o,
        })
    }

    /// A matmul group whose first operand is computed by an `rmsnorm` over its last axis in
    /// the group (the policy's rule 10, [`prologue`]): exactly two anchor statements, the
    /// rmsnorm and the matmul, which is the rmsnorm's only reader in the group and the only
    /// one stored from. `(rmsnorm, matmul)` as statement indices.
    pub fn norm_prologue(&self) -> Option<(usize, usize)> {
        let anchors: Vec<usize> = (0..self.stmts.len())
            .filter(|&i| matches!(&self.stmts[i], Stmt::Op(o) if Anchor::of(o.op).is_some()))
            .collect();
        let [n, m] = anchors[..] else {
            return None;
        };
        let (Stmt::Op(no), Stmt::Op(mo)) = (&self.stmts[n], &self.stmts[m]) else {
            return None;
        };
        let last_axis = no
            .attrs
            .get("axis")
            .and_then(irc_ir::Attr::as_int)
            .is_none_or(|a| a == -1 || a == no.ty.rank() as i64 - 1);
        let readers = self
            .ops()
            .filter(|o| o.operands.contains(&no.value))
            .count();
        let stored = self.stores().any(|(v, _)| v == no.value);
        let ok = no.op == OpKind::Rmsnorm
            && last_axis
            && mo.op == OpKind::Matmul
            && mo.operands.first() == Some(&no.value)
            && mo.operands.get(1) != Some(&no.value)
            && readers == 1
            && !stored;
        ok.then_some((n, m))
    }

    /// The row and column reductions of a matmul group's epilogue (the policy's rule 6): the
    /// indices of the anchors after the group's first, a matmul, when every one is a sum, max,
    /// min or mean over the last axis or the one before it alone, of a value computed from the
    /// matmul, read by no statement of the group. `None` for any other group of several
    /// anchors or of one.
    pub fn epilogue_reductions(&self) -> Option<Vec<usize>> {
        let anchors: Vec<usize> = (0..self.stmts.len())
            .filter(|&i| matches!(&self.stmts[i], Stmt::Op(o) if Anchor::of(o.op).is_some()))
            .collect();
        let (&m, rest) = anchors.split_first()?;
        let Stmt::Op(mo) = &self.stmts[m] else {
            return None;
        };
        if mo.op != OpKind::Matmul || rest.is_empty() {
            return None;
        }
        for &r in rest {
            let Stmt::Op(ro) = &self.stmts[r] else {
                return None;
            };
            // The reduced value has the matmul's shape: its epilogue computes it at the
            // matmul's coordinate. (That the matmul has no vector operand, the verifier checks:
            // a loaded operand's type is its buffer's.)
            let operand = self.ops().find(|o| Some(&o.value) == ro.operands.first());
            let same = operand.is_some_and(|o| o.ty.shape == mo.ty.shape);
            let rank = operand.map_or(0, |o| o.ty.rank());
            let axes = irc_ir::infer::reduction_axes(rank, &ro.attrs).ok();
            let read = self.ops().any(|o| o.operands.contains(&ro.value));
            let ok = crate::reduce_epilogue::is_epilogue_reduction(ro.op)
                && same
                && rank >= 2
                && rank == mo.ty.rank()
                && (axes == Some(vec![rank - 1]) || axes == Some(vec![rank - 2]))
                && !read
                && self.depends(r, &mo.value);
            if !ok {
                return None;
            }
        }
        Some(rest.to_vec())
    }

    /// Whether statement `i` reads `value`, directly or through earlier statements.
    fn depends(&self, i: usize, value: &str) -> bool {
        let mut want = std::collections::HashSet::from([value]);
        for s in &self.stmts[..=i] {
            if let Stmt::Op(o) = s
                && o.operands.iter().any(|a| want.contains(a.as_str()))
            {
                want.insert(&o.value);
            }
        }
        match &self.stmts[i] {
            Stmt::Op(o) => want.contains(o.value.as_str()),
            _ => false,
        }
    }

    /// The ops of the group, in order.
    pub fn ops(&self) -> impl Iterator<Item = &OpStmt> {
        self.stmts.iter().filter_map(|s| match s {
            Stmt::Op(o) => Some(o),
            _ => None,
        })
    }

    /// `(value, buffer)` of every store, in order.
    pub fn stores(&self) -> impl Iterator<Item = (&str, &str)> {
        self.stmts.iter().filter_map(|s| match s {
            Stmt::Store { value, buffer } => Some((value.as_str(), buffer.as_str())),
            _ => None,
        })
    }

    /// `(value, buffer)` of every load, in order.
    pub fn loads(&self) -> impl Iterator<Item = (&str, &str)> {
        self.stmts.iter().filter_map(|s| match s {
            Stmt::Load { value, buffer } => Some((value.as_str(), buffer.as_str())),
            _ => None,
        })
    }
}

impl Module {
    pub fn buffer(&self, name: &str) -> Option<&Buffer> {
        self.buffers.iter().find(|b| b.name == name)
    }

    /// Bytes one group moves: every buffer it stores, every distinct buffer it loads and every
    /// constant array it reads — what the cost model charges a kernel for.
    pub fn group_bytes(&self, g: &Group) -> u64 {
        self.group_bytes_by(g, |name| self.buffer(name))
    }

    /// [`Module::group_bytes`] with buffers found by `buffer` (an index, on modules of many
    /// buffers).
    pub fn group_bytes_by<'m>(
        &'m self,
        g: &Group,
        buffer_of: impl Fn(&str) -> Option<&'m Buffer>,
    ) -> u64 {
        let mut seen: Vec<&str> = vec![];
        let mut bytes = 0u64;
        for s in &g.stmts {
            let b = match s {
                Stmt::Load { buffer, .. } | Stmt::Store { buffer, .. } => {
                    if seen.contains(&buffer.as_str()) {
                        continue;
                    }
                    seen.push(buffer);
                    buffer_of(buffer).map_or(0, |b| b.ty.size_bytes())
                }
                Stmt::Op(o) if o.op == OpKind::Constant && !policy::is_splat(&o.attrs) => {
                    o.ty.size_bytes()
                }
                Stmt::Op(_) => 0,
            };
            bytes = bytes.saturating_add(b);
        }
        bytes
    }
}
