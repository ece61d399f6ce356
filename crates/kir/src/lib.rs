//! The kernel IR: the layout level of the pipeline.
//!
//! A [`Module`] is what runs on the GPU for one graph: device buffers, kernels, and the launch
//! sequence between them. A [`Kernel`] has a grid and a block, pointer parameters, tensors (each
//! a memory space plus a CuTe [`Layout`] from coordinates to element offsets), and a body of
//! structured statements: loops, guards, scalar definitions, loads and stores through tensors,
//! barriers and block reductions.
//!
//! The one rule that makes this a *layout* IR: a load or store names a tensor and a coordinate;
//! the element offset is the tensor's layout applied to that coordinate, and emitters compute it
//! from the layout ([`offset_terms`]), never by hand. A coordinate is either one index per
//! top-level mode of the layout, or a single index read colexicographically over the whole
//! layout (CuTe's 1-D coordinate).
//!
//! Text form (`irc --emit=layout`), one statement per line, described in `spec/layout-ir.md`:
//!
//! ```text
//! module @axpy flops=2048 min_bytes=12288 {
//!   buffer %x : tensor<1024xf32> input
//!   buffer %y : tensor<1024xf32> input
//!   buffer %out : tensor<1024xf32> output
//!   kernel @k0_add grid(4, 1, 1) block(256, 1, 1) index(i32) {
//!     origin "%out = add %x, %y" at "axpy.ir:2:3"
//!     param %p0 : f32
//!     param %p1 : f32
//!     param %p2 : f32
//!     tensor %t0 : f32 global(%p0) = 1024:1
//!     tensor %t1 : f32 global(%p1) = 1024:1
//!     tensor %t2 : f32 global(%p2) = 1024:1
//!     for %i = ((bid.x * ntid.x) + tid.x) to 1024 step (nctaid.x * ntid.x) {
//!       %v0 : f32 = add(load %t0[%i], load %t1[%i])
//!       store %t2[%i], %v0
//!     }
//!   }
//!   launch @k0_add(%x, %y, %out)
//!   return %out
//! }
//! ```

mod func;
pub mod intrinsic;
mod launch;
pub mod manifest;
mod parse;
pub mod print;
pub mod smem;
mod verify;
pub mod wgmma;

pub use func::Func;
pub use intrinsic::{Arg, ArgKind, INTRINSICS, Intrinsic, IntrinsicInfo};
pub use launch::{COOPERATIVE_BLOCKS_PER_SM, cooperative, min_blocks_per_sm, spill_budget};
pub use manifest::{Buffer, BufferKind, Launch, Manifest, ManifestError, manifest_of};

pub use parse::{ParseError, parse_module};
pub use print::print_module;
pub use smem::{DynamicShared, dynamic_shared};
pub use verify::{VerifyError, verify_module, verify_module_for, verify_module_with_twins};
pub use wgmma::{WaitFences, wait_fences};

use irc_ir::DType;
use irc_layout::{Layout, LayoutError, Swizzle, coalesce};

/// A whole GPU program for one graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    /// The graph's name, without `@`.
    pub name: String,
    /// Floating-point operations of the graph (a multiply-add is 2).
    pub flops: u64,
    /// Bytes every implementation must move: inputs read once, outputs written once.
    pub min_bytes: u64,
    pub buffers: Vec<BufferDecl>,
    pub constants: Vec<ConstDecl>,
    pub kernels: Vec<Kernel>,
    /// Launches in order; each names a kernel and the buffers bound to its parameters.
    pub launches: Vec<LaunchStmt>,
    /// Buffers holding the graph's results, in order.
    pub results: Vec<String>,
}

/// A device buffer: contiguous, row-major, of one tensor type.
#[derive(Clone, Debug, PartialEq)]
pub struct BufferDecl {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub kind: BufferKind,
    /// Set on a `tensormap` buffer: 128 bytes (`tensor<16xi64>`, temp) the host fills with the
    /// TMA descriptor of another buffer before any launch.
    pub tensor_map: Option<TensorMapDecl>,
}

