//! The shared-memory stage tiles of the tensor-core pipeline, as layouts of the algebra.
//!
//! Each operand's stage is a `(rows, bk)` tile (rows are M for A, N for B) laid out as CuTe's
//! sm_80 atoms: 8 lines of `c` contiguous elements (128, 64 or 32 bytes: at most one 128-byte
//! line), the lines running along the other dimension, under the swizzle
//! `Sw<log2(c/w), log2(w), 3>` (`w` elements per 16-byte chunk: 8 of 16 bits, 4 of f32), which
//! XORs a line's 16-byte chunk index with bits of its line index.
//! The atom is tiled over the stage with `tile_to_shape`; `S` stages follow one another. No
//! padding: `Sw o L` is a bijection onto `rows * bk` elements, and the 16-byte chunks that
//! `cp.async` writes and `ldmatrix` reads stay whole (the low 3 bits pass through).
//!
//! Every address the template writes is a coordinate layout composed with the stage's layout
//! (`through`), then swizzled (`irc_kir::swizzled_offset_expr`): the `ldmatrix` row starts of a
//! warp ([`StageTile::ldmatrix_domain`]) and the chunks each thread copies
//! ([`StageTile::copy_domain`]). The tests count their bank conflicts with
//! `irc_layout::bank_conflicts`: zero for every configuration of the space.

use super::ldmatrix_x4_rows;
#[cfg(test)]
use irc_layout::ComposedLayout;
use irc_layout::{IntTuple, Layout, LayoutError, Swizzle, composition, tile_to_shape};

/// One operand's stage tile.
#[derive(Clone, Debug)]
pub(crate) struct StageTile {
    pub(crate) rows: u64,
    pub(crate) bk: u64,
    /// Whether K is the contiguous dimension (else rows are).
    pub(crate) k_fast: bool,
    /// `(rows, bk)` → element offset within a stage, before the swizzle.
    pub(crate) layout: Layout,
    pub(crate) swizzle: Swizzle,
}

impl StageTile {
    /// The swizzled `(rows, bk)` tile of `elem_bytes`-byte elements (2 or 4) whose contiguous
    /// dimension is K (`k_fast`) or the rows.
    pub(crate) fn new(
        rows: u64,
        bk: u64,
        k_fast: bool,
        elem_bytes: u64,
    ) -> Result<StageTile, LayoutError> {
        let (cont, lines) = if k_fast { (bk, rows) } else { (rows, bk) };
        let w = 16 / elem_bytes.clamp(1, 16);
        let c = [8 * w, 4 * w, 2 * w].into_iter().find(|c| cont % c == 0);
        let Some(c) = c.filter(|_| lines % 8 == 0) else {
            return Err(LayoutError::Divisibility {
                op: "StageTile",
                what: format!(
                    "a {rows}x{bk} tile needs a contiguous extent that is a multiple of {} and a multiple of 8 lines",
                    2 * w
                ),
            });
        };
        let swizzle = Swizzle::new(
            i64::from((c / w).trailing_zeros()),
            i64::from(w.trailing_zeros()),
            3,
        )?;
        let c = c as i64;
        let atom = if k_fast {
            Layout::flat(&[8, c], &[c, 1])?
        } else {
            Layout::flat(&[c, 8], &[1, c])?
        };
        let layout = tile_to_shape(&atom, &IntTuple::ints(&[rows as i64, bk as i64]), None)?;
        Ok(StageTile {
            rows,
            bk,
            k_fast,
            layout,
            swizzle,
        })
    }

    /// Elements of one stage.
    pub(crate) fn elems(&self) -> i64 {
        (self.rows * self.bk) as i64
    }

    /// The stage as the algebra's composed layout `Sw o L` (what the bank-conflict tests read).
    #[cfg(test)]
    pub(crate) fn composed(&self) -> ComposedLayout {
        ComposedLayout::swizzled(self.swizzle, 0, self.layout.clone())
    }

    /// `L o d` for a coordinate layout `d` into the tile's domain (the colexicographic index
    /// `row + rows * k`): the offsets before the swizzle.
    pub(crate) fn through(&self, d: &Layout) -> Result<Layout, LayoutError> {
        composition(&self.layout, d)
    }

