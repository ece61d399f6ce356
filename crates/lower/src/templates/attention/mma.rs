//! FlashAttention-2's schedule on `mma.sync.m16n8k16` (sm_80+), head dims up to 128.
//!
//! A block of 4 warps owns 64 query rows of one batch entry (every batch dim, heads included,
//! flattened); each warp owns 16 rows, one mma row atom. The block loads its Q tile once, each
//! warp keeps its Q fragments in registers, then for each tile of 64 keys (32 when a head dim
//! is 128, [`keys_per_tile`]):
//!
//! 1. K and V tiles come to shared memory (16-byte copies where the layouts allow, zeros past
//!    the sequence's end); with 64 keys the K tile reuses the Q tile's storage.
//! 2. `S = Q·Kᵀ` by ldmatrix + mma into f32 accumulators (atoms of 16x8).
//! 3. The prologue and the online softmax (the parent module's), P kept in registers.
//! 4. `O += P·V` with V's fragments by `ldmatrix.trans` when V is head-dim-contiguous.
//!
//! Head dims are computed in steps of 16 (an ldmatrix.x4's columns): a head dim of 40 is a
//! 48-column tile whose last 8 columns are loaded as zeros and never stored.

use super::super::matmul_mma::{TileLoad, ldmatrix_x4_rows};
use super::{AttPlan, AttentionOps};
use crate::lower::*;
use irc_ir::DType;
use irc_kir::{self as kir, Builtin, Expr, IdxOp, Intrinsic, Space, Stmt, Ty};
use irc_layout::{Layout, composition};

/// Query rows per block (4 warps of one 16-row mma atom each).
pub(crate) const BQ: u64 = 64;
/// Keys per tile: 64, or 32 when a head dim is 128 (the S and P registers of 64 keys beside
/// 128-column O accumulators and Q fragments exceed the 255-register budget on sm_80).
pub(crate) fn keys_per_tile(d: u64, dv: u64) -> u64 {
    if d.max(dv) > 64 { 32 } else { 64 }
}
const WARPS: u64 = 4;
const THREADS: u64 = 32 * WARPS;

