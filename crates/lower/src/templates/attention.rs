//! The attention template for sm_80+ (FlashAttention-2's schedule on `mma.sync.m16n8k16`):
//! `O = softmax(prologue(Q·Kᵀ)) · V` in one kernel, the scores and probabilities never leaving
//! registers.
//!
//! A block of 4 warps owns 64 query rows of one batch entry (every batch dim, heads included,
//! flattened); each warp owns 16 rows, one mma row atom. The block loads its Q tile once, each
//! warp keeps its Q fragments in registers, then for each tile of 64 keys (32 when a head dim
//! is 128, [`keys_per_tile`]):
//!
//! 1. K and V tiles come to shared memory (16-byte copies where the layouts allow, zeros past
//!    the sequence's end); with 64 keys the K tile reuses the Q tile's storage.
//! 2. `S = Q·Kᵀ` by ldmatrix + mma into f32 accumulators (atoms of 16x8).
//! 3. The prologue, per score: the accumulator atom `mma_m16n8k16_c` gives each value's
//!    (row, col), the score is read through the prologue at that coordinate
//!    ([`Builder::value_at`] with the scores' matmul held in a register), and scores past the
//!    sequence's end are `-inf` (guards only where the tiles do not divide the lengths).
//! 4. Online softmax per row: the row max over the thread's values (`maxnum`: a NaN score still
//!    makes its row NaN through `exp`), then over the 4 lanes of a quad (`warp_reduce.max.4`);
//!    `m` and the per-thread partial row sum `l` are rescaled, the O accumulators too (a row
//!    with no finite score yet subtracts 0, not -inf).
//! 5. `P = exp(S - m)` rounded to the input type is the A operand of `P·V` as it is: the 4
//!    values of C atoms `2k` and `2k+1` are the 8 values of A fragment `k`
//!    (`tests::p_accumulators_are_a_fragments` checks it on the atoms).
//! 6. `O += P·V` with V's fragments by `ldmatrix.trans` when V is head-dim-contiguous.
//!
//! At the end the row sums are summed over the quad, `O / l` goes through the group's epilogue
//! (if any) and is stored. A causal mask recognized by the policy (`irc_fused::attention::causal`)
//! skips the key tiles right of the block's last row; its diagonal tiles are masked by the
//! prologue itself.

use super::matmul_mma::{TileLoad, ldmatrix_x4_rows};
use crate::LowerError;
use crate::lower::*;
use irc_ir::{DType, Inst, ValueDef, ValueId};
use irc_kir::{self as kir, Builtin, Expr, Func, IdxOp, Intrinsic, ReduceOp, Space, Stmt, Ty};
use irc_layout::{Layout, coalesce, composition, mma_m16n8k16_c};

/// Query rows per block (4 warps of one 16-row mma atom each).
pub(crate) const BQ: u64 = 64;
/// Keys per tile: 64, or 32 when a head dim is 128 (the S and P registers of 64 keys beside
/// 128-column O accumulators and Q fragments exceed the 255-register budget on sm_80).
pub(crate) fn keys_per_tile(d: u64, dv: u64) -> u64 {
    if d.max(dv) > 64 { 32 } else { 64 }
}
const WARPS: u64 = 4;
const THREADS: u64 = 32 * WARPS;

/// The three matmul/softmax statements of an attention group.
pub(crate) struct AttentionOps<'g> {
    pub(crate) scores: &'g Inst,
    pub(crate) softmax: &'g Inst,
    pub(crate) output: &'g Inst,
    /// Whether the prologue is a causal mask (key tiles past the diagonal are skipped).
    pub(crate) causal: bool,
}

fn unsupported(reason: String) -> Retry {
    Retry::Fail(LowerError::Unsupported {
        op: "attention".into(),
        reason,
    })
}