/// A TMA tensor map over a buffer (CUDA's `CUtensorMap`, encoded by the host with
/// `cuTensorMapEncodeTiled` once the buffer is allocated): how tiled copies (`tma.load`) see
/// the buffer's elements.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorMapDecl {
    /// The buffer it maps; its elements are the map's element type.
    pub of: String,
    /// Extents, innermost (contiguous) dimension first, in elements.
    pub dims: Vec<u64>,
    /// Byte strides of dimensions 1.. (dimension 0 is contiguous): multiples of 16.
    pub strides: Vec<u64>,
    /// The box one copy moves, per dimension, in elements (at most 256 each).
    pub box_dims: Vec<u32>,
    /// The shared-memory swizzle of the box, in bytes: 0 (none), 32, 64 or 128; the box's
    /// innermost extent is at most this many bytes.
    pub swizzle: u32,
}

impl TensorMapDecl {
    /// Bytes one box copies (what its mbarrier's transaction count is).
    pub fn box_bytes(&self, dtype: DType) -> u64 {
        self.box_dims.iter().map(|&b| u64::from(b)).product::<u64>() * dtype.size_bytes()
    }
}

impl BufferDecl {
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// Constant data compiled into the program (a `__device__` array in CUDA).
#[derive(Clone, Debug, PartialEq)]
pub struct ConstDecl {
    pub name: String,
    pub dtype: DType,
    pub values: Vec<f64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LaunchStmt {
    pub kernel: String,
    pub args: Vec<String>,
}

/// Integer width of index arithmetic in a kernel (32 when every offset fits).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum IndexWidth {
    I32,
    I64,
}

/// One GPU kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub name: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub index: IndexWidth,
    /// Blocks per SM the template asks the assembler to fit (`occupancy(N)` in the text form,
    /// `__launch_bounds__(threads, N)`, `.minnctapersm N`): 1 leaves the register count to
    /// the assembler; a memory-bound kernel whose threads hold one vector each asks for a full
    /// SM, since its bytes in flight grow with its resident threads
    /// ([`min_blocks_per_sm`]).
    pub occupancy: u32,
    /// The graph ops this kernel computes, with their source locations.
    pub origins: Vec<Origin>,
    pub params: Vec<Param>,
    pub tensors: Vec<TensorDecl>,
    /// Shared between a kernel and its copies (a repeated group lowered once).
    pub body: std::sync::Arc<Vec<Stmt>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Origin {
    /// The graph statement, as printed.
    pub op: String,
    /// `file:line:col` of the statement, or of its upstream `loc(...)`.
    pub loc: String,
}

/// A pointer parameter (to one element type).
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: String,
    pub dtype: DType,
}

/// Where a tensor's elements live.
#[derive(Clone, Debug, PartialEq)]
pub enum Space {
    /// Global memory, through a pointer parameter.
    Global(String),
    /// A constant array of the module.
    Const(String),
    /// Shared memory of the block, `cosize(layout)` elements.
    Shared,
    /// Registers of each thread, `cosize(layout)` elements, indexed by constants only.
    Registers,
    /// Another view of a shared or register tensor's storage (same dtype), through its own
    /// layout: how a tile is partitioned among threads (CuTe's `partition`).
    View(String),
}

/// A tensor: a memory space, a base offset and a layout from coordinates to element offsets
/// (CuTe's tensor: an engine pointer advanced by `offset`, composed with a layout). The element
/// at a coordinate is `offset + layout(coord)`; a global or constant tensor's layout may have
/// negative strides (a slice walking backwards) as long as every element stays in its buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorDecl {
    pub name: String,
    pub dtype: DType,
    pub space: Space,
    /// Added to every element offset (`global(%p0) + 12`); 0 for shared, register and view
    /// tensors.
    pub offset: i64,
    pub layout: Layout,
}

