//! The kernel templates: how each Fused IR group becomes a kernel.
//!
//! [`TEMPLATES`] is the table: a template's name, the anchor of the groups it builds, and its
//! configuration space. Each template is one file of `impl Builder` methods; the lowering picks
//! one per group by its anchor (and, for matmuls, its dtype).

use crate::lower::{ConfigSource, Lowering, R, Retry};
use irc_fused::Anchor;
use irc_ir::{Category, DType, OpKind};

mod attention;
pub mod attention_config;
pub mod config;
pub mod decode_config;
mod matmul_mma;
mod matmul_wgmma;
mod norm_prologue;
mod reduction_config;

pub(crate) use attention::AttentionOps;
mod mma_config;
mod problem;
pub mod wgmma_config;

pub use config::{
    Config, PointwiseConfig, ReductionConfig, RowConfig, SPACES, TemplateSpace, ranked, space,
    space_of,
};
pub use mma_config::MmaConfig;
pub(crate) use problem::problem_of;
pub use problem::{Problem, ProblemShape, canonical_text, fnv1a};
mod arrival;
mod column;
mod epilogue_reduce;
mod gemv;
mod matmul_simt;
mod pointwise;
mod realign;
mod reduction;
mod row;
mod row_cached;
mod split;
mod store_view;
mod tma;
mod transpose;
mod vector;
pub(crate) use transpose::TransposeStage;
pub(crate) use vector::VectorStage;

/// One kernel template.
#[derive(Clone, Copy, Debug)]
pub struct TemplateInfo {
    pub name: &'static str,
    /// The groups it builds.
    pub anchor: Anchor,
    /// When it applies among the templates of its anchor.
    pub applies: &'static str,
    /// Its configuration space in words; the typed space is `config::space_of(name)`.
    pub config: &'static str,
}

