//! Properties of a kernel derived from its body for its launch and assembly: whether its blocks
//! wait for each other (a cooperative launch), the blocks per SM it is built to fit, and the
//! register spill its assembly may show.

use crate::{Intrinsic, Kernel, Stmt, walk};

/// Blocks per SM a cooperative kernel is built to fit: the lowering sizes its grid to at most
/// this many per SM, and the emitters bound its registers accordingly
/// (`__launch_bounds__(threads, N)`, `.minnctapersm N`).
pub const COOPERATIVE_BLOCKS_PER_SM: u32 = 4;

/// The blocks per SM a kernel must fit at least (its registers bounded to allow them): its
/// [`Kernel::occupancy`], and at least [`COOPERATIVE_BLOCKS_PER_SM`] for a cooperative kernel.
pub fn min_blocks_per_sm(k: &Kernel) -> u32 {
    if cooperative(k) {
        COOPERATIVE_BLOCKS_PER_SM.max(k.occupancy)
    } else {
        k.occupancy.max(1)
    }
}

/// Whether a kernel is launched cooperatively (`cuLaunchCooperativeKernel`: every block
/// resident at once, or the launch fails): its blocks wait for each other (`counter.wait`).
pub fn cooperative(k: &Kernel) -> bool {
    let mut waits = false;
    walk(&k.body, &mut |s| {
        waits |= matches!(
            s,
            Stmt::Intrinsic {
                op: Intrinsic::CounterWait,
                ..
            }
        );
    });
    waits
}

/// The register spill (bytes stored per thread) a kernel may show when assembled, which the
/// compile tests allow: none, except for the f32 matmul by 3xTF32 (`mma.m16n8k8.tf32`), whose
/// per-k-tile partial sums beside the running total and the split fragments fill 255
/// registers. Measured on the H100 at 4096³: the spilling 128x128x64/2x4/3 (8–136 bytes on
/// the benchmark shapes; the heuristic's 64x64 point for small problems does not spill) runs
/// in 2.58 ms, the spill-free alternatives in 3.0 (k-steps not unrolled) and 3.3 (64x64
/// tiles); PyTorch's FP32 SGEMM takes 2.66.
pub fn spill_budget(k: &Kernel) -> u64 {
    let mut tf32 = false;
    walk(&k.body, &mut |s| {
        tf32 |= matches!(
            s,
            Stmt::Intrinsic {
                op: Intrinsic::MmaM16n8k8Tf32,
                ..
            }
        )
    });
    if tf32 { 256 } else { 0 }
}
