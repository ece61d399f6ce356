//! The Hopper matmul template (sm_90a, f16/bf16 in, f32 accumulate): TMA loads of the operand
//! tiles into 128-byte-swizzled shared memory, an mbarrier ring of stages, one producer
//! warpgroup and two consumer warpgroups issuing `wgmma.mma_async` (warp specialization with
//! register reallocation), and the fused epilogue applied to the accumulator fragments.
//!
//! The kernel is persistent: a block per SM walks the output tiles (grouped along M for L2
//! reuse), the producer running up to the ring's depth ahead of the consumers, across tiles, so
//! a tile's loads overlap the previous tile's epilogue. The epilogue stages each consumer's
//! results through shared memory, 64 columns at a time (128 where the product has at most two
//! k-tiles), and stores them with 16-byte copies (element stores where the output cannot take
//! them).
//!
//! Block tile `128 x BN x 64`; consumer warpgroup `c` owns rows `64c..64c+64` of the tile. An
//! operand is K-major (its contiguous dimension is K) or MN-major; either way a stage holds its
//! `rows x 64` tile as TMA boxes whose inner extent is 64 elements (128 bytes, the swizzle
//! span): one box `64 x rows` when K-major, `rows / 64` boxes `64 x 64` when MN-major. The
//! wgmma descriptors read those boxes as the canonical 128-byte-swizzled layouts
//! (`irc_layout::gmma_smem_atom`): K-major rows 128 bytes apart, 8-row groups 1024 bytes apart
//! (SBO); MN-major 64-element chunks one box apart (LBO), 8-row K groups 1024 bytes apart.

use super::matmul_mma::TcPlan;
use super::tma::{Operand, operand};
use crate::lower::*;
use irc_ir::{DType, Inst, ValueId};
use irc_kir::{self as kir, Arg, Builtin, Expr, Frag, IdxOp, Intrinsic, Space, Stmt, Ty};
use irc_layout::Layout;

mod epilogue;
mod prologue;

// Block rows (two consumer warpgroups of 64) and the K step (64 f16/bf16: 128 bytes).
use super::wgmma_config::{BK, BM, WgmmaConfig};
/// Threads: a producer warpgroup and two consumers.
const THREADS: u64 = 384;