    /// `(lane, atom, k-step, warp)` → the tile index of the row whose start the lane gives
    /// `ldmatrix.x4`: [`ldmatrix_x4_rows`] in a 16x16 block, the block stepping 16 rows per
    /// atom (an A atom, or a pair of B atoms), 16 K per k-step and `atoms * 16` rows per warp.
    pub(crate) fn ldmatrix_domain(
        &self,
        b_operand: bool,
        trans: bool,
        atoms: u64,
        warps: u64,
    ) -> Result<Layout, LayoutError> {
        let rows = self.rows as i64;
        let block = Layout::flat(&[16, 16], &[1, rows])?;
        let lanes = composition(&block, &ldmatrix_x4_rows(b_operand, trans)?)?;
        Layout::concat(&[
            lanes,
            Layout::int(atoms as i64, 16)?,
            Layout::int(self.bk as i64 / 16, 16 * rows)?,
            Layout::int(warps as i64, atoms as i64 * 16)?,
        ])
    }

    /// `(lane, value, atom, k-step, warp)` → the tile index of what lane `lane` holds as value
    /// `value` of the `mma.m16n8k8.tf32` fragment of atom `atom` (A: 16 rows each, B: 8), k-step
    /// `k-step` (8 K each) and warp `warp` (`atoms` atoms each): the atoms `mma_m16n8k8_tf32_a/b`
    /// (lane `t % 4` gives K, `t / 4` rows; A's values `(row + 8, k + 4)`, B's `k + 4`) with
    /// K relabelled when `pairs`: fragment K `j` and `j + 4` of lane `t % 4 = j` read tile K
    /// `2j` and `2j + 1` (both operands alike, so the product is the same sum). Pairs keep a
    /// warp's reads of a rows-contiguous tile free of bank conflicts (its 8 rows and 4 K land in
    /// 32 distinct banks under the swizzle); without them a K-contiguous tile's are.
    pub(crate) fn tf32_domain(
        &self,
        b_operand: bool,
        pairs: bool,
        atoms: u64,
        warps: u64,
    ) -> Result<Layout, LayoutError> {
        let rows = self.rows as i64;
        let (lane_k, value_k) = if pairs {
            (2 * rows, rows)
        } else {
            (rows, 4 * rows)
        };
        let lanes = Layout::flat(&[4, 8], &[lane_k, 1])?;
        let (values, atom) = if b_operand {
            (Layout::int(2, value_k)?, 8)
        } else {
            (Layout::flat(&[2, 2], &[8, value_k])?, 16)
        };
        Layout::concat(&[
            lanes,
            values,
            Layout::int(atoms as i64, atom)?,
            Layout::int(self.bk as i64 / 8, 8 * rows)?,
            Layout::int(warps as i64, atoms as i64 * atom)?,
        ])
    }

    /// `(thread, l, lo)` → the tile index of the first element of copy `l + inner * lo` of
    /// `thread`, for copies of `w` elements along the contiguous dimension: consecutive threads
    /// take consecutive chunks of a line, then the next lines; `inner` copies per unrolled
    /// batch, `per_thread / inner` batches.
    pub(crate) fn copy_domain(
        &self,
        w: u64,
        threads: u64,
        inner: u64,
    ) -> Result<Layout, LayoutError> {
        let (rows, bk, w) = (self.rows as i64, self.bk as i64, w as i64);
        let chunks = if self.k_fast {
            Layout::flat(&[bk / w, rows], &[w * rows, 1])?
        } else {
            Layout::flat(&[rows / w, bk], &[w, rows])?
        };
        let (t, inner) = (threads as i64, inner as i64);
        let per_thread = (self.rows * self.bk) as i64 / w / t;
        composition(
            &chunks,
            &Layout::flat(&[t, inner, per_thread / inner], &[1, t, t * inner])?,
        )
    }

