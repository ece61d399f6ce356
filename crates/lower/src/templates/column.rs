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
//! the last block of a tile to arrive reads the tile's `ks` partials as a column reduction of
//! its own (`column_split_one`: the same strip, over the partials) and finishes the outputs —
//! one launch, and a fixed order of additions whichever block is last (deterministic). With
//! `ks = 1` the kernel finishes the outputs itself.

use super::vector::vector_width;
use crate::lower::*;
use irc_ir::DType;
use irc_kir::{self as kir, Builtin, Expr, Func, IdxOp, ReduceOp, Space, Stmt, Ty};
use irc_layout::Layout;

/// Lanes of outputs and groups along the reduced axis of a block.
const LANES: u64 = 8;
const GROUPS: u64 = 32;

/// A block's share of a column reduction ([`Builder::column_strip`]): `lanes` threads across
/// vectors of `w` outputs (of `vecs`, the tile's starting at `bid.x·lanes`) by `groups` along
/// the axis, over the rows `k0 .. k0 + kc` of `k`, `unroll` rows a thread in flight.
struct Strip {
    lanes: u64,
    groups: u64,
    w: u64,
    vecs: u64,
    k0: Expr,
    kc: u64,
    k: u64,
    unroll: u64,
}

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
        let sums = self.column_partial(&c, elem, tiles, kc)?;
        if ks == 1 {
            return self.column_sums(&c, (sums, GROUPS), |b, o, v| finish(b, o, v));
        }
        self.column_split_one(c, sums, ks, finish)
    }

    /// The split column reduction's merge, in the same launch: each of the `ks` blocks of a
    /// tile of outputs writes its partial sums to `[ks, outs]` and arrives on the tile's
    /// counter; the last to arrive reads the tile's partials as a column reduction of its own
    /// ([`Builder::column_strip`] over the `ks` rows: 16-byte vectors of partials, eight rows
    /// of them in flight a thread, the groups in order — the same order whichever block is
    /// last) and finishes the outputs. Measured (H200, run 157): the second kernel this
    /// replaces, a warp per output adding every 32nd partial one load at a time, took 5.3 µs
    /// of colmax_64's 0.050 ms, besides its launch.
    fn column_split_one(
        &mut self,
        c: ColumnSplit,
        sums: String,
        ks: u64,
        finish: impl FnOnce(&mut Self, Expr, Expr) -> R<()>,
    ) -> R<()> {
        // `[ks, outs]`: a tile's partials of one block side by side.
        let layout = partials_layout(c.outs, ks)?;
        let (pp, part) = self.partials_buffer([ks, c.outs], layout.clone(), c.acc_t);
        let p2 = part.clone();
        self.column_sums(&c, (sums, GROUPS), |b, o, v| {
            b.out.push(Stmt::Store {
                tensor: p2,
                coord: vec![o, bx(Builtin::BidY)],
                value: v,
            });
            Ok(())
        })?;
        let tiles = c.outs.div_ceil(LANES * c.w);
        let (counter, old) = self.arrival_counters("arrivals", tiles)?;
        let tid = bx(Builtin::TidX);
        // The merge's threads: `cols` across the tile's outputs in vectors of `mw` partials,
        // `groups` down the partials.
        let span = LANES * c.w;
        let mut mw = vector_width(c.acc_t, c.outs);
        while span % mw != 0 {
            mw /= 2;
        }
        let cols = span / mw;
        let strip = Strip {
            lanes: cols,
            groups: (LANES * GROUPS / cols).max(1),
            w: mw,
            vecs: c.outs.div_ceil(mw),
            k0: Expr::Int(0),
            kc: ks,
            k: ks,
            unroll: 8,
        };
        let elem = move |b: &mut Builder<'_, '_>, o: Expr, s: Expr| -> R<Expr> {
            Ok(match b.vector_read(&pp, c.acc_t, &layout, 0)? {
                Some(e) => e,
                None => Expr::load(&part, vec![o, s]),
            })
        };
        let groups = strip.groups;
        self.when_last(
            (&counter, vec![bx(Builtin::BidX)]),
            ks,
            (&old, 0),
            &tid,
            &Stmt::Sync,
            move |b| {
                let merged = b.column_strip(&strip, &c, &elem)?;
                b.column_sums(&c, (merged, groups), finish)
            },
        )
    }

    /// The kernel's grid and block, and each block's accumulation: returns the shared tile of
    /// the groups' accumulators `[LANES·w, GROUPS]`, filled and synchronized.
    fn column_partial(
        &mut self,
        c: &ColumnSplit,
        elem: &Elem<'_>,
        tiles: u64,
        kc: u64,
    ) -> R<String> {
        let ks = c.k.div_ceil(kc);
        self.kernel.block = [(LANES * GROUPS) as u32, 1, 1];
        self.kernel.grid = [tiles.min(u32::MAX as u64) as u32, ks as u32, 1];
        let strip = Strip {
            lanes: LANES,
            groups: GROUPS,
            w: c.w,
            vecs: c.outs.div_ceil(c.w),
            k0: mul(bx(Builtin::BidY), int(kc)),
            kc,
            k: c.k,
            unroll: 4,
        };
        self.column_strip(&strip, c, elem)
    }

    /// One block's strip of a column reduction ([`Strip`]): each thread accumulates its
    /// vector of `w` outputs over its group's rows `k0 + g, k0 + g + groups, ...` in order
    /// (`unroll` rows in flight); returns the shared tile of the groups' accumulators
    /// `[lanes·w, groups]`, filled and synchronized.
    fn column_strip(&mut self, st: &Strip, c: &ColumnSplit, elem: &Elem<'_>) -> R<String> {
        let (w, kc, groups) = (st.w, st.kc, st.groups);
        // Every thread of the block is one (lane, group): no two add the same rows.
        if st.lanes * groups != LANES * GROUPS {
            return Err(Retry::Fail(crate::LowerError::Internal(format!(
                "a column strip of {} lanes by {groups} groups is not the block's {} threads",
                st.lanes,
                LANES * GROUPS
            ))));
        }
        let tid = bx(Builtin::TidX);
        let lane = self.let_(
            "lane",
            Ty::Idx,
            Expr::idx(IdxOp::Rem, tid.clone(), int(st.lanes)),
        );
        let grp = self.let_("grp", Ty::Idx, Expr::idx(IdxOp::Div, tid, int(st.lanes)));
        let ob = self.let_(
            "ob",
            Ty::Idx,
            add(mul(bx(Builtin::BidX), int(st.lanes)), lane.clone()),
        );
        let k0 = self.let_("k0", Ty::Idx, st.k0.clone());
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
        let valid = lt(ob.clone(), int(st.vecs));
        // `unroll` rows per group in flight: `kk = base + groups·u + grp`. Steps whose rows all
        // exist load without a guard, so that the loads issue before the first is used (a load
        // under its own branch waits for the previous one's use); the block's last partial
        // step, and any step past K, are guarded row by row.
        let unroll = (kc / groups).clamp(1, st.unroll);
        let whole_axis = matches!(st.k0, Expr::Int(0)) && kc == st.k;
        let step = groups * unroll;
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
                        add(add(kb.clone(), mul(u, int(groups))), grp.clone()),
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
                        // (A strip over the whole axis needs only the one bound.)
                        let cond = match whole_axis {
                            true => lt(kv.clone(), int(st.k)),
                            false => {
                                Expr::idx(IdxOp::And, lt(kv.clone(), int(st.k)), lt(kk, int(kc)))
                            }
                        };
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
                    let inside = lt(last, int(st.k));
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
                &[(st.lanes * w) as i64, groups as i64],
                &[1, (st.lanes * w) as i64],
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

    /// Threads `t < LANES·w` sum column `t` of the shared tile over its `groups` in order
    /// and give output `bid.x·LANES·w + t` (when it exists) to `put`.
    fn column_sums(
        &mut self,
        c: &ColumnSplit,
        (tile, groups): (String, u64),
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
                int(groups),
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

impl Builder<'_, '_> {
    /// The temp buffer `<kernel>_partials` (`acc_t`) of `shape`, where a split reduction's
    /// blocks write their partials: its parameter, and this kernel's tensor of it through
    /// `layout` (indexed `[output, part]`).
    pub(crate) fn partials_buffer(
        &mut self,
        shape: [u64; 2],
        layout: Layout,
        acc_t: DType,
    ) -> (String, String) {
        let name = format!("{}_partials", self.kernel.name);
        self.temps.push(kir::BufferDecl {
            name: name.clone(),
            dtype: acc_t,
            shape: shape.to_vec(),
            kind: kir::BufferKind::Temp,
            tensor_map: None,
        });
        let pp = self.param(&name);
        let t = self.tensor(Space::Global(pp.clone()), acc_t, layout);
        (pp, t)
    }
}

/// `(outs, parts):(1, outs)`: the partials buffer `[parts, outs]` indexed `[output, part]`.
pub(crate) fn partials_layout(outs: u64, parts: u64) -> R<Layout> {
    Layout::flat(&[outs as i64, parts as i64], &[1, outs as i64]).map_err(internal)
}
