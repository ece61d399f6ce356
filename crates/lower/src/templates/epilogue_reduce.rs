//! Row and column reductions in a matmul's epilogue (the policy's rule 6;
//! `irc_fused::reduce_epilogue`), for the tensor-core templates.
//!
//! A block reduces the reduction's operand (the epilogue chain over the matmul's rounded value)
//! over its tile's part of every row (column) it holds, in f32 and in a fixed order, and writes
//! the partial to a workspace: rows to `partials[row, column tile, batch, reduction]` — the
//! Hopper template from its accumulator registers (each thread's rows by
//! `norm_prologue::split_rows` of the accumulator layout, then across the lanes sharing them),
//! the mma.sync template from its staging tile (consecutive lanes share a row) — and columns to
//! `partials[column, row block, batch, reduction]` from the staging tile of either template
//! (consecutive lanes share a column; a row block is what one staging pass holds: 64 rows on
//! Hopper, half the tile on mma.sync). Then the block arrives on its row tile's (column
//! tile's) counter: every thread fences, the block synchronizes, one thread adds 1
//! (`atom.arrive`). The block that reads `n - 1` arrived last of the `n` that share the
//! counter: it fences again, adds each row's (column's) partials in tile order — the same
//! order whichever block is last, so the result does not depend on the order blocks run in —
//! divides a mean by the reduced extent, rounds to the output's type, stores it and resets the
//! counter to 0 for the next launch (the counters are a `zeroed` buffer). One launch; the
//! `[.., M, N]` value is never written unless it is a root itself.

use super::arrival::Arrival;
use super::matmul_mma::TcPlan;
use crate::lower::*;
use irc_ir::{Category, DType, OpKind, ValueId};
use irc_kir::{self as kir, Builtin, Expr, Func, IdxOp, ReduceOp, Space, Stmt, Ty};
use irc_layout::Layout;

/// One row or column reduction of the epilogue.
pub(crate) struct RowReduce {
    /// The reduction, stored by the matmul's kernel.
    pub(crate) root: ValueId,
    /// The value it reduces over its last axis (the matmul or its epilogue chain).
    pub(crate) operand: ValueId,
    pub(crate) op: ReduceOp,
    /// `reduce_mean`: the sum divided by the reduced extent.
    pub(crate) mean: bool,
    /// Over the last axis (one value per row), else over M (one per column).
    pub(crate) rows: bool,
}

impl RowReduce {
    fn identity(&self) -> Expr {
        lit(
            DType::F32,
            match self.op {
                ReduceOp::Sum => 0.0,
                ReduceOp::Max => f64::NEG_INFINITY,
                ReduceOp::Min => f64::INFINITY,
            },
        )
    }

    fn combine(&self, a: Expr, b: Expr) -> Expr {
        let f = match self.op {
            ReduceOp::Sum => Func::Add,
            ReduceOp::Max => Func::Max,
            ReduceOp::Min => Func::Min,
        };
        Expr::call(f, vec![a, b])
    }
}

/// The partials, counter and outputs of one axis's reductions.
pub(crate) struct Partials {
    /// f32 `(row, column tile, batch, k)` for rows, `(column, row block, batch, k)` for
    /// columns, `k` numbering this axis's reductions.
    part: String,
    /// i32 arrival counters `(tile, batch)` along the kept axis, a `zeroed` buffer.
    counter: String,
    /// The reductions of this axis (indices into the plan's) and their outputs `(index,
    /// batch)`.
    which: Vec<usize>,
    outs: Vec<String>,
    /// Partials per output element: column tiles for rows, row blocks for columns.
    blocks: u64,
    /// Blocks sharing a counter (the tiles along the reduced axis).
    arrivals: u64,
}

/// A kernel's tensors for its epilogue reductions.
pub(crate) struct ReduceTiles {
    rows: Option<Partials>,
    cols: Option<Partials>,
    /// Shared i32 `[2]`: each counter's value before the block's arrival.
    old: String,
    bm: u64,
    bn: u64,
    /// Rows per row block of the column partials.
    rb: u64,
}

impl ReduceTiles {
    pub(crate) fn has_cols(&self) -> bool {
        self.cols.is_some()
    }
}

