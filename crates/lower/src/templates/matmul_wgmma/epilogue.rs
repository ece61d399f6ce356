//! The Hopper matmul's epilogues: the fused chain staged through shared memory (or stored
//! element by element), a split's f32 partials, and split K's summing kernel.

use super::*;
use crate::LowerError;
use crate::templates::epilogue_reduce::ReduceTiles;
use irc_layout::coalesce;

/// The epilogue's outputs: the vector path's tensors, or one tensor per root for element
/// stores.
pub(super) struct Epilogue {
    /// (each root's global vector view, staging tile, its vector view, its (thread, value)
    /// partition).
    pub(super) vector: Option<(Vec<String>, String, String, String)>,
    pub(super) outs: Vec<String>,
    /// Columns per staging pass.
    pub(super) cw: u64,
    /// The roots cannot take 16-byte copies but the output is N-contiguous (`N` odd, say):
    /// the values still go through the staging tile, and a warp then stores 32 consecutive
    /// elements of a row per instruction instead of each thread its fragment's scattered
    /// pairs.
    pub(super) scalar_staged: bool,
    /// A norm prologue's row scales, `[row, consumer]` in shared memory: each accumulator is
    /// multiplied by its row's before it is rounded.
    pub(super) row_scale: Option<String>,
    /// The staging tile's (pair, thread, pair index, consumer) view, where a thread's two
    /// values of a pair are neighbours in a row and move as one store (4, 8 or 16 bytes), and
    /// the register pair they are rounded into.
    pub(super) pairs: Option<(String, String)>,
}

