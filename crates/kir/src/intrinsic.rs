//! The intrinsics: target instructions of the kernel IR, declared once in [`INTRINSICS`].
//!
//! A row gives the mnemonic the text form uses, a one-sentence meaning, the operands with how
//! each is accessed ([`ArgKind`]) and a typing check beyond the operand kinds. The printer, the
//! parser, the verifier and [`written_tensors`](crate::written_tensors) read the table; an
//! emitter has one case per intrinsic. Adding an instruction is one row here plus its case in
//! each emitter. The Hopper rows (TMA loads, mbarriers, wgmma, register reallocation) are what
//! the `matmul_wgmma` template is made of; the `cp.async` rows (sm_80) feed the multistage
//! pipeline of `matmul_mma`.

use crate::{Expr, Frag, TensorDecl};
use irc_ir::DType;

/// An operand of an intrinsic.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// A tensor at a coordinate (a fragment's modes after mode 0, or a full coordinate).
    Frag(Frag),
    /// An index expression.
    Expr(Expr),
}

impl Arg {
    /// Tensor `tensor` at `at` as an operand.
    pub fn at(tensor: &str, at: Vec<crate::Expr>) -> Arg {
        Arg::Frag(Frag {
            tensor: tensor.to_string(),
            at,
        })
    }

    pub fn frag(&self) -> Option<&Frag> {
        match self {
            Arg::Frag(f) => Some(f),
            Arg::Expr(_) => None,
        }
    }
}

/// How an intrinsic accesses an operand.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// A register fragment with this many values in mode 0, indexed at its other modes; written.
    RegOut(i64),
    /// Likewise, read.
    RegIn(i64),
    /// Likewise, read and written (an accumulator).
    RegInOut(i64),
    /// A shared tensor (or a view of one) at a full coordinate, read.
    SharedIn,
    /// A shared tensor (or a view of one) at a full coordinate, written asynchronously: by a
    /// TMA load (complete once its mbarrier's phase completes) or a `cp.async` (complete for
    /// the thread once a `cp.async.wait` has waited for its group).
    SharedOut,
    /// A global tensor at a full coordinate, read: where an asynchronous copy starts.
    GlobalIn,
    /// A global tensor at a full coordinate, read and written by one atomic operation.
    GlobalAtomic,
    /// An mbarrier: an `i64` shared tensor at a full coordinate, read and written.
    Barrier,
    /// A TMA tensor map: an `i64` global tensor (a `tensormap` buffer) at its first element.
    TensorMap,
    /// An index expression.
    Index,
    /// An integer literal (a PTX immediate).
    Imm,
}

impl ArgKind {
    /// Whether the intrinsic writes the operand's tensor.
    pub fn writes(self) -> bool {
        matches!(
            self,
            ArgKind::RegOut(_)
                | ArgKind::RegInOut(_)
                | ArgKind::SharedOut
                | ArgKind::Barrier
                | ArgKind::GlobalAtomic
        )
    }

    /// Whether the operand is an expression (written as one) rather than a tensor.
    pub fn is_expr(self) -> bool {
        matches!(self, ArgKind::Index | ArgKind::Imm)
    }
}

/// An intrinsic.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Intrinsic {
    LdmatrixX4,
    LdmatrixX4Trans,
    MmaM16n8k16,
    /// `mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32`.
    MmaM16n8k8Tf32,
    /// `mbarrier.init`.
    MbarrierInit,
    /// `mbarrier.arrive.expect_tx`.
    MbarrierExpectTx,
    /// `mbarrier.arrive`.
    MbarrierArrive,
    /// `mbarrier.try_wait.parity` until it succeeds.
    MbarrierWait,
    /// `fence.mbarrier_init` and `fence.proxy.async`.
    FenceBarrierInit,
    /// `cp.async.bulk.tensor.{2,3}d` global to shared through a tensor map.
    TmaLoad2d,
    TmaLoad3d,
    TmaLoad4d,
    TmaLoad5d,
    /// `wgmma.fence`, `wgmma.commit_group`, `wgmma.wait_group`.
    WgmmaFence,
    WgmmaCommit,
    WgmmaWait,
    /// `wgmma.mma_async.m64nNk16` with both operands in shared memory, for N = 64, 128, 256.
    Wgmma(u16),
    /// `wgmma.mma_async.m64nNk16` with `a` in registers (the accumulator layout's values as
    /// f16/bf16: FlashAttention's P) and `b` in shared memory, for N = 64, 128, 256.
    WgmmaRs(u16),
    /// `setmaxnreg.inc` / `setmaxnreg.dec`.
    SetMaxNregInc,
    SetMaxNregDec,
    /// `bar.sync id, threads`: a named barrier of some of the block's warps.
    BarSync,
    /// `bar.arrive id, threads`: arrives on a named barrier without waiting.
    BarArrive,
    /// `cp.async.cg.shared.global` of 16 bytes, and `cp.async.ca.shared.global` of 8 and 4
    /// (`.cg` takes 16 bytes only), zero-filled past the source size.
    CpAsync16,
    CpAsync8,
    CpAsync4,
    /// `cp.async.commit_group`, `cp.async.wait_group`.
    CpAsyncCommit,
    CpAsyncWait,
    /// `atom.add.u32` on a global counter, the value it held stored to shared memory.
    AtomicArrive,
    /// `fence.acq_rel.gpu`.
    FenceGpu,
    /// `fence.proxy.async.shared::cta`.
    FenceProxyAsync,
    /// Spins until a global counter (`ld.acquire.gpu`) reaches a value: the blocks of a
    /// cooperative launch waiting for each other.
    CounterWait,
    /// A packed multiply of two 16-bit pairs (`fma.rn.{f16,bf16}x2` with a `-0` addend).
    Mul2,
}