    /// The tile's `(row, k)` projections: `(rows, bk):(1, 0)` and `(rows, bk):(0, 1)`, which
    /// read a tile index's row and K coordinates.
    pub(crate) fn projections(&self) -> Result<(Layout, Layout), LayoutError> {
        let shape = [self.rows as i64, self.bk as i64];
        Ok((
            Layout::flat(&shape, &[1, 0])?,
            Layout::flat(&shape, &[0, 1])?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MmaConfig;
    use irc_layout::bank_conflicts;

    /// For every point of the tensor-core space and every operand major-ness: the stage
    /// layout is a bijection onto `rows * bk` elements, and the `cp.async` stores (16 bytes
    /// per lane) and the `ldmatrix` row reads of every warp have no bank conflicts.
    #[test]
    fn stage_tiles_have_no_bank_conflicts() {
        let target = irc_target::Target::default();
        let space = MmaConfig::space(&target);
        assert!(!space.is_empty());
        let mut checked = 0;
        for cfg in space {
            for (b_operand, rows, atoms, warps) in [
                (false, cfg.bm, cfg.mt(), cfg.warps_m),
                (true, cfg.bn, cfg.nt() / 2, cfg.warps_n),
            ] {
                for k_fast in [true, false] {
                    let tile = StageTile::new(rows, cfg.bk, k_fast, 2).unwrap();
                    let sw = tile.composed();
                    let mut seen: Vec<i64> =
                        (0..tile.elems()).map(|i| sw.eval(i).unwrap()).collect();
                    seen.sort_unstable();
                    assert!(
                        seen.iter().copied().eq(0..tile.elems()),
                        "{cfg}: not a bijection"
                    );
                    // ldmatrix: the row starts of one warp, for each (atom, k-step, warp).
                    // `.trans` where the stage's contiguous dimension is M or N (either operand).
                    let trans = !k_fast;
                    let d = tile
                        .ldmatrix_domain(b_operand, trans, atoms, warps)
                        .unwrap();
                    let rows_l = tile.through(&d).unwrap();
                    let reads = bank_conflicts(
                        &sw.with_layout(rows_l.clone()),
                        &Layout::int(rows_l.size().unwrap(), 1).unwrap(),
                        2,
                        16,
                    );
                    let reads = reads.unwrap();
                    assert_eq!(reads.len() as u64, atoms * cfg.bk / 16 * warps);
                    assert!(
                        reads.iter().all(|a| a.conflicts() == 0),
                        "{cfg} b={b_operand} k_fast={k_fast}: ldmatrix {reads:?}"
                    );
                    // cp.async: 16 bytes per lane, the block's threads in warps.
                    let c = tile.copy_domain(8, cfg.threads(), 1).unwrap();
                    let stores = bank_conflicts(
                        &sw.with_layout(tile.through(&c).unwrap()),
                        &Layout::int(c.size().unwrap(), 1).unwrap(),
                        2,
                        16,
                    )
                    .unwrap();
                    assert!(
                        stores.iter().all(|a| a.conflicts() == 0),
                        "{cfg} b={b_operand} k_fast={k_fast}: cp.async {stores:?}"
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked >= 16, "{checked}");
    }

    /// f32 stages (3xTF32): every warp's element reads of the `mma.m16n8k8.tf32` fragments are
    /// free of bank conflicts with K read in pairs from rows-contiguous stages and in fragment
    /// order from K-contiguous ones; the other pairing conflicts (what `tf32_fragments` avoids
    /// where it can: both stages K-contiguous).
    #[test]
    fn tf32_fragment_reads_have_no_bank_conflicts() {
        let worst = |tile: &StageTile, b: bool, pairs: bool| -> i64 {
            let (atoms, warps) = if b { (4, 4) } else { (4, 2) };
            let d = tile.tf32_domain(b, pairs, atoms, warps).unwrap();
            let l = tile.through(&d).unwrap();
            let reads = bank_conflicts(
                &tile.composed().with_layout(l.clone()),
                &Layout::int(l.size().unwrap(), 1).unwrap(),
                4,
                4,
            )
            .unwrap();
            reads.iter().map(|a| a.conflicts()).max().unwrap()
        };
        for (rows, bk) in [(128, 32), (128, 64), (64, 32), (64, 64)] {
            for b in [false, true] {
                let rows_fast = StageTile::new(rows, bk, false, 4).unwrap();
                let k_fast = StageTile::new(rows, bk, true, 4).unwrap();
                assert_eq!(worst(&rows_fast, b, true), 0, "{rows}x{bk} b={b} rows-fast");
                assert_eq!(worst(&k_fast, b, false), 0, "{rows}x{bk} b={b} k-fast");
                assert!(worst(&rows_fast, b, false) > 0, "{rows}x{bk} b={b}");
            }
        }
    }

    /// The count is not trivially zero: the same reads from the unswizzled tile conflict
    /// (eight 16-byte rows 128 bytes apart share their banks).
    #[test]
    fn unswizzled_tiles_conflict() {
        let tile = StageTile::new(128, 64, true, 2).unwrap();
        let d = tile.ldmatrix_domain(false, false, 4, 2).unwrap();
        let rows = tile.through(&d).unwrap();
        let plain =
            bank_conflicts(&rows, &Layout::int(rows.size().unwrap(), 1).unwrap(), 2, 16).unwrap();
        assert!(plain.iter().all(|a| a.conflicts() > 0), "{plain:?}");
    }
}
