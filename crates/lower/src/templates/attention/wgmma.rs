//! The Hopper attention schedule (sm_90a): TMA, mbarriers and `wgmma` for both products.
//!
//! A block owns `64 * consumers` query rows of one batch entry (`AttentionConfig`: 2 or 3
//! consumer warpgroups) beside a producer warpgroup: one producer thread issues every TMA load
//! (`setmaxnreg.dec` gives its registers away), each consumer owns 64 query rows
//! (`setmaxnreg.inc`). The producer loads the Q tile once, then K and V tiles of
//! [`keys_per_tile`] keys (128, or 64 above head dim 128 or with two blocks an SM) into a
//! ring of stages, each stage with its own "K full", "V full" and "empty" mbarriers, so a
//! consumer starts `Q·Kᵀ` while V is still arriving and the producer runs up to the ring's
//! depth ahead. Q has two buffers (the next unit's tile loads while this one's run) where two
//! K/V stages still fit beside them, else one (head dim 256). For each key tile a consumer:
//!
//! 1. waits for K, then `S = Q·Kᵀ` by `wgmma.m64nNk16` (N the tile's keys) with both operands
//!    in shared memory
//!    (its 64 rows of Q, the K tile), f32 accumulators, the first k-step overwriting them;
//! 2. applies the prologue and the online softmax (the parent module's, on the same register
//!    order: each warp's part of `wgmma_m64nk16_d` is atoms of `mma_m16n8k16_c`), leaving
//!    `P = exp(S - m)` in the f32 score registers; on a key tile wholly inside a mask band
//!    (left of a causal diagonal) the mask is known to keep every score;
//! 3. waits for V, then `O += P·V` by `wgmma.rs` with P as the register A operand (rounded to
//!    the inputs' type pairwise as the instruction's registers are packed), and releases the
//!    stage.
//!
//! With `AttentionConfig::pipelined` a consumer keeps two score buffers and issues tile
//! `j`'s `Q·Kᵀ` beside tile `j - 1`'s `P·V`, waiting for the first alone (`wgmma.wait 1`) to
//! run tile `j`'s softmax while the second computes; O is rescaled once it is done (ptxas
//! places that wait early in the softmax, so the overlap is partial: `bench/gpu/NOTES.md`,
//! session 11). The consumers interleave on the SM's schedulers, so one's softmax also
//! overlaps the others' products; with `AttentionConfig::pingpong` they issue them in turn
//! (named barriers). Tiles are the canonical 128-byte-swizzled wgmma layouts as TMA lays its
//! boxes (the
//! `tma` module's [`Operand`]): any of Q, K, V may be K-major or MN-major (the descriptors'
//! transpose flags). Rows and keys past the sequence's end are TMA's zero fill and the
//! prologue's `-inf`; a mask band (a causal mask, a sliding window) limits the key loop to the
//! tiles it reaches from the unit's rows (`schedule::band_tiles`). A head dim is computed in
//! tiles of 64 columns that TMA fills with zeros past it (`Q·Kᵀ` takes the real k-steps only;
//! `P·V` is whole tiles wide and the zero columns are not stored).
//!
//! With `AttentionConfig::occupancy` 2, two blocks share an SM, each with half its registers
//! (`__launch_bounds__(threads, 2)`: 80 a thread at entry, 104 a consumer's after the
//! producer's `setmaxnreg.dec`) and half its shared memory, on key tiles of 64: one block's
//! softmax and its units' first and last tiles run beside the other's products.
//!
//! At the end of a unit each consumer stores `O / l` through its rows of the unit's Q tile
//! (the `staged` module: 16-byte copies instead of scattered 2-byte stores) and only then
//! releases the tile to the producer.

use super::super::attention_config::{
    AttentionConfig, PRODUCER_REGS, consumer_regs, keys_per_tile, ring,
};
use super::super::config::Config;
use super::super::tma::{Operand, operand};
use super::{AttPlan, AttentionOps, schedule};
use crate::lower::*;
use irc_ir::{DType, ValueId};
use irc_kir::{Arg, Builtin, Expr, IdxOp, Intrinsic, Space, Stmt, Ty};
use irc_layout::Layout;