/// One row of the table.
pub struct IntrinsicInfo {
    pub op: Intrinsic,
    /// The text form's mnemonic.
    pub name: &'static str,
    pub summary: &'static str,
    /// Operand names (for messages) and kinds, in order.
    pub args: &'static [(&'static str, ArgKind)],
    /// Typing beyond the kinds, given each operand's tensor (`None` for an expression).
    pub check: fn(&[Option<&TensorDecl>]) -> Result<(), String>,
}

/// Every intrinsic.
pub const INTRINSICS: &[IntrinsicInfo] = &[
    IntrinsicInfo {
        op: Intrinsic::LdmatrixX4,
        name: "ldmatrix.x4",
        summary: "`ldmatrix.sync.aligned.m8n8.x4.shared.b16`: each thread gives, at `src`'s coordinate, the start of one 8-element row of a 16-bit shared tile (16-byte aligned); `dst`'s mode 0 receives its 8 values (register j is values 2j, 2j+1). Warp-wide.",
        args: &[("dst", ArgKind::RegOut(8)), ("src", ArgKind::SharedIn)],
        check: check_ldmatrix,
    },
    IntrinsicInfo {
        op: Intrinsic::LdmatrixX4Trans,
        name: "ldmatrix.x4.trans",
        summary: "As `ldmatrix.x4`, each 8x8 matrix transposed on the way (`.trans`).",
        args: &[("dst", ArgKind::RegOut(8)), ("src", ArgKind::SharedIn)],
        check: check_ldmatrix,
    },
    IntrinsicInfo {
        op: Intrinsic::MmaM16n8k16,
        name: "mma.m16n8k16",
        summary: "`mma.sync.aligned.m16n8k16.row.col.f32`: `d += a * b` on tensor cores, f16 or bf16 inputs, f32 accumulate; fragments ordered as the layout atoms `mma_m16n8k16_a/b/c`. Warp-wide.",
        args: &[
            ("d", ArgKind::RegInOut(4)),
            ("a", ArgKind::RegIn(8)),
            ("b", ArgKind::RegIn(4)),
        ],
        check: check_mma,
    },
    IntrinsicInfo {
        op: Intrinsic::MmaM16n8k8Tf32,
        name: "mma.m16n8k8.tf32",
        summary: "`mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32`: `d += a * b` on tensor cores, f32 fragments a and b holding TF32 values (the low 13 mantissa bits zero: `tf32(x)`), f32 accumulate; fragments ordered as the layout atoms `mma_m16n8k8_tf32_a/b` and `mma_m16n8k16_c`. Warp-wide.",
        args: &[
            ("d", ArgKind::RegInOut(4)),
            ("a", ArgKind::RegIn(4)),
            ("b", ArgKind::RegIn(2)),
        ],
        check: check_mma_tf32,
    },
    IntrinsicInfo {
        op: Intrinsic::MbarrierInit,
        name: "mbarrier.init",
        summary: "`mbarrier.init.shared::cta.b64`: the barrier expects `count` arrivals per phase. One thread; before any use, followed by `fence.barrier_init` and a block barrier.",
        args: &[("bar", ArgKind::Barrier), ("count", ArgKind::Index)],
        check: check_barrier,
    },
    IntrinsicInfo {
        op: Intrinsic::MbarrierExpectTx,
        name: "mbarrier.expect_tx",
        summary: "`mbarrier.arrive.expect_tx.shared::cta.b64`: one arrival, and the current phase also waits for `bytes` bytes of asynchronous copies (TMA loads naming the barrier).",
        args: &[("bar", ArgKind::Barrier), ("bytes", ArgKind::Index)],
        check: check_barrier,
    },
    IntrinsicInfo {
        op: Intrinsic::MbarrierArrive,
        name: "mbarrier.arrive",
        summary: "`mbarrier.arrive.shared::cta.b64`: one arrival on the barrier.",
        args: &[("bar", ArgKind::Barrier)],
        check: check_barrier,
    },
    IntrinsicInfo {
        op: Intrinsic::MbarrierWait,
        name: "mbarrier.wait",
        summary: "`mbarrier.try_wait.parity.shared::cta.b64` repeated until the phase of parity `parity` (0 or 1) has completed.",
        args: &[("bar", ArgKind::Barrier), ("parity", ArgKind::Index)],
        check: check_barrier,
    },
    IntrinsicInfo {
        op: Intrinsic::FenceBarrierInit,
        name: "fence.barrier_init",
        summary: "`fence.mbarrier_init.release.cluster` and `fence.proxy.async.shared::cta`: initialized barriers become visible to TMA (the async proxy).",
        args: &[],
        check: check_none,
    },
    IntrinsicInfo {
        op: Intrinsic::TmaLoad2d,
        name: "tma.load.2d",
        summary: "`cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes`: one thread copies the tensor map's box at element coordinates (c0 innermost, c1) into `dst` (laid out as the map's swizzle says; out-of-bounds elements are zero), completing `bar`'s transaction bytes.",
        args: &[
            ("dst", ArgKind::SharedOut),
            ("map", ArgKind::TensorMap),
            ("bar", ArgKind::Barrier),
            ("c0", ArgKind::Index),
            ("c1", ArgKind::Index),
        ],
        check: check_tma,
    },
    IntrinsicInfo {
        op: Intrinsic::TmaLoad3d,
        name: "tma.load.3d",
        summary: "As `tma.load.2d`, for a 3-dimensional tensor map (c2 outermost).",
        args: &[
            ("dst", ArgKind::SharedOut),
            ("map", ArgKind::TensorMap),
            ("bar", ArgKind::Barrier),
            ("c0", ArgKind::Index),
            ("c1", ArgKind::Index),
            ("c2", ArgKind::Index),
        ],
        check: check_tma,
    },
    IntrinsicInfo {
        op: Intrinsic::TmaLoad4d,
        name: "tma.load.4d",
        summary: "As `tma.load.2d`, for a 4-dimensional tensor map (c3 outermost).",
        args: &[
            ("dst", ArgKind::SharedOut),
            ("map", ArgKind::TensorMap),
            ("bar", ArgKind::Barrier),
            ("c0", ArgKind::Index),
            ("c1", ArgKind::Index),
            ("c2", ArgKind::Index),
            ("c3", ArgKind::Index),
        ],
        check: check_tma,
    },
    IntrinsicInfo {
        op: Intrinsic::TmaLoad5d,
        name: "tma.load.5d",
        summary: "As `tma.load.2d`, for a 5-dimensional tensor map (c4 outermost).",
        args: &[
            ("dst", ArgKind::SharedOut),
            ("map", ArgKind::TensorMap),
            ("bar", ArgKind::Barrier),
            ("c0", ArgKind::Index),
            ("c1", ArgKind::Index),
            ("c2", ArgKind::Index),
            ("c3", ArgKind::Index),
            ("c4", ArgKind::Index),
        ],
        check: check_tma,
    },
    IntrinsicInfo {
        op: Intrinsic::WgmmaFence,
        name: "wgmma.fence",
        summary: "`wgmma.fence.sync.aligned`: orders register accesses to accumulators before the next `wgmma`. Warpgroup-wide.",
        args: &[],
        check: check_none,
    },
    IntrinsicInfo {
        op: Intrinsic::WgmmaCommit,
        name: "wgmma.commit",
        summary: "`wgmma.commit_group.sync.aligned`: the warpgroup's uncommitted `wgmma`s become one group.",
        args: &[],
        check: check_none,
    },
    IntrinsicInfo {
        op: Intrinsic::WgmmaWait,
        name: "wgmma.wait",
        summary: "`wgmma.wait_group.sync.aligned n`: waits until at most `n` groups are pending; their accumulators are then readable.",
        args: &[("n", ArgKind::Imm)],
        check: check_none,
    },
    IntrinsicInfo {
        op: Intrinsic::Wgmma(64),
        name: "wgmma.m64n64k16",
        summary: WGMMA_SUMMARY,
        args: &wgmma_args(32),
        check: check_wgmma,
    },
    IntrinsicInfo {
        op: Intrinsic::Wgmma(128),
        name: "wgmma.m64n128k16",
        summary: WGMMA_SUMMARY,
        args: &wgmma_args(64),
        check: check_wgmma,
    },
    IntrinsicInfo {
        op: Intrinsic::Wgmma(192),
        name: "wgmma.m64n192k16",
        summary: WGMMA_SUMMARY,
        args: &wgmma_args(96),
        check: check_wgmma,
    },
    IntrinsicInfo {
        op: Intrinsic::Wgmma(256),
        name: "wgmma.m64n256k16",
        summary: WGMMA_SUMMARY,
        args: &wgmma_args(128),
        check: check_wgmma,
    },
    IntrinsicInfo {
        op: Intrinsic::WgmmaRs(64),
        name: "wgmma.rs.m64n64k16",
        summary: WGMMA_RS_SUMMARY,
        args: &wgmma_rs_args(32),
        check: check_wgmma_rs,
    },
    IntrinsicInfo {
        op: Intrinsic::WgmmaRs(128),
        name: "wgmma.rs.m64n128k16",
        summary: WGMMA_RS_SUMMARY,
        args: &wgmma_rs_args(64),
        check: check_wgmma_rs,
    },
    IntrinsicInfo {
        op: Intrinsic::WgmmaRs(192),
        name: "wgmma.rs.m64n192k16",
        summary: WGMMA_RS_SUMMARY,
        args: &wgmma_rs_args(96),
        check: check_wgmma_rs,
    },
    IntrinsicInfo {
        op: Intrinsic::WgmmaRs(256),
        name: "wgmma.rs.m64n256k16",
        summary: WGMMA_RS_SUMMARY,
        args: &wgmma_rs_args(128),
        check: check_wgmma_rs,
    },
    IntrinsicInfo {
        op: Intrinsic::Mul2,
        name: "mul.x2",
        summary: "`fma.rn.{f16,bf16}x2` with a `-0` addend: `dst`'s two values are `a`'s times `b`'s, each product rounded once to the 16-bit dtype (one instruction for a pair of register values). Per thread.",
        args: &[
            ("dst", ArgKind::RegOut(2)),
            ("a", ArgKind::RegIn(2)),
            ("b", ArgKind::RegIn(2)),
        ],
        check: check_mul2,
    },
    IntrinsicInfo {
        op: Intrinsic::SetMaxNregInc,
        name: "setmaxnreg.inc",
        summary: "`setmaxnreg.inc.sync.aligned.u32 n`: the warpgroup's threads may use up to `n` registers (a multiple of 8 in 24..256). Warpgroup-wide.",
        args: &[("n", ArgKind::Imm)],
        check: check_none,
    },
    IntrinsicInfo {
        op: Intrinsic::SetMaxNregDec,
        name: "setmaxnreg.dec",
        summary: "`setmaxnreg.dec.sync.aligned.u32 n`: the warpgroup's threads give their registers above `n` back. Warpgroup-wide.",
        args: &[("n", ArgKind::Imm)],
        check: check_none,
    },
    IntrinsicInfo {
        op: Intrinsic::BarSync,
        name: "bar.sync",
        summary: "`bar.sync id, threads`: waits until `threads` threads (a multiple of 32) have reached named barrier `id` (1..15; 0 is the block barrier `sync`).",
        args: &[("id", ArgKind::Index), ("threads", ArgKind::Imm)],
        check: check_none,
    },
    IntrinsicInfo {
        op: Intrinsic::BarArrive,
        name: "bar.arrive",
        summary: "`bar.arrive id, threads`: the thread counts itself at named barrier `id` (1..15) without waiting; the warps that `bar.sync` there go on once `threads` threads have arrived or synced. One warpgroup hands a turn to another this way.",
        args: &[("id", ArgKind::Index), ("threads", ArgKind::Imm)],
        check: check_none,
    },
    IntrinsicInfo {
        op: Intrinsic::CpAsync16,
        name: "cp.async.16",
        summary: "`cp.async.cg.shared.global [dst], [src], 16, src_size`: the thread starts copying 16 bytes from `src` (global, at a full coordinate) to `dst` (shared, at a full coordinate), both 16-byte aligned; bytes from `src_size` (0 to 16) on are zeros, not read. The copy joins the thread's uncommitted group; `dst` may be read once `cp.async.wait` has waited for that group (by other threads, after a block barrier too).",
        args: CP_ASYNC_ARGS,
        check: check_cp_async::<16>,
    },
    IntrinsicInfo {
        op: Intrinsic::CpAsync8,
        name: "cp.async.8",
        summary: "As `cp.async.16`, 8 bytes (`cp.async.ca.shared.global`, through L1), 8-byte aligned.",
        args: CP_ASYNC_ARGS,
        check: check_cp_async::<8>,
    },
    IntrinsicInfo {
        op: Intrinsic::CpAsync4,
        name: "cp.async.4",
        summary: "As `cp.async.16`, 4 bytes (`cp.async.ca.shared.global`, through L1), 4-byte aligned.",
        args: CP_ASYNC_ARGS,
        check: check_cp_async::<4>,
    },
    IntrinsicInfo {
        op: Intrinsic::CpAsyncCommit,
        name: "cp.async.commit",
        summary: "`cp.async.commit_group`: the thread's uncommitted `cp.async` copies become one group (possibly empty).",
        args: &[],
        check: check_none,
    },
    IntrinsicInfo {
        op: Intrinsic::CpAsyncWait,
        name: "cp.async.wait",
        summary: "`cp.async.wait_group n`: waits until at most the `n` most recent of the thread's committed groups are pending; the copies of the others are complete.",
        args: &[("n", ArgKind::Imm)],
        check: check_none,
    },
    IntrinsicInfo {
        op: Intrinsic::AtomicArrive,
        name: "atom.arrive",
        summary: "`atom.add.u32`: adds `value` to the u32 (an i32 tensor's element) `counter` in global memory and stores the value it held before to `old`, an i32 element of shared memory. One thread arrives for its block; the last of `n` arrivals reads `n - 1`.",
        args: &[
            ("counter", ArgKind::GlobalAtomic),
            ("value", ArgKind::Index),
            ("old", ArgKind::SharedOut),
        ],
        check: check_atomic,
    },
    IntrinsicInfo {
        op: Intrinsic::FenceGpu,
        name: "fence.gpu",
        summary: "`fence.acq_rel.gpu`: the thread's earlier memory accesses are ordered before its later ones for every thread of the GPU (with `atom.arrive`: a block's partial results are visible to the block that arrives last, which fences before reading them).",
        args: &[],
        check: check_none,
    },
    IntrinsicInfo {
        op: Intrinsic::FenceProxyAsync,
        name: "fence.proxy_async",
        summary: "`fence.proxy.async.shared::cta`: the thread's shared-memory accesses so far are ordered with later ones of the async proxy (TMA, wgmma): a tile written or read by threads may then be refilled by TMA or read by wgmma.",
        args: &[],
        check: check_none,
    },
    IntrinsicInfo {
        op: Intrinsic::CounterWait,
        name: "counter.wait",
        summary: "Spins until the u32 (an i32 tensor's element) `counter` in global memory, read with `ld.acquire.gpu`, is at least `value`. One thread waits for its block on the other blocks' `atom.arrive`s; a kernel that contains it is launched cooperatively (all its blocks resident at once, or the launch fails), so the arrivals it waits for are made.",
        args: &[
            ("counter", ArgKind::GlobalAtomic),
            ("value", ArgKind::Index),
        ],
        check: check_counter,
    },
];

