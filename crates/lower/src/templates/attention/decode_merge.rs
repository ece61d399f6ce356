//! The decoding kernel's merges (`decode.rs`, module doc steps 2 and 3): a block's lane groups
//! through shared memory, then its store, or its partial and the last block's merge of the
//! splits.

use super::super::decode_config::WIDTH;
use super::AttPlan;
use super::decode::Lanes;
use super::tree;
use crate::lower::*;
use irc_ir::DType;
use irc_kir::{self as kir, Builtin, Expr, Func, IdxOp, Space, Stmt, Ty};
use irc_layout::Layout;

/// Partials a thread reads at once ([`Builder::over_parts`]).
const IN_FLIGHT: u64 = 8;

impl Builder<'_, '_> {
    /// The block's merge of its `groups` (lane groups or warps, each with its own `(m, l, O)`
    /// of the unit's rows, which `write` puts in shared memory: `(m, l)` at `[2, rows,
    /// groups]` and O at `[dv, rows, groups]`), then the store (one split) or the partials and
    /// the last block's merge of the splits (module doc, 2 and 3).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decode_merge(
        &mut self,
        p: &AttPlan,
        (rows, units, splits): (u64, u64, u64),
        groups: u64,
        write: &dyn Fn(&mut Self, &str, &str) -> R<()>,
        (unit, split): (&Expr, &Expr),
        row_at: &dyn Fn(&Expr) -> (Expr, Expr),
        kk: f64,
    ) -> R<()> {
        let dv = p.dv;
        let shared = |s: &mut Self, shape: &[u64]| -> R<String> {
            let l = Layout::flat(
                &shape.iter().map(|&n| n as i64).collect::<Vec<_>>(),
                &col_major(shape),
            )
            .map_err(internal)?;
            Ok(s.tensor(Space::Shared, DType::F32, l))
        };
        let sm_ml = shared(self, &[2, rows, groups])?;
        let sm_o = shared(self, &[dv, rows, groups])?;
        write(self, &sm_ml, &sm_o)?;
        self.out.push(Stmt::Sync);
        let tid = bx(Builtin::TidX);
        // Each row's weights of the groups and its (M, L), by one thread a row.
        let sm_w = shared(self, &[groups, rows])?;
        let sm_ref = shared(self, &[2, rows])?;
        let at = |i: u64, g: Expr| Expr::load(&sm_ml, vec![int(i), tid.clone(), g]);
        self.if_(lt(tid.clone(), int(rows)), |s| {
            s.decode_weights(groups, &at, kk, &sm_w, &tid, &sm_ref)
        })?;
        self.out.push(Stmt::Sync);
        let block_sum = |s: &mut Self, r: &Expr, d: &Expr| -> Expr {
            let terms = (0..groups)
                .map(|g| {
                    Expr::call(
                        Func::Mul,
                        vec![
                            Expr::load(&sm_o, vec![d.clone(), r.clone(), int(g)]),
                            Expr::load(&sm_w, vec![int(g), r.clone()]),
                        ],
                    )
                })
                .collect();
            s.let_("o", Ty::Elem(DType::F32), tree(Func::Add, terms))
        };
        if splits == 1 {
            return self.decode_outputs(p, rows, row_at, |s, r, d| {
                let o = block_sum(s, r, d);
                Ok((o, Expr::load(&sm_ref, vec![int(1), r.clone()])))
            });
        }
        // The block's partial (O, M, L) of its unit's split.
        let temp = |s: &mut Self, what: &str, shape: &[u64]| -> R<String> {
            let name = format!("{}_{what}", s.kernel.name);
            s.temps.push(kir::BufferDecl {
                name: name.clone(),
                dtype: DType::F32,
                shape: shape.iter().rev().copied().collect(),
                kind: kir::BufferKind::Temp,
                tensor_map: None,
            });
            let pp = s.param(&name);
            let l = Layout::flat(
                &shape.iter().map(|&n| n as i64).collect::<Vec<_>>(),
                &col_major(shape),
            )
            .map_err(internal)?;
            Ok(s.tensor(Space::Global(pp), DType::F32, l))
        };
        let part_o = temp(self, "partials", &[dv, rows, splits, units])?;
        let part_ml = temp(self, "maxsums", &[2, rows, splits, units])?;
        let (po, pm) = (part_o.clone(), part_ml.clone());
        let threads = self.block_threads();
        self.for_(
            "ix",
            tid.clone(),
            int(rows * dv),
            int(threads),
            false,
            |s, ix| {
                let r = s.let_("r", Ty::Idx, Expr::idx(IdxOp::Div, ix.clone(), int(dv)));
                let d = s.let_("d", Ty::Idx, Expr::idx(IdxOp::Rem, ix, int(dv)));
                let o = block_sum(s, &r, &d);
                s.out.push(Stmt::Store {
                    tensor: po,
                    coord: vec![d, r, split.clone(), unit.clone()],
                    value: o,
                });
                Ok(())
            },
        )?;
        self.if_(lt(tid.clone(), int(rows)), |s| {
            for i in 0..2 {
                s.out.push(Stmt::Store {
                    tensor: pm.clone(),
                    coord: vec![int(i), tid.clone(), split.clone(), unit.clone()],
                    value: Expr::load(&sm_ref, vec![int(i), tid.clone()]),
                });
            }
            Ok(())
        })?;
        let (counter, old) = self.arrival_counters("arrivals", units)?;
        let t2 = tid.clone();
        self.when_last(
            (&counter, vec![unit.clone()]),
            splits,
            (&old, 0),
            &tid,
            &Stmt::Sync,
            move |s| {
                // The splits' weights and each row's L, by one thread a row; then every output
                // merged over the splits in order.
                let sm_w2 = shared(s, &[splits, rows])?;
                let sm_ref2 = shared(s, &[2, rows])?;
                s.if_(lt(t2.clone(), int(rows)), |s| {
                    let at = |i: u64, sp: Expr| {
                        Expr::load(&part_ml, vec![int(i), t2.clone(), sp, unit.clone()])
                    };
                    s.decode_weights(splits, &at, kk, &sm_w2, &t2, &sm_ref2)
                })?;
                s.out.push(Stmt::Sync);
                s.decode_outputs(p, rows, row_at, |s, r, d| {
                    let acc = s.fresh("acc");
                    s.out.push(Stmt::Var {
                        var: acc.clone(),
                        ty: Ty::Elem(DType::F32),
                        init: lit(DType::F32, 0.0),
                    });
                    let acc2 = acc.clone();
                    s.over_parts(splits, |s, sp| {
                        let term = Expr::call(
                            Func::Mul,
                            vec![
                                Expr::load(
                                    &part_o,
                                    vec![d.clone(), r.clone(), sp.clone(), unit.clone()],
                                ),
                                Expr::load(&sm_w2, vec![sp, r.clone()]),
                            ],
                        );
                        s.out.push(Stmt::Assign {
                            var: acc2.clone(),
                            value: Expr::call(Func::Add, vec![Expr::var(&acc2), term]),
                        });
                        Ok(())
                    })?;
                    Ok((
                        Expr::var(&acc),
                        Expr::load(&sm_ref2, vec![int(1), r.clone()]),
                    ))
                })
            },
        )
    }

    /// The CUDA-core kernel's [`Builder::decode_merge`] writer: each lane group's `(m, l)` of
    /// its rows (by its first lane) and its lanes' slices of the O rows.
    pub(super) fn decode_write_groups(
        &mut self,
        (m, l, oreg): (&[String], &[String], &str),
        ln: &Lanes,
        (rows, dv): (u64, u64),
        (sm_ml, sm_o): (&str, &str),
    ) -> R<()> {
        let cv = dv.div_ceil(WIDTH);
        let first = Expr::idx(IdxOp::Eq, ln.lane.clone(), Expr::Int(0));
        self.if_(first, |s| {
            for r in 0..rows {
                for (i, var) in [&m[r as usize], &l[r as usize]].into_iter().enumerate() {
                    s.out.push(Stmt::Store {
                        tensor: sm_ml.to_string(),
                        coord: vec![int(i as u64), int(r), ln.grp.clone()],
                        value: Expr::var(var),
                    });
                }
            }
            Ok(())
        })?;
        for i in 0..cv.div_ceil(ln.lanes) {
            let chunk = ln.chunks[i as usize].clone();
            let store = |s: &mut Self| -> R<()> {
                for r in 0..rows {
                    for e in 0..WIDTH {
                        s.out.push(Stmt::Store {
                            tensor: sm_o.to_string(),
                            coord: vec![
                                add(mul(chunk.clone(), int(WIDTH)), int(e)),
                                int(r),
                                ln.grp.clone(),
                            ],
                            value: Expr::load(oreg, vec![int(i * WIDTH + e), int(r)]),
                        });
                    }
                }
                Ok(())
            };
            match ln.guard(i, cv) {
                Some(inside) => self.if_(inside, store)?,
                None => store(self)?,
            }
        }
        Ok(())
    }

    /// Row `tid`'s weights `2^((mᵢ - M)·c)` of its `n` partials `(mᵢ, lᵢ) = (at(0, i),
    /// at(1, i))` (a block's lane groups, or a unit's splits) to `w[i, tid]`, and `(M, L =
    /// Σ lᵢ·wᵢ)` to `out[.., tid]`: `M` their max (a row with no finite score subtracts 0), the
    /// partials in order.
    fn decode_weights(
        &mut self,
        splits: u64,
        at: &dyn Fn(u64, Expr) -> Expr,
        kk: f64,
        w: &str,
        tid: &Expr,
        out: &str,
    ) -> R<()> {
        let f32t = Ty::Elem(DType::F32);
        let var = |s: &mut Self, hint: &str, init: f64| {
            let v = s.fresh(hint);
            s.out.push(Stmt::Var {
                var: v.clone(),
                ty: f32t,
                init: lit(DType::F32, init),
            });
            v
        };
        let big = var(self, "mm", f64::NEG_INFINITY);
        self.over_parts(splits, |s, sp| {
            s.out.push(Stmt::Assign {
                var: big.clone(),
                value: Expr::call(Func::Max, vec![Expr::var(&big), at(0, sp)]),
            });
            Ok(())
        })?;
        let mr = self.att_reference(&Expr::var(&big));
        let sum = var(self, "ls", 0.0);
        self.over_parts(splits, |s, sp| {
            let wi = s.let_("w", f32t, weight(at(0, sp.clone()), &mr, kk));
            s.out.push(Stmt::Store {
                tensor: w.to_string(),
                coord: vec![sp.clone(), tid.clone()],
                value: wi.clone(),
            });
            s.out.push(Stmt::Assign {
                var: sum.clone(),
                value: Expr::call(
                    Func::Add,
                    vec![Expr::var(&sum), Expr::call(Func::Mul, vec![at(1, sp), wi])],
                ),
            });
            Ok(())
        })?;
        for (i, v) in [big, sum].into_iter().enumerate() {
            self.out.push(Stmt::Store {
                tensor: out.to_string(),
                coord: vec![int(i as u64), tid.clone()],
                value: Expr::var(&v),
            });
        }
        Ok(())
    }

    /// `f(s, i)` for each of `splits` partials `i` in order, [`IN_FLIGHT`] of them unrolled a
    /// turn: their loads are independent and in flight together, where a plain loop would wait
    /// on each (a unit's last block runs after every other block of its unit, so its latency is
    /// the kernel's), without unrolling them all (a register each).
    fn over_parts(&mut self, splits: u64, f: impl Fn(&mut Self, Expr) -> R<()>) -> R<()> {
        let n = IN_FLIGHT.min(splits);
        self.for_("sp", int(0), int(splits), int(n), false, |s, sp0| {
            s.for_("su", int(0), int(n), int(1), true, |s, u| {
                let sp = s.let_("sp", Ty::Idx, add(sp0, u));
                if splits.is_multiple_of(n) {
                    f(s, sp)
                } else {
                    s.if_(lt(sp.clone(), int(splits)), |s| f(s, sp))
                }
            })
        })
    }

    /// Every output `(r, d)` of the unit, a thread each in turn: `o / l` from `value(r, d)`
    /// stored at query `r % sq` of batch entry `bi0 + r / sq` through the epilogue.
    fn decode_outputs(
        &mut self,
        p: &AttPlan,
        rows: u64,
        row_at: &dyn Fn(&Expr) -> (Expr, Expr),
        value: impl Fn(&mut Self, &Expr, &Expr) -> R<(Expr, Expr)>,
    ) -> R<()> {
        let dv = p.dv;
        let tid = bx(Builtin::TidX);
        let threads = self.block_threads();
        self.for_("ix", tid, int(rows * dv), int(threads), false, |s, ix| {
            let r = s.let_("r", Ty::Idx, Expr::idx(IdxOp::Div, ix.clone(), int(dv)));
            let d = s.let_("d", Ty::Idx, Expr::idx(IdxOp::Rem, ix, int(dv)));
            let (o, l) = value(s, &r, &d)?;
            let o = Expr::cast(p.dt, Expr::call(Func::Div, vec![o, l]));
            let (qr, bi) = row_at(&r);
            let qr = s.let_("oq", Ty::Idx, qr);
            let bi = s.let_("ob", Ty::Idx, bi);
            s.att_store_at(p, o, vec![qr, d, bi])
        })
    }
}

impl Builder<'_, '_> {
    /// Threads of the kernel's block (set before the merge).
    fn block_threads(&self) -> u64 {
        u64::from(self.kernel.block[0])
    }
}

/// `2^((m - mr)·c)`.
fn weight(m: Expr, mr: &Expr, kk: f64) -> Expr {
    Expr::call(
        Func::Exp2,
        vec![Expr::call(
            Func::Mul,
            vec![
                Expr::call(Func::Sub, vec![m, mr.clone()]),
                lit(DType::F32, kk),
            ],
        )],
    )
}

/// Column-major strides of `shape` (the first dimension contiguous).
fn col_major(shape: &[u64]) -> Vec<i64> {
    let mut st = 1i64;
    shape
        .iter()
        .map(|&n| {
            let s = st;
            st *= n as i64;
            s
        })
        .collect()
}
