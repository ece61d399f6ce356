//! Decoding attention on tensor cores (`mma.sync.m16n8k16`, sm_80+): the decoding template's
//! units, splits and merges (`decode.rs`, `decode_merge.rs`) with the products on tensor cores,
//! for units of up to 16 query rows (multi-query attention folds 16 query heads a K/V head).
//!
//! On CUDA cores a score costs a thread its slice of the dot product, a butterfly over the
//! lane group and the softmax's bookkeeping for every row of the unit (run 230 on the H200: 32
//! query heads over one K/V head at 2.25× SDPA, bound by instructions, not memory). Here each
//! of a block's warps (4 or 8) takes 16 keys a step and the unit's rows as one 16-row mma atom
//! (rows past the unit's are zeros, their scores `-inf`, never stored):
//!
//! 1. Each warp copies its keys' K and V rows into its own tiles of a ring of `stages` steps
//!    in shared memory (`cp.async`, rows padded by 16 bytes so that `ldmatrix` reads them
//!    without bank conflicts; keys past the kept ones read kept keys' rows, weighed 0 as in
//!    `decode.rs`). CUTLASS's multistage order: wait for the step, a barrier, the copies of
//!    the step `stages - 1` ahead into the stage the last step read, then the step's math.
//! 2. `S = Q·Kᵀ` (Q's A fragments in registers, built once from the unit's folded rows: where
//!    `cp.async` reads Q's rows, they are copied into one shared tile with the ring's first
//!    stage and read by `ldmatrix`, every warp's fragments being the same — element loads of
//!    them were the kernel's longest wait, run 239; else loaded element by element), the
//!    prologue per score at its (query, key, batch), the online softmax of the tensor-core
//!    kernels (`att_softmax`), `O += P·V` with V by `ldmatrix.trans`.
//! 3. The warps' `(m, l, O)` merged through shared memory as the lane groups' are, then the
//!    splits by the last block to arrive.

use super::super::decode_config::{DecodeConfig, WARP_KEYS, WIDTH};
use super::super::matmul_mma::{copy_width, ldmatrix_x4_rows, vector_copy};
use super::decode::{DecodeShape, RingStep, UnitSplit, cp_async_commit, cp_async_wait, unit_row};
use super::{AttPlan, AttentionOps, LOG2_E};
use crate::lower::*;
use irc_ir::{DType, ValueId};
use irc_kir::{self as kir, Builtin, Expr, Func, IdxOp, Intrinsic, ReduceOp, Space, Stmt, Ty};
use irc_layout::{Layout, composition, mma_m16n8k16_a};

/// Rows of the mma atom a unit's rows fill.
const ATOM_ROWS: u64 = 16;

impl Builder<'_, '_> {
    /// Whether `cp.async` can copy the rows of K and of V (each a value and its access:
    /// buffers or views of them, rows in whole 4-byte pieces), asked without adding to the
    /// kernel.
    pub(super) fn decode_copies(
        &self,
        (k, ka): (ValueId, &Layout),
        (v, va): (ValueId, &Layout),
        dt: DType,
    ) -> bool {
        let bytes = dt.size_bytes();
        vector_copy(self, k, ka, 0, bytes).is_some() && vector_copy(self, v, va, 1, bytes).is_some()
    }

