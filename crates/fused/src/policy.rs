//! The fusion policy: which values a graph keeps in memory, and why.
//!
//! One function, [`decide`], over any DAG of graph-IR ops ([`Dag`]): the fusion planner runs it
//! on a [`Graph`](irc_ir::Graph) and the e-graph cost model on each candidate selection, so the
//! kernels the cost model prices are exactly the kernels lowering builds.
//!
//! The rules, in order (each stored value is one kernel, its *group*):
//!
//! 1. Parameters and constant arrays are in memory already; splat constants are immediates.
//! 2. A graph result is stored (a view or constant that is a result is a copy kernel) — except a
//!    view whose chain of views (each read only by the next, none of them a broadcast that adds
//!    elements) reaches a reduction or row composite read by nothing else: that anchor's kernel
//!    stores its value into the result's buffer through the inverse of the views' layout, and
//!    the anchor gets no buffer of its own ([`Home::Epilogue`]). No copy kernel, no temp. A row
//!    composite read elsewhere too has its kernel store the view beside its epilogue (rule 6:
//!    no buffer for the composite when only the epilogue and such views read it) or beside its
//!    own value (read by another kernel).
//! 3. An anchor (matmul, reduction, row composite) is stored: its consumers start new kernels.
//! 4. An elementwise value read by two or more statements is stored (no recomputation; but
//!    see rule 11) — unless it is computed from indices alone (`iota`s and splat constants
//!    through elementwise ops and views: a causal or sliding-window mask's comparisons), which
//!    every reader recomputes for a few integer operations instead of loading.
//! 5. A computed matmul operand (an elementwise op, possibly behind views) is stored: every
//!    tile would otherwise recompute it.
//! 6. A matmul's **epilogue** is the closure of its same-shape elementwise readers whose other
//!    operands do not depend on it. When a member would be stored anyway (a result, a value read
//!    twice, a matmul operand), the whole closure runs in the matmul's kernel; a member is then
//!    stored only if it is a result or read outside the closure (so one kernel may store several
//!    values, the matmul's own result among them), and the matmul itself only if it must be.
//!    Otherwise the matmul is stored and its readers compute the chain inline (the same bytes,
//!    without an extra pass in the epilogue). A node belongs to one closure (the first matmul's).
//!    A row or column reduction (sum, max, min, mean over the last axis or the one before it)
//!    of a closure member joins it as a leaf: the matmul's kernel reduces each row (column)
//!    and stores the result, and the `[.., M, N]`
//!    value is stored only if something else reads it ([`crate::reduce_epilogue`] says when it
//!    declines and why).
//!    A row composite (softmax, log_softmax, rmsnorm, layernorm) has an epilogue by the same rule, whose
//!    members may also pass through reshapes (same element count): a group norm's per-channel
//!    scale and shift after the norm of `[N, G, C/G·H·W]` rows runs in the norm's kernel.
//! 7. A view is read through a layout; a view that cannot be composed with its reader's access
//!    is *forced* into memory by lowering (the caller passes it in `forced`).
//! 8. **Attention** (applied after rule 5, before rule 6): `matmul(softmax(prologue(matmul(Q,
//!    Kᵀ))), V)` with the softmax over the last axis is one kernel, the output matmul's: the
//!    scores, their elementwise prologue and the softmax are computed in its registers
//!    ([`Home::Attention`]) — when the prologue can be recomputed per tile, the type is f16 or
//!    bf16 and the head dims are multiples of 8 up to 256 ([`crate::attention`] says each
//!    reason it declines). A result view of the output (rule 2's chain) is stored by that kernel,
//!    as is a chain of views of it (after an elementwise epilogue, if any) that a matmul reads
//!    ([`Why::ViewForMatmul`]: the heads merged back for the output projection, which then
//!    reads a plain buffer).
//!
//! 9. **Row prologue store** (last): a row composite's input `x` that is stored anyway (a graph
//!    result, or read by several statements) and would be its own pointwise kernel is computed
//!    and stored by the composite's kernel (the pre-norm block's `h = x + r`, the next
//!    residual, stored and normalized in one pass) — unless the composite's other operands
//!    depend on it.
//! 10. **Norm prologue** (after rule 6, before rule 9): `matmul(rmsnorm(x, g), W)` with the
//!     rmsnorm read only there is one kernel, the matmul's: it scales the A tiles of `x` by
//!     `g` as they arrive, sums each row's squares from them and applies the row scale to the
//!     accumulator ([`Home::Prologue`]; [`crate::prologue`] says when it declines and why).
//! 11. **Shared within one kernel** (last, after rule 12): a value rule 4 stored is computed
//!     inline instead when all its readers are same-shape elementwise ops whose values end in
//!     one pointwise kernel of its shape: that kernel computes it once (`y = h · sigmoid(h)`).
//! 12. **Siblings** (before rule 11): a pointwise kernel that reads a buffer an earlier
//!     pointwise kernel of its shape and element type reads is that kernel, where the kernel
//!     graph stays acyclic: it stores both (up to four values), reading their common inputs
//!     once (`a + b` and `a · b` both results). Values stored because several statements read
//!     them are left to rule 11.
//! 13. **Window taps** (last): a value rule 4 stored is computed inline instead when it is
//!     cheap (a few views, `concat`s and arithmetic ops without a transcendental function) and
//!     every reader, at least one a view, ends in one pointwise kernel: a pooling window's or a
//!     convolution's taps (strided slices) of a padded input read the input through the
//!     padding's `concat` ([`crate::taps`]).
//!
//! Everything else (single-use elementwise ops, views, immediates) is computed inside the
//! kernel of each value that reads it.