impl Builder<'_, '_> {
    /// The Hopper matmul, if its operands can be read by TMA: `Ok(false)` (nothing emitted)
    /// where they cannot, and the caller uses the mma.sync template.
    pub(crate) fn matmul_wgmma(&mut self, inst: &Inst, roots: &[ValueId], p: &TcPlan) -> R<bool> {
        if p.batch > 65535 || p.k == 0 {
            return Ok(false);
        }
        let target = self.l.options.target.clone();
        let sms = u64::from(target.sms);
        // The point: the tuning cache's (`LowerOptions::configs`), else the heuristic
        // (`WgmmaConfig::heuristic`).
        let ktiles = p.k.div_ceil(BK);
        let cfg = match self.config {
            Some(super::config::Config::Wgmma(c)) => c,
            _ => WgmmaConfig::heuristic(p.batch, p.m, p.n, p.k, sms),
        };
        let bn = cfg.bn;
        let esize = p.dtype.size_bytes();
        // A norm prologue's A is its x, scaled in shared memory (`norm_prologue`).
        let a = p.prologue.as_ref().map_or(inst.operands[0], |q| q.x);
        let bv = inst.operands[1];
        // B's access is (k, n, batch): swap to (n, k, batch) to read it as rows x K.
        let b_rows_first = {
            let m = p.access_b.modes();
            let mut v = vec![m[1].clone(), m[0].clone()];
            v.extend(m.into_iter().skip(2));
            concat(&v)?
        };
        let elems = |s: &Self, v: ValueId| s.ty(v).shape.iter().product::<u64>();
        let Some((abuf, al)) = self.resolve(a, &p.access_a) else {
            return Ok(false);
        };
        let Some((bbuf, bl)) = self.resolve(bv, &b_rows_first) else {
            return Ok(false);
        };
        let (ae, be) = (elems(self, abuf), elems(self, bbuf));
        // An operand TMA cannot read in place (rows not 16-byte aligned), or reads at a cost
        // (rows not 32-byte aligned, of a product much larger than the operand), is copied
        // into an aligned temp first where the product is large enough to pay for it
        // (`realign`).
        let macs = p
            .batch
            .saturating_mul(p.m)
            .saturating_mul(p.n)
            .saturating_mul(p.k);
        let big = macs >= super::realign::REALIGN_MIN_MACS;
        let index = self.inst_index(inst)?;
        let read = |s: &mut Self,
                    buf: ValueId,
                    l: &Layout,
                    rows: u64,
                    ext: u64,
                    n: u64,
                    what: &str|
         -> R<Option<Operand>> {
            let name = s.l.buffer_of[&buf].clone();
            let in_place = operand(name, l, rows, BK, p.k, ext, n, esize);
            let realign = big
                && p.prologue.is_none()
                && match &in_place {
                    None => true,
                    Some(_) => super::realign::sector_misaligned(l, esize, n, macs),
                };
            if !realign {
                return Ok(in_place);
            }
            let Some((temp, tl)) = s.realigned(index, buf, l, what)? else {
                return Ok(in_place);
            };
            let size = tl.cosize().map_err(internal)? as u64;
            Ok(operand(temp, &tl, rows, BK, p.k, ext, size, esize))
        };
        let (pre, temps) = (self.pre.len(), self.temps.len());
        // Where the template declines after all, no operand's copy is kept for mma.sync.
        let decline = |s: &mut Self| {
            s.pre.truncate(pre);
            s.temps.truncate(temps);
            Ok(false)
        };
        let Some(oa) = read(self, abuf, &al, BM, p.m, ae, "a")? else {
            return decline(self);
        };
        let Some(ob) = read(self, bbuf, &bl, bn, p.n, be, "b")? else {
            return decline(self);
        };
        // The prologue walks K-major A tiles' 16-byte chunks along K.
        if p.prologue.is_some() && !oa.k_major {
            return decline(self);
        }
        // The epilogue's staging tiles: per consumer 64 rows x `cw` columns, 8 of padding (the
        // rows of a warp's stores fall in distinct banks). 128 columns a pass where the product
        // has at most two k-tiles and the epilogue is most of the work (half the barriers,
        // twice the independent values between them: exp(Q·Kᵀ/8) at K = 64 6% faster on the
        // H200, run 169), else 64, where the ring's stages count for more (wider passes leave
        // a 4096³ GEMM three stages instead of four).
        let cw = if ktiles <= 2 { 128 } else { 64 }.min(bn);
        let staging_elems = 64 * (cw + 8);
        let stage_bytes = (oa.tile_elems() + ob.tile_elems()) * esize;
        let scales = if p.prologue.is_some() {
            prologue::SCALE_BYTES
        } else {
            0
        };
        let fixed = 2 * staging_elems * esize + 1024 + scales;
        let budget = target.max_dynamic_shared_bytes.saturating_sub(fixed);
        let stages = (budget / stage_bytes).min(6);
        if stages < 2 {
            return decline(self);
        }
        let (tiles_m, tiles_n) = (p.m.div_ceil(BM), p.n.div_ceil(bn));
        let per_batch = tiles_m * tiles_n;
        let total = per_batch * p.batch;
        // Tiles are walked in groups of `group` M tiles, M fastest within a group, then N: blocks
        // running together share A row panels and B column panels in L2.
        let group = cfg.group(tiles_m);
        // A norm prologue needs each row's whole K in one kernel, and a row reduction each
        // tile's finished values: no split.
        let (split, kps) = if p.prologue.is_some() || !p.reductions.is_empty() {
            (1, ktiles)
        } else {
            cfg.splits(ktiles)
        };
        let mut walk = TileWalk {
            total,
            per_batch,
            tiles_n,
            group,
            bn,
            stages,
            cw,
            split,
            kps,
        };
        if split > 1 {
            // Split K: a first kernel writes each split's f32 partial tile; this kernel sums
            // them and applies the epilogue.
            // The partials, padded to whole tiles ([split, batch, Mp, Np]): every tile's
            // stores land inside, unguarded, through the accumulator's (thread, value)
            // partition of the tile.
            let (mp, np) = (tiles_m * BM, tiles_n * bn);
            let ws = kir::BufferDecl {
                name: format!("{}_partials", self.kernel.name),
                dtype: DType::F32,
                shape: vec![split, p.batch, mp, np],
                kind: kir::BufferKind::Temp,
                tensor_map: None,
            };
            self.temps.push(ws.clone());
            let index = self.l.g.insts.iter().position(|i| i.result == inst.result);
            let mut pb = Builder::new(
                self.l,
                format!("{}_partial", self.kernel.name),
                index.unwrap_or(0),
            );
            pb.temps.push(ws.clone());
            let pp = pb.param(&ws.name);
            // (thread, value) of a consumer's 64 x bn tile, then the tile's 64-row block, its
            // column block, the batch and the split.
            let tile = Layout::flat(&[64, bn as i64], &[np as i64, 1]).map_err(internal)?;
            let tv = irc_layout::wgmma_m64nk16_d(bn as i64).map_err(internal)?;
            let mut modes = irc_layout::composition(&tile, tv.layout())
                .map_err(internal)?
                .modes();
            let li = |s: u64, d: u64| Layout::int(s as i64, d as i64).map_err(internal);
            modes.push(li(mp / 64, 64 * np)?);
            modes.push(li(np / bn, bn)?);
            modes.push(li(p.batch, mp * np)?);
            modes.push(li(split, p.batch * mp * np)?);
            let part = pb.tensor(Space::Global(pp), DType::F32, concat(&modes)?);
            walk.total = total * split;
            pb.wgmma_kernel(inst, roots, p, &oa, &ob, &walk, Out::Partials(part))?;
            let maps: Vec<_> = pb
                .temps
                .drain(..)
                .filter(|t| t.tensor_map.is_some())
                .collect();
            self.temps.extend(maps);
            self.pre.push(pb.finish());
            self.splitk_reduce(inst, roots, p, &ws.name, split, (mp, np))?;
            return Ok(true);
        }
        self.wgmma_kernel(inst, roots, p, &oa, &ob, &walk, Out::Epilogue)?;
        Ok(true)
    }

