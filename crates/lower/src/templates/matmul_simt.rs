//! The SIMT matmul template (f64 and the fallback): shared-memory tiles, register
//! sub-tiles per thread; batch broadcasting and transposed operands as layouts. Also the
//! dispatch between it and the tensor-core template.

use super::matmul_mma::*;
use crate::LowerError;
use crate::lower::*;
use irc_ir::infer::matmul_shape;
use irc_ir::{Attr, DType, Inst, ValueId};
use irc_kir::{Builtin, Expr, Func, IdxOp, Space, Stmt, Ty};
use irc_layout::{Layout, coalesce};

/// Matmul tile sizes: a block computes BM x BN outputs stepping BK along K; each of the
/// THREADS threads owns a TM x TN sub-tile, strided by the thread grid.
pub(crate) const BM: u64 = 64;
pub(crate) const BN: u64 = 64;
pub(crate) const BK: u64 = 16;
pub(crate) const TM: u64 = 4;
pub(crate) const TN: u64 = 4;

/// A matmul's operand and result accesses: `(m, k, batch)` → A's row-major index,
/// `(k, n, batch)` → B's, `(m, n, batch)` → C's, the batch coordinate one index over the
/// output's batch dims (row-major; an operand's broadcast batch dims are stride 0).
pub(crate) struct MatmulAccess {
    pub(crate) ms: irc_ir::infer::MatmulShape,
    pub(crate) access_a: Layout,
    pub(crate) access_b: Layout,
    pub(crate) access_c: Layout,
    /// A's logical K stride and B's logical N stride.
    pub(crate) ak_st: i64,
    pub(crate) bn_st: i64,
}

impl Builder<'_, '_> {
    pub(crate) fn matmul_access(&self, inst: &Inst) -> R<MatmulAccess> {
        let (a, bv) = (inst.operands[0], inst.operands[1]);
        let (ashape, bshape) = (self.ty(a).shape.clone(), self.ty(bv).shape.clone());
        let flag = |n: &str| inst.attrs.get(n).and_then(Attr::as_bool).unwrap_or(false);
        let (ta, tb) = (flag("transpose_a"), flag("transpose_b"));
        let ms = matmul_shape(&ashape, &bshape, ta, tb)
            .map_err(|e| Retry::Fail(LowerError::Internal(e.message)))?;
        let (m, n, k) = (ms.m, ms.n, ms.k);
        let nb = ms.batch.len();
        // Batch modes of an operand, broadcast to the output's batch dims.
        let batch_modes = |shape: &[u64], st: &[i64]| -> Vec<(u64, i64)> {
            let own = shape.len().saturating_sub(2);
            ms.batch
                .iter()
                .enumerate()
                .map(|(j, &size)| {
                    let i = j as i64 - (nb as i64 - own as i64);
                    if i < 0 || shape[i as usize] == 1 {
                        (size, 0)
                    } else {
                        (size, st[i as usize])
                    }
                })
                .collect()
        };
        let sa = row_major(&ashape);
        let ((_, am_st), (_, ak_st)) = if ashape.len() == 1 {
            ((1u64, 0i64), (k, 1i64))
        } else {
            let r = ashape.len();
            let (md, kd) = if ta { (r - 1, r - 2) } else { (r - 2, r - 1) };
            ((m, sa[md]), (k, sa[kd]))
        };
        let sb = row_major(&bshape);
        let ((_, bk_st), (_, bn_st)) = if bshape.len() == 1 {
            ((k, 1i64), (1u64, 0i64))
        } else {
            let r = bshape.len();
            let (kd, nd) = if tb { (r - 1, r - 2) } else { (r - 2, r - 1) };
            ((k, sb[kd]), (n, sb[nd]))
        };
        let oshape = self.ty(inst.result).shape.clone();
        let so = row_major(&oshape);
        let cm_st = if ms.squeeze_m { 0 } else { so[nb] };
        let cn_st = if ms.squeeze_n {
            0
        } else {
            so[oshape.len() - 1]
        };
        let out_batch: Vec<(u64, i64)> = ms.batch.iter().zip(&so).map(|(&s, &d)| (s, d)).collect();
        let li = |s: u64, d: i64| Layout::int(s as i64, d).map_err(internal);
        let access_a = concat(&[
            li(m, am_st)?,
            li(k, ak_st)?,
            dims_layout(&batch_modes(&ashape, &sa)).map_err(internal)?,
        ])?;
        let access_b = concat(&[
            li(k, bk_st)?,
            li(n, bn_st)?,
            dims_layout(&batch_modes(&bshape, &sb)).map_err(internal)?,
        ])?;
        let access_c = concat(&[
            li(m, cm_st)?,
            li(n, cn_st)?,
            dims_layout(&out_batch).map_err(internal)?,
        ])?;
        Ok(MatmulAccess {
            ms,
            access_a,
            access_b,
            access_c,
            ak_st,
            bn_st,
        })
    }
}

