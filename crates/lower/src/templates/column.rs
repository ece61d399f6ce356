//! Split column reductions: a reduction along a strided axis with few outputs (a
//! vector-matrix product `x·B` with B N-contiguous; the outputs of a leading-axis reduction
//! too few for a thread each) spread over the whole GPU.
//!
//! A block of 256 threads is 8 lanes of outputs by 32 groups along the reduced axis: lane `l`
//! owns `w` adjacent outputs (a 16-byte vector where the layouts allow, so 8 lanes read 128
//! contiguous bytes of each row), group `g` the rows `g, g + 32, ...` of the block's part of
//! the axis. The groups' accumulators meet in shared memory and 8·w threads sum them, each
//! over the 32 groups in order. When the output tiles alone leave SMs idle, the axis is also
//! split across `ks` blocks: each writes its partial sums to a temp buffer `[ks, outs]`, and
//! the `ks` partials of each output are added in a fixed order (deterministic) before the
//! output is finished — by the last block of a tile to arrive where that merge is short
//! (`column_split_one`, one launch), else by a second kernel. With `ks = 1` the kernel
//! finishes the outputs itself.

use crate::lower::*;
use irc_ir::DType;
use irc_kir::{self as kir, Builtin, Expr, Func, IdxOp, ReduceOp, Space, Stmt, Ty};
use irc_layout::Layout;

/// Lanes of outputs and groups along the reduced axis of a block.
const LANES: u64 = 8;
const GROUPS: u64 = 32;

/// The reduction `column_split` builds: `outs` outputs over an axis of `k`, `w` outputs per
/// vector, accumulated in `acc_t` with `op` from `init`.
pub(crate) struct ColumnSplit {
    pub(crate) outs: u64,
    pub(crate) k: u64,
    pub(crate) w: u64,
    pub(crate) acc_t: DType,
    pub(crate) op: ReduceOp,
    pub(crate) init: f64,
}

/// The element function: `(builder, output index, index along the axis)` → the value to
/// accumulate, read at the builder's coordinate `[output, axis]` (a vector loop's).
pub(crate) type Elem<'a> = dyn Fn(&mut Builder<'_, '_>, Expr, Expr) -> R<Expr> + 'a;

impl Builder<'_, '_> {
    /// The split column reduction (module docs); `finish(o, value)` stores output `o`.
    pub(crate) fn column_split(
        &mut self,
        inst_index: usize,
        c: ColumnSplit,
        elem: &Elem<'_>,
        finish: impl FnOnce(&mut Self, Expr, Expr) -> R<()>,
    ) -> R<()> {
        let vecs = c.outs.div_ceil(c.w);
        let tiles = vecs.div_ceil(LANES);
        // Split the axis until about 4 blocks per SM, each group at least 4 rows of it.
        let sms = u64::from(self.l.options.target.sms);
        let most = c.k.div_ceil(4 * GROUPS).max(1);
        let ks = (4 * sms).div_ceil(tiles).clamp(1, most);
        let kc = c.k.div_ceil(ks).div_ceil(GROUPS) * GROUPS;
        let ks = c.k.div_ceil(kc);
        if ks == 1 {
            let sums = self.column_partial(&c, elem, tiles, kc)?;
            return self.column_sums(&c, sums, |b, o, v| finish(b, o, v));
        }
        // One launch where the last block's merge is short: each of its warps adds at most
        // 4 rounds of partials (a round: 32 partials of one output, one load per lane), about
        // the cost of the second launch it saves. Measured on the H100 (`bench/gpu/NOTES.md`,
        // run 90): colmax_64's 64 outputs of 528 partials (136 rounds a warp) took 0.081 ms
        // in one launch against 0.0645 in two.
        let rounds = (LANES * c.w).div_ceil(LANES * GROUPS / 32) * ks.div_ceil(32);
        if rounds <= 4 {
            return self.column_split_one(c, elem, (tiles, kc, ks), finish);
        }
        let (mut p, name, part) = self.partials_kernel(inst_index, c.outs, ks, c.acc_t)?;
        let sums = p.column_partial(&c, elem, tiles, kc)?;
        p.column_sums(&c, sums, |b, o, v| {
            b.out.push(Stmt::Store {
                tensor: part,
                coord: vec![o, bx(Builtin::BidY)],
                value: v,
            });
            Ok(())
        })?;
        p.temps.clear();
        self.pre.push(p.finish());
        self.sum_partials(&name, c.outs, ks, c.acc_t, c.op, c.init, finish)
    }