    /// The tensor-core decoding kernel (module doc) for the group `ops` planned as `p`.
    pub(super) fn attention_decode_mma(
        &mut self,
        ops: &AttentionOps<'_>,
        p: &AttPlan,
        shape: DecodeShape,
        c: DecodeConfig,
    ) -> R<()> {
        let (q, k, v) = (
            ops.scores.operands[0],
            ops.scores.operands[1],
            ops.output.operands[1],
        );
        let DecodeShape {
            units,
            rows,
            keys: (kbeg, kend),
            ..
        } = shape;
        let (sq, dt, d, dv) = (p.sq, p.dt, p.d, p.dv);
        let (d16, dv16) = (d.next_multiple_of(16), dv.next_multiple_of(16));
        let (cq, cv) = (d.div_ceil(WIDTH), dv.div_ceil(WIDTH));
        let warps = c.warps;
        let kept = kend - kbeg;
        let UnitSplit {
            unit,
            split,
            bi0,
            k0,
            step,
            chunk,
            splits,
        } = self.unit_split(&shape, &c);
        let steps = chunk / step;
        let stages = c.stages.max(2);
        let tid = bx(Builtin::TidX);
        let lane = self.let_("lane", Ty::Idx, Expr::idx(IdxOp::Rem, tid.clone(), int(32)));
        let warp = self.let_("warp", Ty::Idx, Expr::idx(IdxOp::Div, tid.clone(), int(32)));
        let row_at = |r: &Expr| unit_row(r, sq, &bi0);
        // The rings: a warp's 16 keys of a step, rows padded by 8 elements.
        let li = |s: u64, st: i64| Layout::int(s as i64, st).map_err(internal);
        let ring = |s: &mut Self, cols: u64| -> R<(String, i64)> {
            let r = (cols + 8) as i64;
            let l = Layout::flat(
                &[r, WARP_KEYS as i64, warps as i64, stages as i64],
                &[1, r, 16 * r, 16 * r * warps as i64],
            )
            .map_err(internal)?;
            Ok((s.tensor(Space::Shared, dt, l), r))
        };
        let (ring_k, kr) = ring(self, d16)?;
        let (ring_v, vr) = ring(self, dv16)?;
        let ldm = |b: bool, trans: bool, r: i64, k: i64| -> R<Layout> {
            composition(
                &Layout::flat(&[16, 16], &[r, k]).map_err(internal)?,
                &ldmatrix_x4_rows(b, trans).map_err(internal)?,
            )
            .map_err(internal)
        };
        let warps_stages = |r: i64| -> R<[Layout; 2]> {
            Ok([li(warps, 16 * r)?, li(stages, 16 * r * warps as i64)?])
        };
        let concat = |ls: &[Layout]| Layout::concat(ls).map_err(internal);
        let [kw, ks] = warps_stages(kr)?;
        let rows_k = concat(&[
            ldm(true, false, kr, 1)?,
            li(1, 16 * kr)?,
            li(d16 / 16, 16)?,
            kw,
            ks,
        ])?;
        let [vw, vs] = warps_stages(vr)?;
        let rows_v = concat(&[
            ldm(true, true, 1, vr)?,
            li(dv16 / 16, 16)?,
            li(1, 16 * vr)?,
            vw,
            vs,
        ])?;
        let rows_k = self.tensor(Space::View(ring_k.clone()), dt, rows_k);
        let rows_v = self.tensor(Space::View(ring_v.clone()), dt, rows_v);
        let regs = |s: &mut Self, dtype: DType, shape: &[i64]| -> R<String> {
            let l = Layout::flat(shape, &[1, shape[0]]).map_err(internal)?;
            Ok(s.tensor(Space::Registers, dtype, l))
        };
        let view = |s: &mut Self, of: &str, shape: &[i64]| -> R<String> {
            let l = Layout::flat(shape, &[1, shape[0]]).map_err(internal)?;
            Ok(s.tensor(Space::View(of.to_string()), dt, l))
        };
        let fq = regs(self, dt, &[8, (d16 / 16) as i64])?;
        let fk = regs(self, dt, &[4, 2])?;
        let fk_pairs = view(self, &fk, &[8, 1])?;
        let fv = regs(self, dt, &[4, (dv16 / 8) as i64])?;
        let fv_pairs = view(self, &fv, &[8, (dv16 / 16) as i64])?;
        let acc_s = regs(self, DType::F32, &[4, 2])?;
        let acc_o = regs(self, DType::F32, &[4, (dv16 / 8) as i64])?;
        let p_c = regs(self, dt, &[4, 2])?;
        let p_a = view(self, &p_c, &[8, 1])?;
        // K's columns past its head dim (to the k-step's 16) are zeros: no copy writes them,
        // and the product reads them against Q's zero columns.
        if d < d16 {
            let lines = WARP_KEYS * warps * stages;
            self.for_(
                "zr",
                tid.clone(),
                int(lines),
                int(32 * warps),
                false,
                |s, zr| {
                    for col in d..d16 {
                        s.out.push(Stmt::Store {
                            tensor: ring_k.clone(),
                            coord: vec![
                                int(col),
                                Expr::idx(IdxOp::Rem, zr.clone(), int(WARP_KEYS)),
                                Expr::idx(
                                    IdxOp::Rem,
                                    Expr::idx(IdxOp::Div, zr.clone(), int(WARP_KEYS)),
                                    int(warps),
                                ),
                                Expr::idx(IdxOp::Div, zr.clone(), int(WARP_KEYS * warps)),
                            ],
                            value: lit(dt, 0.0),
                        });
                    }
                    Ok(())
                },
            )?;
        }
        // Q's A fragments (module doc, 2).
        let q_tile = match copy_width(self, q, &p.qk.access_a, 1, dt.size_bytes()) {
            Some(copy) => {
                Some(self.decode_q_copies(copy, (rows, d, dt), (&tid, warps), &row_at)?)
            }
            None => {
                self.decode_q_loads(q, p, rows, (&fq, &lane), &row_at)?;
                None
            }
        };
        let rc = self.att_coords(&lane, &Expr::Int(0))?;
        let (m, l) = self.att_state();
        self.zero(&acc_o, dv16 / 8)?;
        // A warp's copies of its keys of the step at `st` into `stage`: its lanes take the
        // 16 keys' vectors in turn.
        let (wk, gk) = copy_width(self, k, &p.qk.access_b, 0, dt.size_bytes())
            .ok_or_else(|| internal_err("K's rows cannot be copied"))?;
        let (wv, gv) = copy_width(self, v, &p.pv.access_b, 1, dt.size_bytes())
            .ok_or_else(|| internal_err("V's rows cannot be copied"))?;
        let copies_view = |s: &mut Self, ring: &str, r: i64, w: u64| -> R<String> {
            let l = Layout::flat(
                &[
                    (WIDTH / w) as i64,
                    r / WIDTH as i64,
                    WARP_KEYS as i64,
                    warps as i64,
                    stages as i64,
                ],
                &[w as i64, WIDTH as i64, r, 16 * r, 16 * r * warps as i64],
            )
            .map_err(internal)?;
            Ok(s.tensor(Space::View(ring.to_string()), dt, l))
        };
        let vk = copies_view(self, &ring_k, kr, wk)?;
        let vv = copies_view(self, &ring_v, vr, wv)?;
        // A lane's first vector of K's and of V's rows: where a row's vectors divide a warp's
        // 32, the lane's column and its key's offset are the same for each of its copies, whose
        // keys then step by a constant (one address register for all, constant offsets).
        let lane_at = |s: &mut Self, c: u64| -> Option<[Expr; 3]> {
            32u64.is_multiple_of(c).then(|| {
                let kl = s.let_("lk", Ty::Idx, Expr::idx(IdxOp::Div, lane.clone(), int(c)));
                let wl = add(mul(warp.clone(), int(WARP_KEYS)), kl.clone());
                let wl = s.let_("lw", Ty::Idx, wl);
                let ch = s.let_("lc", Ty::Idx, Expr::idx(IdxOp::Rem, lane.clone(), int(c)));
                [kl, wl, ch]
            })
        };
        let lanes_kv = [lane_at(self, cq), lane_at(self, cv)];
        let issue = |s: &mut Self, st: &Expr, stage: &Expr| -> R<()> {
            for (fast, c, w, global, view) in [(0, cq, wk, &gk, &vk), (1, cv, wv, &gv, &vv)] {
                let n = WARP_KEYS * c;
                let op = Intrinsic::cp_async(w * dt.size_bytes())
                    .ok_or_else(|| internal_err("no cp.async of that width"))?;
                let first = lanes_kv[fast].as_ref().map(|[kl, wl, ch]| {
                    (kl, s.let_("kb", Ty::Idx, add(st.clone(), wl.clone())), ch)
                });
                for i in 0..n.div_ceil(32) {
                    let vi = add(int(32 * i), lane.clone());
                    let (kl, ch, key) = match &first {
                        Some((kl, kb, ch)) => (
                            add((*kl).clone(), int(32 / c * i)),
                            (*ch).clone(),
                            add(kb.clone(), int(32 / c * i)),
                        ),
                        None => {
                            let vi = s.let_("vi", Ty::Idx, vi.clone());
                            let kl = Expr::idx(IdxOp::Div, vi.clone(), int(c));
                            let kl = s.let_("kl", Ty::Idx, kl);
                            let ch = s.let_("ch", Ty::Idx, Expr::idx(IdxOp::Rem, vi, int(c)));
                            let wl = add(mul(warp.clone(), int(WARP_KEYS)), kl.clone());
                            (kl, ch, add(st.clone(), wl))
                        }
                    };
                    let key = s.let_("key", Ty::Idx, key);
                    let key = if kept.is_multiple_of(step) {
                        key
                    } else {
                        // Past the kept keys: the last kept key's rows (a compare and a
                        // select, where a remainder held more registers).
                        let last = int(kend - 1);
                        let past = Expr::idx(IdxOp::Lt, last.clone(), key.clone());
                        s.let_(
                            "kr",
                            Ty::Idx,
                            Expr::call(Func::Select, vec![past, last, key]),
                        )
                    };
                    let copies: Vec<Stmt> = (0..WIDTH / w)
                        .map(|qq| {
                            let mut at = vec![int(0), int(0), bi0.clone()];
                            at[1 - fast] = key.clone();
                            at[fast] = add(mul(ch.clone(), int(WIDTH / w)), int(qq));
                            let dst =
                                vec![int(qq), ch.clone(), kl.clone(), warp.clone(), stage.clone()];
                            Stmt::Intrinsic {
                                op,
                                args: vec![
                                    kir::Arg::at(view, dst),
                                    kir::Arg::at(global, at),
                                    kir::Arg::Expr(int(w * dt.size_bytes())),
                                ],
                            }
                        })
                        .collect();
                    let guard = (!n.is_multiple_of(32)).then(|| lt(vi, int(n)));
                    s.guarded(guard, copies);
                }
            }
            Ok(())
        };
        let kk = p.prologue.scale.unwrap_or(1.0) * LOG2_E;
        let compute = |s: &mut Self, st: &Expr, stage: &Expr| -> R<()> {
            let extra = [warp.clone(), stage.clone()];
            s.zero(&acc_s, 2)?;
            let b = (fk_pairs.as_str(), fk.as_str(), rows_k.as_str(), false);
            s.att_products(&lane, (&acc_s, &fq), b, (d16, 16), &extra)?;
            let wk0 = s.let_(
                "wk",
                Ty::Idx,
                add(st.clone(), mul(warp.clone(), int(WARP_KEYS))),
            );
            for j in 0..2u64 {
                for (val, (row, col)) in rc.iter().enumerate() {
                    let at = vec![int(val as u64), int(j)];
                    let key = s.let_(
                        "sk",
                        Ty::Idx,
                        add(wk0.clone(), add(int(8 * j), col.clone())),
                    );
                    let mut guard = vec![];
                    if !kept.is_multiple_of(step) {
                        guard.push(lt(key.clone(), int(kend)));
                    }
                    if rows < ATOM_ROWS {
                        guard.push(lt(row.clone(), int(rows)));
                    }
                    let score = Expr::load(&acc_s, at.clone());
                    let (qr, bi) = row_at(row);
                    let coord = vec![qr, key, bi];
                    let value = match guard.into_iter().reduce(|a, b| Expr::idx(IdxOp::And, a, b)) {
                        None if p.prologue.root.is_none() => continue,
                        None => s.att_score(p, score, coord, false)?,
                        Some(inside) => {
                            let x = s.fresh("x");
                            s.out.push(Stmt::Var {
                                var: x.clone(),
                                ty: Ty::Elem(DType::F32),
                                init: lit(DType::F32, f64::NEG_INFINITY),
                            });
                            let x2 = x.clone();
                            s.if_(inside, |s| {
                                let value = s.att_score(p, score, coord, false)?;
                                s.out.push(Stmt::Assign { var: x2, value });
                                Ok(())
                            })?;
                            Expr::var(&x)
                        }
                    };
                    s.out.push(Stmt::Store {
                        tensor: acc_s.clone(),
                        coord: at,
                        value,
                    });
                }
            }
            s.att_softmax(p, &acc_s, &p_c, &acc_o, (&m, &l), 16, dv, dt)?;
            let b = (fv_pairs.as_str(), fv.as_str(), rows_v.as_str(), true);
            s.att_products(&lane, (&acc_o, &p_a), b, (16, dv16), &extra)
        };
        // The ring (module doc, 1).
        let s1 = stages - 1;
        self.ring_fill(s1, (&k0, step), (steps, kend), &issue)?;
        if let Some(rows_q) = q_tile {
            // Q's copies went with the ring's first stage.
            self.out.push(cp_async_wait(s1 - 1));
            self.out.push(Stmt::Sync);
            for ks in 0..d16 / 16 {
                self.out.push(Stmt::Intrinsic {
                    op: Intrinsic::ldmatrix_x4(false),
                    args: vec![
                        kir::Arg::at(&fq, vec![int(ks)]),
                        kir::Arg::at(&rows_q, vec![lane.clone(), int(ks)]),
                    ],
                });
            }
        }
        self.for_("it", int(0), int(steps), int(1), false, |s, it| {
            let RingStep {
                st,
                ahead,
                next,
                cond,
            } = s.ring_step(&it, (&k0, step), (s1, steps, kend));
            s.out.push(cp_async_wait(s1 - 1));
            s.out.push(Stmt::Sync);
            s.if_(cond, |s| {
                let stage = s.let_("sn", Ty::Idx, Expr::idx(IdxOp::Rem, next, int(stages)));
                issue(s, &ahead, &stage)
            })?;
            s.out.push(cp_async_commit());
            s.if_(lt(st.clone(), int(kend)), |s| {
                let stage = s.let_("sc", Ty::Idx, Expr::idx(IdxOp::Rem, it, int(stages)));
                compute(s, &st, &stage)
            })
        })?;
        self.out.push(cp_async_wait(0));
        // The warps' states for the merge: (m, l) of the thread's two rows by the first lane
        // of each row's four, and its O values.
        let write = |s: &mut Self, sm_ml: &str, sm_o: &str| -> R<()> {
            // A thread's `l` sums its own columns: the row's is the sum over its four lanes.
            let sums: Vec<String> = l
                .iter()
                .map(|lh| {
                    let var = s.fresh("ls");
                    s.out.push(Stmt::WarpReduce {
                        var: var.clone(),
                        ty: Ty::Elem(DType::F32),
                        op: ReduceOp::Sum,
                        width: 4,
                        value: Expr::var(lh),
                    });
                    var
                })
                .collect();
            let first = Expr::idx(
                IdxOp::Eq,
                Expr::idx(IdxOp::Rem, lane.clone(), int(4)),
                int(0),
            );
            s.if_(first, |s| {
                for h in 0..2usize {
                    let row = add(
                        Expr::idx(IdxOp::Div, lane.clone(), int(4)),
                        int(8 * h as u64),
                    );
                    let row = s.let_("mr", Ty::Idx, row);
                    s.if_(lt(row.clone(), int(rows)), |s| {
                        for (i, var) in [&m[h], &sums[h]].into_iter().enumerate() {
                            s.out.push(Stmt::Store {
                                tensor: sm_ml.to_string(),
                                coord: vec![int(i as u64), row.clone(), warp.clone()],
                                value: Expr::var(var),
                            });
                        }
                        Ok(())
                    })?;
                }
                Ok(())
            })?;
            for j in 0..dv16 / 8 {
                for (val, (row, col)) in rc.iter().enumerate() {
                    let dcol = s.let_("oc", Ty::Idx, add(int(8 * j), col.clone()));
                    let inside = Expr::idx(
                        IdxOp::And,
                        lt(row.clone(), int(rows)),
                        lt(dcol.clone(), int(dv)),
                    );
                    let store = Stmt::Store {
                        tensor: sm_o.to_string(),
                        coord: vec![dcol, row.clone(), warp.clone()],
                        value: Expr::load(&acc_o, vec![int(val as u64), int(j)]),
                    };
                    s.guarded(Some(inside), vec![store]);
                }
            }
            Ok(())
        };
        self.decode_merge(
            p,
            (rows, units, splits),
            warps,
            &write,
            (&unit, &split),
            &row_at,
            kk,
        )
    }
    /// Q's A fragments loaded element by element (where `cp.async` cannot read Q's rows):
    /// value v of k-step ks at the atom's (row, col), zero past the unit's `rows` rows and the
    /// head dim.
    fn decode_q_loads(
        &mut self,
        q: ValueId,
        p: &AttPlan,
        rows: u64,
        (fq, lane): (&str, &Expr),
        row_at: &dyn Fn(&Expr) -> (Expr, Expr),
    ) -> R<()> {
        let (dt, d) = (p.dt, p.d);
        let atom_a = mma_m16n8k16_a().map_err(internal)?.layout().clone();
        for ks in 0..d.next_multiple_of(16) / 16 {
            for val in 0..8u64 {
                self.out.push(Stmt::Store {
                    tensor: fq.to_string(),
                    coord: vec![int(val), int(ks)],
                    value: lit(dt, 0.0),
                });
                let ai = kir::offset_expr(&atom_a, &[lane.clone(), int(val)]).map_err(internal)?;
                let ai = self.let_("ai", Ty::Idx, ai);
                let row = self.let_("qr", Ty::Idx, Expr::idx(IdxOp::Rem, ai.clone(), int(16)));
                let col = self.let_(
                    "qc",
                    Ty::Idx,
                    add(int(16 * ks), Expr::idx(IdxOp::Div, ai, int(16))),
                );
                let inside = Expr::idx(
                    IdxOp::And,
                    lt(row.clone(), int(rows)),
                    lt(col.clone(), int(d)),
                );
                let qa = p.qk.access_a.clone();
                let (qr, bi) = row_at(&row);
                let fq = fq.to_string();
                self.if_(inside, move |s| {
                    s.coord = vec![qr, col, bi];
                    let x = s.value_at(q, &qa)?;
                    let value = cast_to(dt, s.val_dtype(q), x);
                    s.out.push(Stmt::Store {
                        tensor: fq,
                        coord: vec![int(val), int(ks)],
                        value,
                    });
                    Ok(())
                })?;
            }
        }
        Ok(())
    }