/// Every template, in the order the lowering tries them for a group's anchor.
pub const TEMPLATES: &[TemplateInfo] = &[
    TemplateInfo {
        name: "pointwise",
        anchor: Anchor::Pointwise,
        applies: "every pointwise group",
        config: "PointwiseConfig: threads 64..1024, a thread per 16-byte vector of the output (an element where the count or a 1-byte type does not allow one) or blocks_per_sm blocks per SM (grid-stride); default threads=256. With an operand staged through a shared-memory transpose (transpose.rs): a block per tile, blocks_per_sm unused, threads where they divide the tile's vectors (else 256 or fewer)",
    },
    TemplateInfo {
        name: "reduction",
        anchor: Anchor::Reduction,
        applies: "every reduce_* group",
        config: "ReductionConfig: row,threads=N (block per output row; default threads from the row length, 32..256) | warp,warps=N[,lanes=L] (N warps per block, an output row per warp or group of L lanes; default for rows of at most 4096 elements and at least 8 x SMs rows, two vectors a lane from rows of 8 vectors) | column,threads=N (leading axes reduced: a thread per output, coalesced; default from 32*SMs outputs) | column_split (leading axes reduced into fewer outputs: column.rs) | split,chunk=N (fewer than 2*SMs rows of at least 16384: chunks over blocks, partials added in order); each optionally ,evict_first (the input read with ld.global.cs; default where it is more than a quarter of the L2 and at most four times it)",
    },
    TemplateInfo {
        name: "row",
        anchor: Anchor::Row,
        applies: "softmax, rmsnorm, layernorm over any axis",
        config: "RowConfig: warp,warps=N[,lanes=L] (N warps per block, a row on a warp or a lane group of one lane a vector or L lanes, cached; rows <= 1024) | block,threads=N (cached; <= 32 values per thread) | split,chunk=N (chunks of a multiple of 1024: partials, merge and apply in one cooperative launch where the blocks fit, else two launches) | streamed,threads=N; default split::RowSchedule::choose",
    },
    TemplateInfo {
        name: "matmul_gemv",
        anchor: Anchor::Matmul,
        applies: "matrix-vector matmuls (M = 1 or N = 1, batched or not) whose matrix is read contiguously along K or along the outputs, any dtype",
        config: "none: K-contiguous, a warp (or a power-of-two lane group) per output, 8 warps per block, 16-byte vector reads of the matrix row, a warp reduction, the epilogue on the group's first lane; output-contiguous, a split column reduction (column.rs: 8 lanes of output vectors by 32 groups along K per block, K split across blocks until about 4 blocks per SM, partials summed in order by the last block to arrive, one launch)",
    },
    TemplateInfo {
        name: "matmul_wgmma",
        anchor: Anchor::Matmul,
        applies: "f16/bf16 matmuls on sm_90a (CUDA backend) whose operands TMA can read: each a buffer (or views of one) with a unit-stride K or M/N dimension, 16-byte strides, at most one batch stride; batch <= 65535; an operand whose rows are not 16-byte aligned (an odd K or N) is first copied into a temp with 128-byte rows where the product has at least 2^27 multiply-adds (realign.rs), else the matmul is mma.sync's",
        config: "WgmmaConfig (wgmma_config.rs): tile 128 x bn x 64, bn 64/128/256, split of K (1 = none; else a partials kernel and a summing epilogue kernel), group = the M tiles the persistent blocks walk together, M fastest within a group, then N (a divisor of the M tiles; default the largest divisor up to 8); heuristic: the widest bn whose tiles fill the SMs (256 also where its tiles keep more than half of them busy), split K where tiles leave half the SMs idle and K >= 64 k-tiles; stages = min(6, shared budget / stage); persistent, 3 warpgroups (TMA producer, 2 wgmma consumers, setmaxnreg 40/232)",
    },
    TemplateInfo {
        name: "matmul_mma",
        anchor: Anchor::Matmul,
        applies: "f16/bf16 matmuls, and f32 ones as 3xTF32 (sm_80+ tensor cores)",
        config: "MmaConfig: block tile bm x bn x bk, warps_m x warps_n warps, cp.async stages (MmaConfig::space; default 128x128x32/2x2/3 for f16/bf16; for f32 128x64x32/2x2/4 or 64x64x32/2x2/4, whichever tiles finish first by waves)",
    },
    TemplateInfo {
        name: "attention_decode",
        anchor: Anchor::Attention,
        applies: "attention groups with at most 16 query rows a unit (a decoding step; query heads sharing a K/V head, proven by the layout algebra, folded into one unit's rows; up to 8 on CUDA cores, up to 16 on tensor cores where cp.async reads K and V), f16/bf16, head dims multiples of 8 up to 256 (128 on tensor cores), any target",
        config: "DecodeConfig (decode_config.rs): on CUDA cores `lanes=L,keys=K,splits=S,stages=N` — lanes a key (a power of two up to 32), keys a lane group takes per step (2 or 4, 16-byte K/V vectors), splits of a unit's keys across blocks (merged in order by the last block to arrive, one launch), stages of a thread's cp.async ring of K/V vectors in shared memory (1: loads straight to registers); on tensor cores `mma,warps=W,splits=S,stages=N` (4 or 8 warps of 16 keys a step, a ring of 2-4 stages); heuristic: CUDA cores up to 8 rows (the fewest lanes whose Q/O slices and K/V vectors fit 160 values a thread, 4 keys a step where they fit, a two-stage ring and up to 2 blocks an SM where two fit an SM's shared memory, else registers and about 4 blocks an SM), else tensor cores at about a block an SM and the deepest ring up to 4 stages (one more than a split's steps), 8 warps where their ring is as deep as a split's steps or 3 stages, else 4",
    },
    TemplateInfo {
        name: "attention_wgmma",
        anchor: Anchor::Attention,
        applies: "attention groups on sm_90a whose Q, K and V TMA can read (head dims multiples of 8 up to 256, 16-byte strides, at most three batch strides); else `attention`",
        config: "AttentionConfig (attention_config.rs): consumers = 2 or 3 warpgroups of 64 query rows beside a TMA producer warpgroup (setmaxnreg 24 / 240 or 160), key tiles of 128 (64 above head dim 128, beside one Q buffer at 256) through a 2-4 stage mbarrier ring, pipelined (2 consumers, head dim <= 64: S of one tile beside P·V of the last), pingpong (the consumers take turns issuing Q·Kᵀ, pipelined with the last tile's P·V, through named barriers), occupancy = 1 or 2 blocks an SM (2: half the registers and shared memory each, key tiles of 64); heuristic: 3 above head dim 64 where their registers fit, without a mask band, keys filling their key tiles and a 192-row block's busy share at least 95% of a 128-row block's, else 2; pipelined at head dim <= 64 without a mask band over at least 4 whole key tiles; pingpong without a mask band where pipelined over at least 8 key tiles or above head dim 128; occupancy 2 where 2 consumers run the serial schedule at head dims <= 64 of a plain kernel (a scale and a one-sided band, no epilogue) whose registers fit",
    },
    TemplateInfo {
        name: "attention",
        anchor: Anchor::Attention,
        applies: "attention groups (policy rule 8: f16/bf16, head dims multiples of 8 up to 256; sm_80+ mma.sync, head dims up to 128: larger ones are planned again unfused)",
        config: "FA2 schedule: block per (batch entry, 64 query rows), 4 warps of 16 rows, K/V tiles of 64 keys (32 when a head dim is 128) through shared memory, online softmax in registers, causal tiles skipped",
    },
    TemplateInfo {
        name: "matmul_simt",
        anchor: Anchor::Matmul,
        applies: "f32/f64 matmuls and what the tensor-core template cannot take",
        config: "block tile 64x64x16, 256 threads, thread tile 4x4",
    },
];