    /// The warp-specialized kernel over `walk`'s work units, its epilogue `out`.
    #[allow(clippy::too_many_arguments)]
    fn wgmma_kernel(
        &mut self,
        inst: &Inst,
        roots: &[ValueId],
        p: &TcPlan,
        oa: &Operand,
        ob: &Operand,
        walk: &TileWalk,
        out: Out,
    ) -> R<()> {
        let (dt, bn, stages, ktiles) = (p.dtype, walk.bn, walk.stages, walk.kps);
        let sms = u64::from(self.l.options.target.sms);
        let stage_bytes = (oa.tile_elems() + ob.tile_elems()) * dt.size_bytes();
        self.kernel.grid = [walk.total.min(sms) as u32, 1, 1];
        self.kernel.block = [THREADS as u32, 1, 1];
        let ma = self.tensor_map(oa, dt)?;
        let mb = self.tensor_map(ob, dt)?;
        let li = |s: u64, d: i64| Layout::int(s as i64, d).map_err(internal);
        let (sa, dst_a) = self.stage_ring(oa, stages, dt)?;
        let (sb, dst_b) = self.stage_ring(ob, stages, dt)?;
        // full[s] at s, empty[s] at stages + s.
        let bars = self.tensor(Space::Shared, DType::I64, li(2 * stages, 1)?);
        // wgmma operands: A at (stage, consumer, k-step), B at (stage, k-step). A consumer's 64
        // rows start 64 rows further, the k-steps 16 further along K: offsets of the tile layout.
        let wa = self.tensor(
            Space::View(sa.clone()),
            dt,
            concat(&[
                li(stages, oa.tile_elems() as i64)?,
                li(2, oa.at(64, 0).map_err(internal)?)?,
                li(BK / 16, oa.at(0, 16).map_err(internal)?)?,
            ])?,
        );
        let wb = self.tensor(
            Space::View(sb.clone()),
            dt,
            concat(&[
                li(stages, ob.tile_elems() as i64)?,
                li(BK / 16, ob.at(0, 16).map_err(internal)?)?,
            ])?,
        );
        let acc = self.tensor(Space::Registers, DType::F32, li(bn / 2, 1)?);
        let tid = bx(Builtin::TidX);

        // Barriers: one arrival (the producer's, with the stage's bytes) fills a stage; one
        // arrival per consumer warpgroup empties it.
        let init = self.block(|s| {
            s.unrolled("s", stages, &mut |s, i| {
                s.out.push(intr(
                    Intrinsic::MbarrierInit,
                    vec![bar(&bars, i.clone()), imm(1)],
                ));
                s.out.push(intr(
                    Intrinsic::MbarrierInit,
                    vec![bar(&bars, add(i, int(stages))), imm(2)],
                ));
                Ok(())
            })?;
            s.out.push(intr(Intrinsic::FenceBarrierInit, vec![]));
            Ok(())
        })?;
        self.out.push(Stmt::If {
            cond: eq(tid.clone(), Expr::Int(0)),
            body: init,
            orelse: vec![],
        });
        self.out.push(Stmt::Sync);
        let wg = self.let_("wg", Ty::Idx, div(tid.clone(), Expr::Int(128)));

        // The producer: one thread issues every stage's loads, tile after tile.
        let producer = self.block(|s| {
            s.out.push(intr(Intrinsic::SetMaxNregDec, vec![imm(40)]));
            let issue = s.block(|s| {
                s.tiles(walk, &mut |s, j, m0, n0, bi, sk| {
                    s.for_(
                        "kt",
                        Expr::Int(0),
                        int(ktiles),
                        Expr::Int(1),
                        false,
                        |s, kt| {
                            let (it, st, ph) = s.ring(walk, &j, &kt);
                            // A stage is refilled once both consumers released its previous fill.
                            let wait = vec![intr(
                                Intrinsic::MbarrierWait,
                                vec![
                                    bar(&bars, add(st.clone(), int(stages))),
                                    Arg::Expr(Expr::idx(IdxOp::Sub, Expr::Int(1), ph)),
                                ],
                            )];
                            s.out.push(Stmt::If {
                                cond: Expr::idx(IdxOp::Le, int(stages), it),
                                body: wait,
                                orelse: vec![],
                            });
                            s.out.push(intr(
                                Intrinsic::MbarrierExpectTx,
                                vec![bar(&bars, st.clone()), Arg::Expr(int(stage_bytes))],
                            ));
                            // This split's k-tiles (past K, TMA reads zeros).
                            let k0 = s.let_(
                                "k0",
                                Ty::Idx,
                                mul(add(mul(sk.clone(), int(walk.kps)), kt), int(BK)),
                            );
                            for (o, map, dst, row0) in
                                [(&oa, &ma, &dst_a, &m0), (&ob, &mb, &dst_b, &n0)]
                            {
                                s.out
                                    .extend(o.loads(dst, map, &bars, &st, &st, row0, &k0, &bi));
                            }
                            Ok(())
                        },
                    )
                })
            })?;
            s.out.push(Stmt::If {
                cond: eq(tid.clone(), Expr::Int(0)),
                body: issue,
                orelse: vec![],
            });
            Ok(())
        })?;

        // The consumers: wgmma on each full stage, releasing the previous stage once its group
        // has completed (one group stays in flight), the tile's last stage after the final
        // wait, then the epilogue on the accumulators.
        let (a_lbo, a_sbo) = oa.lbo_sbo().map_err(internal)?;
        let (b_lbo, b_sbo) = ob.lbo_sbo().map_err(internal)?;
        // Reductions: each consumer's rows' partials from its registers, columns' from the
        // staging tile, then the arrival (`epilogue_reduce`).
        let reduce = match out {
            Out::Epilogue if !p.reductions.is_empty() => Some(self.reduce_tiles(p, BM, bn, 64)?),
            _ => None,
        };
        let staged = reduce.as_ref().is_some_and(|r| r.has_cols());
        let mut epi = match out {
            Out::Epilogue => Some(self.wgmma_epilogue_plan(roots, p, walk.cw, staged)?),
            Out::Partials(_) => None,
        };
        // A norm prologue: each consumer reads its A fragments into registers, sums their
        // squares and scales them (`prologue.rs`); its rows' scales go to shared memory for
        // the epilogue.
        let prologue = match &p.prologue {
            Some(pro) => {
                let rp = self.rs_prologue(pro, &sa, oa, stages, dt)?;
                if let Some(e) = epi.as_mut() {
                    e.row_scale = Some(rp.scales.clone());
                }
                Some(rp)
            }
            None => None,
        };
        // wgmma groups a consumer leaves in flight past a k-tile (each keeps its stage until
        // it completes): one. Where A is in registers (the norm prologue), the k-loop is
        // unrolled by two, so that the registers the group in flight reads are not the ones
        // the next k-tile writes (f32 fragments are packed into registers of their own ahead
        // of each fence; 16-bit ones alternate between the two halves as ptxas allocates
        // them, the SASS showing two sets): the next k-tile's fragments are read, squared
        // and scaled while the tensor cores run the previous k-tile's products.
        let inflight: u64 = 1;
        let consumer = self.block(|s| {
            s.out.push(intr(Intrinsic::SetMaxNregInc, vec![imm(232)]));
            let c = s.let_(
                "cw",
                Ty::Idx,
                Expr::idx(IdxOp::Sub, wg.clone(), Expr::Int(1)),
            );
            let leader = eq(rem(tid.clone(), Expr::Int(128)), Expr::Int(0));
            s.tiles(walk, &mut |s, j, m0, n0, bi, sk| {
                s.unrolled("v", bn / 2, &mut |s, v| {
                    s.out.push(Stmt::Store {
                        tensor: acc.clone(),
                        coord: vec![v],
                        value: lit(DType::F32, 0.0),
                    });
                    Ok(())
                })?;
                if let Some(rp) = &prologue {
                    s.rs_prologue_zero(rp)?;
                    // g for the first k-tile; each k-tile loads the next one's.
                    let k0 = s.let_("gk0", Ty::Idx, mul(sk.clone(), int(walk.kps * BK)));
                    s.rs_prologue_g(rp, &k0, p.k)?;
                }
                let step = |s: &mut Self, kt: Expr| -> R<()> {
                    let (it, st, ph) = s.ring(walk, &j, &kt);
                    s.out.push(intr(
                        Intrinsic::MbarrierWait,
                        vec![bar(&bars, st.clone()), Arg::Expr(ph)],
                    ));
                    if let Some(rp) = &prologue {
                        // The stage's fragments, then their products. (Splitting the k-steps
                        // so one part's products run beside the next part's fragments
                        // measured no faster: the consumers' issue slots bound it.)
                        let k0 = mul(add(mul(sk.clone(), int(walk.kps)), kt.clone()), int(BK));
                        let k0 = s.let_("pk0", Ty::Idx, k0);
                        s.rs_prologue_stage(rp, oa, &st, &c, &k0, p.k, dt)?;
                        s.out.push(intr(Intrinsic::WgmmaFence, vec![]));
                        // One statement per k-step (not a loop), so that the emitters pack
                        // every register A operand ahead of the fence.
                        for ks in 0..(BK / 16) as i64 {
                            s.out.push(intr(
                                Intrinsic::WgmmaRs(bn as u16),
                                vec![
                                    Arg::at(&acc, vec![]),
                                    Arg::at(&rp.pa, vec![Expr::Int(ks)]),
                                    Arg::at(&wb, vec![st.clone(), Expr::Int(ks)]),
                                    imm(i64::from(!ob.k_major)),
                                    imm(b_lbo),
                                    imm(b_sbo),
                                    imm(1),
                                ],
                            ));
                        }
                    } else {
                        s.out.push(intr(Intrinsic::WgmmaFence, vec![]));
                        s.unrolled("ks", BK / 16, &mut |s, ks| {
                            s.out.push(intr(
                                Intrinsic::Wgmma(bn as u16),
                                vec![
                                    Arg::at(&acc, vec![]),
                                    Arg::at(&wa, vec![st.clone(), c.clone(), ks.clone()]),
                                    Arg::at(&wb, vec![st.clone(), ks]),
                                    imm(i64::from(!oa.k_major)),
                                    imm(i64::from(!ob.k_major)),
                                    imm(a_lbo),
                                    imm(a_sbo),
                                    imm(b_lbo),
                                    imm(b_sbo),
                                    imm(1),
                                ],
                            ));
                            Ok(())
                        })?;
                    }
                    s.out.push(intr(Intrinsic::WgmmaCommit, vec![]));
                    if let Some(rp) = &prologue {
                        // The next k-tile's g, under this one's products.
                        let next = add(kt.clone(), Expr::Int(1));
                        let k0 = mul(add(mul(sk.clone(), int(walk.kps)), next.clone()), int(BK));
                        let body = s.block(|s| {
                            let k0 = s.let_("gk1", Ty::Idx, k0);
                            s.rs_prologue_g(rp, &k0, p.k)
                        })?;
                        s.out.push(Stmt::If {
                            cond: lt(next, int(ktiles)),
                            body,
                            orelse: vec![],
                        });
                    }
                    s.out
                        .push(intr(Intrinsic::WgmmaWait, vec![imm(inflight as i64)]));
                    let prev = rem(add(it, int(stages - inflight)), int(stages));
                    s.out.push(Stmt::If {
                        cond: Expr::idx(
                            IdxOp::And,
                            Expr::idx(IdxOp::Lt, Expr::Int(inflight as i64 - 1), kt),
                            leader.clone(),
                        ),
                        body: vec![intr(
                            Intrinsic::MbarrierArrive,
                            vec![bar(&bars, add(prev, int(stages)))],
                        )],
                        orelse: vec![],
                    });
                    Ok(())
                };
                if prologue.is_some() && ktiles >= 2 {
                    // Two k-tiles an iteration (the packed fragments alternate; see above).
                    let pairs = int(ktiles / 2 * 2);
                    s.for_("kt", Expr::Int(0), pairs, Expr::Int(2), false, |s, kt| {
                        step(s, kt.clone())?;
                        step(s, add(kt, Expr::Int(1)))
                    })?;
                    if ktiles % 2 == 1 {
                        // The last k-tile alone writes the registers of the pair's first one,
                        // which the group in flight may still read: that group first.
                        s.out.push(intr(Intrinsic::WgmmaWait, vec![imm(0)]));
                        step(s, int(ktiles - 1))?;
                    }
                } else {
                    s.for_("kt", Expr::Int(0), int(ktiles), Expr::Int(1), false, step)?;
                }
                s.out.push(intr(Intrinsic::WgmmaWait, vec![imm(0)]));
                // The stages of the k-tiles still in flight at the loop's end.
                for kt in ktiles.saturating_sub(inflight)..ktiles {
                    let last = rem(add(mul(j.clone(), int(ktiles)), int(kt)), int(stages));
                    s.out.push(Stmt::If {
                        cond: leader.clone(),
                        body: vec![intr(
                            Intrinsic::MbarrierArrive,
                            vec![bar(&bars, add(last, int(stages)))],
                        )],
                        orelse: vec![],
                    });
                }
                if let Some(rp) = &prologue {
                    s.rs_prologue_scales(rp, &c, p.k)?;
                    s.out.push(intr(
                        Intrinsic::BarSync,
                        vec![Arg::Expr(add(c.clone(), Expr::Int(1))), imm(128)],
                    ));
                }
                match (&epi, &out) {
                    (Some(epi), _) if !roots.is_empty() || staged => s.wgmma_epilogue(
                        inst,
                        roots,
                        p,
                        epi,
                        &acc,
                        bn,
                        &c,
                        (&m0, &n0, &bi),
                        reduce.as_ref(),
                    )?,
                    (None, Out::Partials(part)) => {
                        s.wgmma_partials(part, &acc, bn, &c, &m0, &n0, &bi, &sk)?
                    }
                    _ => {}
                }
                if let Some(rt) = &reduce {
                    s.wgmma_row_partials(rt, p, inst.result, &acc, &c, (&m0, &n0, &bi))?;
                    // Both consumers' threads, numbered from 0, under a barrier of their own.
                    let ct = s.let_("ct", Ty::Idx, Expr::idx(IdxOp::Sub, tid.clone(), int(128)));
                    let both = intr(Intrinsic::BarSync, vec![imm(3), imm(256)]);
                    s.reduce_finish(rt, p, (&m0, &n0, &bi), &ct, 256, &both)?;
                }
                Ok(())
            })
        })?;
        self.out.push(Stmt::If {
            cond: eq(wg, Expr::Int(0)),
            body: producer,
            orelse: consumer,
        });
        Ok(())
    }