/// One buffer of scores: the flat accumulator (`wgmma`), its `[4, atoms]` view (the
/// per-score code) and its view as the A fragments of `P·V`.
struct ScoreBuf {
    acc: String,
    acc4: String,
    pa: String,
}

impl Builder<'_, '_> {
    /// The Hopper attention kernel, if TMA can read Q, K and V and the tiles fit: `Ok(false)`
    /// (nothing emitted) otherwise, and the caller uses the mma.sync schedule.
    pub(super) fn attention_wgmma(&mut self, ops: &AttentionOps<'_>, p: &AttPlan) -> R<bool> {
        let (d, dv, dt) = (p.d, p.dv, p.dt);
        if p.batch > 65535 || p.sq == 0 {
            return Ok(false);
        }
        // Head dims are tiles of 64 columns (the 128-byte swizzle's span) whose columns past
        // the head dim TMA fills with zeros (past the tensor map's inner extent): `Q·Kᵀ` takes
        // only the k-steps of 16 that reach real columns, `P·V` is computed in whole tiles
        // (wgmma's MN-major atoms are 64 wide) and the zero columns are not stored.
        let (dk, dvp) = (d.next_multiple_of(64), dv.next_multiple_of(64));
        // The point: the tuning cache's, else the heuristic.
        let cfg = match self.config {
            Some(Config::Attention(c)) => c,
            _ => AttentionConfig::heuristic(
                p.sq,
                p.sk,
                (d, dv),
                (p.band.is_some(), ops.plain),
                p.batch,
                u64::from(self.l.options.target.sms),
            ),
        };
        let (nc, bq) = (cfg.consumers, cfg.rows());
        let tiles_q = p.sq.div_ceil(bq);
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
            operand(
                s.l.buffer_of[&buf].clone(),
                &l,
                rows,
                kext,
                k,
                extent,
                elems(s, buf),
                2,
            )
        };
        let Some(oq) = read(self, q, &p.qk.access_a, bq, dk, d, p.sq) else {
            return Ok(false);
        };
        let occupancy = cfg.occupancy.max(1);
        let bkv = keys_per_tile(dk, dvp, occupancy);
        let Some(ok) = read(self, kt, &k_rows, bkv, dk, d, p.sk) else {
            return Ok(false);
        };
        let Some(ov) = read(self, v, &v_rows, dvp, bkv, p.sk, dv) else {
            return Ok(false);
        };
        let target = self.l.options.target.clone();
        // Two Q tiles (the next work unit's loads while this one's run) where the K/V ring
        // beside them still has two stages, else one (head dim 256), then the ring, in the
        // block's share of the SM's shared memory.
        let (q_tiles, stages) = ring(
            target.max_dynamic_shared_bytes,
            occupancy,
            oq.tile_elems(),
            ok.tile_elems() + ov.tile_elems(),
        );
        if stages < 2 {
            return Ok(false);
        }
        // Persistent: a block per SM (or two) walks the work units (a query tile of one batch
        // entry).
        let units = tiles_q * p.batch.max(1);
        self.kernel.grid = [units.min(u64::from(target.sms) * occupancy) as u32, 1, 1];
        self.kernel.occupancy = occupancy as u32;
        self.kernel.block = [(128 * (nc + 1)) as u32, 1, 1];
        let li = |s: u64, d: i64| Layout::int(s as i64, d).map_err(internal);
        let mq = self.tensor_map(&oq, dt)?;
        let mk = self.tensor_map(&ok, dt)?;
        let mv = self.tensor_map(&ov, dt)?;
        let (sq_t, dst_q) = self.stage_ring(&oq, q_tiles, dt)?;
        let (sk_t, dst_k) = self.stage_ring(&ok, stages, dt)?;
        let (sv_t, dst_v) = self.stage_ring(&ov, stages, dt)?;
        // Q full and Q empty of Q buffer b at b and 2 + b; K full, V full and empty of stage s
        // at 4 + s, 4 + stages + s and 4 + 2 * stages + s.
        let bars = self.tensor(Space::Shared, DType::I64, li(4 + 3 * stages, 1)?);
        let (q_full, q_empty) = (0, 2);
        let (k_full, v_full, empty) = (4, 4 + stages, 4 + 2 * stages);
        // wgmma operands as flat views of the tiles, positioned by the tiles' layouts.
        let flat = |s: &mut Self, t: &str, n: u64| -> R<String> {
            Ok(s.tensor(Space::View(t.to_string()), dt, li(n, 1)?))
        };
        let wq = flat(self, &sq_t, q_tiles * oq.tile_elems())?;
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
        // Accumulators flat for wgmma, `[4, atoms]` for the per-score code; S twice when
        // pipelined (tile j + 1's scores beside tile j's P).
        let pipelined = cfg.pipelined;
        // Lazy rescaling (`att_online`) where it was measured faster: the serial schedule at
        // head dim 128 (run 120: 3-4% on att_d128_s8k and att_causal_d128_s4k, even
        // elsewhere). At head dim 64 the extra selects cost the causal kernel 15%, and in the
        // pipelined schedule ptxas waits for `P·V` before the conditional rescale.
        let lazy = !pipelined && dv > 64;
        let mut score_bufs = vec![];
        for _ in 0..if pipelined { 2 } else { 1 } {
            let acc = regs(self, DType::F32, bkv / 2)?;
            let acc4 = view4(self, &acc, DType::F32, bkv / 2)?;
            // P is the scores' registers, rounded to the inputs' type pairwise as the RS
            // wgmma packs them: A fragment kk is values 8kk..8kk+8.
            let pa = self.tensor(
                Space::View(acc.clone()),
                DType::F32,
                Layout::flat(&[8, (bkv / 16) as i64], &[1, 8]).map_err(internal)?,
            );
            score_bufs.push(ScoreBuf { acc, acc4, pa });
        }
        let acc_o = regs(self, DType::F32, dvp / 2)?;
        let acc_o4 = view4(self, &acc_o, DType::F32, dvp / 2)?;
        let tid = bx(Builtin::TidX);
        let bar = |i: Expr| Arg::at(&bars, vec![i]);
        let imm = |v: i64| Arg::Expr(Expr::Int(v));
        let intr = |op: Intrinsic, args: Vec<Arg>| Stmt::Intrinsic { op, args };