    /// The split column reduction in one launch: each of the `ks` blocks of a tile of
    /// outputs writes its partial sums to `[ks, outs]`, arrives on the tile's counter, and
    /// the last to arrive adds the tile's partials (a warp per output: its lanes add every
    /// 32nd partial in order, then the warp's tree — the same order whichever block is last)
    /// and finishes the outputs.
    fn column_split_one(
        &mut self,
        c: ColumnSplit,
        elem: &Elem<'_>,
        (tiles, kc, ks): (u64, u64, u64),
        finish: impl FnOnce(&mut Self, Expr, Expr) -> R<()>,
    ) -> R<()> {
        let name = format!("{}_partials", self.kernel.name);
        self.temps.push(kir::BufferDecl {
            name: name.clone(),
            dtype: c.acc_t,
            shape: vec![ks, c.outs],
            kind: kir::BufferKind::Temp,
            tensor_map: None,
        });
        let pp = self.param(&name);
        let part = self.tensor(Space::Global(pp), c.acc_t, partials_layout(c.outs, ks)?);
        let sums = self.column_partial(&c, elem, tiles, kc)?;
        let p2 = part.clone();
        self.column_sums(&c, sums, |b, o, v| {
            b.out.push(Stmt::Store {
                tensor: p2,
                coord: vec![o, bx(Builtin::BidY)],
                value: v,
            });
            Ok(())
        })?;
        let (counter, old) = self.arrival_counters("arrivals", tiles)?;
        let tid = bx(Builtin::TidX);
        let span = LANES * c.w;
        let warps = LANES * GROUPS / 32;
        let t2 = tid.clone();
        self.when_last(
            (&counter, vec![bx(Builtin::BidX)]),
            ks,
            (&old, 0),
            &tid,
            &Stmt::Sync,
            move |b| {
                let lane = b.let_("lane", Ty::Idx, Expr::idx(IdxOp::Rem, t2.clone(), int(32)));
                let warp = Expr::idx(IdxOp::Div, t2, int(32));
                b.for_("oo", warp, int(span), int(warps), false, |b, oo| {
                    let o = b.let_("o", Ty::Idx, add(mul(bx(Builtin::BidX), int(span)), oo));
                    // The same `o` in the whole warp: every lane reaches the tree.
                    b.if_(lt(o.clone(), int(c.outs)), |b| {
                        let acc = b.accumulator(c.acc_t, c.init);
                        let o2 = o.clone();
                        b.for_("s", lane.clone(), int(ks), Expr::Int(32), false, |b, s| {
                            b.combine(&acc, c.op, Expr::load(&part, vec![o2, s]));
                            Ok(())
                        })?;
                        let var = b.fresh("tree");
                        b.out.push(Stmt::WarpReduce {
                            var: var.clone(),
                            ty: Ty::Elem(c.acc_t),
                            op: c.op,
                            width: 32,
                            value: Expr::var(&acc),
                        });
                        let first = Expr::idx(IdxOp::Eq, lane.clone(), Expr::Int(0));
                        b.if_(first, |b| finish(b, o, Expr::Var(var)))
                    })
                })
            },
        )
    }