    /// `for tile = bid.x to total step nctaid.x`: `f(j, m0, n0, batch)` with `j` the block's
    /// count of earlier tiles (what places its k-tiles on the ring).
    fn tiles(
        &mut self,
        w: &TileWalk,
        f: &mut dyn FnMut(&mut Self, Expr, Expr, Expr, Expr, Expr) -> R<()>,
    ) -> R<()> {
        self.for_(
            "unit",
            bx(Builtin::BidX),
            int(w.total),
            bx(Builtin::NctaidX),
            false,
            |s, unit| {
                let j = s.let_(
                    "j",
                    Ty::Idx,
                    div(
                        Expr::idx(IdxOp::Sub, unit.clone(), bx(Builtin::BidX)),
                        bx(Builtin::NctaidX),
                    ),
                );
                // A work unit is (split of K, tile), tiles fastest: the tiles sharing an
                // operand's K slice run together.
                let tiles = w.total / w.split;
                let sk = s.let_("sk", Ty::Idx, div(unit.clone(), int(tiles)));
                let tile = s.let_("tile", Ty::Idx, rem(unit, int(tiles)));
                let bi = s.let_("bi", Ty::Idx, div(tile.clone(), int(w.per_batch)));
                let t = s.let_("tb", Ty::Idx, rem(tile, int(w.per_batch)));
                let per_group = w.group * w.tiles_n;
                let r = s.let_("tr", Ty::Idx, rem(t.clone(), int(per_group)));
                let tm = add(
                    mul(div(t, int(per_group)), int(w.group)),
                    rem(r.clone(), int(w.group)),
                );
                let m0 = s.let_("m0", Ty::Idx, mul(tm, int(BM)));
                let n0 = s.let_("n0", Ty::Idx, mul(div(r, int(w.group)), int(w.bn)));
                f(s, j, m0, n0, bi, sk)
            },
        )
    }