impl Builder<'_, '_> {
    /// `roots` split into the values stored element by element and the reductions.
    pub(crate) fn split_row_reductions(&self, roots: &[ValueId]) -> (Vec<ValueId>, Vec<RowReduce>) {
        let (mut elements, mut reductions) = (vec![], vec![]);
        for &r in roots {
            match self.def(r) {
                Some(i) if i.op.category() == Category::Reduction => {
                    reductions.push(RowReduce {
                        root: r,
                        operand: i.operands[0],
                        op: match i.op {
                            OpKind::ReduceMax => ReduceOp::Max,
                            OpKind::ReduceMin => ReduceOp::Min,
                            _ => ReduceOp::Sum,
                        },
                        mean: i.op == OpKind::ReduceMean,
                        rows: irc_ir::infer::reduction_axes(
                            self.ty(i.operands[0]).rank(),
                            &i.attrs,
                        )
                        .is_ok_and(|a| a == [self.ty(i.operands[0]).rank() - 1]),
                    });
                }
                _ => elements.push(r),
            }
        }
        (elements, reductions)
    }

    /// The partials, the counters and the outputs of `p`'s reductions over `bm x bn` tiles,
    /// the column partials in blocks of `rb` rows.
    pub(crate) fn reduce_tiles(&mut self, p: &TcPlan, bm: u64, bn: u64, rb: u64) -> R<ReduceTiles> {
        let (tiles_m, tiles_n) = (p.m.div_ceil(bm), p.n.div_ceil(bn));
        let flat = |shape: &[u64], strides: &[u64]| {
            let s: Vec<i64> = shape.iter().map(|&x| x as i64).collect();
            let d: Vec<i64> = strides.iter().map(|&x| x as i64).collect();
            Layout::flat(&s, &d).map_err(internal)
        };
        let b = p.batch;
        let axis = |s: &mut Self, rows: bool| -> R<Option<Partials>> {
            let which: Vec<usize> = (0..p.reductions.len())
                .filter(|&k| p.reductions[k].rows == rows)
                .collect();
            if which.is_empty() {
                return Ok(None);
            }
            let count = which.len() as u64;
            // (extent kept, blocks, tiles along the kept axis, tiles along the reduced one)
            let (kept, blocks, tiles, arrivals, what) = match rows {
                true => (p.m, tiles_n, tiles_m, tiles_n, "row"),
                false => (p.n, tiles_m * (bm / rb), tiles_n, tiles_m, "column"),
            };
            let name = &s.kernel.name;
            let part = kir::BufferDecl {
                name: format!("{name}_{what}_partials"),
                dtype: DType::F32,
                shape: vec![count, b, kept, blocks],
                kind: kir::BufferKind::Temp,
                tensor_map: None,
            };
            let counter = kir::BufferDecl {
                name: format!("{name}_{what}_arrivals"),
                dtype: DType::I32,
                shape: vec![b, tiles],
                kind: kir::BufferKind::Zeroed,
                tensor_map: None,
            };
            let (pp, pc) = (part.name.clone(), counter.name.clone());
            s.temps.push(part);
            s.temps.push(counter);
            let (pp, pc) = (s.param(&pp), s.param(&pc));
            let part = s.tensor(
                Space::Global(pp),
                DType::F32,
                flat(
                    &[kept, blocks, b, count],
                    &[blocks, 1, kept * blocks, b * kept * blocks],
                )?,
            );
            let counter = s.tensor(
                Space::Global(pc),
                DType::I32,
                flat(&[tiles, b], &[1, tiles])?,
            );
            // The reduction's buffer is `[.., kept]` (with a 1 where keepdims), row-major.
            let outs = which
                .iter()
                .map(|&k| Ok(s.global(p.reductions[k].root, flat(&[kept, b], &[1, kept])?)))
                .collect::<R<_>>()?;
            Ok(Some(Partials {
                part,
                counter,
                which,
                outs,
                blocks,
                arrivals,
            }))
        };
        let rows = axis(self, true)?;
        let cols = axis(self, false)?;
        let old = self.tensor(Space::Shared, DType::I32, flat(&[2], &[1])?);
        Ok(ReduceTiles {
            rows,
            cols,
            old,
            bm,
            bn,
            rb,
        })
    }