pub use crate::attention::AttentionMatch;
pub use crate::prologue::NormPrologue;
pub use crate::reduce_epilogue::EpilogueReduction;
use irc_ir::infer::flatten_value;
use irc_ir::{Attr, Attrs, DType, OpKind, ops::Category};

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
    /// Computed per element like an elementwise op, but reading its operands at other
    /// coordinates (`concat`, `gather`): inline where read once, never in a matmul's epilogue.
    Indexing,
    Anchor(OpKind),
}

impl NodeKind {
    /// The kind of a statement of `op` with `attrs`.
    pub fn of(op: OpKind, attrs: &Attrs) -> NodeKind {
        match op.category() {
            Category::Constant => NodeKind::Constant {
                splat: is_splat(attrs),
            },
            // A slice is a window: a layout and an offset.
            Category::View | Category::Slice => NodeKind::View,
            Category::Unary
            | Category::Binary
            | Category::Cast
            | Category::Compare
            | Category::Select
            | Category::Iota => NodeKind::Elementwise,
            Category::Concat | Category::Gather => NodeKind::Indexing,
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
    /// The element type of node `i`, if known.
    fn dtype(&self, i: usize) -> Option<DType>;
    /// An attribute of node `i`'s statement.
    fn attr(&self, i: usize, name: &str) -> Option<Attr>;
    /// The op of node `i` (`None` for a parameter).
    fn op(&self, i: usize) -> Option<OpKind>;
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
    /// Computed in a matmul's epilogue and read by a statement outside it.
    ReadOutsideEpilogue,
    /// A view of an attention output that the matmul at this node reads: the attention kernel
    /// stores its output through it, in the layout the matmul reads.
    ViewForMatmul(usize),
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
    /// Stored to a buffer by the kernel led by node `kernel` (itself, or the matmul whose
    /// epilogue computes it).
    Stored { why: Why, kernel: usize },
    /// An anchor that is not stored: computed only by its own kernel, which stores values
    /// computed from it (a matmul's epilogue, or the result view of a reduction or row
    /// composite, rule 2).
    Epilogue,
    /// The scores, their prologue or the softmax of an attention chain (rule 8): computed tile
    /// by tile in the registers of the kernel led by `kernel` (the output matmul), never stored.
    Attention { kernel: usize },
    /// An rmsnorm computed by the kernel of the matmul `kernel` as its first operand's
    /// prologue (rule 10), never stored.
    Prologue { kernel: usize },
}

impl Home {
    /// Whether reading the node reads memory (it is a buffer or a constant array).
    pub fn in_memory(&self) -> bool {
        matches!(self, Home::Memory | Home::Stored { .. })
    }

    /// The node leading the kernel that stores this one, if it is stored.
    pub fn kernel(&self) -> Option<usize> {
        match self {
            Home::Stored { kernel, .. } => Some(*kernel),
            _ => None,
        }
    }
}

/// What kernel `k` reads computing the nodes `from`: the buffers (and constant arrays) and
/// the other kernels whose values it loads, through the nodes it computes itself.
fn inputs(d: &impl Dag, home: &[Home], from: &[usize], k: usize) -> (Vec<usize>, Vec<usize>) {
    let (mut mem, mut kernels) = (vec![], vec![]);
    let mut stack: Vec<usize> = from.iter().flat_map(|&s| d.operands(s).to_vec()).collect();
    let mut seen = std::collections::HashSet::new();
    while let Some(j) = stack.pop() {
        if !seen.insert(j) {
            continue;
        }
        if home[j].in_memory() {
            mem.push(j);
        }
        match home[j].kernel() {
            Some(o) if o != k => {
                if !kernels.contains(&o) {
                    kernels.push(o);
                }
            }
            _ if home[j] == Home::Memory => {}
            _ => stack.extend(d.operands(j).iter().copied()),
        }
    }
    (mem, kernels)
}

/// Every kernel, as its leading node and the nodes it stores, in an order that runs each kernel
/// after the kernels whose results it reads.
pub fn kernels(d: &impl Dag, home: &[Home]) -> Vec<(usize, Vec<usize>)> {
    let n = d.len();
    let mut stores: Vec<Vec<usize>> = vec![vec![]; n];
    for i in 0..n {
        if let Some(k) = home[i].kernel() {
            stores[k].push(i);
        }
    }
    // Kernels in the order of their first store, then moved after the kernels they read
    // (a depth-first topological sort; the kernel graph is acyclic by rule 6).
    let mut order: Vec<usize> = (0..n).filter(|&k| !stores[k].is_empty()).collect();
    order.sort_by_key(|&k| stores[k][0]);
    let reads: Vec<Vec<usize>> = (0..n).map(|k| inputs(d, home, &stores[k], k).1).collect();
    let mut done = vec![false; n];
    let mut out = vec![];
    fn visit(
        k: usize,
        reads: &[Vec<usize>],
        done: &mut [bool],
        stores: &mut [Vec<usize>],
        out: &mut Vec<(usize, Vec<usize>)>,
    ) {
        if std::mem::replace(&mut done[k], true) {
            return;
        }
        for &o in &reads[k] {
            visit(o, reads, done, stores, out);
        }
        out.push((k, std::mem::take(&mut stores[k])));
    }
    for k in order {
        visit(k, &reads, &mut done, &mut stores, &mut out);
    }
    out
}

/// The reduction or row composite that the result view `r` shows, when its kernel can store
/// `r` itself (rule 2): every view on the way is read only by the next, none of them is a
/// result or forced, and the element count never changes (a broadcast that adds elements has
/// no inverse). With it, whether the chain is the anchor's only reader (else the anchor keeps
/// its buffer and its kernel stores both).
fn viewed_anchor(
    d: &impl Dag,
    r: usize,
    uses: &[usize],
    is_result: &[bool],
    forced_at: &impl Fn(usize) -> bool,
    anchor_ok: &impl Fn(usize, OpKind) -> bool,
) -> Option<(usize, bool)> {
    let numel = |i: usize| d.shape(i).iter().product::<u64>();
    if d.kind(r) != NodeKind::View || forced_at(r) {
        return None;
    }
    let mut v = *d.operands(r).first()?;
    loop {
        if forced_at(v) || numel(v) != numel(r) {
            return None;
        }
        let alone = !is_result[v] && uses[v] == 1;
        match d.kind(v) {
            NodeKind::View if alone => v = *d.operands(v).first()?,
            NodeKind::Anchor(op) if anchor_ok(v, op) => return Some((v, alone)),
            _ => return None,
        }
    }
}

/// The last view of a chain from the attention output `o` that a matmul reads (rule 2 for
/// attention, toward matmuls), with its first matmul reader: `o` and every view before the last
/// read only by the next view, none a result or forced, each inline, the element count kept;
/// the chain may begin with elementwise ops of `o`'s shape, each the only reader of the one
/// before (the output's epilogue, returned third). Its other readers read the stored view.
/// `readers`: each node's distinct readers.
fn merged_view(
    d: &impl Dag,
    o: usize,
    (readers, uses, is_result): (&[Vec<usize>], &[usize], &[bool]),
    forced_at: &impl Fn(usize) -> bool,
    home: &[Home],
) -> Option<(usize, usize, Vec<usize>)> {
    let numel = |i: usize| d.shape(i).iter().product::<u64>();
    let mut v = o;
    // First through elementwise ops of the output's shape, each the only reader of the last
    // (its epilogue: an importer's guard of rows with no attended key), which the kernel
    // computes before the views.
    // (Rule 2 toward matmuls stored the last of them as the matmul's operand; the view is
    // stored instead.)
    let mut epilogue = vec![];
    while let [r] = readers[v].as_slice() {
        let open = match home[*r] {
            Home::Inline => true,
            Home::Stored {
                why: Why::MatmulOperand(_),
                ..
            } => true,
            _ => false,
        };
        if is_result[v]
            || forced_at(v)
            || uses[v] != 1
            || d.kind(*r) != NodeKind::Elementwise
            || !open
            || d.shape(*r) != d.shape(o)
        {
            break;
        }
        epilogue.push(*r);
        v = *r;
    }
    let mut last = None;
    loop {
        if is_result[v] || forced_at(v) {
            return None;
        }
        let rs = &readers[v];
        let views = rs.iter().all(|&r| d.kind(r) == NodeKind::View);
        match rs.as_slice() {
            [r] if views && uses[v] == 1 => {
                if home[*r] != Home::Inline || numel(*r) != numel(o) {
                    return None;
                }
                last = Some(*r);
                v = *r;
            }
            _ if last.is_some() => {
                let matmul = |r: &&usize| d.kind(**r) == NodeKind::Anchor(OpKind::Matmul);
                return Some((last?, *rs.iter().find(matmul)?, epilogue));
            }
            _ => return None,
        }
    }
}

/// Decides the home of every node; `forced[i]` marks views lowering must store (rule 7).
pub fn decide(d: &impl Dag, forced: &[bool]) -> Vec<Home> {
    decide_explained(d, forced).home
}

/// What [`decide_explained`] decided, with the patterns it looked at.
#[derive(Clone, Debug, PartialEq)]
pub struct Decisions {
    pub home: Vec<Home>,
    /// Every attention chain of rule 8, accepted or declined.
    pub attention: Vec<AttentionMatch>,
    /// Every norm prologue of rule 10, accepted or declined.
    pub prologues: Vec<NormPrologue>,
    /// Every reduction of a matmul's epilogue value (rule 6), accepted or declined.
    pub reductions: Vec<EpilogueReduction>,
}

/// [`decide`], with every attention chain (rule 8), epilogue reduction (rule 6) and norm
/// prologue (rule 10) looked at, accepted or declined.
pub fn decide_explained(d: &impl Dag, forced: &[bool]) -> Decisions {
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
    let stored = |why: Why, kernel: usize| Home::Stored { why, kernel };
    // Values computed from indices alone (operands come before their readers).
    let mut index_only = vec![false; n];
    for i in 0..n {
        index_only[i] = match d.kind(i) {
            NodeKind::Constant { splat } => splat,
            NodeKind::Elementwise | NodeKind::View => {
                d.operands(i).iter().all(|&o| index_only[o]) && !d.operands(i).is_empty()
                    || d.op(i) == Some(OpKind::Iota)
            }
            _ => false,
        };
    }
    let mut home: Vec<Home> = (0..n)
        .map(|i| match d.kind(i) {
            NodeKind::Param => Home::Memory,
            _ if is_result[i] => stored(Why::Result, i),
            _ if forced_at(i) => stored(Why::Forced, i),
            NodeKind::Constant { splat: true } => Home::Immediate,
            NodeKind::Constant { splat: false } => Home::Memory,
            NodeKind::Anchor(_) => stored(Why::Anchor, i),
            NodeKind::Elementwise | NodeKind::Indexing if uses[i] > 1 && !index_only[i] => {
                stored(Why::SharedBy(uses[i]), i)
            }
            NodeKind::Elementwise | NodeKind::Indexing | NodeKind::View => Home::Inline,
        })
        .collect();
    // Rule 2: a result view of a reduction or row composite is stored by the anchor's kernel.
    let reduction_or_row =
        |_: usize, op: OpKind| matches!(op.category(), Category::Reduction | Category::Composite);
    for &r in d.results() {
        if let Some((a, alone)) =
            viewed_anchor(d, r, &uses, &is_result, &forced_at, &reduction_or_row)
        {
            // A reduction kernel stores one value: a view beside a reduction read elsewhere
            // stays a copy.
            let row =
                matches!(d.kind(a), NodeKind::Anchor(op) if op.category() == Category::Composite);
            if alone {
                home[r] = stored(Why::Result, a);
                home[a] = Home::Epilogue;
            } else if row {
                home[r] = stored(Why::Result, a);
            }
        }
    }
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
                    NodeKind::Elementwise | NodeKind::Indexing if home[v] == Home::Inline => {
                        home[v] = stored(Why::MatmulOperand(i), v);
                        break;
                    }
                    _ => break,
                }
            }
        }
    }
    // Rule 8: attention chains, computed in registers by their output matmul's kernel.
    let attention = crate::attention::find(d, &home, &uses, &is_result, &forced_at);
    let mut claimed = vec![false; n];
    for a in attention.iter().filter(|a| a.declined.is_none()) {
        let kernel = a.output;
        let chain = a.scores.iter().chain(&a.prologue).chain([&a.softmax]);
        for &x in chain.chain(&a.p_cast) {
            home[x] = Home::Attention { kernel };
            claimed[x] = true;
        }
    }
    // Rule 2 for attention: a result view of an attention output (the heads merged back,
    // `[B, S, H·D]`) is stored by the attention kernel through the inverse of its layout.
    let attention_output = |v: usize, op: OpKind| {
        op == OpKind::Matmul
            && attention
                .iter()
                .any(|a| a.output == v && a.declined.is_none())
    };
    for &r in d.results() {
        if let Some((a, true)) =
            viewed_anchor(d, r, &uses, &is_result, &forced_at, &attention_output)
        {
            home[r] = stored(Why::Result, a);
            home[a] = Home::Epilogue;
        }
    }
    // Each node's distinct readers, in node order (rule 2 toward matmuls, rule 6).
    let mut readers: Vec<Vec<usize>> = vec![vec![]; n];
    for i in 0..n {
        for &o in d.operands(i) {
            // Readers are pushed in node order, so a repeat is the last one pushed.
            if readers[o].last() != Some(&i) {
                readers[o].push(i);
            }
        }
    }
    // Rule 2 for attention, toward matmuls: an attention output read only through a chain of
    // views (each read only by the next, the element count kept) whose last view a matmul
    // reads — the heads merged back, `[B, S, H·D]`, for the output projection — is stored by
    // the attention kernel through the chain, so the matmul reads a plain buffer rather than a
    // view whose K mode crosses heads (which no TMA box reads).
    for a in attention.iter().filter(|a| a.declined.is_none()) {
        let at = (&readers[..], &uses[..], &is_result[..]);
        if let Some((last, m, epilogue)) = merged_view(d, a.output, at, &forced_at, &home) {
            home[last] = stored(Why::ViewForMatmul(m), a.output);
            home[a.output] = Home::Epilogue;
            for e in epilogue {
                home[e] = Home::Inline;
            }
        }
    }
    // Rule 6: epilogues.
    // Stamps (the matmul's index) instead of fresh vectors: rule 6 stays linear in what each
    // closure touches, not in the graph per matmul.
    let mut member = vec![usize::MAX; n];
    let mut reductions = vec![];
    let mut seen = vec![usize::MAX; n];
    let mut walk = 0usize;
    let mut stack = vec![];
    let numel = |i: usize| d.shape(i).iter().product::<u64>();
    for m in 0..n {
        let row = match d.kind(m) {
            NodeKind::Anchor(OpKind::Matmul) => false,
            // A row composite's epilogue (rule 6 for rows); not one whose result view rule 2
            // already stores.
            NodeKind::Anchor(op) if op.category() == Category::Composite => {
                if home[m] == Home::Epilogue {
                    continue;
                }
                true
            }
            _ => continue,
        };
        if forced_at(m) || claimed[m] {
            continue;
        }
        member[m] = m;
        // A worklist: a reader can only join once one more of its operands has, so each
        // member's readers are looked at when it joins (the fixed point, in one pass).
        let mut closure = vec![m];
        let mut next = 0;
        while let Some(&x) = closure.get(next) {
            next += 1;
            for &r in &readers[x] {
                // A row's epilogue may also pass through reshapes (the same elements in the
                // same order): its nodes are computed at the row's coordinate.
                let shaped = match d.kind(r) {
                    NodeKind::Elementwise if row => numel(r) == numel(m),
                    NodeKind::Elementwise => d.shape(r) == d.shape(m),
                    NodeKind::View => {
                        row && d.op(r) == Some(OpKind::Reshape) && home[r] == Home::Inline
                    }
                    _ => false,
                };
                let joins = member[r] != m
                    && !claimed[r]
                    && !forced_at(r)
                    && shaped
                    && d.operands(r).iter().all(|&o| {
                        // An epilogue node reads m only through the epilogue.
                        member[o] == m || !depends_on(d, o, m, &mut seen, &mut walk, &mut stack)
                    });
                if joins {
                    member[r] = m;
                    closure.push(r);
                }
            }
        }
        // A matmul's row and column reductions of the closure's values join it as leaves: stored by its
        // kernel, read by nothing in it.
        if !row {
            let before = closure.len();
            for i in 0..before {
                let x = closure[i];
                for &r in &readers[x] {
                    let own = matches!(home[r], Home::Stored { kernel, .. } if kernel == r);
                    let candidate = matches!(d.kind(r), NodeKind::Anchor(op) if op.category() == Category::Reduction)
                        && own
                        && member[r] != m
                        && !claimed[r]
                        && !forced_at(r);
                    if !candidate {
                        continue;
                    }
                    let attention_output = attention
                        .iter()
                        .any(|a| a.output == m && a.declined.is_none());
                    let declined = if attention_output {
                        Some("the matmul is an attention kernel's output".into())
                    } else {
                        crate::reduce_epilogue::why_not(d, m, r)
                    };
                    if declined.is_none() {
                        member[r] = m;
                        closure.push(r);
                    }
                    reductions.push(EpilogueReduction {
                        reduction: r,
                        matmul: m,
                        declined,
                    });
                }
            }
        }
        // Worth it only if some member would be stored anyway (a result, a value read twice,
        // a matmul operand, a reduction): otherwise the readers outside compute the members
        // inline from the stored matmul, which moves the same bytes without an extra pass in
        // the epilogue.
        let worth = closure
            .iter()
            .any(|&x| x != m && matches!(home[x], Home::Stored { .. }));
        if !worth {
            continue;
        }
        for &x in &closure {
            claimed[x] = true;
            // A result view that this kernel stores (rule 2, beside a row composite read
            // elsewhere) is not a reader outside.
            let outside = readers[x].iter().any(|&r| {
                member[r] != m
                    && !(d.kind(r) == NodeKind::View
                        && matches!(home[r], Home::Stored { kernel, .. } if kernel == m))
            });
            home[x] = if is_result[x] {
                stored(Why::Result, m)
            } else if outside {
                let why = match &home[x] {
                    // The matmul and its reductions keep their reason (an anchor).
                    Home::Stored { why, .. } if matches!(d.kind(x), NodeKind::Anchor(_)) => {
                        why.clone()
                    }
                    _ => Why::ReadOutsideEpilogue,
                };
                stored(why, m)
            } else if x == m {
                Home::Epilogue
            } else {
                Home::Inline
            };
        }
    }
    // Rule 10: an rmsnorm read only as a matmul's first operand is that matmul's prologue.
    let free = |i: usize| !claimed[i] && !forced_at(i) && !is_result[i];
    let mut prologues = crate::prologue::find(d, &home, &uses, &free);
    for p in &mut prologues {
        let reduced = reductions
            .iter()
            .any(|r| r.matmul == p.matmul && r.declined.is_none());
        if reduced && p.declined.is_none() {
            p.declined = Some("the matmul's epilogue has a reduction".into());
        }
    }
    for p in prologues.iter().filter(|p| p.declined.is_none()) {
        home[p.norm] = Home::Prologue { kernel: p.matmul };
        claimed[p.norm] = true;
    }
    // Rule 9: a row composite's input that is stored anyway (a graph result, or read by
    // several statements: the pre-norm residual `h = x + r`) and would be its own pointwise
    // kernel is computed and stored by the composite's kernel, which reads its operands once.
    for c in 0..n {
        let NodeKind::Anchor(op) = d.kind(c) else {
            continue;
        };
        let x = d.operands(c)[0];
        let own = matches!(home[x], Home::Stored { kernel, .. } if kernel == x);
        if op.category() != Category::Composite
            || claimed[c]
            || claimed[x]
            || forced_at(x)
            || !own
            || d.kind(x) != NodeKind::Elementwise
            || d.shape(x) != d.shape(c)
            || d.operands(c)[1..]
                .iter()
                .any(|&o| depends_on(d, o, x, &mut seen, &mut walk, &mut stack))
        {
            continue;
        }
        let Home::Stored { why, .. } = home[x].clone() else {
            continue;
        };
        home[x] = stored(why, c);
        claimed[x] = true;
    }
    // Rule 11: a value read by several statements that all end in one pointwise kernel is
    // computed once in that kernel (`h = a + b; y = h * sigmoid(h)`), not stored by its own.
    // Rule 12: sibling pointwise kernels of one shape and type reading a buffer in common are
    // one kernel, which reads it once (before rule 11, which may then compute a value they
    // both read in that kernel).
    siblings_share_a_kernel(d, &mut home, &claimed, &forced_at);
    shared_within_one_kernel(d, &readers, &mut home, &claimed, &is_result, &forced_at);
    // Rule 13: a cheap value read through views by the taps of one pointwise kernel.
    crate::taps::taps_in_one_kernel(d, &readers, &mut home, &claimed, &is_result, &forced_at);
    Decisions {
        home,
        attention,
        prologues,
        reductions,
    }
}

