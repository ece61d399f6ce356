//! Shared-memory bank conflicts computed from layouts.
//!
//! The model (NVIDIA GPUs since Volta): shared memory has 32 banks of 4-byte words; bank =
//! `(byte_address / 4) % 32`. A warp access of `w` bytes per lane is served in phases: 32 lanes at
//! once for `w <= 4`, 16 lanes for 8 bytes, 8 lanes for 16 bytes (`ldmatrix` reads one 8x16-byte
//! matrix per phase, the same pattern). A phase takes as many wavefronts as the largest number of
//! *distinct* words any bank must deliver (lanes reading the same word are served by broadcast).
//! Conflicts are the wavefronts beyond the minimum the phase's distinct words need.

use std::collections::{BTreeMap, BTreeSet};

use super::core::Layout;
use super::error::{LayoutError, Result, ceil_div, mul};
use super::swizzle::ComposedLayout;

/// A map from a logical 1-D index to an element offset in shared memory.
pub trait IndexMap {
    fn offset(&self, i: i64) -> Result<i64>;
}

impl IndexMap for Layout {
    fn offset(&self, i: i64) -> Result<i64> {
        self.eval(i)
    }
}

impl IndexMap for ComposedLayout {
    fn offset(&self, i: i64) -> Result<i64> {
        self.eval(i)
    }
}

/// The cost of one warp-wide access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarpAccess {
    /// Wavefronts the access takes.
    pub wavefronts: i64,
    /// Wavefronts it would take without conflicts.
    pub ideal: i64,
}

impl WarpAccess {
    /// Extra wavefronts caused by bank conflicts.
    pub fn conflicts(&self) -> i64 {
        self.wavefronts - self.ideal
    }
}

/// The cost of each warp access when lane `l` of access `a` reads or writes `access_bytes` bytes
/// starting at element `smem(lanes(32*a + l))` of `elem_bytes`-byte elements.
///
/// @pre `size(lanes)` is a multiple of 32; `access_bytes` is 1, 2, 4, 8 or 16, a multiple of
///      `elem_bytes`, and every access is aligned to it (else an error).
/// @post `result.len() == size(lanes) / 32` and `result[a].conflicts() >= 0`.
pub fn bank_conflicts(
    smem: &dyn IndexMap,
    lanes: &Layout,
    elem_bytes: i64,
    access_bytes: i64,
) -> Result<Vec<WarpAccess>> {
    let n = lanes.size()?;
    if n % 32 != 0
        || ![1, 2, 4, 8, 16].contains(&access_bytes)
        || elem_bytes < 1
        || access_bytes % elem_bytes != 0
    {
        return Err(LayoutError::domain(
            "bank_conflicts",
            format!(
                "needs a multiple of 32 lanes (got {n}) and a 1/2/4/8/16-byte access that is a multiple of the {elem_bytes}-byte element (got {access_bytes})"
            ),
        ));
    }
    let addrs = (0..n)
        .map(|k| mul("bank_conflicts", smem.offset(lanes.eval(k)?)?, elem_bytes))
        .collect::<Result<Vec<_>>>()?;
    if let Some(a) = addrs.iter().find(|&&a| a % access_bytes != 0 || a < 0) {
        return Err(LayoutError::domain(
            "bank_conflicts",
            format!("byte address {a} is not aligned to the {access_bytes}-byte access"),
        ));
    }
    let lanes_per_phase = (128 / access_bytes).min(32) as usize;
    Ok(addrs
        .chunks(32)
        .map(|warp| warp_access(warp, lanes_per_phase, access_bytes))
        .collect())
}

/// Wavefronts of one warp's accesses, phase by phase.
fn warp_access(addrs: &[i64], lanes_per_phase: usize, access_bytes: i64) -> WarpAccess {
    let phases = addrs
        .chunks(lanes_per_phase)
        .map(|phase| phase_wavefronts(phase, access_bytes));
    phases.fold(
        WarpAccess {
            wavefronts: 0,
            ideal: 0,
        },
        |acc, (w, i)| WarpAccess {
            wavefronts: acc.wavefronts + w,
            ideal: acc.ideal + i,
        },
    )
}

/// `(wavefronts, ideal)` of one phase: the most distinct words on any bank, and the minimum the
/// number of distinct words needs.
fn phase_wavefronts(addrs: &[i64], access_bytes: i64) -> (i64, i64) {
    let words: BTreeSet<i64> = addrs
        .iter()
        .flat_map(|&a| (a / 4)..(a + access_bytes.max(4)) / 4)
        .collect();
    let mut per_bank: BTreeMap<i64, i64> = BTreeMap::new();
    for w in &words {
        *per_bank.entry(w % 32).or_default() += 1;
    }
    let worst = per_bank.values().copied().max().unwrap_or(1);
    (worst, ceil_div(words.len() as i64, 32).max(1))
}
