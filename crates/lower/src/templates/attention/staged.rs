//! The Hopper attention kernel's output through shared memory: each consumer writes its 64
//! rows of `O / l` (rounded to the output's type) into its own rows of the unit's Q tile,
//! which no product reads any more, then its threads apply the group's epilogue to 8
//! consecutive elements of a row at a time and store them with one 16-byte copy.
//!
//! Stored straight from the accumulators, every thread writes its fragment's scattered
//! 2-byte values (64 stores at head dim 128, each a quarter of a 32-byte sector); staged, a
//! warp's copies are whole rows. The Q tile is the 128-byte-swizzled layout TMA filled
//! ([`Operand::smem_tile`] under `Swizzle<3,3,3>`), so a warp's fragment writes and a
//! quarter-warp's 16-byte reads each touch 32 distinct banks, and the 8 elements of an
//! aligned chunk of a row stay together under the swizzle.
//!
//! It takes no extra shared memory: the consumer's Q rows hold `64 x d` elements and the
//! output tile `64 x dv`, so it is taken where `dv <= d` and Q is K-major (a row's elements
//! contiguous), and not where the prologue reads a tensor per score (there the MLIR
//! backend's kernel had no registers to spare for it). A row's 16-byte chunks are spread
//! over the warpgroup's 128 threads, a whole number of rows a step: where `dv / 8` does not
//! divide 128 (head dims 40, 80, 96, 160) the tile is staged in whole 64-column tiles and
//! the threads of the chunks past `dv` store nothing; 24 chunks a row (192 columns) are
//! three passes of 8.

use super::super::tma::Operand;
use super::AttPlan;
use crate::lower::*;
use crate::templates::matmul_mma::vector_layout;
use irc_ir::ValueId;
use irc_kir::{self as kir, Arg, Expr, Frag, Func, IdxOp, Intrinsic, Space, Stmt, Ty};
use irc_layout::{Layout, Swizzle};

/// Where the staged output goes.
pub(super) struct Staged {
    /// Each root's (or the stored view's) 8-element vector view of its output:
    /// `(vector, row, column / 8, batch)`.
    globals: Vec<String>,
    /// Per root, when several: registers for its 8 values (empty for one root, whose values
    /// are computed in place in the tile).
    regs: Vec<String>,
    /// The Q ring as flat elements, and as 8-element vectors.
    flat: String,
    vec8: String,
    /// A Q tile's `(row, k)` layout before the swizzle.
    tile: Layout,
    /// Per column chunk `j` (columns `8 j ..`): `(lo, hi)` with the swizzled offset of a
    /// thread's value v in the chunk equal to its value 0's in chunk 0 xor `lo`, plus `hi`
    /// and `deltas[v]` ([`chunk_terms`]).
    chunks: Vec<(i64, i64)>,
    deltas: [i64; 4],
    /// Per step `l` of the copies (rows `l * 128 / (dv/8)` further): what the swizzled
    /// offset of any element adds, or `None` where that is not one constant (steps of fewer
    /// rows than the swizzle's period, head dim 256: the offset is computed at that row).
    row_steps: Vec<Option<i64>>,
    tile_elems: u64,
    /// The staged columns: `dv`, or its 64-column tiles where `dv / 8` does not divide 128.
    width: u64,
    /// The chunks of 8 columns a pass covers (`width / 8`, or 8 at width 192: three
    /// passes): 128 / `cols` rows a step.
    cols: u64,
}

