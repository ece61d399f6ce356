//! The key tiles a query tile's mask band reaches ([`band_tiles`]), and the order in which the
//! persistent attention kernel's blocks take their work units when the units differ in length
//! (a causal mask: query tile `t` reads `t + 1` key tiles of its own size).
//!
//! A block per SM walking the units round-robin (`unit = block + i · blocks`) gives each block
//! the units whose index has its residue: with 16 query tiles a batch entry and 132 blocks,
//! block `b` sees only the query tiles `≡ 15 − b (mod 4)`, and the busiest block does 1.20× the
//! mean work (the causal d64 row of the attention set ran 1.23× SDPA). Instead the lowering
//! simulates, with the kernel's cost of a unit (its key tiles, plus one tile's worth for its
//! query tile and output), blocks that each take the next unit when they finish: the units in
//! groups of batch entries whose K and V fit [`L2_BYTES`] (so that the blocks running together
//! still share them in L2), longest first within a group. The result is a table the kernel
//! reads: each block's first and last position, then the units in the order taken. The
//! simulated busiest block does 1.02× the mean on the shape above.

use crate::lower::*;
use irc_fused::attention::Band;
use irc_kir::{Expr, Func, IdxOp, Ty};

/// The key tiles `[first, first + count)` (of `bkv` keys, `ktiles` in all) that query rows
/// `[q0, q0 + rows)` read under `band`: every tile without one. A band holds the diagonal, so
/// the count is at least one wherever a row has a key.
pub(crate) fn band_tiles(
    band: Option<Band>,
    q0: u64,
    rows: u64,
    bkv: u64,
    ktiles: u64,
) -> (u64, u64) {
    let Some(b) = band else {
        return (0, ktiles);
    };
    // Keys `col` with `lo <= row - col <= hi`: from `q0 - hi` to `q0 + rows - 1 - lo`.
    let last = match b.lo {
        Some(lo) => ((q0 + rows - 1).saturating_add_signed(-lo) / bkv).min(ktiles - 1),
        None => ktiles - 1,
    };
    let first = match b.hi {
        Some(hi) => (q0.saturating_sub(hi as u64) / bkv).min(last),
        None => 0,
    };
    (first, last + 1 - first)
}

impl Builder<'_, '_> {
    /// [`band_tiles`] of the query rows from `q0` (an index expression): `(first, count)`.
    pub(super) fn att_key_tiles(
        &mut self,
        band: Option<Band>,
        q0: &Expr,
        rows: u64,
        bkv: u64,
        ktiles: u64,
    ) -> (Expr, Expr) {
        let Some(b) = band else {
            return (Expr::Int(0), int(ktiles));
        };
        let min = |a: Expr, b: Expr| Expr::call(Func::Select, vec![lt(a.clone(), b.clone()), a, b]);
        let last = match b.lo {
            Some(lo) => {
                let l = Expr::idx(
                    IdxOp::Div,
                    add(q0.clone(), int(rows - 1 + lo.unsigned_abs())),
                    int(bkv),
                );
                min(l, int(ktiles - 1))
            }
            None => int(ktiles - 1),
        };
        let last = self.let_("kl", Ty::Idx, last);
        let first = match b.hi {
            Some(hi) => {
                let past = Expr::idx(
                    IdxOp::Div,
                    Expr::idx(IdxOp::Sub, q0.clone(), int(hi as u64)),
                    int(bkv),
                );
                let f = Expr::call(
                    Func::Select,
                    vec![lt(q0.clone(), int(hi as u64)), Expr::Int(0), past],
                );
                let f = self.let_("kb", Ty::Idx, f);
                min(f, last.clone())
            }
            None => Expr::Int(0),
        };
        let first = self.let_("kf", Ty::Idx, first);
        let count = add(Expr::idx(IdxOp::Sub, last, first.clone()), Expr::Int(1));
        (first, self.let_("nk", Ty::Idx, count))
    }

    /// Whether every score of the key tile from `k0` (`bkv` keys) for the query rows from
    /// `q0` (`rows`) is inside `band`: `q0 - (k0 + bkv - 1) >= lo` and
    /// `q0 + rows - 1 - k0 <= hi`.
    pub(super) fn att_whole_tile(band: Band, q0: &Expr, k0: &Expr, rows: u64, bkv: u64) -> Expr {
        let mut conds = vec![];
        if let Some(lo) = band.lo {
            conds.push(Expr::idx(
                IdxOp::Le,
                add(k0.clone(), int(bkv)),
                add(q0.clone(), int(1 + lo.unsigned_abs())),
            ));
        }
        if let Some(hi) = band.hi {
            conds.push(Expr::idx(
                IdxOp::Le,
                add(q0.clone(), int(rows)),
                add(k0.clone(), int(hi as u64 + 1)),
            ));
        }
        conds
            .into_iter()
            .reduce(|a, b| Expr::idx(IdxOp::And, a, b))
            .unwrap_or(Expr::Int(1))
    }
}

/// The bytes of K and V a group of batch entries may hold: a third of the H100's and H200's
/// 50 MB L2.
const L2_BYTES: u64 = 16 << 20;

/// The most units the table is built for (the table has `blocks + 1` entries more); more fall
/// back to round-robin.
pub(crate) const MAX_UNITS: u64 = 1 << 16;

/// A unit's cost beyond its key tiles, in key tiles: its Q tile's load and its output.
const UNIT_COST: u64 = 1;