/// The template that builds a group anchored at `op` whose anchor (or stored value) has
/// `dtype`: the row of [`TEMPLATES`] the lowering uses.
pub fn template_of(op: OpKind, dtype: DType, wgmma: bool) -> &'static str {
    match op.category() {
        // The Hopper template has no configuration space yet; where it declines a matmul (an
        // operand TMA cannot read), the mma.sync template takes it with its heuristic point.
        Category::Matmul if matches!(dtype, DType::F16 | DType::BF16) && wgmma => "matmul_wgmma",
        // f32 by 3xTF32 on the same template (`matmul_mma/tf32.rs`): about f32 accuracy.
        Category::Matmul if matches!(dtype, DType::F16 | DType::BF16 | DType::F32) => "matmul_mma",
        Category::Matmul => "matmul_simt",
        Category::Reduction => "reduction",
        Category::Composite => "row",
        _ => "pointwise",
    }
}

impl Lowering<'_> {
    /// The configuration a group is built with: `--mma-config` for tensor-core matmuls, else
    /// the kernel's entry in `configs` when it passes the space's check, else the heuristic.
    pub(crate) fn resolve(&self, p: &Problem) -> R<(Option<Config>, ConfigSource)> {
        let Some(space) = space_of(p.template) else {
            return Ok((None, ConfigSource::Heuristic));
        };
        let target = &self.options.target;
        if let (Some(c), "matmul_mma") = (self.options.mma, p.template) {
            c.check_for(target, p.dtype.size_bytes()).map_err(|why| {
                Retry::Fail(crate::LowerError::Unsupported {
                    op: "matmul".into(),
                    reason: format!("the tensor-core configuration {why}"),
                })
            })?;
            return Ok((Some(Config::Mma(c)), ConfigSource::Flag));
        }
        let heuristic = space.heuristic(p, target);
        match self.options.configs.get(&p.key()) {
            Some(c) => match space.check(c, p, target) {
                Ok(()) => Ok((Some(*c), ConfigSource::Given)),
                Err(why) => Ok((Some(heuristic), ConfigSource::Rejected(why))),
            },
            None => Ok((Some(heuristic), ConfigSource::Heuristic)),
        }
    }
}

impl crate::lower::Builder<'_, '_> {
    /// `f(batch entry)` for each of the `batch` entries of this block: `bid.z` where the grid
    /// has a z for each (no loop: one around a matmul's main loop let the compiler hoist the
    /// epilogue's addresses out of it, to be held across the main loop — 64x64 warp tiles then
    /// spilled), else a loop striding by the grid's z.
    pub(crate) fn batch_loop(
        &mut self,
        batch: u64,
        f: impl FnOnce(&mut Self, irc_kir::Expr) -> R<()>,
    ) -> R<()> {
        use crate::lower::{bx, int};
        use irc_kir::{Builtin, Ty};
        if batch <= u64::from(self.kernel.grid[2]) {
            let body = self.block(|s| {
                let b = s.let_("b", Ty::Idx, bx(Builtin::BidZ));
                f(s, b)
            })?;
            self.out.extend(body);
            return Ok(());
        }
        self.for_(
            "b",
            bx(Builtin::BidZ),
            int(batch),
            bx(Builtin::NctaidZ),
            false,
            f,
        )
    }
}