impl Builder<'_, '_> {
    /// The staged output's tensors, or `None` where it cannot be taken: Q not K-major, `dv`
    /// over `d`, a root of another type than the output's, or an output whose columns are
    /// not contiguous in 16-byte chunks.
    pub(super) fn att_staged_plan(
        &mut self,
        p: &AttPlan,
        oq: &Operand,
        q_ring: &str,
        q_tiles: u64,
    ) -> R<Option<Staged>> {
        let width = match p.dv {
            dv if dv % 8 == 0 && 128 % (dv / 8) == 0 => dv,
            dv => dv.next_multiple_of(64),
        };
        // The staged columns fit the tile's (`d`'s 64-column tiles) and spread over whole rows.
        let cols = gcd(width / 8, 128);
        if !oq.k_major || p.dv > p.d || width > oq.kext || cols < 2 {
            return Ok(None);
        }
        // A prologue that reads a tensor per score (a mask or bias) keeps its addresses in
        // registers across the key loop; beside them the staged output's per-thread offsets
        // spilled (the MLIR backend's kernel of `tests/gpu/attention_bf16_d128.ir`), so such
        // kernels store from their fragments.
        if p.prologue
            .root
            .is_some_and(|r| self.reads_memory(r, p.s_mm))
        {
            return Ok(None);
        }
        let dt = p.dt;
        // The layouts the scalar path stores through: the view's (its buffer's index of each
        // coordinate) or each root's own.
        if !p.viewed && p.roots.iter().any(|&r| self.ty(r).dtype != dt) {
            return Ok(None);
        }
        let mut targets: Vec<(Space, Layout)> = vec![];
        for out in &p.outs {
            let Some(t) = self.kernel.tensors.iter().find(|t| &t.name == out) else {
                return Ok(None);
            };
            targets.push((t.space.clone(), t.layout.clone()));
        }
        let mut globals = vec![];
        for (space, layout) in targets {
            match vector_layout(&layout, 1, 8) {
                Some(l) if kir::is_vector_operand(&l, 8, layout.rank()) => {
                    globals.push(self.tensor(space, dt, l));
                }
                _ => return Ok(None),
            }
        }
        let regs = match p.roots.len() {
            _ if p.viewed => vec![],
            1 => vec![],
            n => (0..n)
                .map(|_| {
                    let l = Layout::int(8, 1).map_err(internal)?;
                    Ok(self.tensor(Space::Registers, dt, l))
                })
                .collect::<R<_>>()?,
        };
        let n = (q_tiles * oq.tile_elems()) as i64;
        let flat = self.tensor(
            Space::View(q_ring.to_string()),
            dt,
            Layout::int(n, 1).map_err(internal)?,
        );
        let vec8 = self.tensor(
            Space::View(q_ring.to_string()),
            dt,
            Layout::flat(&[8, n / 8], &[1, 8]).map_err(internal)?,
        );
        let tile = oq.smem_tile().map_err(internal)?;
        let Some((chunks, deltas)) = chunk_terms(&tile, width, oq.rows)? else {
            return Ok(None);
        };
        let Some(row_steps) = row_steps(&tile, width, cols, oq.rows)? else {
            return Ok(None);
        };
        Ok(Some(Staged {
            chunks,
            deltas,
            row_steps,
            globals,
            regs,
            flat,
            vec8,
            tile,
            tile_elems: oq.tile_elems(),
            width,
            cols,
        }))
    }

    /// Whether computing `v` from the scores `s` loads anything from memory: a graph input, or
    /// a value another kernel stored (each value of the prologue's DAG visited once).
    fn reads_memory(&self, v: ValueId, s: ValueId) -> bool {
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![v];
        while let Some(x) = stack.pop() {
            if x == s || !seen.insert(x) {
                continue;
            }
            if self.l.buffer_of.contains_key(&x) {
                return true;
            }
            match self.def(x) {
                None => return true,
                Some(i) => stack.extend(i.operands.iter().copied()),
            }
        }
        false
    }

