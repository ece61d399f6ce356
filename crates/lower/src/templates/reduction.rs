//! The reduction template: `reduce_*` over any axes. Two schedules, chosen per shape: one block
//! per output row (a block-strided loop and a block reduction) when the innermost dimension is
//! reduced or outputs are few; a thread per output (coalesced column sums) when a leading axis
//! is reduced and there are at least 32 × SMs outputs. Shared helpers for row-wise kernels.

use super::config::{Config, ReductionSchedule};
use crate::LowerError;
use crate::lower::*;
use irc_ir::infer::reduction_axes;
use irc_ir::{DType, Inst, OpKind};
use irc_kir::{Builtin, Expr, Func, IdxOp, ReduceOp, Stmt, Ty};

impl Builder<'_, '_> {
    /// `for %row = bid.x to rows step nctaid.x { ... }`: one block per row.
    pub(crate) fn rows(&mut self, rows: u64, f: impl FnOnce(&mut Self, Expr) -> R<()>) -> R<()> {
        self.kernel.grid = [rows.clamp(1, MAX_BLOCKS) as u32, 1, 1];
        self.for_(
            "row",
            bx(Builtin::BidX),
            int(rows),
            bx(Builtin::NctaidX),
            false,
            f,
        )
    }

    /// A block-strided loop over the `k` elements of row `row`: vectors of `width` elements
    /// (`templates/vector.rs`), eight per thread in flight where the row is whole steps of
    /// them, else four (measured on the H200, run 132: softmax over rows of 64k f16 7% faster
    /// with eight, the norms' streamed rows the same; the reduction template's block-per-row
    /// schedule takes the same loop, not measured apart); `f` gets the element index.
    pub(crate) fn row_loop(
        &mut self,
        k: u64,
        row: &Expr,
        width: u64,
        f: impl FnOnce(&mut Self, Expr) -> R<()>,
    ) -> R<()> {
        let lanes = u64::from(self.kernel.block[0]);
        let rest = vec![row.clone()];
        let vecs = k.div_ceil(width);
        // Eight only over whole steps: guarded loads do not stay in flight together, and
        // ptxas spills some guarded eight-load loops (rows of 40000 f16 over 128 threads).
        let unroll = if vecs % (8 * lanes) == 0 { 8 } else { 4 };
        self.strided_vectors(vecs, bx(Builtin::TidX), lanes, unroll, width, rest, None, f)
    }