impl Builder<'_, '_> {
    /// FlashAttention-2's kernel for the group `ops` (the module doc's schedule).
    pub(super) fn attention_mma(&mut self, ops: &AttentionOps<'_>, p: &AttPlan) -> R<()> {
        let (qk, pv) = (&p.qk, &p.pv);
        let (sq, sk, d, dv, dt, batch) = (p.sq, p.sk, p.d, p.dv, p.dt, p.batch);
        let (q, kt) = (ops.scores.operands[0], ops.scores.operands[1]);
        let v = ops.output.operands[1];
        let q_d_fast = self.unit_stride(q, &qk.access_a, 1, qk.ak_st == 1);
        let k_keys_fast = self.unit_stride(kt, &qk.access_b, 1, qk.bn_st == 1);
        let v_d_fast = self.unit_stride(v, &pv.access_b, 1, pv.bn_st == 1);
        // Head dim 256 is the Hopper kernel's alone: here a warp's 128 O accumulators a thread
        // beside its Q fragments (or their addresses, read at each k-step) left no room (the
        // MLIR backend's sm_80 kernel spilled), so the chain is planned again unfused.
        if d.max(dv) > 128 {
            return Err(Retry::Materialize(
                self.l.names[ops.softmax.result.index()].clone(),
            ));
        }
        // Head dims in whole k-steps / column pairs of 16; the padding columns are zeros.
        let (d16, dv16) = (d.next_multiple_of(16), dv.next_multiple_of(16));
        let tiles_q = sq.div_ceil(BQ);
        if tiles_q > i32::MAX as u64 {
            return Err(super::unsupported(format!("{sq} query rows")));
        }
        self.kernel.grid = [tiles_q as u32, batch.clamp(1, 65535) as u32, 1];
        self.kernel.block = [THREADS as u32, 1, 1];
        let li = |s: u64, st: i64| Layout::int(s as i64, st).map_err(internal);
        // Shared tiles are (rows, k) as in the matmul template: the contiguous dimension in
        // memory is contiguous in shared memory, rows padded by 8 elements (16 bytes).
        let strides = |k_fast: bool, rows: u64, kext: u64| -> (i64, i64) {
            if k_fast {
                (kext as i64 + 8, 1)
            } else {
                (1, rows as i64 + 8)
            }
        };
        let (q_r, q_k) = strides(q_d_fast, BQ, d16);
        let bkv = keys_per_tile(d, dv);
        let (k_r, k_k) = strides(!k_keys_fast, bkv, d16);
        let (v_r, v_k) = strides(!v_d_fast, dv16, bkv);
        let tile = |rows: u64, kext: u64, (r, k): (i64, i64)| {
            Layout::flat(&[rows as i64, kext as i64], &[r, k]).map_err(internal)
        };
        let smem_q = self.tensor(Space::Shared, dt, tile(BQ, d16, (q_r, q_k))?);
        // K's tile reuses Q's once Q is in registers, when their layouts agree (64 keys, both
        // head-dim-contiguous: the usual case).
        let smem_k = if (q_r, q_k) == (k_r, k_k) && bkv == BQ {
            smem_q.clone()
        } else {
            self.tensor(Space::Shared, dt, tile(bkv, d16, (k_r, k_k))?)
        };
        let smem_v = self.tensor(Space::Shared, dt, tile(dv16, bkv, (v_r, v_k))?);
        let cosize = |t: &str| {
            self.kernel
                .tensors
                .iter()
                .find(|x| x.name == t)
                .map_or(0, |x| x.layout.cosize().unwrap_or(i64::MAX))
        };
        let mut bytes = cosize(&smem_q) + cosize(&smem_v);
        if smem_k != smem_q {
            bytes += cosize(&smem_k);
        }
        let limit = self.l.options.target.max_shared_bytes as i64;
        if bytes.saturating_mul(2) > limit {
            // Too much shared memory for these layouts: plan again with the probabilities stored
            // (policy rule 8 then declines the chain, and the unfused kernels run).
            return Err(Retry::Materialize(
                self.l.names[ops.softmax.result.index()].clone(),
            ));
        }
        // ldmatrix row starts (see `ldmatrix_x4_rows`) extended with the atom/k-step/warp modes.
        let lanes = |b: bool, trans: bool, r: i64, k: i64| -> R<Layout> {
            composition(
                &Layout::flat(&[16, 16], &[r, k]).map_err(internal)?,
                &ldmatrix_x4_rows(b, trans).map_err(internal)?,
            )
            .map_err(internal)
        };
        let (trans_q, trans_k, trans_v) = (!q_d_fast, k_keys_fast, v_d_fast);
        let rows_q = concat(&[
            lanes(false, trans_q, q_r, q_k)?,
            li(d16 / 16, 16 * q_k)?,
            li(WARPS, 16 * q_r)?,
        ])?;
        let rows_k = concat(&[
            lanes(true, trans_k, k_r, k_k)?,
            li(bkv / 16, 16 * k_r)?,
            li(d16 / 16, 16 * k_k)?,
        ])?;
        let rows_v = concat(&[
            lanes(true, trans_v, v_r, v_k)?,
            li(dv16 / 16, 16 * v_r)?,
            li(bkv / 16, 16 * v_k)?,
        ])?;
        let rows_q = self.tensor(Space::View(smem_q.clone()), dt, rows_q);
        let rows_k = self.tensor(Space::View(smem_k.clone()), dt, rows_k);
        let rows_v = self.tensor(Space::View(smem_v.clone()), dt, rows_v);
        let regs = |s: &mut Self, dtype: DType, shape: &[i64], stride: &[i64]| -> R<String> {
            let l = Layout::flat(shape, stride).map_err(internal)?;
            Ok(s.tensor(Space::Registers, dtype, l))
        };
        let natoms = (bkv / 8) as i64;
        let fq = regs(self, dt, &[8, d16 as i64 / 16], &[1, 8])?;
        let fk = regs(self, dt, &[4, natoms], &[1, 4])?;
        let fk_pairs = self.tensor(
            Space::View(fk.clone()),
            dt,
            Layout::flat(&[8, natoms / 2], &[1, 8]).map_err(internal)?,
        );
        let fv = regs(self, dt, &[4, dv16 as i64 / 8], &[1, 4])?;
        let fv_pairs = self.tensor(
            Space::View(fv.clone()),
            dt,
            Layout::flat(&[8, dv16 as i64 / 16], &[1, 8]).map_err(internal)?,
        );
        let acc_s = regs(self, DType::F32, &[4, natoms], &[1, 4])?;
        let acc_o = regs(self, DType::F32, &[4, dv16 as i64 / 8], &[1, 4])?;
        // P: value v of C atom j at 4j + v; A fragment k is C atoms 2k and 2k+1, 8 values.
        let p_c = regs(self, dt, &[4, natoms], &[1, 4])?;
        let p_a = self.tensor(
            Space::View(p_c.clone()),
            dt,
            Layout::flat(&[8, natoms / 2], &[1, 8]).map_err(internal)?,
        );
        let lane = self.let_(
            "lane",
            Ty::Idx,
            Expr::idx(IdxOp::Rem, bx(Builtin::TidX), Expr::Int(32)),
        );
        let warp = self.let_(
            "warp",
            Ty::Idx,
            Expr::idx(IdxOp::Div, bx(Builtin::TidX), Expr::Int(32)),
        );
        let rc = self.att_coords(&lane, &warp)?;
        self.for_(
            "b",
            bx(Builtin::BidY),
            int(batch),
            bx(Builtin::NctaidY),
            false,
            |s, bi| {
                let q0 = s.let_("q0", Ty::Idx, mul(bx(Builtin::BidX), int(BQ)));
                s.out.push(Stmt::Sync);
                let q_tile = TileLoad {
                    v: q,
                    access: qk.access_a.clone(),
                    rows: BQ,
                    extent: sq,
                    row0: q0.clone(),
                    row_pos: 0,
                    k_fast: q_d_fast,
                    smem: smem_q.clone(),
                    strides: (q_r, q_k),
                    bk: d16,
                    threads: THREADS,
                };
                s.tc_tile_load(&q_tile, &Expr::Int(0), &bi, d, dt)?;
                s.out.push(Stmt::Sync);
                s.unrolled("ks", d16 / 16, &mut |s, ks| {
                    s.out.push(Stmt::Intrinsic {
                        op: Intrinsic::ldmatrix_x4(trans_q),
                        args: vec![
                            kir::Arg::at(&fq, vec![ks.clone()]),
                            kir::Arg::at(&rows_q, vec![lane.clone(), ks, warp.clone()]),
                        ],
                    });
                    Ok(())
                })?;
                let (m, l) = s.att_state();
                s.zero(&acc_o, dv16 / 8)?;
                // With a mask band, only the key tiles inside it.
                let (kf, nk) = s.att_key_tiles(p.band, &q0, BQ, bkv, sk.div_ceil(bkv));
                let (k_first, k_end) = (mul(kf.clone(), int(bkv)), mul(add(kf, nk), int(bkv)));
                s.for_("k0", k_first, k_end, int(bkv), false, |s, k0| {
                    s.out.push(Stmt::Sync);
                    let k_tile = TileLoad {
                        v: kt,
                        access: qk.access_b.clone(),
                        rows: bkv,
                        extent: sk,
                        row0: k0.clone(),
                        row_pos: 1,
                        k_fast: !k_keys_fast,
                        smem: smem_k.clone(),
                        strides: (k_r, k_k),
                        bk: d16,
                        threads: THREADS,
                    };
                    s.tc_tile_load(&k_tile, &Expr::Int(0), &bi, d, dt)?;
                    let v_tile = TileLoad {
                        v,
                        access: pv.access_b.clone(),
                        rows: dv16,
                        extent: dv,
                        row0: Expr::Int(0),
                        row_pos: 1,
                        k_fast: !v_d_fast,
                        smem: smem_v.clone(),
                        strides: (v_r, v_k),
                        bk: bkv,
                        threads: THREADS,
                    };
                    s.tc_tile_load(&v_tile, &k0, &bi, sk, dt)?;
                    s.out.push(Stmt::Sync);
                    // S = Q·Kᵀ.
                    s.zero(&acc_s, bkv / 8)?;
                    s.att_products(
                        &lane,
                        (&acc_s, &fq),
                        (&fk_pairs, &fk, &rows_k, trans_k),
                        (d16, bkv),
                        &[],
                    )?;
                    s.att_prologue(p, &acc_s, &rc, (&q0, &k0, &bi), BQ, bkv, false)?;
                    s.att_softmax(p, &acc_s, &p_c, &acc_o, (&m, &l), bkv, dv, dt)?;
                    // O += P·V.
                    s.att_products(
                        &lane,
                        (&acc_o, &p_a),
                        (&fv_pairs, &fv, &rows_v, trans_v),
                        (bkv, dv16),
                        &[],
                    )
                })?;
                s.att_store(p, &acc_o, &l, &rc, (&q0, &bi), BQ)
            },
        )
    }