    /// Consumer `c`'s output of the unit from query row `q0` of batch entry `bi` (`bq` rows a
    /// unit): `acc_o` (`[4, dv / 8]`) times each row's `1 / l` into its rows of Q tile `qb`,
    /// a barrier of the consumer's warpgroup (named barrier `bar`), the epilogue and 16-byte
    /// copies, a barrier, and a proxy fence so TMA may refill the tile.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn att_store_staged(
        &mut self,
        p: &AttPlan,
        st: &Staged,
        acc_o: &str,
        inv: &[Expr],
        rc: &[(Expr, Expr)],
        (qb, c, bar): (&Expr, &Expr, &Expr),
        (q0, bi): (&Expr, &Expr),
        bq: u64,
    ) -> R<()> {
        let sw = Swizzle::new(3, 3, 3).map_err(internal)?;
        let dv = st.width;
        let base = self.let_("ob", Ty::Idx, mul(qb.clone(), int(st.tile_elems)));
        let row0 = self.let_("or", Ty::Idx, mul(c.clone(), Expr::Int(64)));
        let at = |s: &mut Self, row: Expr, col: Expr| -> R<Expr> {
            let off = kir::swizzled_offset_expr(&sw, &st.tile, &[row, col]).map_err(internal)?;
            Ok(s.let_("oo", Ty::Idx, add(base.clone(), off)))
        };
        // Value 0's swizzled offset at column chunk 0 (`rc`'s rows count from the block's
        // first: consumer c's are 64 c ..); value v of chunk j is at that offset xor `lo_j`,
        // plus `hi_j` and `delta_v` (`Staged::chunks`), one xor a store.
        let (row, col) = &rc[0];
        let first = at(self, row.clone(), col.clone())?;
        for (j, (lo, hi)) in st.chunks.iter().enumerate() {
            let x = self.let_(
                "ox",
                Ty::Idx,
                Expr::idx(IdxOp::Xor, first.clone(), Expr::Int(*lo)),
            );
            for (val, delta) in st.deltas.iter().enumerate() {
                let off = add(x.clone(), Expr::Int(hi + delta));
                let o = Expr::call(
                    Func::Mul,
                    vec![
                        Expr::load(acc_o, vec![int(val as u64), int(j as u64)]),
                        inv[val / 2].clone(),
                    ],
                );
                self.out.push(Stmt::Store {
                    tensor: st.flat.clone(),
                    coord: vec![off],
                    value: Expr::cast(p.dt, o),
                });
            }
        }
        let sync = Stmt::Intrinsic {
            op: Intrinsic::BarSync,
            args: vec![Arg::Expr(bar.clone()), Arg::Expr(Expr::Int(128))],
        };
        self.out.push(sync.clone());
        // 64 rows x `cols` chunks a pass over the warpgroup's 128 threads: the thread's chunk
        // column and first row, then `128 / cols` rows further each step, whose offsets add
        // `Staged::row_steps` (or are computed at that row).
        let t = self.let_(
            "ot",
            Ty::Idx,
            Expr::idx(IdxOp::Rem, bx(irc_kir::Builtin::TidX), Expr::Int(128)),
        );
        let cols = st.cols as i64;
        let r = self.let_(
            "orr",
            Ty::Idx,
            Expr::idx(IdxOp::Div, t.clone(), Expr::Int(cols)),
        );
        let c0 = self.let_("oc", Ty::Idx, Expr::idx(IdxOp::Rem, t, Expr::Int(cols)));
        let row = self.let_("ow", Ty::Idx, add(row0.clone(), r));
        let gq0 = self.let_("oq", Ty::Idx, add(q0.clone(), row.clone()));
        for pass in 0..dv / 8 / st.cols {
            let c8 = match pass {
                0 => c0.clone(),
                _ => self.let_("oc", Ty::Idx, add(c0.clone(), int(pass * st.cols))),
            };
            self.att_store_pass(p, st, (&row, &c8, &gq0), bi, bq, &at)?;
        }
        self.out.push(sync);
        self.out.push(Stmt::Intrinsic {
            op: Intrinsic::FenceProxyAsync,
            args: vec![],
        });
        Ok(())
    }

    /// One pass of the staged copies: the thread's chunk `c8` of its row, then `128 / cols`
    /// rows further each step (`Staged::row_steps`).
    fn att_store_pass(
        &mut self,
        p: &AttPlan,
        st: &Staged,
        (row, c8, gq0): (&Expr, &Expr, &Expr),
        bi: &Expr,
        bq: u64,
        at: &dyn Fn(&mut Self, Expr, Expr) -> R<Expr>,
    ) -> R<()> {
        let dv = st.width;
        let off0 = at(self, row.clone(), mul(c8.clone(), Expr::Int(8)))?;
        for (l, &step) in st.row_steps.iter().enumerate() {
            let rl = l as u64 * 128 / st.cols;
            let off = match step {
                Some(step) => add(off0.clone(), Expr::Int(step)),
                None => at(
                    self,
                    add(row.clone(), int(rl)),
                    mul(c8.clone(), Expr::Int(8)),
                )?,
            };
            let gq = add(gq0.clone(), int(rl));
            // Rows past the end only where the query tiles pass it; chunks past `dv` where
            // the tile is staged wider.
            let mut guards = vec![];
            if p.sq % bq != 0 {
                guards.push(lt(gq.clone(), int(p.sq)));
            }
            if dv > p.dv {
                guards.push(lt(c8.clone(), int(p.dv / 8)));
            }
            match guards
                .into_iter()
                .reduce(|a, b| Expr::idx(IdxOp::And, a, b))
            {
                None => self.att_chunk(p, st, &off, (&gq, c8, bi))?,
                Some(cond) => self.if_(cond, |s| s.att_chunk(p, st, &off, (&gq, c8, bi)))?,
            }
        }
        Ok(())
    }

    /// One chunk of 8 output elements at `off` in the tile (output row `gq`, columns
    /// `8 c8 ..`): the epilogue's roots computed from them, then one 16-byte copy per root.
    fn att_chunk(
        &mut self,
        p: &AttPlan,
        st: &Staged,
        off: &Expr,
        (gq, c8, bi): (&Expr, &Expr, &Expr),
    ) -> R<()> {
        let mm = p.o_mm;
        let roots: &[ValueId] = if p.viewed { &[] } else { &p.roots };
        let in_place = st.regs.is_empty();
        if roots.iter().any(|&r| r != mm) {
            for z in 0..8 {
                let elem = add(off.clone(), Expr::Int(z));
                let gd = add(mul(c8.clone(), Expr::Int(8)), Expr::Int(z));
                self.coord = vec![gq.clone(), gd, bi.clone()];
                let staged = Expr::load(&st.flat, vec![elem.clone()]);
                let targets: Vec<(String, Vec<Expr>)> = roots
                    .iter()
                    .enumerate()
                    .map(|(k, _)| match in_place {
                        true => (st.flat.clone(), vec![elem.clone()]),
                        false => (st.regs[k].clone(), vec![Expr::Int(z)]),
                    })
                    .collect();
                self.roots_into(mm, staged, &p.pv.access_c, roots, &targets)?;
            }
        }
        let at8 = self.let_(
            "o8",
            Ty::Idx,
            Expr::idx(IdxOp::Div, off.clone(), Expr::Int(8)),
        );
        for (k, g) in st.globals.iter().enumerate() {
            let from_tile = p.viewed || in_place || roots[k] == mm;
            let src = match from_tile {
                true => Frag {
                    tensor: st.vec8.clone(),
                    at: vec![at8.clone()],
                },
                false => Frag {
                    tensor: st.regs[k].clone(),
                    at: vec![],
                },
            };
            self.out.push(Stmt::Copy {
                width: 8,
                dst: Frag {
                    tensor: g.clone(),
                    at: vec![gq.clone(), c8.clone(), bi.clone()],
                },
                src,
                hint: irc_kir::CacheHint::Normal,
            });
        }
        Ok(())
    }
}