/// Rule 11 (module docs), from the last node back, so that each reader's home is final when
/// its operand is looked at: `dest[i]` is the one kernel node `i`'s value ends in (itself if
/// it is stored, the common kernel of its readers if it is inline), `None` for several or for
/// a kernel that is not pointwise. `readers[i]`: the distinct statements reading node `i`.
fn shared_within_one_kernel(
    d: &impl Dag,
    readers: &[Vec<usize>],
    home: &mut [Home],
    claimed: &[bool],
    is_result: &[bool],
    forced_at: &impl Fn(usize) -> bool,
) {
    let n = d.len();
    let pointwise = |k: usize, home: &[Home]| {
        d.kind(k) == NodeKind::Elementwise
            && matches!(home[k], Home::Stored { kernel, .. } if kernel == k)
    };
    let mut dest: Vec<Option<usize>> = vec![None; n];
    for i in (0..n).rev() {
        // The one pointwise kernel every reader of `i` ends in, reading `i` at its own
        // coordinate (same-shape elementwise readers only).
        let common = || -> Option<usize> {
            let mut k = None;
            for &r in &readers[i] {
                if d.kind(r) != NodeKind::Elementwise || d.shape(r) != d.shape(i) {
                    return None;
                }
                let kr = dest[r]?;
                if k.is_some_and(|k| k != kr) {
                    return None;
                }
                k = Some(kr);
            }
            k
        };
        match home[i] {
            Home::Stored {
                why: Why::SharedBy(_),
                kernel,
            } if kernel == i
                && d.kind(i) == NodeKind::Elementwise
                && !claimed[i]
                && !is_result[i]
                && !forced_at(i) =>
            {
                match common() {
                    Some(k) if pointwise(k, home) && d.shape(k) == d.shape(i) => {
                        home[i] = Home::Inline;
                        dest[i] = Some(k);
                    }
                    _ => dest[i] = Some(i),
                }
            }
            Home::Stored { kernel, .. } => {
                dest[i] = pointwise(kernel, home).then_some(kernel);
            }
            Home::Inline if d.kind(i) == NodeKind::Elementwise => dest[i] = common(),
            _ => {}
        }
    }
}

