//! The order in which the persistent attention kernel's blocks take their work units when the
//! units differ in length (a causal mask: query tile `t` reads `t + 1` key tiles of its own
//! size).
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