/// Where each accumulator value of a thread lands in the swizzled tile, from its value 0 in
/// column chunk 0: value `v` of chunk `j` at `(sw(L(row_0, col_0)) ^ lo_j) + hi_j + delta_v`,
/// `L(0, 8j)` split into `hi_j`, its multiple of the swizzle's period, and `lo_j`; the rows
/// and columns are the accumulator atom's (`mma_m16n8k16_c` in 16-row warp slabs, as
/// `Builder::att_coords` places them). The identity is checked for every lane, slab, value
/// and chunk (an xor confined to the bits a swizzle writes, off those it reads, commutes with
/// it; the deltas must be the same for every thread): `None` where it does not hold.
type ChunkTerms = (Vec<(i64, i64)>, [i64; 4]);
fn chunk_terms(tile: &Layout, dv: u64, rows: u64) -> R<Option<ChunkTerms>> {
    use irc_layout::IntTuple;
    let sw = Swizzle::new(3, 3, 3).map_err(internal)?;
    let period = 1i64 << (sw.bits() + sw.base() + sw.shift().max(0) as u32);
    let swz = |r: i64, k: i64| -> R<i64> {
        let x = tile.crd2idx(&IntTuple::ints(&[r, k])).map_err(internal)?;
        Ok(sw.apply(x))
    };
    let atom = irc_layout::mma_m16n8k16_c().map_err(internal)?;
    let place = |slab: i64, lane: i64, v: i64| -> R<(i64, i64)> {
        let ci = atom
            .layout()
            .crd2idx(&IntTuple::ints(&[lane, v]))
            .map_err(internal)?;
        Ok((slab * 16 + ci % 16, ci / 16))
    };
    let lo_hi: Vec<(i64, i64)> = (0..(dv / 8) as i64)
        .map(|j| {
            let x = tile
                .crd2idx(&IntTuple::ints(&[0, 8 * j]))
                .map_err(internal)?;
            Ok((x.rem_euclid(period), x - x.rem_euclid(period)))
        })
        .collect::<R<_>>()?;
    let mut deltas: Option<[i64; 4]> = None;
    for slab in 0..(rows / 16) as i64 {
        for lane in 0..32 {
            let (r0, c0) = place(slab, lane, 0)?;
            let b = swz(r0, c0)?;
            let mut d = [0; 4];
            for (v, dl) in d.iter_mut().enumerate() {
                let (r, c) = place(slab, lane, v as i64)?;
                *dl = swz(r, c)? - b;
            }
            if *deltas.get_or_insert(d) != d {
                return Ok(None);
            }
            for (j, &(lo, hi)) in lo_hi.iter().enumerate() {
                for (v, &dl) in d.iter().enumerate() {
                    let (r, c) = place(slab, lane, v as i64)?;
                    if swz(r, 8 * j as i64 + c)? != (b ^ lo) + hi + dl {
                        return Ok(None);
                    }
                }
            }
        }
    }
    Ok(deltas.map(|d| (lo_hi, d)))
}