/// The work units' order: `blocks + 1` offsets (block `b` takes positions `[o[b], o[b + 1])`),
/// then the units, each `batch · tiles_q + (tiles_q − 1 − query tile)` as the round-robin walk
/// numbers them. `keys(t)`: the key tiles of query tile `t`; `kv_bytes`: K's and V's bytes of
/// one batch entry.
pub(crate) fn balanced_order(
    tiles_q: u64,
    batch: u64,
    blocks: u64,
    kv_bytes: u64,
    keys: impl Fn(u64) -> u64,
) -> Vec<u64> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let group = (L2_BYTES / kv_bytes.max(1)).clamp(1, batch.max(1));
    let blocks = blocks.max(1);
    // (time free, block): the earliest free block first, the lowest on a tie.
    let mut free: BinaryHeap<Reverse<(u64, u64)>> = (0..blocks).map(|b| Reverse((0, b))).collect();
    let mut taken: Vec<Vec<u64>> = vec![vec![]; blocks as usize];
    for g0 in (0..batch).step_by(group as usize) {
        for t in (0..tiles_q).rev() {
            for bi in g0..(g0 + group).min(batch) {
                let Some(Reverse((at, b))) = free.pop() else {
                    break;
                };
                taken[b as usize].push(bi * tiles_q + (tiles_q - 1 - t));
                free.push(Reverse((at + keys(t) + UNIT_COST, b)));
            }
        }
    }
    let mut out = Vec::with_capacity((blocks + 1 + tiles_q * batch) as usize);
    let mut at = 0;
    for units in &taken {
        out.push(at);
        at += units.len() as u64;
    }
    out.push(at);
    out.extend(taken.into_iter().flatten());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key tiles of a band are exactly those holding a kept score of the query rows
    /// (brute force over small sizes, bands from causal to local windows both ways).
    #[test]
    fn band_tiles_are_the_tiles_with_kept_scores() {
        let bands = [
            (Some(0), None),
            (Some(0), Some(0)),
            (Some(0), Some(5)),
            (Some(0), Some(64)),
            (Some(-3), Some(9)),
            (None, Some(0)),
            (None, Some(100)),
            (Some(-70), None),
        ];
        for (lo, hi) in bands {
            let band = Band { lo, hi };
            for (sq, sk) in [(100, 100), (130, 70), (40, 200)] {
                for (rows, bkv) in [(64, 64), (128, 64), (64, 32), (192, 128)] {
                    let ktiles = u64::div_ceil(sk, bkv);
                    for q0 in (0..sq).step_by(rows as usize) {
                        let kept = |t: u64| {
                            (q0..(q0 + rows).min(sq)).any(|r| {
                                (t * bkv..((t + 1) * bkv).min(sk)).any(|c| {
                                    let d = r as i64 - c as i64;
                                    lo.is_none_or(|l| d >= l) && hi.is_none_or(|h| d <= h)
                                })
                            })
                        };
                        let want: Vec<u64> = (0..ktiles).filter(|&t| kept(t)).collect();
                        let (first, count) = band_tiles(Some(band), q0, rows, bkv, ktiles);
                        let got: Vec<u64> = (first..first + count).collect();
                        // Rows past the queries' end may add tiles the real rows do not need.
                        if want.is_empty() {
                            assert!(count >= 1, "{band:?} {q0}");
                            continue;
                        }
                        assert!(
                            got.first() <= want.first() && got.last() >= want.last(),
                            "{band:?} sq {sq} sk {sk} rows {rows} bkv {bkv} q0 {q0}: {got:?} {want:?}"
                        );
                        if q0 + rows <= sq {
                            assert_eq!(got, want, "{band:?} {q0} {rows} {bkv}");
                        }
                    }
                }
            }
        }
    }

    /// The busiest block's work over the mean.
    fn spread(order: &[u64], tiles_q: u64, blocks: u64, keys: &dyn Fn(u64) -> u64) -> f64 {
        let offs = &order[..=blocks as usize];
        let units = &order[blocks as usize + 1..];
        let work = |u: u64| keys(tiles_q - 1 - u % tiles_q) + UNIT_COST;
        let loads: Vec<u64> = (0..blocks as usize)
            .map(|b| {
                units[offs[b] as usize..offs[b + 1] as usize]
                    .iter()
                    .map(|&u| work(u))
                    .sum()
            })
            .collect();
        let mean = loads.iter().sum::<u64>() as f64 / blocks as f64;
        *loads.iter().max().unwrap() as f64 / mean
    }

    #[test]
    fn every_unit_is_taken_once_and_the_blocks_balance() {
        let causal = |t: u64| t + 1;
        for (tiles_q, batch, kv) in [(16, 128, 512 << 10), (32, 64, 2 << 20), (16, 16, 1 << 20)] {
            let order = balanced_order(tiles_q, batch, 132, kv, causal);
            let mut units = order[133..].to_vec();
            units.sort_unstable();
            assert_eq!(units, (0..tiles_q * batch).collect::<Vec<_>>());
            assert_eq!(order[132], tiles_q * batch);
            let s = spread(&order, tiles_q, 132, &causal);
            assert!(s < 1.05, "{tiles_q} x {batch}: {s}");
            // Round-robin, for comparison: 1.20 on the first shape.
            let rr: Vec<u64> = {
                let mut o = vec![];
                let mut lists = vec![vec![]; 132];
                for u in 0..tiles_q * batch {
                    lists[(u % 132) as usize].push(u);
                }
                let mut at = 0;
                for l in &lists {
                    o.push(at);
                    at += l.len() as u64;
                }
                o.push(at);
                o.extend(lists.into_iter().flatten());
                o
            };
            assert!(spread(&rr, tiles_q, 132, &causal) >= s);
        }
        // Fewer units than blocks: one each, the rest idle.
        let order = balanced_order(4, 2, 132, 1 << 20, causal);
        assert_eq!(order[132], 8);
        assert!(order[..=132].windows(2).all(|w| w[1] - w[0] <= 1));
    }
}