impl TensorDecl {
    /// The least and greatest element offsets the tensor reaches (`offset` included).
    pub fn span(&self) -> (i64, i64) {
        let (mut lo, mut hi) = (self.offset, self.offset);
        for (size, stride) in self.layout.leaves() {
            let reach = (size - 1).saturating_mul(stride);
            if reach < 0 {
                lo = lo.saturating_add(reach);
            } else {
                hi = hi.saturating_add(reach);
            }
        }
        (lo, hi)
    }

    /// The element offset at a coordinate: [`offset_expr`] of the layout plus the base offset.
    pub fn offset_at(&self, coord: &[Expr]) -> Result<Expr, LayoutError> {
        Ok(self.offset_with(&offset_terms(&self.layout, coord.len())?, coord))
    }

    /// [`TensorDecl::offset_at`] with the layout's [`offset_terms`] for this coordinate rank
    /// given (computed once per tensor by an emitter).
    pub fn offset_with(&self, terms: &[OffsetTerm], coord: &[Expr]) -> Expr {
        Expr::idx(IdxOp::Add, terms_expr(terms, coord), Expr::Int(self.offset))
    }
}

/// A scalar type: an index or an element type.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Ty {
    Idx,
    Elem(DType),
}

impl Ty {
    pub fn name(self) -> &'static str {
        match self {
            Ty::Idx => "idx",
            Ty::Elem(d) => d.name(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `%v : ty = expr`: an immutable scalar.
    Let { var: String, ty: Ty, value: Expr },
    /// `var %v : ty = expr`: a mutable scalar.
    Var { var: String, ty: Ty, init: Expr },
    /// `%v <- expr`: assigns a mutable scalar.
    Assign { var: String, value: Expr },
    /// `store %t[coord], expr`.
    Store {
        tensor: String,
        coord: Vec<Expr>,
        value: Expr,
    },
    /// `for %i = start to end step s [unroll] { ... }`: `i = start; i < end; i += s`.
    For {
        var: String,
        start: Expr,
        end: Expr,
        step: Expr,
        unroll: bool,
        body: Vec<Stmt>,
    },
    /// `if cond { ... }`.
    If {
        cond: Expr,
        body: Vec<Stmt>,
        /// `} else {`: run when `cond` is false (may be empty).
        orelse: Vec<Stmt>,
    },
    /// `copy.N %dst[c..], %src[c..]`: copies the N elements of mode 0 of `src` to mode 0 of
    /// `dst`, as one vector access. Mode 0 of both tensors is `N:1` and every other stride is a
    /// multiple of N, so the access is N-element aligned whatever the coordinates. Between
    /// global and shared memory, or between either and a register tensor (a vector load into
    /// registers, or a vector store from them).
    /// `copy.N.evict_first ...`: the same, its global loads marked read-once ([`CacheHint`]).
    Copy {
        width: u32,
        dst: Frag,
        src: Frag,
        hint: CacheHint,
    },
    /// `sync`: a barrier of the whole block.
    Sync,
    /// `%v : ty = block_reduce.OP expr`: every thread of the block contributes its value and
    /// receives the block's result. Every thread must reach it.
    BlockReduce {
        var: String,
        ty: Ty,
        op: ReduceOp,
        value: Expr,
    },
    /// `%v : ty = warp_reduce.OP[.W] expr`: as `block_reduce`, over each group of `width`
    /// consecutive lanes of a warp (a butterfly of `__shfl_xor` over offsets `width/2 .. 1`;
    /// `width` is a power of two from 2 to 32, and 32, the whole warp, is not written). Every
    /// thread of the warp must reach it. An mma accumulator row lives in the 4 lanes of a quad:
    /// its reductions are `warp_reduce.max.4`.
    WarpReduce {
        var: String,
        ty: Ty,
        op: ReduceOp,
        width: u32,
        value: Expr,
    },
    /// `MNEMONIC args..`: a target instruction of the [`INTRINSICS`] table.
    Intrinsic { op: Intrinsic, args: Vec<Arg> },
}

/// How a copy's loads from global memory are cached.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum CacheHint {
    /// The default: cached in L1 and L2 with normal priority.
    #[default]
    Normal,
    /// Read once (PTX's `.cs`, cache streaming): the lines are allocated with evict-first
    /// priority in L1 and L2, so a stream read once replaces its own lines before the lines
    /// other work keeps (or has written and not yet written back).
    EvictFirst,
}

impl CacheHint {
    /// The hints that are not the default, by name.
    pub const HINTS: [(&'static str, CacheHint); 1] = [("evict_first", CacheHint::EvictFirst)];

    /// The hint's name (`evict_first`; `None` for the default), as the kernel IR's
    /// `copy.N.NAME` and a reduction point's `,NAME` write it.
    pub fn name(self) -> Option<&'static str> {
        Self::HINTS
            .iter()
            .find(|(_, h)| *h == self)
            .map(|(n, _)| *n)
    }

    /// The hint called `name`.
    pub fn from_name(name: &str) -> Option<CacheHint> {
        Self::HINTS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, h)| *h)
    }