/// The offsets the copies' steps add: step `l` reads rows `rl = l * 128 / cols` below the
/// thread's first, and `sw(L(r + rl, k)) = sw(L(r, k)) + L(rl, 0)` for every row and column
/// of the tile where `L(rl, 0)` is a multiple of the swizzle's period (else that step's
/// offset is `None`: computed at its row); `None` unless each aligned chunk of 8 columns of a
/// row is 8 consecutive elements (both checked here at every offset).
fn row_steps(tile: &Layout, dv: u64, cols: u64, rows: u64) -> R<Option<Vec<Option<i64>>>> {
    use irc_layout::IntTuple;
    let sw = Swizzle::new(3, 3, 3).map_err(internal)?;
    let off = |r: i64, k: i64| tile.crd2idx(&IntTuple::ints(&[r, k])).map_err(internal);
    // A copy's 8 elements are consecutive.
    for r in 0..rows as i64 {
        for k in 0..dv as i64 {
            if sw.apply(off(r, k)?) != sw.apply(off(r, k - k % 8)?) + k % 8 {
                return Ok(None);
            }
        }
    }
    let per = (128 / cols) as i64;
    let mut out = vec![];
    for l in 0..(64 / per) {
        let rl = l * per;
        let step = off(rl, 0)?;
        let mut additive = true;
        'rows: for r in 0..rows as i64 - rl {
            for k in 0..dv as i64 {
                if sw.apply(off(r + rl, k)?) != sw.apply(off(r, k)?) + step {
                    additive = false;
                    break 'rows;
                }
            }
        }
        out.push(additive.then_some(step));
    }
    Ok(Some(out))
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q_tile(rows: u64, kext: u64, k_major: bool) -> Layout {
        Operand::tile_only(rows, kext, k_major).smem_tile().unwrap()
    }

    /// The staged output's offset decompositions hold for every Q tile the Hopper kernel
    /// stages through (K-major, 2 or 3 consumers' rows, head dims 32 to 256), so the fast
    /// path is taken there; on an MN-major tile a row's 8 columns are not contiguous and the
    /// copies are refused.
    #[test]
    fn every_k_major_q_tile_takes_the_staged_output() {
        for rows in [128, 192] {
            let widths = [
                (64, 32),
                (64, 64),
                (128, 64),
                (128, 128),
                (192, 192),
                (256, 256),
            ];
            for (kext, dv) in widths {
                let tile = q_tile(rows, kext, true);
                let (chunks, deltas) = chunk_terms(&tile, dv, rows).ok().flatten().unwrap();
                assert_eq!(chunks.len() as u64, dv / 8);
                // Value 1 is the next column, values 2 and 3 eight rows down.
                assert_eq!(deltas[1] - deltas[0], 1, "{rows}x{kext}");
                assert_eq!(deltas[3] - deltas[2], 1, "{rows}x{kext}");
                // 192 columns: three passes of 8 chunks, 16 rows a step.
                let cols = gcd(dv / 8, 128);
                assert_eq!(cols, if dv == 192 { 8 } else { dv / 8 });
                let steps = row_steps(&tile, dv, cols, rows).ok().flatten().unwrap();
                assert_eq!(steps.len() as u64, 64 / (128 / cols));
                // Steps of 8 rows or more add a constant; head dim 256's steps of 4 rows
                // alternate: every other one is a whole swizzle period.
                let constant: Vec<bool> = steps.iter().map(Option::is_some).collect();
                match dv {
                    256 => assert_eq!(constant, (0..16).map(|l| l % 2 == 0).collect::<Vec<_>>()),
                    _ => assert!(constant.iter().all(|&c| c), "{rows}x{kext}"),
                }
            }
        }
        let mn = q_tile(128, 64, false);
        assert!(row_steps(&mn, 64, 8, 128).ok().flatten().is_none());
    }
}