    /// The unit's `rows` rows of Q (head dim `d`, elements `dt`) copied by `cp.async` (`copy`:
    /// the vector width and Q's buffer split into vectors) into one shared tile of the atom's
    /// 16 rows, rows padded by 8 elements; rows past the unit's and columns past the head dim
    /// are zeros. Returns the tile's `ldmatrix.x4` row starts at `(lane, k-step)`.
    fn decode_q_copies(
        &mut self,
        (w, gq): (u64, String),
        (rows, d, dt): (u64, u64, DType),
        (tid, warps): (&Expr, u64),
        row_at: &dyn Fn(&Expr) -> (Expr, Expr),
    ) -> R<String> {
        let d16 = d.next_multiple_of(16);
        let r = (d16 + 8) as i64;
        let threads = 32 * warps;
        let tile = Layout::flat(&[ATOM_ROWS as i64, d16 as i64], &[r, 1]).map_err(internal)?;
        let smem = self.tensor(Space::Shared, dt, tile);
        // A copy's first element at (vector, row).
        let copies = Layout::flat(&[(d16 / w) as i64, ATOM_ROWS as i64], &[w as i64, r])
            .map_err(internal)?;
        let copies = self.tensor(Space::View(smem.clone()), dt, copies);
        let op = Intrinsic::cp_async(w * dt.size_bytes())
            .ok_or_else(|| internal_err("no cp.async of Q's width"))?;
        let (nv, total) = (d / w, rows * (d / w));
        for i in 0..total.div_ceil(threads) {
            let vi = self.let_("qv", Ty::Idx, add(int(i * threads), tid.clone()));
            let row = self.let_("qr", Ty::Idx, Expr::idx(IdxOp::Div, vi.clone(), int(nv)));
            let c = self.let_("qc", Ty::Idx, Expr::idx(IdxOp::Rem, vi.clone(), int(nv)));
            let (qr, bi) = row_at(&row);
            let copy = Stmt::Intrinsic {
                op,
                args: vec![
                    kir::Arg::at(&copies, vec![c.clone(), row]),
                    kir::Arg::at(&gq, vec![qr, c, bi]),
                    kir::Arg::Expr(int(w * dt.size_bytes())),
                ],
            };
            let guard = (!total.is_multiple_of(threads)).then(|| lt(vi, int(total)));
            self.guarded(guard, vec![copy]);
        }
        // Zeros: the rows past the unit's, then the columns past the head dim.
        for (first, n, cols, col0) in [
            (rows, (ATOM_ROWS - rows) * d16, d16, 0),
            (0, rows * (d16 - d), d16 - d, d),
        ] {
            if n == 0 {
                continue;
            }
            let smem = smem.clone();
            self.for_("zq", tid.clone(), int(n), int(threads), false, |s, z| {
                s.out.push(Stmt::Store {
                    tensor: smem,
                    coord: vec![
                        add(int(first), Expr::idx(IdxOp::Div, z.clone(), int(cols))),
                        add(int(col0), Expr::idx(IdxOp::Rem, z, int(cols))),
                    ],
                    value: lit(dt, 0.0),
                });
                Ok(())
            })?;
        }
        let lanes = composition(
            &Layout::flat(&[16, 16], &[r, 1]).map_err(internal)?,
            &ldmatrix_x4_rows(false, false).map_err(internal)?,
        )
        .map_err(internal)?;
        let starts =
            Layout::concat(&[lanes, Layout::int((d16 / 16) as i64, 16).map_err(internal)?])
                .map_err(internal)?;
        Ok(self.tensor(Space::View(smem), dt, starts))
    }
}

fn internal_err(what: &str) -> Retry {
    Retry::Fail(crate::LowerError::Internal(format!(
        "the tensor-core decoding kernel: {what}"
    )))
}