    /// The second kernel of a split reduction: the `parts` partials of output `o` in the temp
    /// buffer `name` (`[parts, outs]`, row-major) combined in a fixed order (the same result
    /// every run), then `finish(o, value)`. A thread per output adds them in order; for at
    /// most 8192 outputs of at least 64 partials, a warp per output (its lanes add strided
    /// partials in order, then the warp's shuffle tree), so no thread waits on a long chain
    /// of loads (measured: colmax_64, 521 partials, 0.076 -> 0.069 ms).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn sum_partials(
        &mut self,
        name: &str,
        outs: u64,
        parts: u64,
        acc_t: DType,
        op: ReduceOp,
        init: f64,
        finish: impl FnOnce(&mut Self, Expr, Expr) -> R<()>,
    ) -> R<()> {
        let layout = partials_layout(outs, parts)?;
        let pp = self.param(name);
        let part = self.tensor(Space::Global(pp), acc_t, layout);
        if parts < 64 || outs > 8192 {
            // Many outputs or few partials: a thread per output, adjacent threads reading
            // adjacent outputs of each partial row.
            self.kernel.block = [THREADS, 1, 1];
            self.kernel.grid = [
                outs.div_ceil(u64::from(THREADS)).clamp(1, MAX_BLOCKS) as u32,
                1,
                1,
            ];
            let start = add(
                mul(bx(Builtin::BidX), bx(Builtin::NtidX)),
                bx(Builtin::TidX),
            );
            let step = mul(bx(Builtin::NctaidX), bx(Builtin::NtidX));
            return self.for_("o", start, int(outs), step, false, |b, o| {
                let acc = b.accumulator(acc_t, init);
                let o2 = o.clone();
                b.for_(
                    "s",
                    Expr::Int(0),
                    int(parts),
                    Expr::Int(1),
                    false,
                    |b, s| {
                        b.combine(&acc, op, Expr::load(&part, vec![o2, s]));
                        Ok(())
                    },
                )?;
                finish(b, o, Expr::var(&acc))
            });
        }
        // Few outputs of many partials: a warp per output (`lane_group_rows` with whole
        // warps: a uniform loop, so every lane reaches the shuffle tree).
        self.lane_group_rows(outs, 32, u64::from(THREADS) / 32, |b, o, _, lane| {
            let acc = b.accumulator(acc_t, init);
            let o2 = o.clone();
            b.for_(
                "s",
                lane.clone(),
                int(parts),
                Expr::Int(32),
                false,
                |b, s| {
                    b.combine(&acc, op, Expr::load(&part, vec![o2, s]));
                    Ok(())
                },
            )?;
            let var = b.fresh("tree");
            b.out.push(Stmt::WarpReduce {
                var: var.clone(),
                ty: Ty::Elem(acc_t),
                op,
                width: 32,
                value: Expr::var(&acc),
            });
            let first = Expr::idx(IdxOp::Eq, lane, Expr::Int(0));
            b.if_(first, |b| finish(b, o, Expr::Var(var)))
        })
    }

    /// The first kernel's grid, block and accumulation: returns the shared tile of the
    /// groups' accumulators `[LANES·w, GROUPS]`, filled and synchronized.
    fn column_partial(
        &mut self,
        c: &ColumnSplit,
        elem: &Elem<'_>,
        tiles: u64,
        kc: u64,
    ) -> R<String> {
        let (w, vecs) = (c.w, c.outs.div_ceil(c.w));
        let ks = c.k.div_ceil(kc);
        self.kernel.block = [(LANES * GROUPS) as u32, 1, 1];
        self.kernel.grid = [tiles.min(u32::MAX as u64) as u32, ks as u32, 1];
        let tid = bx(Builtin::TidX);
        let lane = self.let_(
            "lane",
            Ty::Idx,
            Expr::idx(IdxOp::Rem, tid.clone(), int(LANES)),
        );
        let grp = self.let_("grp", Ty::Idx, Expr::idx(IdxOp::Div, tid, int(LANES)));
        let ob = self.let_(
            "ob",
            Ty::Idx,
            add(mul(bx(Builtin::BidX), int(LANES)), lane.clone()),
        );
        let k0 = self.let_("k0", Ty::Idx, mul(bx(Builtin::BidY), int(kc)));
        let acc = self.tensor(
            Space::Registers,
            c.acc_t,
            Layout::int(w as i64, 1).map_err(internal)?,
        );
        self.for_("v", Expr::Int(0), int(w), Expr::Int(1), true, |b, v| {
            b.out.push(Stmt::Store {
                tensor: acc.clone(),
                coord: vec![v],
                value: lit(c.acc_t, c.init),
            });
            Ok(())
        })?;
        let combine = match c.op {
            ReduceOp::Sum => Func::Add,
            ReduceOp::Max => Func::Max,
            ReduceOp::Min => Func::Min,
        };
        let valid = lt(ob.clone(), int(vecs));
        // Four rows per group in flight: `kk = base + 32·u + grp`. Steps whose rows all exist
        // load without a guard, so that the four loads issue before the first is used (a load
        // under its own branch waits for the previous one's use); the block's last partial
        // step, and any step past K, are guarded row by row.
        let unroll = (kc / GROUPS).clamp(1, 4);
        let step = GROUPS * unroll;
        let steps = |b: &mut Self, kb: Expr, guard: bool| -> R<()> {
            b.for_(
                "u",
                Expr::Int(0),
                int(unroll),
                Expr::Int(1),
                true,
                |b, u| {
                    let kk = b.let_(
                        "kk",
                        Ty::Idx,
                        add(add(kb.clone(), mul(u, int(GROUPS))), grp.clone()),
                    );
                    let kv = b.let_("kv", Ty::Idx, add(k0.clone(), kk.clone()));
                    let accumulate = |b: &mut Self| {
                        b.vector_loop(w, vec![ob.clone(), kv.clone()], |b, ox, v| {
                            b.coord = vec![ox.clone(), kv.clone()];
                            let e = elem(b, ox, kv.clone())?;
                            let prev = Expr::load(&acc, vec![v.clone()]);
                            b.out.push(Stmt::Store {
                                tensor: acc.clone(),
                                coord: vec![v],
                                value: Expr::call(combine, vec![prev, e]),
                            });
                            Ok(())
                        })
                    };
                    if guard {
                        let cond = Expr::idx(IdxOp::And, lt(kv.clone(), int(c.k)), lt(kk, int(kc)));
                        b.if_(cond, accumulate)
                    } else {
                        accumulate(b)
                    }
                },
            )
        };
        let whole = kc / step * step;
        self.if_(valid, |b| {
            if whole > 0 {
                b.for_("kb", Expr::Int(0), int(whole), int(step), false, |b, kb| {
                    // Every row of the step exists unless this is the last block's tail.
                    let last = add(add(k0.clone(), kb.clone()), int(step - 1));
                    let inside = lt(last, int(c.k));
                    let fast = b.block(|b| steps(b, kb.clone(), false))?;
                    let slow = b.block(|b| steps(b, kb.clone(), true))?;
                    b.out.push(Stmt::If {
                        cond: inside,
                        body: fast,
                        orelse: slow,
                    });
                    Ok(())
                })?;
            }
            if whole < kc {
                steps(b, int(whole), true)?;
            }
            Ok(())
        })?;
        // Each thread's w accumulators to the shared tile, at (lane·w + v, group).
        let tile = self.tensor(
            Space::Shared,
            c.acc_t,
            Layout::flat(
                &[(LANES * w) as i64, GROUPS as i64],
                &[1, (LANES * w) as i64],
            )
            .map_err(internal)?,
        );
        self.for_("v", Expr::Int(0), int(w), Expr::Int(1), true, |b, v| {
            b.out.push(Stmt::Store {
                tensor: tile.clone(),
                coord: vec![add(mul(lane, int(w)), v.clone()), grp],
                value: Expr::load(&acc, vec![v]),
            });
            Ok(())
        })?;
        self.out.push(Stmt::Sync);
        Ok(tile)
    }

    /// Threads `t < LANES·w` sum column `t` of the shared tile over the groups in order and
    /// give output `bid.x·LANES·w + t` (when it exists) to `put`.
    fn column_sums(
        &mut self,
        c: &ColumnSplit,
        tile: String,
        put: impl FnOnce(&mut Self, Expr, Expr) -> R<()>,
    ) -> R<()> {
        let span = LANES * c.w;
        let t = bx(Builtin::TidX);
        let o = add(mul(bx(Builtin::BidX), int(span)), t.clone());
        let cond = Expr::idx(
            IdxOp::And,
            lt(t.clone(), int(span)),
            lt(o.clone(), int(c.outs)),
        );
        self.if_(cond, |b| {
            let o = b.let_("o", Ty::Idx, o);
            let acc = b.accumulator(c.acc_t, c.init);
            b.for_(
                "g",
                Expr::Int(0),
                int(GROUPS),
                Expr::Int(1),
                false,
                |b, g| {
                    let x = Expr::load(&tile, vec![t, g]);
                    b.combine(&acc, c.op, x);
                    Ok(())
                },
            )?;
            put(b, o, Expr::var(&acc))
        })
    }
}

