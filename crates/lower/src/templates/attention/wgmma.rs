//! The Hopper attention schedule (sm_90a): TMA, mbarriers and `wgmma` for both products.
//!
//! A block of three warpgroups owns 128 query rows of one batch entry: warpgroup 0 is the
//! producer (one thread issues every TMA load; `setmaxnreg.dec` gives its registers away),
//! warpgroups 1 and 2 are consumers of 64 query rows each (`setmaxnreg.inc`). The producer
//! loads the Q tile once, then K and V tiles of [`BKV`] keys into a ring of stages, each
//! stage with its own "K full", "V full" and "empty" mbarriers, so a consumer starts `Q·Kᵀ`
//! while V is still arriving and the producer runs up to the ring's depth ahead. For each key
//! tile a consumer:
//!
//! 1. waits for K, then `S = Q·Kᵀ` by `wgmma.m64nBKVk16` with both operands in shared memory
//!    (Q's 64 rows of this consumer, K's tile), f32 accumulators;
//! 2. applies the prologue and the online softmax (the parent module's, on the same register
//!    order: each warp's part of `wgmma_m64nk16_d` is atoms of `mma_m16n8k16_c`), leaving
//!    `P = exp(S - m)` in registers as f16/bf16;
//! 3. waits for V, then `O += P·V` by `wgmma.rs` with P as the register A operand, and
//!    releases the stage.
//!
//! Tiles are the canonical 128-byte-swizzled wgmma layouts as TMA lays its boxes (the `tma`
//! module's [`Operand`]): any of Q, K, V may be K-major or MN-major (the descriptors' transpose
//! flags). The two consumers interleave on the SM's schedulers, so one's softmax overlaps the
//! other's products. Rows and keys past the sequence's end are TMA's zero fill and the
//! prologue's `-inf`; a causal mask skips the key tiles right of the block's last row.

use super::super::tma::{Operand, operand};
use super::{AttPlan, AttentionOps};
use crate::lower::*;
use irc_ir::{DType, ValueId};
use irc_kir::{Arg, Builtin, Expr, IdxOp, Intrinsic, Space, Stmt, Ty};
use irc_layout::Layout;

/// Query rows per block: two consumer warpgroups of 64.
const BQ: u64 = 128;
/// Keys per tile.
const BKV: u64 = 128;
/// A producer warpgroup and two consumers.
const THREADS: u64 = 384;