impl<'g> Lowering<'g> {
    /// The statements of an attention group, and whether its prologue is a causal mask.
    pub(crate) fn attention_ops(
        &self,
        grp: &irc_fused::Group,
        att: irc_fused::AttentionStmts,
    ) -> R<crate::templates::AttentionOps<'g>> {
        let inst_of = |k: usize| -> R<&'g Inst> {
            let irc_fused::Stmt::Op(o) = &grp.stmts[k] else {
                return Err(Retry::Fail(LowerError::Internal("attention anchor".into())));
            };
            let v = self.value_of.get(&o.value).map_or(0, |v| v.index());
            match self.g.values[v].def {
                ValueDef::Inst(i) => Ok(&self.g.insts[i]),
                ValueDef::Param(_) => {
                    Err(Retry::Fail(LowerError::Internal("attention anchor".into())))
                }
            }
        };
        let (scores, softmax, output) = (
            inst_of(att.scores)?,
            inst_of(att.softmax)?,
            inst_of(att.output)?,
        );
        let dag = self.dag.get_or_init(|| irc_fused::GraphDag::new(self.g));
        let x = softmax.operands[0].index();
        let m = irc_fused::AttentionMatch {
            output: output.result.index(),
            softmax: softmax.result.index(),
            p_cast: None,
            scores: Some(scores.result.index()),
            prologue: irc_fused::attention::path(dag, x, scores.result.index()),
            declined: None,
            declined_at: None,
        };
        Ok(crate::templates::AttentionOps {
            scores,
            softmax,
            output,
            causal: irc_fused::attention::causal(dag, &m),
        })
    }
}

impl Builder<'_, '_> {
    /// Whether mode `mode` of `v` read at `access` is contiguous in memory (looking through
    /// views); `logical` when `v` is computed.
    fn unit_stride(&mut self, v: ValueId, access: &Layout, mode: usize, logical: bool) -> bool {
        match self.resolve(v, access) {
            Some((_, l)) => l
                .modes()
                .get(mode)
                .and_then(|m| coalesce(m).ok())
                .is_some_and(|m| m.leaves().first().is_some_and(|&(_, d)| d == 1)),
            None => logical,
        }
    }