    /// The reduction's operand at `(gm, gn, bi)` as f32, given the matmul's rounded value there.
    fn reduce_operand(
        &mut self,
        r: &RowReduce,
        p: &TcPlan,
        mm: ValueId,
        value: &Expr,
        at: [&Expr; 3],
    ) -> R<Expr> {
        let x = if r.operand == mm {
            value.clone()
        } else {
            self.coord = at.iter().map(|&e| e.clone()).collect();
            self.overrides
                .insert(mm, (p.access_c.clone(), value.clone()));
            // The chain's values this kernel stores (a residual sum that is also normalized)
            // are stored after the reduction pass: it computes them.
            self.unstored = self.roots.iter().copied().collect();
            let x = self.compute_at(r.operand, &p.access_c, false);
            self.unstored.clear();
            self.overrides.remove(&mm);
            x?
        };
        Ok(cast_to(DType::F32, self.ty(r.operand).dtype, x))
    }

    /// Each reduction `which[k]`'s operand at `at` (given the matmul's value there) folded into
    /// `vars[k]`.
    fn accumulate(
        &mut self,
        p: &TcPlan,
        mm: ValueId,
        (which, vars): (&[usize], &[Expr]),
        value: Expr,
        at: [&Expr; 3],
    ) -> R<()> {
        let value = self.let_("mv", Ty::Elem(p.dtype), value);
        for (&k, var) in which.iter().zip(vars) {
            let red = &p.reductions[k];
            let x = self.reduce_operand(red, p, mm, &value, at)?;
            self.assign(var, red.combine(var.clone(), x));
        }
        Ok(())
    }

    /// One f32 register per reduction of `which`, set to its identity.
    fn reduce_vars(&mut self, p: &TcPlan, which: &[usize]) -> Vec<Expr> {
        which
            .iter()
            .map(|&k| self.var("red", Ty::Elem(DType::F32), p.reductions[k].identity()))
            .collect()
    }