    /// `%acc` combined with `f` over a row (as [`Builder::row_loop`] walks it), then reduced
    /// across the block.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn row_reduce(
        &mut self,
        k: u64,
        row: &Expr,
        width: u64,
        acc_t: DType,
        op: ReduceOp,
        init: f64,
        f: impl FnOnce(&mut Self, Expr) -> R<Expr>,
    ) -> R<Expr> {
        let acc = self.accumulator(acc_t, init);
        let (a, r) = (acc.clone(), row.clone());
        self.row_loop(k, row, width, move |b, kv| {
            b.coord = vec![kv.clone(), r];
            let x = f(b, kv)?;
            b.combine(&a, op, x);
            Ok(())
        })?;
        let red = self.fresh("red");
        self.out.push(Stmt::BlockReduce {
            var: red.clone(),
            ty: Ty::Elem(acc_t),
            op,
            value: Expr::var(&acc),
        });
        Ok(Expr::Var(red))
    }

    /// `var %acc : acc_t = init`.
    pub(crate) fn accumulator(&mut self, acc_t: DType, init: f64) -> String {
        let acc = self.fresh("acc");
        self.out.push(Stmt::Var {
            var: acc.clone(),
            ty: Ty::Elem(acc_t),
            init: lit(acc_t, init),
        });
        acc
    }

    /// `%acc <- op(%acc, x)`.
    pub(crate) fn combine(&mut self, acc: &str, op: ReduceOp, x: Expr) {
        let combine = match op {
            ReduceOp::Sum => Func::Add,
            ReduceOp::Max => Func::Max,
            ReduceOp::Min => Func::Min,
        };
        self.out.push(Stmt::Assign {
            var: acc.to_string(),
            value: Expr::call(combine, vec![Expr::var(acc), x]),
        });
    }

    pub(crate) fn reduction(&mut self, inst: &Inst) -> R<()> {
        let x = inst.operands[0];
        let xshape = self.ty(x).shape.clone();
        let out_dtype = self.ty(inst.result).dtype;
        let axes = reduction_axes(xshape.len(), &inst.attrs)
            .map_err(|e| Retry::Fail(LowerError::Internal(e.message)))?;
        let st = row_major(&xshape);
        let red: Vec<(u64, i64)> = axes.iter().map(|&a| (xshape[a], st[a])).collect();
        let kept: Vec<(u64, i64)> = (0..xshape.len())
            .filter(|d| !axes.contains(d))
            .map(|d| (xshape[d], st[d]))
            .collect();
        let k: u64 = red.iter().map(|m| m.0).product();
        let rows = self.ty(inst.result).numel();
        let access = concat(&[
            dims_layout(&red).map_err(internal)?,
            dims_layout(&kept).map_err(internal)?,
        ])?;
        let acc_t = math_dtype(self.ty(x).dtype);
        let (op, init) = match (inst.op, acc_t) {
            (OpKind::ReduceMax, DType::I64) => (ReduceOp::Max, i64::MIN as f64),
            (OpKind::ReduceMin, DType::I64) => (ReduceOp::Min, i64::MAX as f64),
            (OpKind::ReduceMax, _) => (ReduceOp::Max, f64::NEG_INFINITY),
            (OpKind::ReduceMin, _) => (ReduceOp::Min, f64::INFINITY),
            _ => (ReduceOp::Sum, 0.0),
        };
        let out = self.output(inst.result, &linear(rows).map_err(internal)?)?;
        // The schedule: the configuration's — the reduction space's heuristic
        // (`reduction_config.rs`) unless a tuning cache or the tuner gives another point, whose
        // check allows the column schedules only with the innermost dimension kept.
        let Some(Config::Reduction(c)) = self.config else {
            return Err(Retry::Fail(LowerError::Internal(
                "a reduction kernel is built from a reduction configuration".into(),
            )));
        };
        let schedule = c.schedule;
        let width = super::row_cached::row_width(self.ty(x).dtype, k, &access);
        let mean = inst.op == OpKind::ReduceMean;
        let finish = move |red: Expr| -> Expr {
            let value = if mean {
                Expr::call(Func::Div, vec![red, lit(acc_t, k as f64)])
            } else {
                red
            };
            cast_to(out_dtype, acc_t, value)
        };
        let xd = self.ty(x).dtype;
        // The access with the kept dims first: the column schedules' coordinate (output, k).
        let swapped = concat(&[
            access.mode(1).map_err(internal)?,
            access.mode(0).map_err(internal)?,
        ])?;
        match schedule {
            ReductionSchedule::ColumnSplit => {
                let w = super::row_cached::row_width(xd, rows, &swapped);
                let sw = swapped.clone();
                let elem = move |s: &mut Builder<'_, '_>, _: Expr, _: Expr| -> R<Expr> {
                    let e = s.value_at(x, &sw)?;
                    Ok(cast_to(acc_t, xd, e))
                };
                let split = super::column::ColumnSplit {
                    outs: rows,
                    k,
                    w,
                    acc_t,
                    op,
                    init,
                };
                return self.column_split(split, &elem, |s, o, red| {
                    s.out.push(Stmt::Store {
                        tensor: out,
                        coord: vec![o],
                        value: finish(red),
                    });
                    Ok(())
                });
            }
            ReductionSchedule::Split { chunk } => {
                let width = super::row_cached::row_width(xd, k, &access);
                let red = RowsSplit {
                    rows,
                    k,
                    chunk,
                    width,
                    acc_t,
                    op,
                    init,
                };
                return self.reduction_split(inst, red, &access, out, finish);
            }
            _ => {}
        }
        if let ReductionSchedule::Column { threads } = schedule {
            // A thread per `w` adjacent outputs (16 bytes of them where the kept dims are
            // contiguous and the outputs many): the reduced axis walked serially, four steps
            // in flight, each step one vector read (`templates/vector.rs`) into `w`
            // accumulators, stored as one vector.
            // Narrower vectors where wide ones would leave fewer than two blocks per SM.
            let mut w = super::row_cached::row_width(xd, rows, &swapped);
            let min_threads = 2 * u64::from(self.l.options.target.sms) * threads;
            while w > 1 && rows / w < min_threads {
                w /= 2;
                if w * xd.size_bytes() < 4 {
                    w = 1;
                }
            }
            let outs = rows.div_ceil(w);
            self.kernel.block = [threads as u32, 1, 1];
            self.kernel.grid = [outs.div_ceil(threads).clamp(1, MAX_BLOCKS) as u32, 1, 1];
            let start = add(
                mul(bx(Builtin::BidX), bx(Builtin::NtidX)),
                bx(Builtin::TidX),
            );
            let step = mul(bx(Builtin::NctaidX), bx(Builtin::NtidX));
            let unroll = k.min(4);
            return self.for_("ob", start, int(outs), step, false, |b, ob| {
                let acc = b.tensor(
                    irc_kir::Space::Registers,
                    acc_t,
                    irc_layout::Layout::int(w as i64, 1).map_err(internal)?,
                );
                b.for_("v", Expr::Int(0), int(w), Expr::Int(1), true, |b, v| {
                    b.out.push(Stmt::Store {
                        tensor: acc.clone(),
                        coord: vec![v],
                        value: lit(acc_t, init),
                    });
                    Ok(())
                })?;
                let combine = match op {
                    ReduceOp::Sum => Func::Add,
                    ReduceOp::Max => Func::Max,
                    ReduceOp::Min => Func::Min,
                };
                let ob2 = ob.clone();
                b.for_("kb", Expr::Int(0), int(k), int(unroll), false, |b, kb| {
                    b.for_(
                        "u",
                        Expr::Int(0),
                        int(unroll),
                        Expr::Int(1),
                        true,
                        |b, u| {
                            let kv = b.let_("k", Ty::Idx, add(kb, u));
                            let guard = lt(kv.clone(), int(k));
                            let body = |b: &mut Self| {
                                b.vector_loop(w, vec![ob2, kv.clone()], |b, ox, v| {
                                    b.coord = vec![ox, kv];
                                    let e = b.value_at(x, &swapped)?;
                                    let e = cast_to(acc_t, xd, e);
                                    let prev = Expr::load(&acc, vec![v.clone()]);
                                    b.out.push(Stmt::Store {
                                        tensor: acc.clone(),
                                        coord: vec![v],
                                        value: Expr::call(combine, vec![prev, e]),
                                    });
                                    Ok(())
                                })
                            };
                            if k % unroll == 0 {
                                body(b)
                            } else {
                                b.if_(guard, body)
                            }
                        },
                    )
                })?;
                b.vector_loop(w, vec![ob], |b, ox, v| {
                    let red = Expr::load(&acc, vec![v]);
                    let value = finish(red);
                    b.store_elem(&out, vec![ox], value)
                })
            });
        }
        let threads = match schedule {
            ReductionSchedule::Row { threads } | ReductionSchedule::Column { threads } => threads,
            // Built above.
            ReductionSchedule::Split { .. } | ReductionSchedule::ColumnSplit => u64::from(THREADS),
            ReductionSchedule::Warp { warps, lanes } => {
                // A row per lane group: the group's lanes stride its vectors, a group reduction,
                // the group's first lane stores.
                let vecs = k.div_ceil(width);
                let lanes = lanes.unwrap_or(super::reduction_config::natural_lanes(vecs));
                return self.lane_group_rows(rows, lanes, warps, |b, row, valid, lane| {
                    let acc = b.accumulator(acc_t, init);
                    let (a, r) = (acc.clone(), row.clone());
                    let rest = vec![row.clone()];
                    b.strided_vectors(
                        vecs,
                        lane.clone(),
                        lanes,
                        4,
                        width,
                        rest,
                        valid.clone(),
                        move |b, kv| {
                            b.coord = vec![kv, r];
                            let e = b.value_at(x, &access)?;
                            let e = cast_to(acc_t, b.ty(x).dtype, e);
                            b.combine(&a, op, e);
                            Ok(())
                        },
                    )?;
                    let red = if lanes > 1 {
                        let var = b.fresh("red");
                        b.out.push(Stmt::WarpReduce {
                            var: var.clone(),
                            ty: Ty::Elem(acc_t),
                            op,
                            width: lanes as u32,
                            value: Expr::var(&acc),
                        });
                        Expr::Var(var)
                    } else {
                        Expr::var(&acc)
                    };
                    let value = finish(red);
                    let mut cond = Expr::idx(IdxOp::Eq, lane, Expr::Int(0));
                    if let Some(v) = valid {
                        cond = Expr::idx(IdxOp::And, v, cond);
                    }
                    b.if_(cond, |b| {
                        b.out.push(Stmt::Store {
                            tensor: out,
                            coord: vec![row],
                            value,
                        });
                        Ok(())
                    })
                });
            }
        };
        self.kernel.block = [threads as u32, 1, 1];
        self.rows(rows, |b, row| {
            let red = b.row_reduce(k, &row, width, acc_t, op, init, |b, _| {
                let e = b.value_at(x, &access)?;
                Ok(cast_to(acc_t, b.ty(x).dtype, e))
            })?;
            let value = finish(red);
            b.if_(Expr::idx(IdxOp::Eq, bx(Builtin::TidX), Expr::Int(0)), |b| {
                b.out.push(Stmt::Store {
                    tensor: out,
                    coord: vec![row],
                    value,
                });
                Ok(())
            })
        })
    }
}