    /// `sep` and the name, empty for the default: the suffix after `copy.N` (`.evict_first`)
    /// or after a reduction point's schedule (`,evict_first`).
    pub fn suffix(self, sep: char) -> String {
        self.name().map(|n| format!("{sep}{n}")).unwrap_or_default()
    }

    /// The PTX load of `regs` 32-bit registers (1, 2 or 4) with this hint, when it is not
    /// the default: operands `%0 .. %{regs-1}` the registers, `%{regs}` the 64-bit address.
    /// The MLIR emitter writes it as inline assembly; the CUDA emitter calls CUDA's intrinsic
    /// for the same instruction (`__ldcs`).
    pub fn ptx_load(self, regs: u32) -> Option<String> {
        let op = match self {
            CacheHint::Normal => return None,
            CacheHint::EvictFirst => "ld.global.cs",
        };
        let list = (0..regs)
            .map(|i| format!("%{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        Some(match regs {
            1 => format!("{op}.u32 %0, [%1];"),
            _ => format!("{op}.v{regs}.u32 {{{list}}}, [%{regs}];"),
        })
    }
}

/// A register fragment: a tensor and the coordinates of its modes after mode 0.
#[derive(Clone, Debug, PartialEq)]
pub struct Frag {
    pub tensor: String,
    pub at: Vec<Expr>,
}

impl Frag {
    /// The coordinate of value `v` of the fragment.
    pub fn coord(&self, v: i64) -> Vec<Expr> {
        let mut c = vec![Expr::Int(v)];
        c.extend(self.at.iter().cloned());
        c
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
}

impl ReduceOp {
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }
}

/// Thread and block coordinates.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Builtin {
    TidX,
    BidX,
    BidY,
    BidZ,
    NtidX,
    NctaidX,
    NctaidY,
    NctaidZ,
}

impl Builtin {
    pub const ALL: [Builtin; 8] = [
        Builtin::TidX,
        Builtin::BidX,
        Builtin::BidY,
        Builtin::BidZ,
        Builtin::NtidX,
        Builtin::NctaidX,
        Builtin::NctaidY,
        Builtin::NctaidZ,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Builtin::TidX => "tid.x",
            Builtin::BidX => "bid.x",
            Builtin::BidY => "bid.y",
            Builtin::BidZ => "bid.z",
            Builtin::NtidX => "ntid.x",
            Builtin::NctaidX => "nctaid.x",
            Builtin::NctaidY => "nctaid.y",
            Builtin::NctaidZ => "nctaid.z",
        }
    }
}