    /// `acc += a · B` over `k / 16` k-steps and `n / 16` pairs of 8-column atoms of B (its
    /// fragments `b`, as pairs `b_pairs`, read by `ldmatrix.x4` from the row starts `rows` at
    /// `(lane, pair, k-step, extra..)`, transposed with `trans`): each ldmatrix.x4 feeds the
    /// two mmas of its atom pair right away (few fragment registers live at once). `S = Q·Kᵀ`
    /// and `O += P·V`.
    pub(super) fn att_products(
        &mut self,
        lane: &Expr,
        (acc, a): (&str, &str),
        (b_pairs, b, rows, trans): (&str, &str, &str, bool),
        (k, n): (u64, u64),
        extra: &[Expr],
    ) -> R<()> {
        self.unrolled("ks", k / 16, &mut |s, ks| {
            s.unrolled("j", n / 16, &mut |s, j| {
                let mut at = vec![lane.clone(), j.clone(), ks.clone()];
                at.extend(extra.iter().cloned());
                s.out.push(Stmt::Intrinsic {
                    op: Intrinsic::ldmatrix_x4(trans),
                    args: vec![
                        kir::Arg::at(b_pairs, vec![j.clone()]),
                        kir::Arg::at(rows, at),
                    ],
                });
                for half in 0..2 {
                    let atom = add(mul(j.clone(), Expr::Int(2)), Expr::Int(half));
                    s.out.push(Stmt::Intrinsic {
                        op: Intrinsic::MmaM16n8k16,
                        args: vec![
                            kir::Arg::at(acc, vec![atom.clone()]),
                            kir::Arg::at(a, vec![ks.clone()]),
                            kir::Arg::at(b, vec![atom]),
                        ],
                    });
                }
                Ok(())
            })
        })
    }
}