        let init = self.block(|s| {
            for b in 0..2 {
                s.out.push(intr(
                    Intrinsic::MbarrierInit,
                    vec![bar(int(q_full + b)), imm(1)],
                ));
                s.out.push(intr(
                    Intrinsic::MbarrierInit,
                    vec![bar(int(q_empty + b)), imm(nc as i64)],
                ));
            }
            s.unrolled("s", stages, &mut |s, i| {
                for (base, count) in [(k_full, 1), (v_full, 1), (empty, nc as i64)] {
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
        let ktiles = p.sk.div_ceil(bkv);
        // The ring position of the block's `it`-th key tile: (stage, phase parity).
        let ring = |s: &mut Self, it: &Expr| -> (Expr, Expr) {
            let st = s.let_(
                "st",
                Ty::Idx,
                Expr::idx(IdxOp::Rem, it.clone(), int(stages)),
            );
            let ph = s.let_(
                "ph",
                Ty::Idx,
                Expr::idx(
                    IdxOp::Rem,
                    Expr::idx(IdxOp::Div, it.clone(), int(stages)),
                    Expr::Int(2),
                ),
            );
            (st, ph)
        };
        // With a mask band the units differ in length: where a block has more than one, the
        // blocks take them in the order `schedule::balanced_order` finds, from a table.
        // Measured on the H200 (run 125): att_causal_d64_s2k 0.2258 -> 0.1920 ms,
        // att_causal_d128_s4k 0.5209 -> 0.4826.
        let keys = |t: u64| schedule::band_tiles(p.band, t * bq, bq, bkv, ktiles).1;
        let blocks = u64::from(self.kernel.grid[0]);
        let order = match p.band.is_some() && units > blocks && units <= schedule::MAX_UNITS {
            true => {
                let kv_bytes = p.sk * (d + dv) * 2;
                let table =
                    schedule::balanced_order(tiles_q, p.batch.max(1), blocks, kv_bytes, keys);
                let name = format!("{}_c{}", self.kernel.name, self.constants.len());
                let len = table.len() as i64;
                self.constants.push(irc_kir::ConstDecl {
                    name: name.clone(),
                    dtype: DType::I32,
                    values: table.into_iter().map(|v| v as f64).collect(),
                });
                Some(self.tensor(Space::Const(name), DType::I32, li(len as u64, 1)?))
            }
            false => None,
        };
        // The block's walk over work units, the same in the producer and the consumers:
        // `f(unit count j, q0, batch, (first key tile kf, key tiles nk), key tiles before this
        // unit)`. Query tiles go last to first within a batch entry (a causal mask's longest
        // rows first); blocks running together share a batch entry's K and V in L2.
        let walk = |s: &mut Self,
                    f: &mut dyn FnMut(&mut Self, Expr, Expr, Expr, (Expr, Expr), Expr) -> R<()>|
         -> R<()> {
            let it0 = s.fresh("it");
            s.out.push(Stmt::Var {
                var: it0.clone(),
                ty: Ty::Idx,
                init: Expr::Int(0),
            });
            // Round-robin (`unit = block + j · blocks`), or the table's positions.
            let idx = |e: Expr| Expr::call(irc_kir::Func::Index, vec![e]);
            let (first, end, step) = match &order {
                None => (bx(Builtin::BidX), int(units), bx(Builtin::NctaidX)),
                Some(t) => {
                    let at = |e: Expr| idx(Expr::load(t, vec![e]));
                    let lo = s.let_("lo", Ty::Idx, at(bx(Builtin::BidX)));
                    let hi = s.let_("hi", Ty::Idx, at(add(bx(Builtin::BidX), Expr::Int(1))));
                    (lo, hi, Expr::Int(1))
                }
            };
            s.for_("unit", first.clone(), end, step, false, |s, pos| {
                let (j, unit) = match &order {
                    None => {
                        let j = Expr::idx(
                            IdxOp::Div,
                            Expr::idx(IdxOp::Sub, pos.clone(), bx(Builtin::BidX)),
                            bx(Builtin::NctaidX),
                        );
                        (j, pos)
                    }
                    Some(t) => {
                        let u = idx(Expr::load(t, vec![add(pos.clone(), int(blocks + 1))]));
                        (
                            Expr::idx(IdxOp::Sub, pos, first.clone()),
                            s.let_("u", Ty::Idx, u),
                        )
                    }
                };
                let j = s.let_("j", Ty::Idx, j);
                let qt = Expr::idx(
                    IdxOp::Sub,
                    int(tiles_q - 1),
                    Expr::idx(IdxOp::Rem, unit.clone(), int(tiles_q)),
                );
                let q0 = s.let_("q0", Ty::Idx, mul(qt, int(bq)));
                let bi = s.let_("bi", Ty::Idx, Expr::idx(IdxOp::Div, unit, int(tiles_q)));
                // With a mask band, only the key tiles inside it.
                let (kf, nk) = s.att_key_tiles(p.band, &q0, bq, bkv, ktiles);
                f(s, j, q0, bi, (kf, nk.clone()), Expr::var(&it0))?;
                s.out.push(Stmt::Assign {
                    var: it0.clone(),
                    value: add(Expr::var(&it0), nk),
                });
                Ok(())
            })
        };
        // Q buffer and its phase parity of the block's `j`-th unit.
        let q_ring = |s: &mut Self, j: &Expr| -> (Expr, Expr) {
            let qb = s.let_(
                "qb",
                Ty::Idx,
                Expr::idx(IdxOp::Rem, j.clone(), int(q_tiles)),
            );
            let qph = Expr::idx(
                IdxOp::Rem,
                Expr::idx(IdxOp::Div, j.clone(), int(q_tiles)),
                Expr::Int(2),
            );
            let qph = s.let_("qph", Ty::Idx, qph);
            (qb, qph)
        };
        let bytes = |o: &Operand| int(o.tile_elems() * 2);

        // The producer.
        let producer = self.block(|s| {
            s.out.push(intr(
                Intrinsic::SetMaxNregDec,
                vec![imm(PRODUCER_REGS as i64)],
            ));
            let zero = Expr::Int(0);
            let issue = s.block(|s| {
                walk(s, &mut |s, j, q0, bi, (kf, nk), it0| {
                    // The unit's Q, once the consumers released the buffer's last fill.
                    let (qb, qph) = q_ring(s, &j);
                    s.out.push(Stmt::If {
                        cond: Expr::idx(IdxOp::Le, int(q_tiles), j.clone()),
                        body: vec![intr(
                            Intrinsic::MbarrierWait,
                            vec![
                                bar(add(qb.clone(), int(q_empty))),
                                Arg::Expr(Expr::idx(IdxOp::Sub, Expr::Int(1), qph)),
                            ],
                        )],
                        orelse: vec![],
                    });
                    let qbar = add(qb.clone(), int(q_full));
                    s.out.push(intr(
                        Intrinsic::MbarrierExpectTx,
                        vec![bar(qbar.clone()), Arg::Expr(bytes(&oq))],
                    ));
                    s.out
                        .extend(oq.loads(&dst_q, &mq, &bars, &qbar, &qb, &q0, &zero, &bi));
                    s.for_("kt", Expr::Int(0), nk, Expr::Int(1), false, |s, kt| {
                        let it = s.let_("it", Ty::Idx, add(it0.clone(), kt.clone()));
                        let (st, ph) = ring(s, &it);
                        // A stage is refilled once the consumers released its last fill.
                        s.out.push(Stmt::If {
                            cond: Expr::idx(IdxOp::Le, int(stages), it),
                            body: vec![intr(
                                Intrinsic::MbarrierWait,
                                vec![
                                    bar(add(st.clone(), int(empty))),
                                    Arg::Expr(Expr::idx(IdxOp::Sub, Expr::Int(1), ph)),
                                ],
                            )],
                            orelse: vec![],
                        });
                        let key0 = s.let_("key0", Ty::Idx, mul(add(kf.clone(), kt), int(bkv)));
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
                    })
                })
            })?;
            s.out.push(Stmt::If {
                cond: Expr::idx(IdxOp::Eq, tid.clone(), Expr::Int(0)),
                body: issue,
                orelse: vec![],
            });
            Ok(())
        })?;

        // The consumers.
        let staged = self.att_staged_plan(p, &oq, &sq_t, q_tiles)?;
        let (q_lbo, q_sbo) = oq.lbo_sbo().map_err(internal)?;
        let (k_lbo, k_sbo) = ok.lbo_sbo().map_err(internal)?;
        let (v_lbo, v_sbo) = ov.lbo_sbo().map_err(internal)?;
        let consumer = self.block(|s| {
            s.out.push(intr(
                Intrinsic::SetMaxNregInc,
                vec![imm(consumer_regs(nc, occupancy) as i64)],
            ));
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
            let leader = Expr::idx(
                IdxOp::Eq,
                Expr::idx(IdxOp::Rem, tid.clone(), Expr::Int(128)),
                Expr::Int(0),
            );
            let q_c = s.let_("qc", Ty::Idx, mul(c.clone(), int(consumer_rows as u64)));
            // Ping-pong: the consumers take turns issuing `Q·Kᵀ` (pipelined: with the last
            // tile's `P·V` beside it; serial, `P·V` is issued after the softmax, outside the
            // turn). A consumer waits at its named barrier (1 + its index) for the previous
            // one to hand it the turn (`bar.sync` of 256 threads: its own 128 and the previous
            // consumer's arrivals), issues, and hands the turn on (`bar.arrive`), so one's
            // softmax runs while the others' products hold the tensor cores. Every consumer
            // takes as many turns as the others (the same units, the same key tiles); the
            // first turn's hand-over stays pending when the kernel ends.
            let pingpong = cfg.pingpong && nc > 1;
            let turn_take = |s: &mut Self| {
                if pingpong {
                    let mine = add(c.clone(), Expr::Int(1));
                    s.out
                        .push(intr(Intrinsic::BarSync, vec![Arg::Expr(mine), imm(256)]));
                }
            };
            let turn_give = |s: &mut Self| {
                if pingpong {
                    let next = Expr::idx(IdxOp::Rem, add(c.clone(), Expr::Int(1)), int(nc));
                    let next = add(next, Expr::Int(1));
                    s.out
                        .push(intr(Intrinsic::BarArrive, vec![Arg::Expr(next), imm(256)]));
                }
            };
            if pingpong {
                // The last consumer hands the first its first turn.
                s.out.push(Stmt::If {
                    cond: Expr::idx(IdxOp::Eq, c.clone(), int(nc - 1)),
                    body: vec![intr(Intrinsic::BarArrive, vec![imm(1), imm(256)])],
                    orelse: vec![],
                });
            }
            // S = Q·Kᵀ of the tile in stage `st` (once its K is there), committed.
            let scores =
                |s: &mut Self, buf: &ScoreBuf, q_at: &Expr, st: &Expr, ph: &Expr| -> R<()> {
                    s.out.push(intr(
                        Intrinsic::MbarrierWait,
                        vec![bar(add(st.clone(), int(k_full))), Arg::Expr(ph.clone())],
                    ));
                    turn_take(s);
                    s.out.push(intr(Intrinsic::WgmmaFence, vec![]));
                    let k_base = s.let_("kb", Ty::Idx, mul(st.clone(), int(ok.tile_elems())));
                    for ks in 0..d.div_ceil(16) {
                        let qa = add(q_at.clone(), int(step_at(&q_steps, ks)? as u64));
                        let kb = add(k_base.clone(), int(step_at(&k_steps, ks)? as u64));
                        s.out.push(intr(
                            Intrinsic::Wgmma(bkv as u16),
                            vec![
                                Arg::at(&buf.acc, vec![]),
                                Arg::at(&wq, vec![qa]),
                                Arg::at(&wk, vec![kb]),
                                imm(i64::from(!oq.k_major)),
                                imm(i64::from(!ok.k_major)),
                                imm(q_lbo),
                                imm(q_sbo),
                                imm(k_lbo),
                                imm(k_sbo),
                                // The first k-step overwrites the last tile's values.
                                imm(i64::from(ks > 0)),
                            ],
                        ));
                    }
                    s.out.push(intr(Intrinsic::WgmmaCommit, vec![]));
                    Ok(())
                };
            // O += P·V with V in stage `st` (once it is there), committed.
            let values =
                |s: &mut Self, buf: &ScoreBuf, st: &Expr, ph: &Expr, fence: bool| -> R<()> {
                    s.out.push(intr(
                        Intrinsic::MbarrierWait,
                        vec![bar(add(st.clone(), int(v_full))), Arg::Expr(ph.clone())],
                    ));
                    if fence {
                        s.out.push(intr(Intrinsic::WgmmaFence, vec![]));
                    }
                    let v_base = s.let_("vb", Ty::Idx, mul(st.clone(), int(ov.tile_elems())));
                    for kk in 0..bkv / 16 {
                        let vb = add(v_base.clone(), int(step_at(&v_steps, kk)? as u64));
                        s.out.push(intr(
                            Intrinsic::WgmmaRs(dvp as u16),
                            vec![
                                Arg::at(&acc_o, vec![]),
                                Arg::at(&buf.pa, vec![int(kk)]),
                                Arg::at(&wv, vec![vb]),
                                imm(i64::from(!ov.k_major)),
                                imm(v_lbo),
                                imm(v_sbo),
                                imm(1),
                            ],
                        ));
                    }
                    s.out.push(intr(Intrinsic::WgmmaCommit, vec![]));
                    Ok(())
                };
            // One arrival per consumer on barrier `b`.
            let release = |b: Expr| Stmt::If {
                cond: leader.clone(),
                body: vec![intr(Intrinsic::MbarrierArrive, vec![bar(b)])],
                orelse: vec![],
            };
            // (The first tile's S overwrites the accumulator; it starts defined all the same.)
            for buf in &score_bufs {
                s.zero(&buf.acc4, bkv / 8)?;
            }
            // The prologue and the online softmax of the scores in `buf` (key tile `kt`, counted
            // from the unit's first): the probabilities left in `buf`, the rows' rescaling
            // factors returned.
            let softmax = |s: &mut Self,
                           buf: &ScoreBuf,
                           kt: &Expr,
                           kf: &Expr,
                           q0: &Expr,
                           bi: &Expr,
                           m: &[String],
                           l: &[String]|
             -> R<Vec<Expr>> {
                let k0 = s.let_("k0", Ty::Idx, mul(add(kf.clone(), kt.clone()), int(bkv)));
                // Each value's (row, col), computed where they are used: kept live across the
                // whole walk they cost the registers the MLIR backend's kernel runs out of.
                let rc = s.att_coords(&lane, &slab)?;
                if let (Some(band), true) = (p.band, p.prologue.keep.is_some()) {
                    // Key tiles inside the band for all the unit's rows keep every score.
                    let whole = Self::att_whole_tile(band, q0, &k0, bq, bkv);
                    let unmasked = s.block(|s| {
                        s.att_prologue(p, &buf.acc4, &rc, (q0, &k0, bi), bq, bkv, true)
                    })?;
                    let masked = s.block(|s| {
                        s.att_prologue(p, &buf.acc4, &rc, (q0, &k0, bi), bq, bkv, false)
                    })?;
                    s.out.push(Stmt::If {
                        cond: whole,
                        body: unmasked,
                        orelse: masked,
                    });
                } else {
                    s.att_prologue(p, &buf.acc4, &rc, (q0, &k0, bi), bq, bkv, false)?;
                }
                s.att_online(p, &buf.acc4, (m, l), bkv, lazy)
            };
            walk(s, &mut |s, j, q0, bi, (kf, nk), it0| {
                let (m, l) = s.att_state();
                s.zero(&acc_o4, dvp / 8)?;
                let (qb, qph) = q_ring(s, &j);
                s.out.push(intr(
                    Intrinsic::MbarrierWait,
                    vec![bar(add(qb.clone(), int(q_full))), Arg::Expr(qph)],
                ));
                let q_at = add(mul(qb.clone(), int(oq.tile_elems())), q_c.clone());
                let q_at = s.let_("qa", Ty::Idx, q_at);
                if !pipelined {
                    // Per key tile: S, the softmax, then P·V (P is S's registers, so the next
                    // tile's S waits for it).
                    let buf = &score_bufs[0];
                    s.for_("kt", Expr::Int(0), nk, Expr::Int(1), false, |s, kt| {
                        let it = s.let_("it", Ty::Idx, add(it0.clone(), kt.clone()));
                        let (st, ph) = ring(s, &it);
                        scores(s, buf, &q_at, &st, &ph)?;
                        turn_give(s);
                        s.out.push(intr(Intrinsic::WgmmaWait, vec![imm(0)]));
                        let scale = softmax(s, buf, &kt, &kf, &q0, &bi, &m, &l)?;
                        s.att_rescale(&acc_o4, &scale, dv, lazy)?;
                        values(s, buf, &st, &ph, true)?;
                        s.out.push(intr(Intrinsic::WgmmaWait, vec![imm(0)]));
                        s.out.push(release(add(st, int(empty))));
                        Ok(())
                    })?;
                } else {
                    // Tile 0's scores and softmax, then per tile kt: its S issued beside tile
                    // kt - 1's P·V, its softmax while that product runs (`wgmma.wait 1`
                    // waits for S only), O rescaled once the product is done. The two score
                    // buffers alternate, so the loop takes tiles in pairs.
                    let (a, b) = (&score_bufs[0], &score_bufs[1]);
                    let (st, ph) = ring(s, &it0);
                    scores(s, a, &q_at, &st, &ph)?;
                    turn_give(s);
                    s.out.push(intr(Intrinsic::WgmmaWait, vec![imm(0)]));
                    let scale = softmax(s, a, &Expr::Int(0), &kf, &q0, &bi, &m, &l)?;
                    s.att_rescale(&acc_o4, &scale, dv, lazy)?;
                    let step =
                        |s: &mut Self, kt: &Expr, cur: &ScoreBuf, prev: &ScoreBuf| -> R<()> {
                            let it = s.let_("it", Ty::Idx, add(it0.clone(), kt.clone()));
                            let (st, ph) = ring(s, &it);
                            let pit =
                                s.let_("pit", Ty::Idx, Expr::idx(IdxOp::Sub, it, Expr::Int(1)));
                            let (pst, pph) = ring(s, &pit);
                            scores(s, cur, &q_at, &st, &ph)?;
                            values(s, prev, &pst, &pph, false)?;
                            turn_give(s);
                            s.out.push(intr(Intrinsic::WgmmaWait, vec![imm(1)]));
                            let scale = softmax(s, cur, kt, &kf, &q0, &bi, &m, &l)?;
                            s.out.push(intr(Intrinsic::WgmmaWait, vec![imm(0)]));
                            s.out.push(release(add(pst, int(empty))));
                            s.att_rescale(&acc_o4, &scale, dv, lazy)
                        };
                    s.for_(
                        "kt",
                        Expr::Int(1),
                        nk.clone(),
                        Expr::Int(2),
                        false,
                        |s, kt| {
                            step(s, &kt, b, a)?;
                            let kt2 = s.let_("kt", Ty::Idx, add(kt, Expr::Int(1)));
                            s.if_(lt(kt2.clone(), nk.clone()), |s| step(s, &kt2, a, b))
                        },
                    )?;
                    // The last tile's P·V: its P is in `a` when the tile count is odd.
                    let last = Expr::idx(IdxOp::Sub, nk.clone(), Expr::Int(1));
                    let lit_ = s.let_("lit", Ty::Idx, add(it0.clone(), last.clone()));
                    let (lst, lph) = ring(s, &lit_);
                    let in_a = s.block(|s| values(s, a, &lst, &lph, true))?;
                    let in_b = s.block(|s| values(s, b, &lst, &lph, true))?;
                    s.out.push(Stmt::If {
                        cond: Expr::idx(
                            IdxOp::Eq,
                            Expr::idx(IdxOp::Rem, last, Expr::Int(2)),
                            Expr::Int(0),
                        ),
                        body: in_a,
                        orelse: in_b,
                    });
                    s.out.push(intr(Intrinsic::WgmmaWait, vec![imm(0)]));
                    s.out.push(release(add(lst, int(empty))));
                }
                let rc = s.att_coords(&lane, &slab)?;
                let Some(st) = &staged else {
                    // The unit's Q is no longer read: the producer may load the next one there.
                    s.out.push(release(add(qb, int(q_empty))));
                    return s.att_store(p, &acc_o4, &l, &rc, (&q0, &bi), bq);
                };
                // The output through the consumer's rows of the Q tile (named barrier
                // `1 + nc + c`: ping-pong's are 1 ..= nc), then the tile is the producer's.
                let inv = s.att_inverse_sums(&l);
                let named = add(c.clone(), int(1 + nc));
                s.att_store_staged(p, st, &acc_o4, &inv, &rc, (&qb, &c, &named), (&q0, &bi), bq)?;
                s.out.push(release(add(qb, int(q_empty))));
                Ok(())
            })
        })?;
        self.out.push(Stmt::If {
            cond: Expr::idx(IdxOp::Eq, wg, Expr::Int(0)),
            body: producer,
            orelse: consumer,
        });
        Ok(true)
    }
}