/// Index arithmetic and comparisons (on `idx`; comparisons give `i1`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum IdxOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Lt,
    Le,
    Eq,
    And,
    /// Bitwise exclusive or of two non-negative indices: what a swizzle
    /// ([`irc_layout::Swizzle`], [`swizzle_expr`]) computes.
    Xor,
}

impl IdxOp {
    pub const ALL: [IdxOp; 10] = [
        IdxOp::Add,
        IdxOp::Sub,
        IdxOp::Mul,
        IdxOp::Div,
        IdxOp::Rem,
        IdxOp::Lt,
        IdxOp::Le,
        IdxOp::Eq,
        IdxOp::And,
        IdxOp::Xor,
    ];
    pub fn symbol(self) -> &'static str {
        match self {
            IdxOp::Add => "+",
            IdxOp::Sub => "-",
            IdxOp::Mul => "*",
            IdxOp::Div => "/",
            IdxOp::Rem => "%",
            IdxOp::Lt => "<",
            IdxOp::Le => "<=",
            IdxOp::Eq => "==",
            IdxOp::And => "&&",
            IdxOp::Xor => "^",
        }
    }
    pub fn is_compare(self) -> bool {
        matches!(self, IdxOp::Lt | IdxOp::Le | IdxOp::Eq)
    }
}

/// Equality is structural, with float literals compared bit for bit (so `f32(nan)` equals
/// itself and a module with one equals its re-parse).
#[derive(Clone, Debug)]
pub enum Expr {
    /// An index literal.
    Int(i64),
    /// A float literal: only as the argument of a cast (`f32(1.5)`, `f32(-inf)`).
    Float(f64),
    Var(String),
    Builtin(Builtin),
    Load {
        tensor: String,
        coord: Vec<Expr>,
    },
    Idx(IdxOp, Box<Expr>, Box<Expr>),
    Call(Func, Vec<Expr>),
}

impl PartialEq for Expr {
    fn eq(&self, other: &Expr) -> bool {
        match (self, other) {
            (Expr::Int(a), Expr::Int(b)) => a == b,
            (Expr::Float(a), Expr::Float(b)) => a.to_bits() == b.to_bits(),
            (Expr::Var(a), Expr::Var(b)) => a == b,
            (Expr::Builtin(a), Expr::Builtin(b)) => a == b,
            (
                Expr::Load {
                    tensor: ta,
                    coord: ca,
                },
                Expr::Load {
                    tensor: tb,
                    coord: cb,
                },
            ) => ta == tb && ca == cb,
            (Expr::Idx(oa, a1, a2), Expr::Idx(ob, b1, b2)) => oa == ob && a1 == b1 && a2 == b2,
            (Expr::Call(fa, aa), Expr::Call(fb, ab)) => fa == fb && aa == ab,
            _ => false,
        }
    }
}

impl Expr {
    pub fn var(name: &str) -> Expr {
        Expr::Var(name.to_string())
    }
    pub fn idx(op: IdxOp, a: Expr, b: Expr) -> Expr {
        // Fold the trivial cases so that lowering writes no `x * 1` or `x + 0`.
        match (op, &a, &b) {
            (IdxOp::Add, Expr::Int(0), _) | (IdxOp::Mul, Expr::Int(1), _) => b,
            (IdxOp::Add | IdxOp::Sub, _, Expr::Int(0))
            | (IdxOp::Mul | IdxOp::Div, _, Expr::Int(1)) => a,
            (IdxOp::Mul, Expr::Int(0), _) | (IdxOp::Mul, _, Expr::Int(0)) => Expr::Int(0),
            (IdxOp::Rem, _, Expr::Int(1)) => Expr::Int(0),
            (IdxOp::Add, Expr::Int(x), Expr::Int(y)) => Expr::Int(x + y),
            (IdxOp::Mul, Expr::Int(x), Expr::Int(y)) => Expr::Int(x * y),
            _ => Expr::Idx(op, Box::new(a), Box::new(b)),
        }
    }
    pub fn call(f: Func, args: Vec<Expr>) -> Expr {
        Expr::Call(f, args)
    }
    pub fn cast(d: DType, e: Expr) -> Expr {
        Expr::Call(Func::Cast(d), vec![e])
    }
    pub fn lit(d: DType, v: f64) -> Expr {
        Expr::Call(Func::Cast(d), vec![Expr::Float(v)])
    }
    pub fn load(tensor: &str, coord: Vec<Expr>) -> Expr {
        Expr::Load {
            tensor: tensor.to_string(),
            coord,
        }
    }
}