    /// Hopper: consumer `c`'s rows' partials of the `64 x bn` accumulator tile `acc` (value
    /// `v` of thread `t` at `wgmma_m64nk16_d(bn)(t, v)`), each thread's row slots in registers,
    /// then a butterfly over the lanes sharing a row.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn wgmma_row_partials(
        &mut self,
        rt: &ReduceTiles,
        p: &TcPlan,
        mm: ValueId,
        acc: &str,
        c: &Expr,
        (m0, n0, bi): (&Expr, &Expr, &Expr),
    ) -> R<()> {
        let Some(part) = &rt.rows else {
            return Ok(());
        };
        let reds: Vec<&RowReduce> = part.which.iter().map(|&k| &p.reductions[k]).collect();
        let d = irc_layout::wgmma_m64nk16_d(rt.bn as i64).map_err(internal)?;
        let dl = d.layout().clone();
        let (slot_of, slot_rows, quad) =
            super::norm_prologue::split_rows(&dl, 64).ok_or_else(|| {
                Retry::Fail(crate::LowerError::Internal(format!(
                    "the accumulator layout {dl} does not split into rows per thread"
                )))
            })?;
        let slots = slot_rows.size().map_err(internal)?;
        let t = self.let_("t", Ty::Idx, rem(bx(Builtin::TidX), int(128)));
        let row0 = self.let_("r0", Ty::Idx, add(m0.clone(), mul(c.clone(), int(64))));
        let regs: Vec<String> = reds
            .iter()
            .map(|_| {
                let l = Layout::int(slots, 1).map_err(internal)?;
                Ok(self.tensor(Space::Registers, DType::F32, l))
            })
            .collect::<R<_>>()?;
        for (r, reg) in reds.iter().zip(&regs) {
            for s in 0..slots {
                self.out.push(Stmt::Store {
                    tensor: reg.clone(),
                    coord: vec![Expr::Int(s)],
                    value: r.identity(),
                });
            }
        }
        let dt = p.dtype;
        // NVRTC leaves an `unroll` loop of this body rolled (the accumulators it indexes then
        // go to local memory) at 32 steps, and at 128 unless they are nested 4 x 32; written
        // out value by value, 128 values spill. So: 32 or fewer written out, more nested.
        let mut each = |s: &mut Self, v: Expr| -> R<()> {
            let idx = kir::offset_expr(&dl, &[t.clone(), v.clone()]).map_err(internal)?;
            let idx = s.let_("di", Ty::Idx, idx);
            let gm = s.let_("gm", Ty::Idx, add(row0.clone(), rem(idx.clone(), int(64))));
            let gn = s.let_("gn", Ty::Idx, add(n0.clone(), div(idx, int(64))));
            let slot = kir::offset_expr(&slot_of, std::slice::from_ref(&v)).map_err(internal)?;
            let value = cast_to(dt, DType::F32, Expr::load(acc, vec![v]));
            let cond = Expr::idx(
                IdxOp::And,
                lt(gm.clone(), int(p.m)),
                lt(gn.clone(), int(p.n)),
            );
            s.if_(cond, |s| {
                let value = s.let_("mv", Ty::Elem(dt), value);
                for (r, reg) in reds.iter().zip(&regs) {
                    let x = s.reduce_operand(r, p, mm, &value, [&gm, &gn, bi])?;
                    let old = Expr::load(reg, vec![slot.clone()]);
                    s.out.push(Stmt::Store {
                        tensor: reg.clone(),
                        coord: vec![slot.clone()],
                        value: r.combine(old, x),
                    });
                }
                Ok(())
            })
        };
        if rt.bn / 2 <= 32 {
            for v in 0..(rt.bn / 2) as i64 {
                each(self, Expr::Int(v))?;
            }
        } else {
            self.unrolled_chunks("v", rt.bn / 2, &mut each)?;
        }
        let base = kir::offset_expr(&dl, &[t.clone(), Expr::Int(0)]).map_err(internal)?;
        let base = self.let_("rb", Ty::Idx, rem(base, int(64)));
        let tn = self.let_("tn", Ty::Idx, div(n0.clone(), int(rt.bn)));
        for slot in 0..slots {
            let off = slot_rows
                .crd2idx(&irc_layout::IntTuple::Int(slot))
                .map_err(internal)?;
            let gm = self.let_(
                "gm",
                Ty::Idx,
                add(add(row0.clone(), base.clone()), int(off as u64)),
            );
            let mut totals = vec![];
            for (r, reg) in reds.iter().zip(&regs) {
                let x = Expr::load(reg, vec![Expr::Int(slot)]);
                totals.push(self.lanes_reduce(r.op, quad, x));
            }
            let leader = Expr::idx(IdxOp::Eq, rem(t.clone(), int(quad)), Expr::Int(0));
            let cond = Expr::idx(IdxOp::And, leader, lt(gm.clone(), int(p.m)));
            self.if_(cond, |s| {
                for (k, total) in totals.into_iter().enumerate() {
                    s.out.push(Stmt::Store {
                        tensor: part.part.clone(),
                        coord: vec![gm.clone(), tn.clone(), bi.clone(), Expr::Int(k as i64)],
                        value: total,
                    });
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// mma.sync: the partials of the staged half of the block's rows (`stage`, `bm/2 x bn`, the
    /// matmul's rounded values, rows starting at `m0 + h·bm/2`): `threads / rows` consecutive
    /// lanes per row, each taking every such column, then a butterfly over them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn staged_row_partials(
        &mut self,
        rt: &ReduceTiles,
        p: &TcPlan,
        mm: ValueId,
        stage: &str,
        threads: u64,
        (m0, n0, bi): (&Expr, &Expr, &Expr),
        h: &Expr,
    ) -> R<()> {
        let Some(part) = &rt.rows else {
            return Ok(());
        };
        let rows = rt.bm / 2;
        let tpr = (threads / rows).clamp(1, 32);
        if !tpr.is_power_of_two() || !rt.bn.is_multiple_of(tpr) {
            return Err(Retry::Fail(crate::LowerError::Internal(format!(
                "{threads} threads do not split {rows} rows of {} columns into lanes",
                rt.bn
            ))));
        }
        let groups = threads / tpr;
        let tid = bx(Builtin::TidX);
        let q = self.let_("q", Ty::Idx, rem(tid.clone(), int(tpr)));
        let tn = self.let_("tn", Ty::Idx, div(n0.clone(), int(rt.bn)));
        self.unrolled("pass", rows.div_ceil(groups), &mut |s, pass| {
            let r = s.let_(
                "rr",
                Ty::Idx,
                add(mul(pass, int(groups)), div(tid.clone(), int(tpr))),
            );
            let gm = s.let_(
                "gm",
                Ty::Idx,
                add(add(m0.clone(), mul(h.clone(), int(rows))), r.clone()),
            );
            let row_ok = Expr::idx(
                IdxOp::And,
                lt(r.clone(), int(rows)),
                lt(gm.clone(), int(p.m)),
            );
            let vars = s.reduce_vars(p, &part.which);
            s.unrolled("c", rt.bn / tpr, &mut |s, c| {
                let col = s.let_("col", Ty::Idx, add(mul(c, int(tpr)), q.clone()));
                let gn = s.let_("gn", Ty::Idx, add(n0.clone(), col.clone()));
                let cond = Expr::idx(IdxOp::And, row_ok.clone(), lt(gn.clone(), int(p.n)));
                s.if_(cond, |s| {
                    let value = Expr::load(stage, vec![r.clone(), col]);
                    s.accumulate(p, mm, (&part.which, &vars), value, [&gm, &gn, bi])
                })
            })?;
            let at = [gm.clone(), tn.clone(), bi.clone()];
            s.lanes_partials(p, part, &vars, (tpr, &q), row_ok, at)
        })
    }

    /// The column partials of one staged block of `rows x cols` values (`load(r, c)`, the
    /// matmul's rounded values; the block's first element at `(gm0, gn0)`), row block `block`:
    /// `threads / cols` consecutive lanes of the `threads` numbered by `tid` per column, each
    /// taking every such row, then a butterfly over them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn staged_col_partials(
        &mut self,
        rt: &ReduceTiles,
        p: &TcPlan,
        mm: ValueId,
        load: &dyn Fn(Expr, Expr) -> Expr,
        (rows, cols, threads): (u64, u64, u64),
        tid: &Expr,
        (gm0, gn0, bi): (&Expr, &Expr, &Expr),
        block: &Expr,
    ) -> R<()> {
        let Some(part) = &rt.cols else {
            return Ok(());
        };
        let tpc = (threads / cols).clamp(1, 32);
        if !tpc.is_power_of_two() || !rows.is_multiple_of(tpc) {
            return Err(Retry::Fail(crate::LowerError::Internal(format!(
                "{threads} threads do not split {cols} columns of {rows} rows into lanes"
            ))));
        }
        let groups = threads / tpc;
        let q = self.let_("q", Ty::Idx, rem(tid.clone(), int(tpc)));
        self.unrolled("pass", cols.div_ceil(groups), &mut |s, pass| {
            let col = s.let_(
                "cc",
                Ty::Idx,
                add(mul(pass, int(groups)), div(tid.clone(), int(tpc))),
            );
            let gn = s.let_("gn", Ty::Idx, add(gn0.clone(), col.clone()));
            let col_ok = Expr::idx(
                IdxOp::And,
                lt(col.clone(), int(cols)),
                lt(gn.clone(), int(p.n)),
            );
            let vars = s.reduce_vars(p, &part.which);
            s.unrolled("i", rows / tpc, &mut |s, i| {
                let r = s.let_("rr", Ty::Idx, add(mul(i, int(tpc)), q.clone()));
                let gm = s.let_("gm", Ty::Idx, add(gm0.clone(), r.clone()));
                let cond = Expr::idx(IdxOp::And, col_ok.clone(), lt(gm.clone(), int(p.m)));
                s.if_(cond, |s| {
                    let value = load(r.clone(), col.clone());
                    s.accumulate(p, mm, (&part.which, &vars), value, [&gm, &gn, bi])
                })
            })?;
            let at = [gn.clone(), block.clone(), bi.clone()];
            s.lanes_partials(p, part, &vars, (tpc, &q), col_ok, at)
        })
    }

    /// Each reduction's value `vars[k]` reduced over the `width` lanes sharing it (`q` is a
    /// lane's place among them), then stored by the first of them, where `ok`, as partial
    /// `k` at `at` (the output index, the block along the reduced axis, the batch).
    fn lanes_partials(
        &mut self,
        p: &TcPlan,
        part: &Partials,
        vars: &[Expr],
        (width, q): (u64, &Expr),
        ok: Expr,
        at: [Expr; 3],
    ) -> R<()> {
        let totals: Vec<Expr> = part
            .which
            .iter()
            .zip(vars)
            .map(|(&k, var)| self.lanes_reduce(p.reductions[k].op, width, var.clone()))
            .collect();
        let leader = Expr::idx(IdxOp::Eq, q.clone(), Expr::Int(0));
        self.if_(Expr::idx(IdxOp::And, leader, ok), |s| {
            for (k, total) in totals.into_iter().enumerate() {
                let mut coord = at.to_vec();
                coord.push(Expr::Int(k as i64));
                s.out.push(Stmt::Store {
                    tensor: part.part.clone(),
                    coord,
                    value: total,
                });
            }
            Ok(())
        })
    }

    /// `x` reduced over each group of `width` consecutive lanes (`x` itself for one lane).
    fn lanes_reduce(&mut self, op: ReduceOp, width: u64, x: Expr) -> Expr {
        if width <= 1 {
            return x;
        }
        let var = self.fresh("lr");
        self.out.push(Stmt::WarpReduce {
            var: var.clone(),
            ty: Ty::Elem(DType::F32),
            op,
            width: width as u32,
            value: x,
        });
        Expr::Var(var)
    }

    /// After every partial of the block's tile at `(m0, n0)` is written: the arrivals on the
    /// row tile's and the column tile's counters in one step (`arrival`'s protocol, both
    /// counters under one pair of barriers), and in the last block to arrive on one the totals
    /// of its rows or columns (module doc). `tid` numbers the `threads` threads taking part,
    /// which `barrier` synchronizes. (One step per counter, two in a row, hung the MLIR
    /// backend's Hopper kernel: `bench/gpu/NOTES.md`, run 75.)
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn reduce_finish(
        &mut self,
        rt: &ReduceTiles,
        p: &TcPlan,
        (m0, n0, bi): (&Expr, &Expr, &Expr),
        tid: &Expr,
        threads: u64,
        barrier: &Stmt,
    ) -> R<()> {
        // (partials, this block's tile along the kept axis, its first kept index, tile extent,
        // kept extent, reduced extent, which `old` slot)
        let tm = self.let_("tm", Ty::Idx, div(m0.clone(), int(rt.bm)));
        let tn = self.let_("tn", Ty::Idx, div(n0.clone(), int(rt.bn)));
        let axes: Vec<(&Partials, Expr, &Expr, u64, u64, u64, i64)> = [
            rt.rows
                .as_ref()
                .map(|x| (x, tm.clone(), m0, rt.bm, p.m, p.n, 0)),
            rt.cols
                .as_ref()
                .map(|x| (x, tn.clone(), n0, rt.bn, p.n, p.m, 1)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let arrivals: Vec<Arrival<'_>> = axes
            .iter()
            .map(|(x, tile, _, _, _, _, slot)| Arrival {
                counter: &x.counter,
                at: vec![tile.clone(), bi.clone()],
                arrivals: x.arrivals,
                slot: *slot,
            })
            .collect();
        self.arrive(&arrivals, &rt.old, tid, barrier);
        for ((x, _, start, extent, kept, reduced, slot), a) in axes.into_iter().zip(&arrivals) {
            // Blocks that hold at least one element along the reduced axis.
            let blocks = match slot {
                0 => x.blocks,
                _ => x.blocks.min(p.m.div_ceil(rt.rb)),
            };
            self.if_last(a, &rt.old, tid, |s| {
                s.for_(
                    "e",
                    tid.clone(),
                    int(extent),
                    int(threads),
                    false,
                    |s, e| {
                        let g = s.let_("g", Ty::Idx, add(start.clone(), e));
                        s.if_(lt(g.clone(), int(kept)), |s| {
                            for (j, &k) in x.which.iter().enumerate() {
                                let r = &p.reductions[k];
                                let total = s.var("tot", Ty::Elem(DType::F32), r.identity());
                                s.for_(
                                    "j",
                                    Expr::Int(0),
                                    int(blocks),
                                    Expr::Int(1),
                                    false,
                                    |s, b| {
                                        let y = Expr::load(
                                            &x.part,
                                            vec![g.clone(), b, bi.clone(), Expr::Int(j as i64)],
                                        );
                                        s.assign(&total, r.combine(total.clone(), y));
                                        Ok(())
                                    },
                                )?;
                                let value = if r.mean {
                                    Expr::call(
                                        Func::Div,
                                        vec![total, lit(DType::F32, reduced as f64)],
                                    )
                                } else {
                                    total
                                };
                                let out_dt = s.ty(r.root).dtype;
                                s.out.push(Stmt::Store {
                                    tensor: x.outs[j].clone(),
                                    coord: vec![g.clone(), bi.clone()],
                                    value: cast_to(out_dt, DType::F32, value),
                                });
                            }
                            Ok(())
                        })
                    },
                )
            })?;
        }
        Ok(())
    }
}