impl Builder<'_, '_> {
    /// A split's accumulators, as f32, into its slice of the partials `part`: value `v` of
    /// thread `t` at `(t, v, 64-row block, column block, batch, split)`, the partials padded to
    /// whole tiles so no store needs a guard.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn wgmma_partials(
        &mut self,
        part: &str,
        acc: &str,
        bn: u64,
        c: &Expr,
        m0: &Expr,
        n0: &Expr,
        bi: &Expr,
        sk: &Expr,
    ) -> R<()> {
        let t = self.let_("t", Ty::Idx, rem(bx(Builtin::TidX), Expr::Int(128)));
        let rb = self.let_(
            "rb",
            Ty::Idx,
            add(div(m0.clone(), Expr::Int(64)), c.clone()),
        );
        let cb = self.let_("cb", Ty::Idx, div(n0.clone(), int(bn)));
        self.unrolled("v", bn / 2, &mut |s, v| {
            s.out.push(Stmt::Store {
                tensor: part.to_string(),
                coord: vec![
                    t.clone(),
                    v.clone(),
                    rb.clone(),
                    cb.clone(),
                    bi.clone(),
                    sk.clone(),
                ],
                value: Expr::load(acc, vec![v]),
            });
            Ok(())
        })
    }

    /// Split K's second kernel: every output element sums its `split` partials in split order,
    /// rounds to the matmul's dtype and goes through the epilogue chain to every root.
    pub(super) fn splitk_reduce(
        &mut self,
        inst: &Inst,
        roots: &[ValueId],
        p: &TcPlan,
        ws: &str,
        split: u64,
        (mp, np): (u64, u64),
    ) -> R<()> {
        let threads = crate::lower::THREADS;
        let n = p.batch * p.m * p.n;
        self.kernel.grid = [
            n.div_ceil(u64::from(threads)).clamp(1, MAX_BLOCKS) as u32,
            1,
            1,
        ];
        self.kernel.block = [threads, 1, 1];
        let pp = self.param(ws);
        // (m, n, batch, split) over the padded partials.
        let part = self.tensor(
            Space::Global(pp),
            DType::F32,
            Layout::flat(
                &[p.m as i64, p.n as i64, p.batch as i64, split as i64],
                &[np as i64, 1, (mp * np) as i64, (p.batch * mp * np) as i64],
            )
            .map_err(internal)?,
        );
        let outs: Vec<String> = roots
            .iter()
            .map(|&r| self.global(r, p.access_c.clone()))
            .collect();
        let mm = inst.result;
        let start = add(
            mul(bx(Builtin::BidX), bx(Builtin::NtidX)),
            bx(Builtin::TidX),
        );
        let step = mul(bx(Builtin::NctaidX), bx(Builtin::NtidX));
        self.for_("e", start, int(n), step, false, |s, e| {
            let gn = s.let_("gn", Ty::Idx, rem(e.clone(), int(p.n)));
            let gm = s.let_("gm", Ty::Idx, rem(div(e.clone(), int(p.n)), int(p.m)));
            let b = s.let_("b", Ty::Idx, div(e.clone(), int(p.m * p.n)));
            let sum = s.var("acc", Ty::Elem(DType::F32), lit(DType::F32, 0.0));
            s.for_(
                "sk",
                Expr::Int(0),
                int(split),
                Expr::Int(1),
                false,
                |s, sk| {
                    let x = Expr::load(&part, vec![gm.clone(), gn.clone(), b.clone(), sk]);
                    s.assign(&sum, Expr::call(kir::Func::Add, vec![sum.clone(), x]));
                    Ok(())
                },
            )?;
            let value = cast_to(p.dtype, DType::F32, sum);
            s.coord = vec![gm.clone(), gn.clone(), b.clone()];
            s.epilogue_stores(mm, value, &p.access_c, roots, &outs, vec![gm, gn, b])
        })
    }

    /// The epilogue's tensors: the staging tile (where the roots can take 16-byte copies, or
    /// `staged` asks for it: column reductions read it) and, where every root can take 16-byte
    /// copies (N-contiguous, N a multiple of 8, the matmul's dtype), their vector views.
    pub(super) fn wgmma_epilogue_plan(
        &mut self,
        roots: &[ValueId],
        p: &TcPlan,
        cw: u64,
        staged: bool,
    ) -> R<Epilogue> {
        let dt = p.dtype;
        let g = match crate::templates::matmul_mma::vector_layout(&p.access_c, 1, 8) {
            Some(l)
                if !roots.is_empty()
                    && roots.iter().all(|&r| self.ty(r).dtype == dt)
                    && kir::is_vector_operand(&l, 8, p.access_c.rank()) =>
            {
                Some(
                    roots
                        .iter()
                        .map(|&r| self.global(r, l.clone()))
                        .collect::<Vec<_>>(),
                )
            }
            _ => None,
        };
        // Element stores through the staging tile where the output's N mode is contiguous.
        let scalar_staged = g.is_none()
            && !roots.is_empty()
            && p.access_c.modes().get(1).is_some_and(|m| {
                coalesce(m).is_ok_and(|m| matches!(m.leaves().as_slice(), [(_, 1)]))
            });
        let mut pairs = None;
        let vector = match g.is_some() || staged || scalar_staged {
            true => {
                let g = g.unwrap_or_default();
                let li = |s: u64, d: i64| Layout::int(s as i64, d).map_err(internal);
                let pitch = (cw + 8) as i64;
                let stage = self.tensor(
                    Space::Shared,
                    dt,
                    concat(&[li(64, pitch)?, li(cw, 1)?, li(2, 64 * pitch)?])?,
                );
                let stage_v = self.tensor(
                    Space::View(stage.clone()),
                    dt,
                    concat(&[
                        li(8, 1)?,
                        li(64, pitch)?,
                        li(cw / 8, 8)?,
                        li(2, 64 * pitch)?,
                    ])?,
                );
                // What thread t's value v of a chunk writes: the staging tile composed with
                // the accumulator's (thread, value) layout over a 64 x cw tile.
                let tv = irc_layout::wgmma_m64nk16_d(cw as i64).map_err(internal)?;
                let part = irc_layout::composition(
                    &Layout::flat(&[64, cw as i64], &[pitch, 1]).map_err(internal)?,
                    tv.layout(),
                )
                .map_err(internal)?;
                let mut modes = part.modes();
                modes.push(li(2, 64 * pitch)?);
                let stage_tv = self.tensor(Space::View(stage.clone()), dt, concat(&modes)?);
                // A thread's values two by two: the value mode divided by 2, where its first
                // part is two neighbouring elements (`2:1`) and they move 4, 8 or 16 bytes.
                let by2 =
                    irc_layout::logical_divide(&modes[1], &irc_layout::Tiler::Layout(li(2, 1)?))
                        .map_err(internal)?;
                let paired = concat(&[
                    by2.mode(0).map_err(internal)?,
                    modes[0].clone(),
                    by2.mode(1).map_err(internal)?,
                    modes[2].clone(),
                ])?;
                pairs = match kir::is_vector_operand(&paired, 2, 3)
                    && matches!(2 * dt.size_bytes(), 4 | 8 | 16)
                {
                    true => Some((
                        self.tensor(Space::View(stage.clone()), dt, paired),
                        self.tensor(Space::Registers, dt, li(2, 1)?),
                    )),
                    false => None,
                };
                Some((g, stage, stage_v, stage_tv))
            }
            false => None,
        };
        let outs = if vector.as_ref().is_some_and(|v| !v.0.is_empty()) {
            vec![]
        } else {
            roots
                .iter()
                .map(|&r| self.global(r, p.access_c.clone()))
                .collect()
        };
        Ok(Epilogue {
            vector,
            outs,
            cw,
            scalar_staged,
            row_scale: None,
            pairs,
        })
    }

    /// The row scales of a thread's accumulators, read once from `rs` (`[row, consumer]`)
    /// into registers, one per row the thread holds (`norm_prologue::split_rows` of the
    /// accumulator layout `d`): the registers and the layout from a value to its register.
    fn row_scale_registers(
        &mut self,
        d: &Layout,
        rs: &str,
        t: &Expr,
        c: &Expr,
    ) -> R<(String, Layout)> {
        let (slot_of, slot_rows, _) =
            super::super::norm_prologue::split_rows(d, 64).ok_or_else(|| {
                Retry::Fail(LowerError::Internal(format!(
                    "the accumulator layout {d} does not split into rows per thread"
                )))
            })?;
        let n = slot_rows.size().map_err(internal)?;
        let regs = self.tensor(
            Space::Registers,
            DType::F32,
            Layout::int(n, 1).map_err(internal)?,
        );
        let base = kir::offset_expr(d, &[t.clone(), Expr::Int(0)]).map_err(internal)?;
        let base = self.let_("rb", Ty::Idx, rem(base, Expr::Int(64)));
        for r in 0..n {
            let off = slot_rows
                .crd2idx(&irc_layout::IntTuple::Int(r))
                .map_err(internal)?;
            self.out.push(Stmt::Store {
                tensor: regs.clone(),
                coord: vec![Expr::Int(r)],
                value: Expr::load(rs, vec![add(base.clone(), Expr::Int(off)), c.clone()]),
            });
        }
        Ok((regs, slot_of))
    }

    /// The tile's accumulators through the epilogue chain to every root. Value `v` of thread
    /// `t` of consumer `c` is element `wgmma_m64nk16_d(bn)(t, v)` of the consumer's 64 x bn
    /// tile. With a vector output, `cw` columns at a time: the values into the staging tile
    /// (two neighbours a store where the tile's layout allows), a warpgroup barrier, then each
    /// thread loads 8 consecutive elements of a row into registers (one 16-byte load), applies
    /// the chain there and copies each root out with one 16-byte store, a barrier; otherwise
    /// each value stored where it lands.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn wgmma_epilogue(
        &mut self,
        inst: &Inst,
        roots: &[ValueId],
        p: &TcPlan,
        epi: &Epilogue,
        acc: &str,
        bn: u64,
        c: &Expr,
        (m0, n0, bi): (&Expr, &Expr, &Expr),
        reduce: Option<&ReduceTiles>,
    ) -> R<()> {
        let d = irc_layout::wgmma_m64nk16_d(bn as i64).map_err(internal)?;
        let dl = d.layout().clone();
        let mm = inst.result;
        let cols = reduce.filter(|r| r.has_cols());
        let dt = p.dtype;
        let t = self.let_("t", Ty::Idx, rem(bx(Builtin::TidX), Expr::Int(128)));
        let row0 = self.let_(
            "r0",
            Ty::Idx,
            add(m0.clone(), mul(c.clone(), Expr::Int(64))),
        );
        // Whether element (gm, gn) is inside the output: always, where the tiles divide it
        // (no guard: the unrolled chunks of the epilogue are then straight-line code, whose
        // operand loads ptxas issues together instead of one a guarded chunk).
        let whole = p.m.is_multiple_of(super::BM) && p.n.is_multiple_of(bn);
        let in_range = |gm: &Expr, gn: &Expr| {
            (!whole).then(|| {
                Expr::idx(
                    IdxOp::And,
                    lt(gm.clone(), int(p.m)),
                    lt(gn.clone(), int(p.n)),
                )
            })
        };
        // One value of output element (gm, gn) through the chain to every root, where it is
        // inside the output.
        let store_at = |s: &mut Self, gm: Expr, gn: Expr, value: Expr| -> R<()> {
            let cond = in_range(&gm, &gn);
            let body = s.block(|s| {
                s.coord = vec![gm.clone(), gn.clone(), bi.clone()];
                s.epilogue_stores(
                    mm,
                    value,
                    &p.access_c,
                    roots,
                    &epi.outs,
                    vec![gm, gn, bi.clone()],
                )
            })?;
            s.guarded(cond, body);
            Ok(())
        };
        // Value v's (row, column) in the consumer's tile.
        let place = |s: &mut Self, v: &Expr| -> R<(Expr, Expr)> {
            let idx = kir::offset_expr(&dl, &[t.clone(), v.clone()]).map_err(internal)?;
            let idx = s.let_("di", Ty::Idx, idx);
            Ok((rem(idx.clone(), Expr::Int(64)), div(idx, Expr::Int(64))))
        };
        // A norm prologue's row scales: the thread's rows' scales into registers once, then
        // each accumulator times its row's.
        let scales = match &epi.row_scale {
            Some(rs) => Some(self.row_scale_registers(&dl, rs, &t, c)?),
            None => None,
        };
        let scaled = |v: Expr| -> Expr {
            let x = Expr::load(acc, vec![v.clone()]);
            match &scales {
                Some((regs, index)) => {
                    let r = kir::offset_expr(index, &[v]).unwrap_or(Expr::Int(0));
                    Expr::call(kir::Func::Mul, vec![x, Expr::load(regs, vec![r])])
                }
                None => x,
            }
        };
        let vector_roots = epi.vector.as_ref().is_some_and(|v| !v.0.is_empty());
        if !vector_roots && !roots.is_empty() && !epi.scalar_staged {
            self.unrolled_chunks("v", bn / 2, &mut |s, v| {
                let (row, col) = place(s, &v)?;
                let value = cast_to(dt, DType::F32, scaled(v.clone()));
                let gm = s.let_("gm", Ty::Idx, add(row0.clone(), row));
                let gn = s.let_("gn", Ty::Idx, add(n0.clone(), col));
                store_at(s, gm, gn, value)
            })?;
        }
        let Some((g, stage, stage_v, stage_tv)) = &epi.vector else {
            return Ok(());
        };
        if g.is_empty() && cols.is_none() && !epi.scalar_staged {
            return Ok(());
        }
        // Several roots: each one's 8 values go through registers of its own (the staged
        // matmul values stay for the next root); one root that is not the matmul is computed
        // in the register copy of its staged values.
        let regs: Vec<String> = roots
            .iter()
            .map(|&r| match roots.len() == 1 || r == mm {
                true => Ok(String::new()),
                false => {
                    Ok(self.tensor(Space::Registers, dt, Layout::int(8, 1).map_err(internal)?))
                }
            })
            .collect::<R<_>>()?;
        // A chain reads a thread's 8 staged values from registers (one 16-byte load: the
        // vector roots are 16-bit) and leaves its results there: the staging tile is read once
        // and not written back.
        let src8 = match roots.iter().any(|&r| r != mm) && !g.is_empty() {
            true => Some(self.tensor(Space::Registers, dt, Layout::int(8, 1).map_err(internal)?)),
            false => None,
        };
        let named_barrier = || {
            intr(
                Intrinsic::BarSync,
                vec![Arg::Expr(add(c.clone(), Expr::Int(1))), imm(128)],
            )
        };
        let cw = epi.cw as i64;
        self.unrolled("q", bn / epi.cw, &mut |s, q| {
            // The matmul's values (rounded to its dtype) into the staging tile, through the
            // tile's (thread, value) partition: a per-thread base plus a constant per value.
            match &epi.pairs {
                // Two neighbours at a time, rounded into a register pair and stored as one.
                Some((paired, pair)) => s.unrolled("v", epi.cw / 4, &mut |s, k| {
                    for j in 0..2 {
                        let av = add(
                            mul(q.clone(), Expr::Int(cw / 2)),
                            add(mul(k.clone(), Expr::Int(2)), Expr::Int(j)),
                        );
                        s.out.push(Stmt::Store {
                            tensor: pair.clone(),
                            coord: vec![Expr::Int(j)],
                            value: cast_to(dt, DType::F32, scaled(av)),
                        });
                    }
                    s.out.push(Stmt::Copy {
                        width: 2,
                        dst: Frag {
                            tensor: paired.clone(),
                            at: vec![t.clone(), k, c.clone()],
                        },
                        src: Frag {
                            tensor: pair.clone(),
                            at: vec![],
                        },
                        hint: irc_kir::CacheHint::Normal,
                    });
                    Ok(())
                })?,
                None => s.unrolled("v", epi.cw / 2, &mut |s, v| {
                    let av = add(mul(q.clone(), Expr::Int(cw / 2)), v.clone());
                    let value = cast_to(dt, DType::F32, scaled(av));
                    s.out.push(Stmt::Store {
                        tensor: stage_tv.clone(),
                        coord: vec![t.clone(), v, c.clone()],
                        value,
                    });
                    Ok(())
                })?,
            }
            s.out.push(named_barrier());
            if let Some(rt) = cols {
                // The chunk's column partials, row block m0/64 + c; the staged values must
                // stay until every thread has read them.
                let gn0 = s.let_(
                    "qn",
                    Ty::Idx,
                    add(n0.clone(), mul(q.clone(), Expr::Int(cw))),
                );
                let block = s.let_(
                    "qb",
                    Ty::Idx,
                    add(div(m0.clone(), Expr::Int(64)), c.clone()),
                );
                let load = |r: Expr, col: Expr| Expr::load(stage, vec![r, col, c.clone()]);
                s.staged_col_partials(
                    rt,
                    p,
                    mm,
                    &load,
                    (64, epi.cw, 128),
                    &t,
                    (&row0, &gn0, bi),
                    &block,
                )?;
                if g.is_empty() && !epi.scalar_staged {
                    s.out.push(named_barrier());
                    return Ok(());
                }
                s.out.push(named_barrier());
            }
            if epi.scalar_staged {
                // 64 rows x cw columns over the warpgroup's 128 threads, row by row: each
                // value through the chain to every root, one element store each.
                s.unrolled("l", 64 * epi.cw / 128, &mut |s, l| {
                    let e = s.let_("e", Ty::Idx, add(mul(l, Expr::Int(128)), t.clone()));
                    let r = s.let_("rr", Ty::Idx, div(e.clone(), Expr::Int(cw)));
                    let col = s.let_("cc", Ty::Idx, rem(e, Expr::Int(cw)));
                    let gm = s.let_("gm", Ty::Idx, add(row0.clone(), r.clone()));
                    let gn = s.let_(
                        "gn",
                        Ty::Idx,
                        add(add(n0.clone(), mul(q.clone(), Expr::Int(cw))), col.clone()),
                    );
                    store_at(s, gm, gn, Expr::load(stage, vec![r, col, c.clone()]))
                })?;
                s.out.push(named_barrier());
                return Ok(());
            }
            // 64 rows x cw/8 vectors of 8 over the warpgroup's 128 threads: the 8 staged values
            // into registers, the chain on each, then one 16-byte copy per root.
            s.unrolled("l", epi.cw / 16, &mut |s, l| {
                let e = s.let_("e", Ty::Idx, add(mul(l, Expr::Int(128)), t.clone()));
                let r = s.let_("rr", Ty::Idx, div(e.clone(), Expr::Int(cw / 8)));
                let c8 = s.let_("c8", Ty::Idx, rem(e, Expr::Int(cw / 8)));
                let gm = s.let_("gm", Ty::Idx, add(row0.clone(), r.clone()));
                let gn8 = s.let_(
                    "gn8",
                    Ty::Idx,
                    add(
                        div(add(n0.clone(), mul(q.clone(), Expr::Int(cw))), Expr::Int(8)),
                        c8.clone(),
                    ),
                );
                let body = s.block(|s| {
                    // Each root's 8 values, element by element (z), into the register copy of
                    // the staged values (one root) or its own registers (several: the staged
                    // matmul values stay, and each root's value is reused by the roots computed
                    // from it).
                    let in_place = roots.len() == 1;
                    let staged_frag = Frag {
                        tensor: stage_v.clone(),
                        at: vec![r.clone(), c8.clone(), c.clone()],
                    };
                    if let Some(src8) = &src8 {
                        s.out.push(Stmt::Copy {
                            width: 8,
                            dst: Frag {
                                tensor: src8.clone(),
                                at: vec![],
                            },
                            src: staged_frag.clone(),
                            hint: irc_kir::CacheHint::Normal,
                        });
                        // Along the columns (coordinate mode 1): an operand the chain reads
                        // 8 contiguous aligned elements of (a residual, a bias row) is one
                        // 16-byte copy before the loop.
                        let at = vec![gm.clone(), gn8.clone(), bi.clone()];
                        s.vector_loop_along(8, 1, at, |s, gn, z| {
                            let staged = Expr::load(src8, vec![z.clone()]);
                            s.coord = vec![gm.clone(), gn, bi.clone()];
                            let targets: Vec<(String, Vec<Expr>)> = regs
                                .iter()
                                .map(|reg| match in_place {
                                    true => (src8.clone(), vec![z.clone()]),
                                    false => (reg.clone(), vec![z.clone()]),
                                })
                                .collect();
                            s.roots_into(mm, staged, &p.access_c, roots, &targets)
                        })?;
                    }
                    for ((&root, g), reg) in roots.iter().zip(g).zip(&regs) {
                        let src = if let (true, Some(src8)) = (root == mm || in_place, &src8) {
                            Frag {
                                tensor: src8.clone(),
                                at: vec![],
                            }
                        } else if root == mm {
                            staged_frag.clone()
                        } else {
                            Frag {
                                tensor: reg.clone(),
                                at: vec![],
                            }
                        };
                        s.out.push(Stmt::Copy {
                            width: 8,
                            dst: Frag {
                                tensor: g.clone(),
                                at: vec![gm.clone(), gn8.clone(), bi.clone()],
                            },
                            src,
                            hint: irc_kir::CacheHint::Normal,
                        });
                    }
                    Ok(())
                })?;
                s.guarded(in_range(&gm, &mul(gn8.clone(), Expr::Int(8))), body);
                Ok(())
            })?;
            s.out.push(named_barrier());
            Ok(())
        })
    }
}