    /// The ring position of k-tile `kt` of the block's `j`-th tile: (iteration, stage, phase
    /// parity).
    fn ring(&mut self, w: &TileWalk, j: &Expr, kt: &Expr) -> (Expr, Expr, Expr) {
        let it = self.let_("it", Ty::Idx, add(mul(j.clone(), int(w.kps)), kt.clone()));
        let st = self.let_("st", Ty::Idx, rem(it.clone(), int(w.stages)));
        let ph = self.let_(
            "ph",
            Ty::Idx,
            rem(div(it.clone(), int(w.stages)), Expr::Int(2)),
        );
        (it, st, ph)
    }
}

/// The persistent walk over work units (a tile and a split of its K) and the k-tile ring.
struct TileWalk {
    /// Work units: tiles times splits.
    total: u64,
    per_batch: u64,
    tiles_n: u64,
    group: u64,
    bn: u64,
    stages: u64,
    /// Columns of a consumer's tile per staged epilogue pass.
    cw: u64,
    /// Splits of K per tile, and k-tiles per split.
    split: u64,
    kps: u64,
}

/// What the consumers do with a work unit's accumulators.
enum Out {
    /// The epilogue chain to the group's roots.
    Epilogue,
    /// Store them, f32, to this `(m, n, batch, split)` tensor of partials.
    Partials(String),
}

fn bar(bars: &str, i: Expr) -> Arg {
    Arg::at(bars, vec![i])
}

fn imm(v: i64) -> Arg {
    Arg::Expr(Expr::Int(v))
}

fn intr(op: Intrinsic, args: Vec<Arg>) -> Stmt {
    Stmt::Intrinsic { op, args }
}

fn eq(a: Expr, b: Expr) -> Expr {
    Expr::idx(IdxOp::Eq, a, b)
}