impl Builder<'_, '_> {
    /// The Hopper attention kernel, if TMA can read Q, K and V and the tiles fit: `Ok(false)`
    /// (nothing emitted) otherwise, and the caller uses the mma.sync schedule.
    pub(super) fn attention_wgmma(&mut self, ops: &AttentionOps<'_>, p: &AttPlan) -> R<bool> {
        let (d, dv, dt) = (p.d, p.dv, p.dt);
        if !matches!(d, 64 | 128) || !matches!(dv, 64 | 128) || p.batch > 65535 || p.sq == 0 {
            return Ok(false);
        }
        let tiles_q = p.sq.div_ceil(BQ);
        if tiles_q > i32::MAX as u64 {
            return Ok(false);
        }
        let (q, kt) = (ops.scores.operands[0], ops.scores.operands[1]);
        let v = ops.output.operands[1];
        // B operands are read as (rows, k, batch): K's access (d, keys) and V's (keys, d)
        // with their first two modes swapped.
        let swap = |l: &Layout| -> R<Layout> {
            let m = l.modes();
            let mut v = vec![m[1].clone(), m[0].clone()];
            v.extend(m.into_iter().skip(2));
            concat(&v)
        };
        let (k_rows, v_rows) = (swap(&p.qk.access_b)?, swap(&p.pv.access_b)?);
        let elems = |s: &Self, v: ValueId| s.ty(v).shape.iter().product::<u64>();
        let read = |s: &mut Self,
                    v: ValueId,
                    access: &Layout,
                    rows: u64,
                    kext: u64,
                    k: u64,
                    extent: u64| {
            let (buf, l) = s.resolve(v, access)?;
            operand(buf, &l, rows, kext, k, extent, elems(s, buf), 2)
        };
        let Some(oq) = read(self, q, &p.qk.access_a, BQ, d, d, p.sq) else {
            return Ok(false);
        };
        let Some(ok) = read(self, kt, &k_rows, BKV, d, d, p.sk) else {
            return Ok(false);
        };
        let Some(ov) = read(self, v, &v_rows, dv, BKV, p.sk, dv) else {
            return Ok(false);
        };
        let target = self.l.options.target.clone();
        let stage_elems = ok.tile_elems() + ov.tile_elems();
        let budget = target
            .max_dynamic_shared_bytes
            .saturating_sub(oq.tile_elems() * 2 + 1024);
        let stages = (budget / (stage_elems * 2)).min(4);
        if stages < 2 {
            return Ok(false);
        }
        self.kernel.grid = [tiles_q as u32, p.batch.max(1) as u32, 1];
        self.kernel.block = [THREADS as u32, 1, 1];
        let li = |s: u64, d: i64| Layout::int(s as i64, d).map_err(internal);
        let mq = self.tensor_map(&oq, dt)?;
        let mk = self.tensor_map(&ok, dt)?;
        let mv = self.tensor_map(&ov, dt)?;
        let (sq_t, dst_q) = self.stage_ring(&oq, 1, dt)?;
        let (sk_t, dst_k) = self.stage_ring(&ok, stages, dt)?;
        let (sv_t, dst_v) = self.stage_ring(&ov, stages, dt)?;
        // Q full at 0; K full, V full and empty of stage s at 1 + s, 1 + stages + s and
        // 1 + 2 * stages + s.
        let bars = self.tensor(Space::Shared, DType::I64, li(1 + 3 * stages, 1)?);
        let (k_full, v_full, empty) = (1, 1 + stages, 1 + 2 * stages);
        // wgmma operands as flat views of the tiles, positioned by the tiles' layouts.
        let flat = |s: &mut Self, t: &str, n: u64| -> R<String> {
            Ok(s.tensor(Space::View(t.to_string()), dt, li(n, 1)?))
        };
        let wq = flat(self, &sq_t, oq.tile_elems())?;
        let wk = flat(self, &sk_t, stages * ok.tile_elems())?;
        let wv = flat(self, &sv_t, stages * ov.tile_elems())?;
        let q_steps = oq.ksteps()?;
        let k_steps = ok.ksteps()?;
        let v_steps = ov.ksteps()?;
        let step_at = |l: &Layout, i: u64| -> R<i64> {
            l.crd2idx(&irc_layout::IntTuple::Int(i as i64))
                .map_err(internal)
        };
        let consumer_rows = oq.at(64, 0).map_err(internal)?;
        let regs = |s: &mut Self, dtype: DType, n: u64| -> R<String> {
            Ok(s.tensor(Space::Registers, dtype, li(n, 1)?))
        };
        let view4 = |s: &mut Self, t: &str, dtype: DType, n: u64| -> R<String> {
            let l = Layout::flat(&[4, (n / 4) as i64], &[1, 4]).map_err(internal)?;
            Ok(s.tensor(Space::View(t.to_string()), dtype, l))
        };
        // Accumulators flat for wgmma, `[4, atoms]` for the per-score code.
        let acc_s = regs(self, DType::F32, BKV / 2)?;
        let acc_s4 = view4(self, &acc_s, DType::F32, BKV / 2)?;
        let acc_o = regs(self, DType::F32, dv / 2)?;
        let acc_o4 = view4(self, &acc_o, DType::F32, dv / 2)?;
        let p_c = regs(self, dt, BKV / 2)?;
        let p_c4 = view4(self, &p_c, dt, BKV / 2)?;
        let p_a = self.tensor(
            Space::View(p_c.clone()),
            dt,
            Layout::flat(&[8, (BKV / 16) as i64], &[1, 8]).map_err(internal)?,
        );
        let tid = bx(Builtin::TidX);
        let bar = |i: Expr| Arg::at(&bars, vec![i]);
        let imm = |v: i64| Arg::Expr(Expr::Int(v));
        let intr = |op: Intrinsic, args: Vec<Arg>| Stmt::Intrinsic { op, args };

        let init = self.block(|s| {
            s.out
                .push(intr(Intrinsic::MbarrierInit, vec![bar(int(0)), imm(1)]));
            s.unrolled("s", stages, &mut |s, i| {
                for (base, count) in [(k_full, 1), (v_full, 1), (empty, 2)] {
                    s.out.push(intr(
                        Intrinsic::MbarrierInit,
                        vec![bar(add(i.clone(), int(base))), imm(count)],
                    ));
                }
                Ok(())
            })?;
            s.out.push(intr(Intrinsic::FenceBarrierInit, vec![]));
            Ok(())
        })?;
        self.out.push(Stmt::If {
            cond: Expr::idx(IdxOp::Eq, tid.clone(), Expr::Int(0)),
            body: init,
            orelse: vec![],
        });
        self.out.push(Stmt::Sync);
        let wg = self.let_(
            "wg",
            Ty::Idx,
            Expr::idx(IdxOp::Div, tid.clone(), Expr::Int(128)),
        );
        let q0 = self.let_("q0", Ty::Idx, mul(bx(Builtin::BidX), int(BQ)));
        let bi = bx(Builtin::BidY);
        let ktiles = p.sk.div_ceil(BKV);
        // Key tiles starting past the block's last row are fully masked (causal).
        let live = |kt: &Expr| -> Option<Expr> {
            p.causal
                .then(|| lt(mul(kt.clone(), int(BKV)), add(q0.clone(), int(BQ))))
        };
        let ring = |s: &mut Self, kt: &Expr| -> (Expr, Expr) {
            let st = s.let_(
                "st",
                Ty::Idx,
                Expr::idx(IdxOp::Rem, kt.clone(), int(stages)),
            );
            let ph = s.let_(
                "ph",
                Ty::Idx,
                Expr::idx(
                    IdxOp::Rem,
                    Expr::idx(IdxOp::Div, kt.clone(), int(stages)),
                    Expr::Int(2),
                ),
            );
            (st, ph)
        };
        let guarded = |s: &mut Self, cond: Option<Expr>, body: Vec<Stmt>| match cond {
            Some(cond) => s.out.push(Stmt::If {
                cond,
                body,
                orelse: vec![],
            }),
            None => s.out.extend(body),
        };
        let bytes = |o: &Operand| int(o.tile_elems() * 2);

        // The producer.
        let producer = self.block(|s| {
            s.out.push(intr(Intrinsic::SetMaxNregDec, vec![imm(24)]));
            let issue = s.block(|s| {
                s.out.push(intr(
                    Intrinsic::MbarrierExpectTx,
                    vec![bar(int(0)), Arg::Expr(bytes(&oq))],
                ));
                let zero = Expr::Int(0);
                s.out
                    .extend(oq.loads(&dst_q, &mq, &bars, &zero, &zero, &q0, &zero, &bi));
                s.for_(
                    "kt",
                    Expr::Int(0),
                    int(ktiles),
                    Expr::Int(1),
                    false,
                    |s, kt| {
                        let body = s.block(|s| {
                            let (st, ph) = ring(s, &kt);
                            // A stage is refilled once both consumers released its last fill.
                            s.out.push(Stmt::If {
                                cond: Expr::idx(IdxOp::Le, int(stages), kt.clone()),
                                body: vec![intr(
                                    Intrinsic::MbarrierWait,
                                    vec![
                                        bar(add(st.clone(), int(empty))),
                                        Arg::Expr(Expr::idx(IdxOp::Sub, Expr::Int(1), ph)),
                                    ],
                                )],
                                orelse: vec![],
                            });
                            let key0 = s.let_("key0", Ty::Idx, mul(kt.clone(), int(BKV)));
                            for (o, map, dst, base, row0, k0) in [
                                (&ok, &mk, &dst_k, k_full, &key0, &zero),
                                (&ov, &mv, &dst_v, v_full, &zero, &key0),
                            ] {
                                let b = add(st.clone(), int(base));
                                s.out.push(intr(
                                    Intrinsic::MbarrierExpectTx,
                                    vec![bar(b.clone()), Arg::Expr(bytes(o))],
                                ));
                                s.out
                                    .extend(o.loads(dst, map, &bars, &b, &st, row0, k0, &bi));
                            }
                            Ok(())
                        })?;
                        guarded(s, live(&kt), body);
                        Ok(())
                    },
                )
            })?;
            s.out.push(Stmt::If {
                cond: Expr::idx(IdxOp::Eq, tid.clone(), Expr::Int(0)),
                body: issue,
                orelse: vec![],
            });
            Ok(())
        })?;

        // The consumers.
        let (q_lbo, q_sbo) = oq.lbo_sbo().map_err(internal)?;
        let (k_lbo, k_sbo) = ok.lbo_sbo().map_err(internal)?;
        let (v_lbo, v_sbo) = ov.lbo_sbo().map_err(internal)?;
        let consumer = self.block(|s| {
            s.out.push(intr(Intrinsic::SetMaxNregInc, vec![imm(240)]));
            let c = s.let_(
                "cw",
                Ty::Idx,
                Expr::idx(IdxOp::Sub, wg.clone(), Expr::Int(1)),
            );
            let lane = s.let_(
                "lane",
                Ty::Idx,
                Expr::idx(IdxOp::Rem, tid.clone(), Expr::Int(32)),
            );
            let slab = s.let_(
                "slab",
                Ty::Idx,
                Expr::idx(
                    IdxOp::Sub,
                    Expr::idx(IdxOp::Div, tid.clone(), Expr::Int(32)),
                    Expr::Int(4),
                ),
            );
            let rc = s.att_coords(&lane, &slab)?;
            let (m, l) = s.att_state();
            s.zero(&acc_o4, dv / 8)?;
            let leader = Expr::idx(
                IdxOp::Eq,
                Expr::idx(IdxOp::Rem, tid.clone(), Expr::Int(128)),
                Expr::Int(0),
            );
            let q_at = s.let_("qa", Ty::Idx, mul(c, int(consumer_rows as u64)));
            s.out
                .push(intr(Intrinsic::MbarrierWait, vec![bar(int(0)), imm(0)]));
            s.for_(
                "kt",
                Expr::Int(0),
                int(ktiles),
                Expr::Int(1),
                false,
                |s, kt| {
                    let body = s.block(|s| {
                        let (st, ph) = ring(s, &kt);
                        let k0 = s.let_("k0", Ty::Idx, mul(kt.clone(), int(BKV)));
                        // S = Q·Kᵀ.
                        s.out.push(intr(
                            Intrinsic::MbarrierWait,
                            vec![bar(add(st.clone(), int(k_full))), Arg::Expr(ph.clone())],
                        ));
                        s.zero(&acc_s4, BKV / 8)?;
                        s.out.push(intr(Intrinsic::WgmmaFence, vec![]));
                        let k_base = s.let_("kb", Ty::Idx, mul(st.clone(), int(ok.tile_elems())));
                        for ks in 0..d / 16 {
                            s.out.push(intr(
                                Intrinsic::Wgmma(BKV as u16),
                                vec![
                                    Arg::at(&acc_s, vec![]),
                                    Arg::at(
                                        &wq,
                                        vec![add(q_at.clone(), int(step_at(&q_steps, ks)? as u64))],
                                    ),
                                    Arg::at(
                                        &wk,
                                        vec![add(
                                            k_base.clone(),
                                            int(step_at(&k_steps, ks)? as u64),
                                        )],
                                    ),
                                    imm(i64::from(!oq.k_major)),
                                    imm(i64::from(!ok.k_major)),
                                    imm(q_lbo),
                                    imm(q_sbo),
                                    imm(k_lbo),
                                    imm(k_sbo),
                                ],
                            ));
                        }
                        s.out.push(intr(Intrinsic::WgmmaCommit, vec![]));
                        s.out.push(intr(Intrinsic::WgmmaWait, vec![imm(0)]));
                        // The prologue and the online softmax; P to registers.
                        s.att_prologue(p, &acc_s4, &rc, (&q0, &k0, &bi), BQ, BKV)?;
                        s.att_softmax(&acc_s4, &p_c4, &acc_o4, (&m, &l), BKV, dv, dt)?;
                        // O += P·V.
                        s.out.push(intr(
                            Intrinsic::MbarrierWait,
                            vec![bar(add(st.clone(), int(v_full))), Arg::Expr(ph)],
                        ));
                        s.out.push(intr(Intrinsic::WgmmaFence, vec![]));
                        let v_base = s.let_("vb", Ty::Idx, mul(st.clone(), int(ov.tile_elems())));
                        for kk in 0..BKV / 16 {
                            s.out.push(intr(
                                Intrinsic::WgmmaRs(dv as u16),
                                vec![
                                    Arg::at(&acc_o, vec![]),
                                    Arg::at(&p_a, vec![int(kk)]),
                                    Arg::at(
                                        &wv,
                                        vec![add(
                                            v_base.clone(),
                                            int(step_at(&v_steps, kk)? as u64),
                                        )],
                                    ),
                                    imm(i64::from(!ov.k_major)),
                                    imm(v_lbo),
                                    imm(v_sbo),
                                ],
                            ));
                        }
                        s.out.push(intr(Intrinsic::WgmmaCommit, vec![]));
                        s.out.push(intr(Intrinsic::WgmmaWait, vec![imm(0)]));
                        s.out.push(Stmt::If {
                            cond: leader.clone(),
                            body: vec![intr(
                                Intrinsic::MbarrierArrive,
                                vec![bar(add(st, int(empty)))],
                            )],
                            orelse: vec![],
                        });
                        Ok(())
                    })?;
                    guarded(s, live(&kt), body);
                    Ok(())
                },
            )?;
            s.att_store(p, &acc_o4, &l, &rc, (&q0, &bi), BQ)
        })?;
        self.out.push(Stmt::If {
            cond: Expr::idx(IdxOp::Eq, wg, Expr::Int(0)),
            body: producer,
            orelse: consumer,
        });
        Ok(true)
    }
}
