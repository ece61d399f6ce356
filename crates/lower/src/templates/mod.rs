//! The kernel templates: how each Fused IR group becomes a kernel.
//!
//! [`TEMPLATES`] is the table: a template's name, the anchor of the groups it builds, and its
//! configuration space. Each template is one file of `impl Builder` methods; the lowering picks
//! one per group by its anchor (and, for matmuls, its dtype).

use irc_fused::Anchor;

mod attention;
mod matmul_mma;
mod matmul_wgmma;

pub(crate) use attention::AttentionOps;
mod mma_config;

pub use mma_config::MmaConfig;
mod matmul_simt;
mod pointwise;
mod reduction;
mod row;
mod split;
mod store_view;

/// One kernel template.
#[derive(Clone, Copy, Debug)]
pub struct TemplateInfo {
    pub name: &'static str,
    /// The groups it builds.
    pub anchor: Anchor,
    /// When it applies among the templates of its anchor.
    pub applies: &'static str,
    /// Its configuration space (today the heuristic's fixed choice, written as the space's
    /// point the lowering uses).
    pub config: &'static str,
}

/// Every template, in the order the lowering tries them for a group's anchor.
pub const TEMPLATES: &[TemplateInfo] = &[
    TemplateInfo {
        name: "pointwise",
        anchor: Anchor::Pointwise,
        applies: "every pointwise group",
        config: "threads=256 (grid-stride loop, at most 2^20 blocks)",
    },
    TemplateInfo {
        name: "reduction",
        anchor: Anchor::Reduction,
        applies: "every reduce_* group",
        config: "block per output row, threads from the row length (32..256) | column (leading axes reduced, >= 32*SMs outputs: a thread per output, coalesced)",
    },
    TemplateInfo {
        name: "row",
        anchor: Anchor::Row,
        applies: "softmax, rmsnorm, layernorm over any axis",
        config: "schedule per shape (split::RowSchedule::choose): warp-cached (rows <= 1024) | block-cached (<= 8192) | split (longer rows, fewer than 8*SMs: chunks of a multiple of 1024 over ~8*SMs blocks, partial + merge-and-apply launches) | streamed",
    },
    TemplateInfo {
        name: "matmul_wgmma",
        anchor: Anchor::Matmul,
        applies: "f16/bf16 matmuls on sm_90a (CUDA backend) whose operands TMA can read: each a buffer (or views of one) with a unit-stride K or M/N dimension, 16-byte strides, at most one batch stride; batch <= 65535",
        config: "block tile 128 x BN x 64 with BN the widest of 256/128 that gives every SM a tile (else 64); stages = min(6, shared budget / stage); 3 warpgroups (1 TMA producer, 2 wgmma consumers, setmaxnreg 40/232)",
    },
    TemplateInfo {
        name: "matmul_mma",
        anchor: Anchor::Matmul,
        applies: "f16/bf16 matmuls (sm_80+ tensor cores)",
        config: "MmaConfig: block tile bm x bn x bk, warps_m x warps_n warps (MmaConfig::space; default 128x128x64/2x4)",
    },
    TemplateInfo {
        name: "attention",
        anchor: Anchor::Attention,
        applies: "attention groups (policy rule 8: f16/bf16, head dims 32/64/128; sm_80+ mma.sync)",
        config: "FA2 schedule: block per (batch entry, 64 query rows), 4 warps of 16 rows, K/V tiles of 64 keys (32 when a head dim is 128) through shared memory, online softmax in registers, causal tiles skipped",
    },
    TemplateInfo {
        name: "matmul_simt",
        anchor: Anchor::Matmul,
        applies: "f32/f64 matmuls and what the tensor-core template cannot take",
        config: "block tile 64x64x16, 256 threads, thread tile 4x4",
    },
];