/// The most values one pointwise kernel stores (rule 12).
const SIBLINGS: usize = 4;

/// Rule 12 (module docs): each pointwise kernel, in node order, joins the first earlier one of
/// its shape and element type that reads a buffer it reads, where the kernel graph stays
/// acyclic (neither reads the other through a chain of kernels: a walk over the kernels
/// ranked between them in [`kernels`]' order), up to [`SIBLINGS`] values a kernel.
fn siblings_share_a_kernel(
    d: &impl Dag,
    home: &mut [Home],
    claimed: &[bool],
    forced_at: &impl Fn(usize) -> bool,
) {
    let n = d.len();
    // (A value stored because several statements read it is left to rule 11, which may
    // compute it in its readers' kernel instead.)
    let own = |k: usize, home: &[Home]| {
        d.kind(k) == NodeKind::Elementwise
            && matches!(&home[k], Home::Stored { kernel, why } if *kernel == k && !matches!(why, Why::SharedBy(_)))
            && !claimed[k]
            && !forced_at(k)
    };
    // The kernel graph (the kernels each kernel reads) and each kernel's place in the order.
    let graph = |home: &[Home]| {
        let mut reads = vec![vec![]; n];
        let mut rank = vec![usize::MAX; n];
        for (i, (k, stores)) in kernels(d, home).into_iter().enumerate() {
            reads[k] = inputs(d, home, &stores, k).1;
            rank[k] = i;
        }
        (reads, rank)
    };
    let (mut reads, mut rank) = graph(home);
    // Whether a chain of reads leads from kernel `to` to one of `from` (`from` reads a kernel
    // that ... reads `to`), through kernels ranked after `to` only (any such chain lies
    // there); past `PATH_WALK` kernels, assumed (the pair is not merged).
    let leads = |from: &[usize], to: usize, reads: &[Vec<usize>], rank: &[usize]| {
        let mut seen = std::collections::HashSet::new();
        let mut stack = from.to_vec();
        while let Some(k) = stack.pop() {
            if k == to || seen.len() > PATH_WALK {
                return true;
            }
            if rank[k] > rank[to] && seen.insert(k) {
                stack.extend(reads[k].iter().copied());
            }
        }
        false
    };
    // The pointwise kernels (leaders) reading each buffer so far, and each leader's values.
    let mut readers_of: Vec<Vec<usize>> = vec![vec![]; n];
    let mut values: Vec<usize> = vec![0; n];
    for b in 0..n {
        if !own(b, home) {
            continue;
        }
        let mem = inputs(d, home, &[b], b).0;
        let mut candidates: Vec<usize> = mem.iter().flat_map(|&m| readers_of[m].clone()).collect();
        candidates.sort_unstable();
        candidates.dedup();
        let joined = candidates.into_iter().find(|&a| {
            values[a] < SIBLINGS
                && d.shape(a) == d.shape(b)
                && d.dtype(a).is_some()
                && d.dtype(a) == d.dtype(b)
                && !leads(&reads[b], a, &reads, &rank)
                && !leads(&reads[a], b, &reads, &rank)
        });
        let Some(a) = joined else {
            values[b] = 1;
            for m in mem {
                readers_of[m].push(b);
            }
            continue;
        };
        if let Home::Stored { why, .. } = home[b].clone() {
            home[b] = Home::Stored { why, kernel: a };
        }
        values[a] += 1;
        (reads, rank) = graph(home);
    }
}

/// How many kernels rule 12 walks to tell whether one kernel reads another.
const PATH_WALK: usize = 512;

/// Whether `o` depends on `m`, by a walk back from `o` that stops below `m` (operands precede
/// their readers, so nothing before `m` depends on it); `seen` is stamped per walk.
fn depends_on(
    d: &impl Dag,
    o: usize,
    m: usize,
    seen: &mut [usize],
    walk: &mut usize,
    stack: &mut Vec<usize>,
) -> bool {
    *walk += 1;
    stack.clear();
    stack.push(o);
    while let Some(x) = stack.pop() {
        if x == m {
            return true;
        }
        if x < m || std::mem::replace(&mut seen[x], *walk) == *walk {
            continue;
        }
        stack.extend(d.operands(x).iter().copied());
    }
    false
}
