//! Policy rule 10: the **norm prologue**. `matmul(rmsnorm(x, g), W)` is one kernel, the
//! matmul's: `rmsnorm(x, g)[i, k] = x[i, k] · g[k] · r[i]` with the row scale
//! `r[i] = 1 / sqrt(mean_k x[i, k]² + eps)`, so
//!
//! ```text
//! matmul(rmsnorm(x, g), W)[i, j] = r[i] · Σ_k (x[i, k] · g[k]) · W[k, j]
//! ```
//!
//! The template scales each A tile by `g` along K as it arrives (the *operand prologue*),
//! accumulates each row's sum of squares from the same tiles, and applies `r` to the
//! accumulator in the epilogue. x is read once, by the matmul; the normalized operand never
//! exists in memory.
//!
//! Taken when the rmsnorm normalizes the last axis of a `[M, K]` bf16 `x` held in memory, its
//! only reader is the matmul's first operand (no transpose flag), `W` is `[K, N]`, neither
//! M nor N is 1 (that is the matrix-vector template) and N is at most [`MAX_N`]. Declined,
//! with the reason, otherwise. f16 is declined on purpose: `x · g` is formed before the row
//! scale, and f16 (largest value 65504) could overflow where the normalized value would not;
//! bf16 has f32's range.
//!
//! **Why N is bounded.** Unfused, the rmsnorm costs one more pass over x (a read and a write,
//! `4·M·K` bytes) and a launch. Fused, every block transforms the A tiles it reads, so each
//! A tile is transformed once per column tile of the output: the cost grows with N, and the
//! matmul's own time with it (at N = 4096 the one kernel takes 0.192 ms, the f16 4096³ matmul
//! 0.184, run 114: the transform runs beside the products).
//! Measured on an H200 (`bench/results/2026-11-28-norm-prologue-run112.md`; M = K = 4096;
//! fused times of runs 113-114, unfused below N = 2048 of runs 109-112): fused/unfused 0.66 at
//! N = 512, 0.63 at 1024 (M = 16384, K = 2048: 0.70), 0.88 at 2048, 0.96 at 4096, 1.01 at 8192.
//! Beyond N = 4096 the fused kernel is the slower one.

use crate::policy::{Dag, Home, NodeKind};
use irc_ir::{Attr, DType, OpKind};

/// The largest N the norm prologue is taken for (the module doc says why).
pub const MAX_N: u64 = 4096;

/// One `matmul(rmsnorm(..), ..)` the policy looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NormPrologue {
    /// The rmsnorm.
    pub norm: usize,
    /// The matmul reading it as its first operand.
    pub matmul: usize,
    /// Why it stays two kernels; `None` when the rmsnorm is the matmul's operand prologue.
    pub declined: Option<String>,
}

/// Every rmsnorm read only as a matmul's first operand, accepted or declined; `free(i)` says
/// whether an earlier rule left the rmsnorm `i` to this one (not claimed by an attention chain
/// or an epilogue, not forced, not a result). The matmul may have an epilogue; it may not be
/// an attention chain's.
pub(crate) fn find(
    d: &impl Dag,
    home: &[Home],
    uses: &[usize],
    free: &impl Fn(usize) -> bool,
) -> Vec<NormPrologue> {
    let mut out = vec![];
    for m in 0..d.len() {
        if d.kind(m) != NodeKind::Anchor(OpKind::Matmul)
            || matches!(home[m], Home::Attention { .. })
        {
            continue;
        }
        let (n, w) = match d.operands(m) {
            [n, w] if n != w => (*n, *w),
            _ => continue,
        };
        if d.kind(n) != NodeKind::Anchor(OpKind::Rmsnorm) || uses[n] != 1 || !free(n) {
            continue;
        }
        let declined = why_not(d, home, n, m, w);
        out.push(NormPrologue {
            norm: n,
            matmul: m,
            declined,
        });
    }
    out
}

/// Why `matmul(n, w)` at `m` cannot take the rmsnorm `n` as its prologue, if it cannot.
fn why_not(d: &impl Dag, home: &[Home], n: usize, m: usize, w: usize) -> Option<String> {
    let flag = |name: &str| matches!(d.attr(m, name), Some(Attr::Bool(true)));
    let shape = d.shape(n);
    let rank = shape.len();
    let axis = d.attr(n, "axis").and_then(|a| a.as_int()).unwrap_or(-1);
    if axis != -1 && axis != rank as i64 - 1 {
        return Some("the rmsnorm does not normalize the last axis (the matmul's K)".into());
    }
    if rank != 2 || d.shape(w).len() != 2 || flag("transpose_a") {
        return Some("the operand prologue is built for a [M, K] x [K, N] matmul".into());
    }
    let dt = d.dtype(n);
    if dt != Some(DType::BF16) || d.dtype(w) != dt || d.dtype(m) != dt {
        return Some(
            "the operand prologue is built for bf16 (f16 could overflow on x·g before the row scale)"
                .into(),
        );
    }
    let cols = d.shape(m).get(1).copied().unwrap_or(0);
    if shape[0] < 2 || cols < 2 {
        return Some("a matrix-vector product (its own template)".into());
    }
    if cols > MAX_N {
        return Some(format!(
            "N = {cols} > {MAX_N}: fused, each A tile is scaled once per column tile of the output, \
             which costs more than the rmsnorm's own pass over x"
        ));
    }
    let ops = d.operands(n);
    let x = ops[0];
    if d.kind(x) == NodeKind::View || !home[x].in_memory() || d.dtype(x) != dt {
        return Some("x is not a bf16 tensor in memory (a view or computed inline)".into());
    }
    if let Some(&g) = ops.get(1)
        && (d.kind(g) == NodeKind::View || !home[g].in_memory() || d.shape(g) != [shape[1]])
    {
        return Some("g is not a [K] tensor in memory".into());
    }
    None
}