impl Builder<'_, '_> {
    /// A tiled matmul storing `roots`: the matmul itself and/or values of its epilogue, computed
    /// from the accumulator ([`Builder::epilogue_stores`]).
    pub(crate) fn matmul(&mut self, inst: &Inst, roots: &[ValueId]) -> R<()> {
        let (a, bv) = (inst.operands[0], inst.operands[1]);
        // Reductions of the epilogue (the policy's rule 6) go to the tensor-core templates.
        let (elements, reductions) = self.split_row_reductions(roots);
        let roots = &elements[..];
        // An rmsnorm computed as A's prologue (the policy's rule 10): the templates read x.
        let prologue = self.norm_prologue(inst)?;
        let a = prologue.as_ref().map_or(a, |p| p.x);
        let MatmulAccess {
            ms,
            access_a,
            access_b,
            access_c,
            ak_st,
            bn_st,
        } = self.matmul_access(inst)?;
        let (m, n, k) = (ms.m, ms.n, ms.k);
        let dtype = self.ty(inst.result).dtype;
        let acc_t = math_dtype(dtype);
        let batch: u64 = ms.batch.iter().product();
        // f16/bf16, and f32 by 3xTF32, on tensor cores where every operand has the result's
        // dtype.
        let same = [a, bv].iter().all(|&v| self.ty(v).dtype == dtype);
        if matches!(dtype, DType::F16 | DType::BF16 | DType::F32) && same {
            // Which dimension is contiguous is a property of the memory read, so look through
            // views (a transposed operand is K-contiguous even though its logical N stride is 1).
            let unit =
                |s: &mut Self, v: ValueId, access: &Layout, mode: usize, logical: bool| match s
                    .resolve(v, access)
                {
                    Some((_, l)) => l
                        .modes()
                        .get(mode)
                        .and_then(|m| coalesce(m).ok())
                        .is_some_and(|m| m.leaves().first().is_some_and(|&(_, d)| d == 1)),
                    None => logical,
                };
            let a_k_fast = unit(self, a, &access_a, 1, ak_st == 1);
            let b_n_fast = unit(self, bv, &access_b, 1, bn_st == 1);
            let plan = TcPlan {
                m,
                n,
                k,
                batch,
                dtype,
                access_a,
                access_b,
                access_c,
                a_k_fast,
                b_n_fast,
                prologue,
                reductions,
            };
            if self.l.options.wgmma
                && self.l.options.mma.is_none()
                && dtype != DType::F32
                && self.matmul_wgmma(inst, roots, &plan)?
            {
                return Ok(());
            }
            return self.matmul_tc(inst, roots, plan);
        }
        if prologue.is_some() || !reductions.is_empty() {
            return Err(Retry::Fail(LowerError::Internal(
                "a norm prologue or a row reduction on a matmul the tensor-core templates cannot take"
                    .into(),
            )));
        }
        self.kernel.grid = matmul_grid(m, n, batch, BM, BN)?;
        self.kernel.block = [THREADS, 1, 1];
        let cs: Vec<String> = roots
            .iter()
            .map(|&r| self.global(r, access_c.clone()))
            .collect();
        let mm = inst.result;
        let tile = |d0: u64, d1: u64| {
            Layout::flat(&[d0 as i64, d1 as i64], &[d1 as i64 + 1, 1]).map_err(internal)
        };
        let sa_t = self.tensor(Space::Shared, acc_t, tile(BK, BM)?);
        let sb_t = self.tensor(Space::Shared, acc_t, tile(BK, BN)?);
        let acc = self.tensor(
            Space::Registers,
            acc_t,
            Layout::flat(&[TM as i64, TN as i64], &[1, TM as i64]).map_err(internal)?,
        );
        let tx = self.let_(
            "tx",
            Ty::Idx,
            Expr::idx(IdxOp::Rem, bx(Builtin::TidX), int(BN / TN)),
        );
        let ty = self.let_(
            "ty",
            Ty::Idx,
            Expr::idx(IdxOp::Div, bx(Builtin::TidX), int(BN / TN)),
        );
        let a_dtype = self.ty(a).dtype;
        let b_dtype = self.ty(bv).dtype;
        let per_thread = (BM * BK) / u64::from(THREADS);
        let a_k_fast = ak_st == 1;
        let b_n_fast = bn_st == 1;
        self.batch_loop(batch, |s, bi| {
            let m0 = s.let_("m0", Ty::Idx, mul(bx(Builtin::BidY), int(BM)));
            let n0 = s.let_("n0", Ty::Idx, mul(bx(Builtin::BidX), int(BN)));
            let zero = lit(acc_t, 0.0);
            let acc2 = acc.clone();
            s.for_("i", Expr::Int(0), int(TM), Expr::Int(1), true, |s, i| {
                s.for_("j", Expr::Int(0), int(TN), Expr::Int(1), true, |s, j| {
                    s.out.push(Stmt::Store {
                        tensor: acc2,
                        coord: vec![i, j],
                        value: zero,
                    });
                    Ok(())
                })
            })?;
            let (sa_t2, sb_t2, acc3) = (sa_t.clone(), sb_t.clone(), acc.clone());
            let (tx2, ty2, bi2, m02, n02) =
                (tx.clone(), ty.clone(), bi.clone(), m0.clone(), n0.clone());
            s.for_("k0", Expr::Int(0), int(k), int(BK), false, |s, k0| {
                s.for_(
                    "l",
                    Expr::Int(0),
                    int(per_thread),
                    Expr::Int(1),
                    true,
                    |s, l| {
                        let e = s.let_(
                            "e",
                            Ty::Idx,
                            add(mul(l, int(u64::from(THREADS))), bx(Builtin::TidX)),
                        );
                        // Thread-to-tile coordinates: consecutive threads walk the operand's
                        // contiguous dimension, so global loads coalesce.
                        let split = |s: &mut Self, fast: u64| -> (Expr, Expr) {
                            let lo =
                                s.let_("lo", Ty::Idx, Expr::idx(IdxOp::Rem, e.clone(), int(fast)));
                            let hi =
                                s.let_("hi", Ty::Idx, Expr::idx(IdxOp::Div, e.clone(), int(fast)));
                            (lo, hi)
                        };
                        let (ak, am) = if a_k_fast {
                            split(s, BK)
                        } else {
                            let (mm, kk) = split(s, BM);
                            (kk, mm)
                        };
                        let gm = s.let_("gm", Ty::Idx, add(m02.clone(), am.clone()));
                        let gk = s.let_("gk", Ty::Idx, add(k0.clone(), ak.clone()));
                        s.guarded_tile_load(
                            a,
                            &access_a,
                            vec![gm.clone(), gk.clone(), bi2.clone()],
                            Expr::idx(IdxOp::And, lt(gm, int(m)), lt(gk, int(k))),
                            a_dtype,
                            acc_t,
                            &sa_t2,
                            vec![ak, am],
                        )?;
                        let (bn, bk) = if b_n_fast {
                            split(s, BN)
                        } else {
                            let (kk, nn) = split(s, BK);
                            (nn, kk)
                        };
                        let gk2 = s.let_("gk", Ty::Idx, add(k0.clone(), bk.clone()));
                        let gn = s.let_("gn", Ty::Idx, add(n02.clone(), bn.clone()));
                        s.guarded_tile_load(
                            bv,
                            &access_b,
                            vec![gk2.clone(), gn.clone(), bi2.clone()],
                            Expr::idx(IdxOp::And, lt(gk2, int(k)), lt(gn, int(n))),
                            b_dtype,
                            acc_t,
                            &sb_t2,
                            vec![bk, bn],
                        )
                    },
                )?;
                s.out.push(Stmt::Sync);
                let (sa_t3, sb_t3, acc4, tx3, ty3) = (
                    sa_t2.clone(),
                    sb_t2.clone(),
                    acc3.clone(),
                    tx2.clone(),
                    ty2.clone(),
                );
                s.for_("kk", Expr::Int(0), int(BK), Expr::Int(1), true, |s, kk| {
                    s.for_("i", Expr::Int(0), int(TM), Expr::Int(1), true, |s, i| {
                        let a_row = add(ty3.clone(), mul(i.clone(), int(BM / TM)));
                        let av = s.let_(
                            "a",
                            Ty::Elem(acc_t),
                            Expr::load(&sa_t3, vec![kk.clone(), a_row]),
                        );
                        s.for_("j", Expr::Int(0), int(TN), Expr::Int(1), true, |s, j| {
                            let b_col = add(tx3.clone(), mul(j.clone(), int(BN / TN)));
                            let bval = Expr::load(&sb_t3, vec![kk.clone(), b_col]);
                            let cur = Expr::load(&acc4, vec![i.clone(), j.clone()]);
                            let value = Expr::call(
                                Func::Add,
                                vec![cur, Expr::call(Func::Mul, vec![av, bval])],
                            );
                            s.out.push(Stmt::Store {
                                tensor: acc4.clone(),
                                coord: vec![i, j],
                                value,
                            });
                            Ok(())
                        })
                    })
                })?;
                s.out.push(Stmt::Sync);
                Ok(())
            })?;
            let acc5 = acc.clone();
            let (tx4, ty4) = (tx.clone(), ty.clone());
            s.for_("i", Expr::Int(0), int(TM), Expr::Int(1), true, |s, i| {
                s.for_("j", Expr::Int(0), int(TN), Expr::Int(1), true, |s, j| {
                    let gm = s.let_(
                        "cm",
                        Ty::Idx,
                        add(m0, add(ty4, mul(i.clone(), int(BM / TM)))),
                    );
                    let gn = s.let_(
                        "cn",
                        Ty::Idx,
                        add(n0, add(tx4, mul(j.clone(), int(BN / TN)))),
                    );
                    let cond =
                        Expr::idx(IdxOp::And, lt(gm.clone(), int(m)), lt(gn.clone(), int(n)));
                    s.if_(cond, |s| {
                        let acc_v = cast_to(dtype, acc_t, Expr::load(&acc5, vec![i, j]));
                        s.coord = vec![gm.clone(), gn.clone(), bi.clone()];
                        s.epilogue_stores(mm, acc_v, &access_c, roots, &cs, vec![gm, gn, bi])
                    })
                })
            })
        })
    }