/// A split row reduction: `rows` rows of `k` in chunks of `chunk` elements.
struct RowsSplit {
    rows: u64,
    k: u64,
    chunk: u64,
    width: u64,
    acc_t: DType,
    op: ReduceOp,
    init: f64,
}

impl Builder<'_, '_> {
    /// Few long rows (`split,chunk=N`): `(splits, rows)` blocks, each reducing its chunk
    /// (`chunk_loop`: vectors, four per thread in flight) with a block reduction into the
    /// partials `[rows, splits]`; the last block of the row to arrive (`arrival`) adds the
    /// row's partials — each thread every 256th in order (four loads in flight where the
    /// steps are whole), then the block's tree, the same order whichever block is last — in
    /// the same launch.
    fn reduction_split(
        &mut self,
        inst: &Inst,
        r: RowsSplit,
        access: &irc_layout::Layout,
        out: String,
        finish: impl Fn(Expr) -> Expr,
    ) -> R<()> {
        let x = inst.operands[0];
        let splits = r.k.div_ceil(r.chunk);
        // `[rows, splits]`: a row's partials side by side, so the merge's loads are coalesced.
        let layout = irc_layout::Layout::flat(&[r.rows as i64, splits as i64], &[splits as i64, 1])
            .map_err(internal)?;
        let (_, part) = self.partials_buffer([r.rows, splits], layout, r.acc_t);
        self.kernel.grid = [splits as u32, r.rows as u32, 1];
        self.kernel.block = [THREADS, 1, 1];
        let row = bx(Builtin::BidY);
        let start = self.let_("start", Ty::Idx, mul(bx(Builtin::BidX), int(r.chunk)));
        let acc = self.accumulator(r.acc_t, r.init);
        let (a, rw, xd) = (acc.clone(), row.clone(), self.ty(x).dtype);
        self.chunk_loop(
            &start,
            (r.chunk, r.k),
            &row,
            r.width,
            false,
            0,
            |b, kx, _| {
                b.coord = vec![kx, rw.clone()];
                let e = b.value_at(x, access)?;
                b.combine(&a, r.op, cast_to(r.acc_t, xd, e));
                Ok(())
            },
        )?;
        let red = self.block_reduce(Ty::Elem(r.acc_t), r.op, Expr::var(&acc));
        let tid = bx(Builtin::TidX);
        let first = || Expr::idx(IdxOp::Eq, bx(Builtin::TidX), Expr::Int(0));
        self.if_(first(), |b| {
            b.out.push(Stmt::Store {
                tensor: part.clone(),
                coord: vec![row.clone(), bx(Builtin::BidX)],
                value: red,
            });
            Ok(())
        })?;
        let (counter, old) = self.arrival_counters("arrivals", r.rows)?;
        self.when_last(
            (&counter, vec![row.clone()]),
            splits,
            (&old, 0),
            &tid,
            &Stmt::Sync,
            |b| {
                let acc = b.accumulator(r.acc_t, r.init);
                let a = acc.clone();
                b.strided_vectors(
                    splits,
                    tid.clone(),
                    u64::from(THREADS),
                    4,
                    1,
                    vec![],
                    None,
                    |b, s| {
                        b.combine(&a, r.op, Expr::load(&part, vec![row.clone(), s]));
                        Ok(())
                    },
                )?;
                let red = b.block_reduce(Ty::Elem(r.acc_t), r.op, Expr::var(&acc));
                b.if_(first(), |b| {
                    b.out.push(Stmt::Store {
                        tensor: out,
                        coord: vec![row.clone()],
                        value: finish(red),
                    });
                    Ok(())
                })
            },
        )
    }
}