const CP_ASYNC_ARGS: &[(&str, ArgKind)] = &[
    ("dst", ArgKind::SharedOut),
    ("src", ArgKind::GlobalIn),
    ("src_size", ArgKind::Index),
];

const WGMMA_SUMMARY: &str = "`wgmma.mma_async.sync.aligned.m64nNk16.f32`: `d += a * b` for a 64xN tile of the warpgroup, f16 or bf16 operands read from shared memory through matrix descriptors built from `a`'s and `b`'s addresses, 128-byte swizzle, the given leading and stride byte offsets; `a_mn`/`b_mn` 1 where the operand is M-/N-major (0: K-major); `acc` nonzero: `d += a * b`, zero: `d = a * b` (the accumulator's old values ignored). `d` is the f32 accumulator fragment `wgmma_m64nk16_d(N)` (N/2 values). Asynchronous: between `wgmma.fence` and `wgmma.commit`/`wgmma.wait`.";

const fn wgmma_args(values: i64) -> [(&'static str, ArgKind); 10] {
    [
        ("d", ArgKind::RegInOut(values)),
        ("a", ArgKind::SharedIn),
        ("b", ArgKind::SharedIn),
        ("a_mn", ArgKind::Imm),
        ("b_mn", ArgKind::Imm),
        ("a_lbo", ArgKind::Imm),
        ("a_sbo", ArgKind::Imm),
        ("b_lbo", ArgKind::Imm),
        ("b_sbo", ArgKind::Imm),
        ("acc", ArgKind::Index),
    ]
}

const WGMMA_RS_SUMMARY: &str = "`wgmma.mma_async.sync.aligned.m64nNk16.f32` with `a` in registers: `d += a * b` for a 64xN tile of the warpgroup; `a` is the warpgroup's 64x16 fragment of b's type, or of f32 rounded to it pairwise as it is packed (8 values per thread, ordered as `mma_m16n8k16_a` within each warp's 16 rows, which is two 8-column blocks of the accumulator layout `wgmma_m64nk16_d`), `b` is read from shared memory through a descriptor (128-byte swizzle, `b_mn` 1 where it is N-major, the given byte offsets). `d` as for `wgmma`. Asynchronous: between `wgmma.fence` and `wgmma.commit`/`wgmma.wait`; `a`'s registers must not change before the wait.";

const fn wgmma_rs_args(values: i64) -> [(&'static str, ArgKind); 7] {
    [
        ("d", ArgKind::RegInOut(values)),
        ("a", ArgKind::RegIn(8)),
        ("b", ArgKind::SharedIn),
        ("b_mn", ArgKind::Imm),
        ("b_lbo", ArgKind::Imm),
        ("b_sbo", ArgKind::Imm),
        ("acc", ArgKind::Index),
    ]
}

impl Intrinsic {
    /// The TMA load of a `rank`-dimensional tensor map (2 to 5).
    pub fn tma_load(rank: usize) -> Option<Intrinsic> {
        Some(match rank {
            2 => Intrinsic::TmaLoad2d,
            3 => Intrinsic::TmaLoad3d,
            4 => Intrinsic::TmaLoad4d,
            5 => Intrinsic::TmaLoad5d,
            _ => return None,
        })
    }

    /// Whether this is one of the TMA loads.
    pub fn is_tma_load(self) -> bool {
        matches!(
            self,
            Intrinsic::TmaLoad2d
                | Intrinsic::TmaLoad3d
                | Intrinsic::TmaLoad4d
                | Intrinsic::TmaLoad5d
        )
    }

    /// The `cp.async` copy of `bytes` bytes (4, 8 or 16).
    pub fn cp_async(bytes: u64) -> Option<Intrinsic> {
        Some(match bytes {
            4 => Intrinsic::CpAsync4,
            8 => Intrinsic::CpAsync8,
            16 => Intrinsic::CpAsync16,
            _ => return None,
        })
    }

    /// Bytes a `cp.async` copy moves (`None` for other intrinsics).
    pub fn cp_async_bytes(self) -> Option<u64> {
        match self {
            Intrinsic::CpAsync4 => Some(4),
            Intrinsic::CpAsync8 => Some(8),
            Intrinsic::CpAsync16 => Some(16),
            _ => None,
        }
    }

    /// Whether this is a `wgmma` (either form), whose first operand is an accumulator.
    pub fn is_wgmma(self) -> bool {
        matches!(self, Intrinsic::Wgmma(_) | Intrinsic::WgmmaRs(_))
    }

    /// `ldmatrix.x4`, with `.trans` when `trans`.
    pub fn ldmatrix_x4(trans: bool) -> Intrinsic {
        if trans {
            Intrinsic::LdmatrixX4Trans
        } else {
            Intrinsic::LdmatrixX4
        }
    }

    /// The table's row of `self`; the first row where the table has none (a `wgmma` shape it
    /// lacks), which the verifier reports.
    pub fn info(self) -> &'static IntrinsicInfo {
        INTRINSICS
            .iter()
            .find(|i| i.op == self)
            .unwrap_or(&INTRINSICS[0])
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }

    pub fn from_name(name: &str) -> Option<Intrinsic> {
        INTRINSICS.iter().find(|i| i.name == name).map(|i| i.op)
    }
}

fn dtype(t: Option<&TensorDecl>) -> Option<DType> {
    t.map(|t| t.dtype)
}

fn check_ldmatrix(ts: &[Option<&TensorDecl>]) -> Result<(), String> {
    let (Some(d), Some(s)) = (ts[0], ts[1]) else {
        return Err("ldmatrix takes two tensors".into());
    };
    let aligned = s
        .layout
        .leaves()
        .iter()
        .all(|&(size, stride)| size == 1 || (stride * 2) % 16 == 0);
    if s.dtype != d.dtype || d.dtype.size_bytes() != 2 || !aligned {
        return Err(
            "ldmatrix reads 16-bit rows of a shared tensor of the fragment's dtype at 16-byte aligned offsets"
                .into(),
        );
    }
    Ok(())
}

fn check_mma(ts: &[Option<&TensorDecl>]) -> Result<(), String> {
    let (d, a, b) = (dtype(ts[0]), dtype(ts[1]), dtype(ts[2]));
    if a != b || !matches!(a, Some(DType::F16 | DType::BF16)) {
        return Err("mma takes f16 or bf16 fragments a and b of one dtype".into());
    }
    if d != Some(DType::F32) {
        return Err("mma accumulates into an f32 fragment".into());
    }
    Ok(())
}

fn check_mma_tf32(ts: &[Option<&TensorDecl>]) -> Result<(), String> {
    let (d, a, b) = (dtype(ts[0]), dtype(ts[1]), dtype(ts[2]));
    if (a, b, d) != (Some(DType::F32), Some(DType::F32), Some(DType::F32)) {
        return Err("mma.m16n8k8.tf32 takes f32 fragments d, a and b".into());
    }
    Ok(())
}

fn check_none(_: &[Option<&TensorDecl>]) -> Result<(), String> {
    Ok(())
}

fn check_barrier(ts: &[Option<&TensorDecl>]) -> Result<(), String> {
    match ts[0] {
        Some(t) if t.dtype == DType::I64 => Ok(()),
        _ => Err("an mbarrier is an i64 element of shared memory".into()),
    }
}

/// Both tensors of one dtype, and every offset either can reach a multiple of `BYTES`.
fn check_cp_async<const BYTES: i64>(ts: &[Option<&TensorDecl>]) -> Result<(), String> {
    let (Some(d), Some(s)) = (ts[0], ts[1]) else {
        return Err("cp.async copies between two tensors".into());
    };
    let elem = d.dtype.size_bytes() as i64;
    let aligned = |t: &TensorDecl| {
        (t.offset * elem) % BYTES == 0
            && t.layout
                .leaves()
                .iter()
                .all(|&(size, stride)| size == 1 || (stride * elem) % BYTES == 0)
    };
    if s.dtype != d.dtype || BYTES % elem != 0 || !aligned(d) || !aligned(s) {
        return Err(format!(
            "cp.async.{BYTES} copies between tensors of one dtype at {BYTES}-byte aligned offsets"
        ));
    }
    Ok(())
}

fn check_atomic(ts: &[Option<&TensorDecl>]) -> Result<(), String> {
    if dtype(ts[0]) != Some(DType::I32) || dtype(ts[2]) != Some(DType::I32) {
        return Err(
            "atom.arrive counts in an i32 global element and writes an i32 shared one".into(),
        );
    }
    Ok(())
}

fn check_counter(ts: &[Option<&TensorDecl>]) -> Result<(), String> {
    if dtype(ts[0]) != Some(DType::I32) {
        return Err("counter.wait reads an i32 global element".into());
    }
    Ok(())
}

fn check_tma(ts: &[Option<&TensorDecl>]) -> Result<(), String> {
    check_barrier(&ts[2..])?;
    match ts[1] {
        Some(t) if t.dtype == DType::I64 => Ok(()),
        _ => Err("a tensor map is read through an i64 global tensor".into()),
    }
}

fn check_wgmma(ts: &[Option<&TensorDecl>]) -> Result<(), String> {
    let (d, a, b) = (dtype(ts[0]), dtype(ts[1]), dtype(ts[2]));
    if a != b || !matches!(a, Some(DType::F16 | DType::BF16)) {
        return Err("wgmma takes f16 or bf16 operands a and b of one dtype".into());
    }
    if d != Some(DType::F32) {
        return Err("wgmma accumulates into an f32 fragment".into());
    }
    Ok(())
}

fn check_mul2(ts: &[Option<&TensorDecl>]) -> Result<(), String> {
    let (d, a, b) = (dtype(ts[0]), dtype(ts[1]), dtype(ts[2]));
    if a != d || b != d || !matches!(d, Some(DType::F16 | DType::BF16)) {
        return Err("mul.x2 multiplies f16 or bf16 pairs of one dtype".into());
    }
    Ok(())
}

fn check_wgmma_rs(ts: &[Option<&TensorDecl>]) -> Result<(), String> {
    let (d, a, b) = (dtype(ts[0]), dtype(ts[1]), dtype(ts[2]));
    if !matches!(b, Some(DType::F16 | DType::BF16)) || !(a == b || a == Some(DType::F32)) {
        return Err(
            "wgmma.rs takes an f16 or bf16 shared operand b and a register operand a of its dtype or f32 (rounded to it)"
                .into(),
        );
    }
    if d != Some(DType::F32) {
        return Err("wgmma accumulates into an f32 fragment".into());
    }
    Ok(())
}

/// The PTX of an intrinsic whose operands are all addresses, indices or immediates, with `%i`
/// for operand `i` of the table row (shared-memory operands as 32-bit shared addresses, a
/// tensor map or a global source as its 64-bit generic address). Both emitters write it as inline assembly, so
/// the instruction is written once. `None` for the intrinsics with register fragments
/// (`ldmatrix`, `mma`, `wgmma`), which each emitter builds from its own values.
pub fn ptx(op: Intrinsic) -> Option<&'static str> {
    Some(match op {
        Intrinsic::MbarrierInit => "mbarrier.init.shared::cta.b64 [%0], %1;",
        Intrinsic::MbarrierExpectTx => "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;",
        Intrinsic::MbarrierArrive => "mbarrier.arrive.shared::cta.b64 _, [%0];",
        // Labels are local to the braces, so the loop may be written any number of times.
        Intrinsic::MbarrierWait => {
            "{\n.reg .pred P1;\nIRC_WAIT:\nmbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n@!P1 bra IRC_WAIT;\n}"
        }
        Intrinsic::FenceBarrierInit => {
            "fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;"
        }
        Intrinsic::TmaLoad2d => {
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
        }
        Intrinsic::TmaLoad3d => {
            "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];"
        }
        Intrinsic::TmaLoad4d => {
            "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];"
        }
        Intrinsic::TmaLoad5d => {
            "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, %7}], [%2];"
        }
        Intrinsic::WgmmaFence => "wgmma.fence.sync.aligned;",
        Intrinsic::WgmmaCommit => "wgmma.commit_group.sync.aligned;",
        Intrinsic::WgmmaWait => "wgmma.wait_group.sync.aligned %0;",
        Intrinsic::SetMaxNregInc => "setmaxnreg.inc.sync.aligned.u32 %0;",
        Intrinsic::SetMaxNregDec => "setmaxnreg.dec.sync.aligned.u32 %0;",
        Intrinsic::BarSync => "bar.sync %0, %1;",
        Intrinsic::BarArrive => "bar.arrive %0, %1;",
        Intrinsic::CpAsync16 => "cp.async.cg.shared.global [%0], [%1], 16, %2;",
        Intrinsic::CpAsync8 => "cp.async.ca.shared.global [%0], [%1], 8, %2;",
        Intrinsic::CpAsync4 => "cp.async.ca.shared.global [%0], [%1], 4, %2;",
        Intrinsic::CpAsyncCommit => "cp.async.commit_group;",
        Intrinsic::CpAsyncWait => "cp.async.wait_group %0;",
        Intrinsic::AtomicArrive => {
            "{\n.reg .u32 R1;\natom.add.u32 R1, [%0], %1;\nst.shared.u32 [%2], R1;\n}"
        }
        Intrinsic::FenceGpu => "fence.acq_rel.gpu;",
        Intrinsic::FenceProxyAsync => "fence.proxy.async.shared::cta;",
        Intrinsic::CounterWait => {
            "{\n.reg .pred P1;\n.reg .u32 R1;\nIRC_SPIN:\nld.acquire.gpu.u32 R1, [%0];\nsetp.lt.u32 P1, R1, %1;\n@P1 bra IRC_SPIN;\n}"
        }
        Intrinsic::LdmatrixX4
        | Intrinsic::LdmatrixX4Trans
        | Intrinsic::MmaM16n8k16
        | Intrinsic::MmaM16n8k8Tf32
        | Intrinsic::Wgmma(_)
        | Intrinsic::WgmmaRs(_)
        | Intrinsic::Mul2 => return None,
    })
}