    /// `var %x = 0; if cond { %x <- value } ; store smem[tile_coord], %x`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn guarded_tile_load(
        &mut self,
        v: ValueId,
        access: &Layout,
        coord: Vec<Expr>,
        cond: Expr,
        dtype: DType,
        acc_t: DType,
        smem: &str,
        tile_coord: Vec<Expr>,
    ) -> R<()> {
        let x = self.fresh("x");
        self.out.push(Stmt::Var {
            var: x.clone(),
            ty: Ty::Elem(acc_t),
            init: lit(acc_t, 0.0),
        });
        let access = access.clone();
        let x2 = x.clone();
        self.if_(cond, |s| {
            s.coord = coord;
            let e = s.value_at(v, &access)?;
            s.out.push(Stmt::Assign {
                var: x2,
                value: cast_to(acc_t, dtype, e),
            });
            Ok(())
        })?;
        self.out.push(Stmt::Store {
            tensor: smem.to_string(),
            coord: tile_coord,
            value: Expr::var(&x),
        });
        Ok(())
    }

    /// The epilogue at one output element: with the matmul's value `acc` (at `access`, the
    /// builder's coordinate set to the element), computes each of `roots` and stores it to the
    /// matching tensor of `outs` at `coord`. A root computed earlier is reused by later ones,
    /// never re-read from memory.
    pub(crate) fn epilogue_stores(
        &mut self,
        mm: ValueId,
        acc: Expr,
        access: &Layout,
        roots: &[ValueId],
        outs: &[String],
        coord: Vec<Expr>,
    ) -> R<()> {
        self.overrides.insert(mm, (access.clone(), acc.clone()));
        for (&root, out) in roots.iter().zip(outs) {
            let v = if root == mm {
                acc.clone()
            } else {
                let e = self.compute_at(root, access, false)?;
                self.overrides.insert(root, (access.clone(), e.clone()));
                e
            };
            self.out.push(Stmt::Store {
                tensor: out.clone(),
                coord: coord.clone(),
                value: v,
            });
        }
        for &root in roots {
            self.overrides.remove(&root);
        }
        Ok(())
    }

    /// The roots other than the matmul `mm` at the current coordinate (`self.coord`), given
    /// the matmul's value there: root `k`'s value is stored to `targets[k]` (a tensor and a
    /// coordinate; the matmul's own entry is unused) and read back from there by the roots
    /// computed from it.
    pub(crate) fn roots_into(
        &mut self,
        mm: ValueId,
        value: Expr,
        access: &Layout,
        roots: &[ValueId],
        targets: &[(String, Vec<Expr>)],
    ) -> R<()> {
        self.overrides.insert(mm, (access.clone(), value));
        for (&root, (tensor, coord)) in roots.iter().zip(targets) {
            if root == mm {
                continue;
            }
            let value = self.compute_at(root, access, false)?;
            self.out.push(Stmt::Store {
                tensor: tensor.clone(),
                coord: coord.clone(),
                value,
            });
            let back = Expr::load(tensor, coord.clone());
            self.overrides.insert(root, (access.clone(), back));
        }
        for &root in roots.iter().chain([&mm]) {
            self.overrides.remove(&root);
        }
        Ok(())
    }
}