impl<'l, 'g> Builder<'l, 'g> {
    /// The first kernel of a split reduction: a builder for `<kernel>_partial`, the temp buffer
    /// `<kernel>_partials` of `[parts, outs]` (`acc_t`, row-major; added to both kernels), and
    /// the partial kernel's tensor of it, indexed `[output, part]`.
    pub(crate) fn partials_kernel(
        &mut self,
        inst_index: usize,
        outs: u64,
        parts: u64,
        acc_t: DType,
    ) -> R<(Builder<'l, 'g>, String, String)> {
        let name = format!("{}_partials", self.kernel.name);
        let decl = kir::BufferDecl {
            name: name.clone(),
            dtype: acc_t,
            shape: vec![parts, outs],
            kind: kir::BufferKind::Temp,
            tensor_map: None,
        };
        self.temps.push(decl.clone());
        let mut p = Builder::new(self.l, format!("{}_partial", self.kernel.name), inst_index);
        p.temps.push(decl);
        let layout = partials_layout(outs, parts)?;
        let pp = p.param(&name);
        let part = p.tensor(Space::Global(pp), acc_t, layout);
        Ok((p, name, part))
    }
}

/// `(outs, parts):(1, outs)`: the partials buffer `[parts, outs]` indexed `[output, part]`.
pub(crate) fn partials_layout(outs: u64, parts: u64) -> R<Layout> {
    Layout::flat(&[outs as i64, parts as i64], &[1, outs as i64]).map_err(internal)
}