/// Whether two kernels share their code: one body (the same allocation, as a repeated group's
/// copies do) and equal launch shape, parameters and tensors. Such kernels differ at most in
/// their names and origins, so one check and one emission serve both.
pub fn shares_code(a: &Kernel, b: &Kernel) -> bool {
    std::sync::Arc::ptr_eq(&a.body, &b.body)
        && a.grid == b.grid
        && a.block == b.block
        && a.index == b.index
        && a.occupancy == b.occupancy
        && a.params == b.params
        && a.tensors == b.tensors
}

/// Whether two kernels are the same but for their names and origins (literals compare as
/// numbers, so `-0.0` equals `0.0`: a check, not a proof).
pub fn same_code(a: &Kernel, b: &Kernel) -> bool {
    a.grid == b.grid
        && a.block == b.block
        && a.index == b.index
        && a.occupancy == b.occupancy
        && a.params == b.params
        && a.tensors == b.tensors
        && a.body == b.body
}

/// Visits every statement of a body, nested ones included, in program order.
pub fn walk<'a>(body: &'a [Stmt], f: &mut impl FnMut(&'a Stmt)) {
    for s in body {
        f(s);
        match s {
            Stmt::For { body, .. } => walk(body, f),
            Stmt::If { body, orelse, .. } => {
                walk(body, f);
                walk(orelse, f);
            }
            _ => {}
        }
    }
}

/// Whether a tensor of `layout` can be an operand of `copy.w` indexed by `coords` coordinates:
/// mode 0 is `w:1`, every other stride a multiple of `w` (so the access is `w`-aligned whatever
/// the coordinates), and one coordinate per mode after mode 0. The verifier checks copies with
/// it; lowering asks it before choosing a vector copy.
pub fn is_vector_operand(layout: &Layout, w: i64, coords: usize) -> bool {
    w >= 1
        && coords + 1 == layout.rank()
        && layout.mode(0).is_ok_and(|m| m.leaves() == [(w, 1)])
        && layout
            .modes()
            .iter()
            .skip(1)
            .all(|m| m.leaves().iter().all(|&(_, d)| d % w == 0))
}