    /// One attention kernel storing `roots` (the output matmul or its epilogue).
    pub(crate) fn attention(&mut self, ops: &AttentionOps<'_>, roots: &[ValueId]) -> R<()> {
        let qk = self.matmul_access(ops.scores)?;
        let pv = self.matmul_access(ops.output)?;
        let (sq, sk, d) = (qk.ms.m, qk.ms.n, qk.ms.k);
        let dv = pv.ms.n;
        let dt = self.ty(ops.output.result).dtype;
        let s_dt = self.ty(ops.scores.result).dtype;
        if !matches!(dt, DType::F16 | DType::BF16) || !irc_fused::attention::HEAD_DIMS.contains(&d)
        {
            return Err(unsupported(format!(
                "{dt} with head dim {d}: the template takes f16/bf16 and head dims 32, 64, 128"
            )));
        }
        let batch: u64 = qk.ms.batch.iter().product();
        let (q, kt) = (ops.scores.operands[0], ops.scores.operands[1]);
        let v = ops.output.operands[1];
        let x_val = ops.softmax.operands[0];
        let (s_mm, o_mm) = (ops.scores.result, ops.output.result);
        let q_d_fast = self.unit_stride(q, &qk.access_a, 1, qk.ak_st == 1);
        let k_keys_fast = self.unit_stride(kt, &qk.access_b, 1, qk.bn_st == 1);
        let v_d_fast = self.unit_stride(v, &pv.access_b, 1, pv.bn_st == 1);
        let tiles_q = sq.div_ceil(BQ);
        if tiles_q > i32::MAX as u64 {
            return Err(unsupported(format!("{sq} query rows")));
        }
        self.kernel.grid = [tiles_q as u32, batch.clamp(1, 65535) as u32, 1];
        self.kernel.block = [THREADS as u32, 1, 1];
        let origin_s = self.l.origin(ops.scores);
        let origin_p = self.l.origin(ops.softmax);
        for o in [origin_s, origin_p] {
            if !self.kernel.origins.contains(&o) {
                self.kernel.origins.push(o);
            }
        }
        // The output's own buffer and epilogue, or (policy rule 2) a result view of it stored
        // through the inverse of the view's layout.
        let viewed = !self.l.buffer_of.contains_key(&o_mm)
            && roots
                .iter()
                .all(|&r| self.def(r).is_some_and(|i| is_view(i.op)));
        let outs: Vec<String> = if viewed {
            vec![self.output(o_mm, &pv.access_c)?]
        } else {
            roots
                .iter()
                .map(|&r| self.global(r, pv.access_c.clone()))
                .collect()
        };
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
        let (q_r, q_k) = strides(q_d_fast, BQ, d);
        let bkv = keys_per_tile(d, dv);
        let (k_r, k_k) = strides(!k_keys_fast, bkv, d);
        let (v_r, v_k) = strides(!v_d_fast, dv, bkv);
        let tile = |rows: u64, kext: u64, (r, k): (i64, i64)| {
            Layout::flat(&[rows as i64, kext as i64], &[r, k]).map_err(internal)
        };
        let smem_q = self.tensor(Space::Shared, dt, tile(BQ, d, (q_r, q_k))?);
        // K's tile reuses Q's once Q is in registers, when their layouts agree (64 keys, both
        // head-dim-contiguous: the usual case).
        let smem_k = if (q_r, q_k) == (k_r, k_k) && bkv == BQ {
            smem_q.clone()
        } else {
            self.tensor(Space::Shared, dt, tile(bkv, d, (k_r, k_k))?)
        };
        let smem_v = self.tensor(Space::Shared, dt, tile(dv, bkv, (v_r, v_k))?);
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
        let limit = irc_target::Target::default().max_shared_bytes as i64;
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
            li(d / 16, 16 * q_k)?,
            li(WARPS, 16 * q_r)?,
        ])?;
        let rows_k = concat(&[
            lanes(true, trans_k, k_r, k_k)?,
            li(bkv / 16, 16 * k_r)?,
            li(d / 16, 16 * k_k)?,
        ])?;
        let rows_v = concat(&[
            lanes(true, trans_v, v_r, v_k)?,
            li(dv / 16, 16 * v_r)?,
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
        let fq = regs(self, dt, &[8, d as i64 / 16], &[1, 8])?;
        let fk = regs(self, dt, &[4, natoms], &[1, 4])?;
        let fk_pairs = self.tensor(
            Space::View(fk.clone()),
            dt,
            Layout::flat(&[8, natoms / 2], &[1, 8]).map_err(internal)?,
        );
        let fv = regs(self, dt, &[4, dv as i64 / 8], &[1, 4])?;
        let fv_pairs = self.tensor(
            Space::View(fv.clone()),
            dt,
            Layout::flat(&[8, dv as i64 / 16], &[1, 8]).map_err(internal)?,
        );
        let acc_s = regs(self, DType::F32, &[4, natoms], &[1, 4])?;
        let acc_o = regs(self, DType::F32, &[4, dv as i64 / 8], &[1, 4])?;
        // P: value v of C atom j at 4j + v; A fragment k is C atoms 2k and 2k+1, 8 values.
        let p_c = regs(self, dt, &[4, natoms], &[1, 4])?;
        let p_a = self.tensor(
            Space::View(p_c.clone()),
            dt,
            Layout::flat(&[8, natoms / 2], &[1, 8]).map_err(internal)?,
        );
        let atom_c = mma_m16n8k16_c().map_err(internal)?.layout().clone();
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
        // Value v of an accumulator atom sits at (row, col) = (ci % 16, ci / 16), ci =
        // mma_c(lane, v); v = 0, 1 are row `lane / 4`, v = 2, 3 eight rows below.
        let mut rc = vec![];
        for val in 0..4 {
            let ci =
                kir::offset_expr(&atom_c, &[lane.clone(), Expr::Int(val)]).map_err(internal)?;
            let ci = self.let_("ci", Ty::Idx, ci);
            let row = self.let_(
                "ar",
                Ty::Idx,
                add(
                    mul(warp.clone(), Expr::Int(16)),
                    Expr::idx(IdxOp::Rem, ci.clone(), Expr::Int(16)),
                ),
            );
            let col = self.let_("ac", Ty::Idx, Expr::idx(IdxOp::Div, ci, Expr::Int(16)));
            rc.push((row, col));
        }
        let f32v = |x: f64| Expr::lit(DType::F32, x);
        let call = |f: Func, a: Vec<Expr>| Expr::call(f, a);
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
                    bk: d,
                    threads: THREADS,
                };
                s.tc_tile_load(&q_tile, &Expr::Int(0), &bi, d, dt)?;
                s.out.push(Stmt::Sync);
                s.unrolled("ks", d / 16, &mut |s, ks| {
                    s.out.push(Stmt::Intrinsic {
                        op: Intrinsic::ldmatrix_x4(trans_q),
                        args: vec![
                            kir::Arg::at(&fq, vec![ks.clone()]),
                            kir::Arg::at(&rows_q, vec![lane.clone(), ks, warp.clone()]),
                        ],
                    });
                    Ok(())
                })?;
                // Running row max and partial row sum of rows `lane / 4` (h = 0) and 8 below.
                let mut m = vec![];
                let mut l = vec![];
                for h in 0..2 {
                    let mv = s.fresh(&format!("m{h}_"));
                    s.out.push(Stmt::Var {
                        var: mv.clone(),
                        ty: Ty::Elem(DType::F32),
                        init: f32v(f64::NEG_INFINITY),
                    });
                    m.push(mv);
                    let lv = s.fresh(&format!("l{h}_"));
                    s.out.push(Stmt::Var {
                        var: lv.clone(),
                        ty: Ty::Elem(DType::F32),
                        init: f32v(0.0),
                    });
                    l.push(lv);
                }
                s.zero(&acc_o, dv / 8)?;
                s.for_("k0", Expr::Int(0), int(sk), int(bkv), false, |s, k0| {
                    let body = |s: &mut Self| -> R<()> {
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
                            bk: d,
                            threads: THREADS,
                        };
                        s.tc_tile_load(&k_tile, &Expr::Int(0), &bi, d, dt)?;
                        let v_tile = TileLoad {
                            v,
                            access: pv.access_b.clone(),
                            rows: dv,
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
                        // Each ldmatrix.x4 feeds the two mmas of its atom pair right away (few
                        // fragment registers live at once).
                        s.unrolled("ks", d / 16, &mut |s, ks| {
                            s.unrolled("j", bkv / 16, &mut |s, j| {
                                s.out.push(Stmt::Intrinsic {
                                    op: Intrinsic::ldmatrix_x4(trans_k),
                                    args: vec![
                                        kir::Arg::at(&fk_pairs, vec![j.clone()]),
                                        kir::Arg::at(
                                            &rows_k,
                                            vec![lane.clone(), j.clone(), ks.clone()],
                                        ),
                                    ],
                                });
                                for half in 0..2 {
                                    let atom = add(mul(j.clone(), Expr::Int(2)), Expr::Int(half));
                                    s.out.push(Stmt::Intrinsic {
                                        op: Intrinsic::MmaM16n8k16,
                                        args: vec![
                                            kir::Arg::at(&acc_s, vec![atom.clone()]),
                                            kir::Arg::at(&fq, vec![ks.clone()]),
                                            kir::Arg::at(&fk, vec![atom]),
                                        ],
                                    });
                                }
                                Ok(())
                            })
                        })?;
                        // The prologue, per score; -inf past the sequence's end.
                        for j in 0..bkv / 8 {
                            for (val, (row, col)) in rc.iter().enumerate() {
                                let at = vec![Expr::Int(val as i64), Expr::Int(j as i64)];
                                let gq = s.let_("gq", Ty::Idx, add(q0.clone(), row.clone()));
                                let gk = s.let_(
                                    "gk",
                                    Ty::Idx,
                                    add(add(k0.clone(), int(8 * j)), col.clone()),
                                );
                                // The score through the prologue at (gq, gk), as f32.
                                let access_s = qk.access_c.clone();
                                let score =
                                    cast_to(s_dt, DType::F32, Expr::load(&acc_s, at.clone()));
                                let coord = vec![gq.clone(), gk.clone(), bi.clone()];
                                let prologue = |s: &mut Self| -> R<Expr> {
                                    s.coord = coord;
                                    s.overrides.insert(s_mm, (access_s.clone(), score));
                                    let e = s.value_at(x_val, &access_s)?;
                                    s.overrides.remove(&s_mm);
                                    Ok(cast_to(DType::F32, s.ty(x_val).dtype, e))
                                };
                                // Guards only where a tile can pass the end of the sequence.
                                let guard = match (sq % BQ == 0, sk % bkv == 0) {
                                    (true, true) => None,
                                    (false, true) => Some(lt(gq, int(sq))),
                                    (true, false) => Some(lt(gk, int(sk))),
                                    (false, false) => Some(Expr::idx(
                                        IdxOp::And,
                                        lt(gq, int(sq)),
                                        lt(gk, int(sk)),
                                    )),
                                };
                                let value = match guard {
                                    None => prologue(s)?,
                                    Some(inside) => {
                                        let xv = s.fresh("x");
                                        s.out.push(Stmt::Var {
                                            var: xv.clone(),
                                            ty: Ty::Elem(DType::F32),
                                            init: f32v(f64::NEG_INFINITY),
                                        });
                                        let xv2 = xv.clone();
                                        s.if_(inside, |s| {
                                            let value = prologue(s)?;
                                            s.out.push(Stmt::Assign { var: xv2, value });
                                            Ok(())
                                        })?;
                                        Expr::var(&xv)
                                    }
                                };
                                s.out.push(Stmt::Store {
                                    tensor: acc_s.clone(),
                                    coord: at,
                                    value,
                                });
                            }
                        }
                        // Online softmax, rows h = 0 (values 0, 1) and h = 1 (values 2, 3).
                        let sval = |val: u64, j: u64| Expr::load(&acc_s, vec![int(val), int(j)]);
                        let mut scale = vec![];
                        let mut mref = vec![];
                        for h in 0..2u64 {
                            let mut mx = sval(2 * h, 0);
                            for j in 0..bkv / 8 {
                                for val in [2 * h, 2 * h + 1] {
                                    if (j, val) != (0, 2 * h) {
                                        mx = call(Func::MaxNum, vec![mx, sval(val, j)]);
                                    }
                                }
                            }
                            let mx = s.let_("mx", Ty::Elem(DType::F32), mx);
                            let red = s.fresh("mx");
                            s.out.push(Stmt::WarpReduce {
                                var: red.clone(),
                                ty: Ty::Elem(DType::F32),
                                op: ReduceOp::Max,
                                width: 4,
                                value: mx,
                            });
                            let old = Expr::var(&m[h as usize]);
                            let mnew = s.let_(
                                "mn",
                                Ty::Elem(DType::F32),
                                call(Func::Max, vec![old.clone(), Expr::var(&red)]),
                            );
                            // A row with no finite score yet subtracts 0, not -inf (no NaN).
                            let is_inf =
                                call(Func::Eq, vec![mnew.clone(), f32v(f64::NEG_INFINITY)]);
                            let r = s.let_(
                                "mr",
                                Ty::Elem(DType::F32),
                                call(Func::Select, vec![is_inf, f32v(0.0), mnew.clone()]),
                            );
                            let sc = s.let_(
                                "sc",
                                Ty::Elem(DType::F32),
                                call(Func::Exp, vec![call(Func::Sub, vec![old, r.clone()])]),
                            );
                            s.out.push(Stmt::Assign {
                                var: m[h as usize].clone(),
                                value: mnew,
                            });
                            scale.push(sc);
                            mref.push(r);
                        }
                        let mut sums: Vec<Option<Expr>> = vec![None, None];
                        for j in 0..bkv / 8 {
                            for val in 0..4u64 {
                                let h = (val / 2) as usize;
                                let pe = s.let_(
                                    "p",
                                    Ty::Elem(DType::F32),
                                    call(
                                        Func::Exp,
                                        vec![call(Func::Sub, vec![sval(val, j), mref[h].clone()])],
                                    ),
                                );
                                sums[h] = Some(match sums[h].take() {
                                    None => pe.clone(),
                                    Some(a) => call(Func::Add, vec![a, pe.clone()]),
                                });
                                s.out.push(Stmt::Store {
                                    tensor: p_c.clone(),
                                    coord: vec![int(val), int(j)],
                                    value: Expr::cast(dt, pe),
                                });
                            }
                        }
                        for h in 0..2 {
                            let sum = sums[h].take().unwrap_or_else(|| f32v(0.0));
                            let sum = s.let_("rs", Ty::Elem(DType::F32), sum);
                            s.out.push(Stmt::Assign {
                                var: l[h].clone(),
                                value: call(
                                    Func::Add,
                                    vec![
                                        call(Func::Mul, vec![Expr::var(&l[h]), scale[h].clone()]),
                                        sum,
                                    ],
                                ),
                            });
                        }
                        for j in 0..dv / 8 {
                            for val in 0..4u64 {
                                let at = vec![int(val), int(j)];
                                s.out.push(Stmt::Store {
                                    tensor: acc_o.clone(),
                                    coord: at.clone(),
                                    value: call(
                                        Func::Mul,
                                        vec![
                                            Expr::load(&acc_o, at),
                                            scale[(val / 2) as usize].clone(),
                                        ],
                                    ),
                                });
                            }
                        }
                        // O += P·V.
                        s.unrolled("kk", bkv / 16, &mut |s, kk| {
                            s.unrolled("j", dv / 16, &mut |s, j| {
                                s.out.push(Stmt::Intrinsic {
                                    op: Intrinsic::ldmatrix_x4(trans_v),
                                    args: vec![
                                        kir::Arg::at(&fv_pairs, vec![j.clone()]),
                                        kir::Arg::at(
                                            &rows_v,
                                            vec![lane.clone(), j.clone(), kk.clone()],
                                        ),
                                    ],
                                });
                                for half in 0..2 {
                                    let atom = add(mul(j.clone(), Expr::Int(2)), Expr::Int(half));
                                    s.out.push(Stmt::Intrinsic {
                                        op: Intrinsic::MmaM16n8k16,
                                        args: vec![
                                            kir::Arg::at(&acc_o, vec![atom.clone()]),
                                            kir::Arg::at(&p_a, vec![kk.clone()]),
                                            kir::Arg::at(&fv, vec![atom]),
                                        ],
                                    });
                                }
                                Ok(())
                            })
                        })
                    };
                    if ops.causal {
                        // Key tiles starting past the block's last row are fully masked.
                        let cond = lt(k0.clone(), add(q0.clone(), int(BQ)));
                        s.if_(cond, body)
                    } else {
                        body(s)
                    }
                })?;
                // O / l through the epilogue, stored where the row exists.
                let mut total = vec![];
                for lv in &l {
                    let red = s.fresh("l");
                    s.out.push(Stmt::WarpReduce {
                        var: red.clone(),
                        ty: Ty::Elem(DType::F32),
                        op: ReduceOp::Sum,
                        width: 4,
                        value: Expr::var(lv),
                    });
                    total.push(Expr::var(&red));
                }
                for j in 0..dv / 8 {
                    for (val, (row, col)) in rc.iter().enumerate() {
                        let gq = s.let_("oq", Ty::Idx, add(q0.clone(), row.clone()));
                        let gd = s.let_("od", Ty::Idx, add(int(8 * j), col.clone()));
                        let o = call(
                            Func::Div,
                            vec![
                                Expr::load(&acc_o, vec![int(val as u64), int(j)]),
                                total[val / 2].clone(),
                            ],
                        );
                        let o = Expr::cast(dt, o);
                        let (outs, access_o) = (outs.clone(), pv.access_c.clone());
                        let coord = vec![gq.clone(), gd, bi.clone()];
                        let store = |s: &mut Self| -> R<()> {
                            if viewed {
                                s.out.push(Stmt::Store {
                                    tensor: outs[0].clone(),
                                    coord,
                                    value: o,
                                });
                                return Ok(());
                            }
                            s.coord = coord.clone();
                            s.epilogue_stores(o_mm, o, &access_o, roots, &outs, coord)
                        };
                        // Rows past the end only where the query tiles pass it.
                        if sq % BQ == 0 {
                            store(s)?;
                        } else {
                            s.if_(lt(gq, int(sq)), store)?;
                        }
                    }
                }
                Ok(())
            },
        )
    }

    /// Stores f32 zero to every value of a `[4, atoms]` accumulator.
    fn zero(&mut self, acc: &str, atoms: u64) -> R<()> {
        for j in 0..atoms {
            for val in 0..4 {
                self.out.push(Stmt::Store {
                    tensor: acc.to_string(),
                    coord: vec![int(val), int(j)],
                    value: lit(DType::F32, 0.0),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use irc_layout::{IntTuple, mma_m16n8k16_a, mma_m16n8k16_c};

    /// The register identity P·V relies on: value `v` of the A fragment of k-step `k` (16
    /// columns) is value `v % 4` of C atom `2k + v / 4` (8 columns each), at the same
    /// (row, column) of the 16x16 tile.
    #[test]
    fn p_accumulators_are_a_fragments() {
        let a = mma_m16n8k16_a().unwrap();
        let c = mma_m16n8k16_c().unwrap();
        let rc = |idx: i64, rows: i64| (idx % rows, idx / rows);
        for t in 0..32 {
            for v in 0..8 {
                let (ar, ak) = rc(a.layout().crd2idx(&IntTuple::ints(&[t, v])).unwrap(), 16);
                let (cr, cc) = rc(
                    c.layout().crd2idx(&IntTuple::ints(&[t, v % 4])).unwrap(),
                    16,
                );
                assert_eq!((ar, ak), (cr, cc + 8 * (v / 4)), "t={t} v={v}");
            }
        }
    }
}