/// One tensor access or barrier of a body, in program order ([`accesses`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access<'a> {
    Read(&'a str),
    Write(&'a str),
    /// A barrier that orders the memory accesses before it for the threads it waits for:
    /// `sync`, `block_reduce` and a named barrier (the block's threads, or some of its warps),
    /// `counter.wait` (the blocks of a cooperative launch).
    Barrier,
}

/// The tensor accesses and barriers of a body in program order: a statement's reads (the
/// loads of its expressions, a copy's source, the operands an intrinsic reads) before its
/// writes; a loop's or branch's bounds and condition before its body.
pub fn accesses(body: &[Stmt]) -> Vec<Access<'_>> {
    fn loads<'a>(e: &'a Expr, out: &mut Vec<Access<'a>>) {
        match e {
            Expr::Load { tensor, coord } => {
                coord.iter().for_each(|c| loads(c, out));
                out.push(Access::Read(tensor));
            }
            Expr::Idx(_, a, b) => {
                loads(a, out);
                loads(b, out);
            }
            Expr::Call(_, args) => args.iter().for_each(|a| loads(a, out)),
            Expr::Int(_) | Expr::Float(_) | Expr::Var(_) | Expr::Builtin(_) => {}
        }
    }
    let mut out = vec![];
    walk(body, &mut |s| match s {
        Stmt::Let { value, .. } | Stmt::Assign { value, .. } => loads(value, &mut out),
        Stmt::Var { init, .. } => loads(init, &mut out),
        Stmt::Store {
            tensor,
            coord,
            value,
        } => {
            loads(value, &mut out);
            coord.iter().for_each(|c| loads(c, &mut out));
            out.push(Access::Write(tensor));
        }
        Stmt::For {
            start, end, step, ..
        } => [start, end, step]
            .into_iter()
            .for_each(|e| loads(e, &mut out)),
        Stmt::If { cond, .. } => loads(cond, &mut out),
        Stmt::Copy { dst, src, .. } => {
            out.push(Access::Read(&src.tensor));
            out.push(Access::Write(&dst.tensor));
        }
        Stmt::BlockReduce { value, .. } => {
            loads(value, &mut out);
            out.push(Access::Barrier);
        }
        Stmt::WarpReduce { value, .. } => loads(value, &mut out),
        Stmt::Intrinsic { op, args } => {
            let kinds = op.info().args.iter().map(|(_, k)| k);
            let mut writes = vec![];
            for (kind, arg) in kinds.zip(args) {
                match arg {
                    Arg::Frag(f) if kind.writes() => writes.push(Access::Write(&f.tensor)),
                    Arg::Frag(f) => out.push(Access::Read(&f.tensor)),
                    Arg::Expr(e) => loads(e, &mut out),
                }
            }
            out.extend(writes);
            if matches!(op, Intrinsic::BarSync | Intrinsic::CounterWait) {
                out.push(Access::Barrier);
            }
        }
        Stmt::Sync => out.push(Access::Barrier),
    });
    out
}

/// The tensors a body writes: stores, copies and the operands intrinsics write (emitters use
/// it to declare read-only parameters `const`).
pub fn written_tensors(body: &[Stmt]) -> std::collections::HashSet<&str> {
    accesses(body)
        .into_iter()
        .filter_map(|a| match a {
            Access::Write(t) => Some(t),
            _ => None,
        })
        .collect()
}

/// The tensors a body reads: loads in any expression, copy sources and the operands
/// intrinsics read (the counterpart of [`written_tensors`]).
pub fn read_tensors(body: &[Stmt]) -> std::collections::HashSet<&str> {
    accesses(body)
        .into_iter()
        .filter_map(|a| match a {
            Access::Read(t) => Some(t),
            _ => None,
        })
        .collect()
}

/// One leaf of an offset computation: `((c / div) % modulo) * stride`, where `modulo` is `None`
/// when the coordinate never reaches the leaf's size (the last leaf of a mode).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetTerm {
    /// Which coordinate (index into the coordinate list) the term reads.
    pub coord: usize,
    pub div: i64,
    pub modulo: Option<i64>,
    pub stride: i64,
}

/// The element offset of `layout` at a coordinate, as a sum of terms over the coordinate's
/// components: CuTe's `crd2idx` with each mode coalesced first and stride-0 leaves dropped.
///
/// With `coord_rank == 1` the single coordinate is read colexicographically over the whole
/// layout; otherwise `coord_rank` must equal the layout's rank and each coordinate indexes one
/// top-level mode.
pub fn offset_terms(layout: &Layout, coord_rank: usize) -> Result<Vec<OffsetTerm>, LayoutError> {
    let modes: Vec<Layout> = if coord_rank == 1 {
        vec![coalesce(layout)?]
    } else {
        layout
            .modes()
            .iter()
            .map(coalesce)
            .collect::<Result<_, _>>()?
    };
    let mut terms = Vec::new();
    for (c, mode) in modes.iter().enumerate() {
        let leaves = mode.leaves();
        let mut div = 1i64;
        for (k, &(size, stride)) in leaves.iter().enumerate() {
            if size != 1 && stride != 0 {
                let last = k + 1 == leaves.len();
                terms.push(OffsetTerm {
                    coord: c,
                    div,
                    modulo: (!last).then_some(size),
                    stride,
                });
            }
            div = div.saturating_mul(size);
        }
    }
    Ok(terms)
}

/// The offset as an [`Expr`] over the coordinate expressions.
pub fn offset_expr(layout: &Layout, coord: &[Expr]) -> Result<Expr, LayoutError> {
    Ok(terms_expr(&offset_terms(layout, coord.len())?, coord))
}

/// The sum of `terms` ([`offset_terms`] of a layout, which an emitter may compute once per
/// tensor) over the coordinate expressions: what [`offset_expr`] returns.
pub fn terms_expr(terms: &[OffsetTerm], coord: &[Expr]) -> Expr {
    let mut sum: Option<Expr> = None;
    for t in terms {
        let mut e = Expr::idx(IdxOp::Div, coord[t.coord].clone(), Expr::Int(t.div));
        if let Some(m) = t.modulo {
            e = Expr::idx(IdxOp::Rem, e, Expr::Int(m));
        }
        e = Expr::idx(IdxOp::Mul, e, Expr::Int(t.stride));
        sum = Some(match sum {
            None => e,
            Some(s) => Expr::idx(IdxOp::Add, s, e),
        });
    }
    sum.unwrap_or(Expr::Int(0))
}

/// A swizzle applied to a non-negative index expression `x`: `x ^ (((x / 2^(M + max(S, 0))) %
/// 2^B) * 2^(M + max(-S, 0)))`, which is [`Swizzle::apply`] written with the kernel IR's index
/// operators. A swizzled shared tile (CuTe's `Sw<B,M,S> o L`) is addressed as `swizzle_expr(sw,
/// offset_expr(L, coord))`.
pub fn swizzle_expr(sw: &Swizzle, x: Expr) -> Expr {
    if sw.bits() == 0 {
        return x;
    }
    let (m, s) = (i64::from(sw.base()), i64::from(sw.shift()));
    let yyy = Expr::idx(
        IdxOp::Rem,
        Expr::idx(IdxOp::Div, x.clone(), Expr::Int(1 << (m + s.max(0)))),
        Expr::Int(1 << sw.bits()),
    );
    let moved = Expr::idx(IdxOp::Mul, yyy, Expr::Int(1 << (m + (-s).max(0))));
    Expr::idx(IdxOp::Xor, x, moved)
}

/// The offset of the swizzled layout `sw o layout` at a coordinate (CuTe's composed layout
/// `Sw<B,M,S> o layout`): the terms whose stride is a multiple of the swizzle's period are
/// added after the swizzle — it permutes each aligned block of `period` offsets, so
/// `sw(x + y) = sw(x) + y` for such `y` — and only the others go through it, which keeps the
/// per-access arithmetic small where the outer modes are unrolled loops.
///
/// @pre every stride of `layout` is non-negative (else an error).
pub fn swizzled_offset_expr(
    sw: &Swizzle,
    layout: &Layout,
    coord: &[Expr],
) -> Result<Expr, LayoutError> {
    let terms = offset_terms(layout, coord.len())?;
    if terms.iter().any(|t| t.stride < 0) {
        return Err(LayoutError::Domain {
            op: "swizzled_offset_expr",
            what: format!("{layout} has a negative stride"),
        });
    }
    let (outer, inner): (Vec<_>, Vec<_>) =
        terms.into_iter().partition(|t| t.stride % sw.period() == 0);
    Ok(Expr::idx(
        IdxOp::Add,
        swizzle_expr(sw, terms_expr(&inner, coord)),
        terms_expr(&outer, coord),
    ))
}
