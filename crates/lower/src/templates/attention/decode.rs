//! Decoding attention: a few query rows a head over a long key/value cache (a decoding step,
//! a short chunk of speculative tokens), on CUDA cores, the keys split across blocks
//! (flash-decoding).
//!
//! The tensor-core schedules give each block 64 query rows of one batch entry: with one real
//! row the products run on 1/64 of their tiles, and with grouped-query attention every query
//! head of a group streams the same K/V head again (measured on the H200, run 221: 32 query
//! heads over 8 K/V heads, 8k keys, 2.5× SDPA). Here a unit is the query rows that share one
//! K/V head: the batch entries whose K and V coincide ([`Builder::decode_schedule`] proves it
//! with the layout algebra: K's and V's batch layouts composed with `fold:1` have only zero
//! strides) are folded into the unit's rows (`fold · sq ≤` [`MAX_ROWS`]), so K and V are read
//! once per unit. A unit's keys are cut into `splits` chunks, one block each, until about four
//! blocks an SM:
//!
//! 1. A block's 128 threads are lane groups of `lanes` threads; a group takes `keys` (2 or 4)
//!    keys per step (adjacent groups adjacent keys), each lane 16-byte vectors of the key's K
//!    and V rows (vector `lane + lanes·i`), every load of the step issued before its math. The
//!    Q rows live in registers (f32). A score is the lanes' partial dot products summed by a
//!    butterfly over the group (`warp_reduce.sum`), put through the prologue at its (query,
//!    key, batch) coordinate ([`Builder::att_score`]), `-inf` past the keys' end. Each group
//!    keeps its own online softmax per row (lazy rescaling, as the Hopper kernel's) and its
//!    lanes' slices of the O rows.
//! 2. The groups' `(m, l, O)` go to shared memory; each row's weights `2^((mᵢ - M)·c)` are
//!    computed once, and every thread merges outputs in the groups' order.
//! 3. With one split the block normalizes and stores through the group's epilogue. Otherwise
//!    it writes its partial `(O, M, L)` to temps and arrives on its unit's counter; the last
//!    block to arrive merges the splits in their order (`templates/arrival.rs`: the result
//!    does not depend on which block is last) and stores.

use super::super::decode_config::{
    DecodeConfig, MAX_SPLITS, THREADS, WIDTH, fewest_lanes, shared_bytes, step_keys,
};
use super::{AttPlan, AttentionOps, LOG2_E, RESCALE_MARGIN, tree};
use crate::lower::*;
use irc_ir::{DType, ValueId};
use irc_kir::{self as kir, Builtin, Expr, Func, IdxOp, ReduceOp, Space, Stmt, Ty};
use irc_layout::{Layout, composition};

/// The most query rows a unit holds (folded heads times queries).
pub(crate) const MAX_ROWS: u64 = 8;
/// Splits whose partials the last block reads at once ([`Builder::over_splits`]).
const IN_FLIGHT: u64 = 8;

/// What the decoding template makes of one attention group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DecodeShape {
    /// Batch entries folded into a unit's rows (they share K and V), and the units.
    pub(crate) fold: u64,
    pub(crate) units: u64,
    /// Rows a unit: `fold · sq`.
    pub(crate) rows: u64,
    /// The keys some row keeps, `[begin, end)`: all of them, or a mask band's (its other keys
    /// are `-inf` for every row of every unit, and never read).
    pub(crate) keys: (u64, u64),
}

impl Builder<'_, '_> {
    /// The decoding template's shape of the group where it applies (module doc): at most
    /// [`MAX_ROWS`] query rows a unit, some lane count whose registers fit; `None` otherwise
    /// (the tensor-core templates take the group).
    pub(crate) fn decode_shape(&mut self, ops: &AttentionOps<'_>) -> R<Option<DecodeShape>> {
        let qk = self.matmul_access(ops.scores)?;
        let pv = self.matmul_access(ops.output)?;
        let (sq, sk, d, dv) = (qk.ms.m, qk.ms.n, qk.ms.k, pv.ms.n);
        let batch: u64 = qk.ms.batch.iter().product();
        let dt = self.ty(ops.output.result).dtype;
        let head_dim_ok = irc_fused::attention::head_dim_ok;
        if sq > MAX_ROWS
            || sk == 0
            || batch == 0
            || !matches!(dt, DType::F16 | DType::BF16)
            || !head_dim_ok(d)
            || !head_dim_ok(dv)
        {
            return Ok(None);
        }
        let (k, v) = (ops.scores.operands[1], ops.output.operands[1]);
        let fold = (1..=MAX_ROWS / sq)
            .rev()
            .find(|&g| {
                batch % g == 0
                    && (g == 1
                        || (self.shared_by(k, &qk.access_b, g)
                            && self.shared_by(v, &pv.access_b, g)))
            })
            .unwrap_or(1);
        let rows = fold * sq;
        // The heuristic's lanes, and its shared memory at the most splits.
        let Some(lanes) = fewest_lanes(rows, (d, dv)) else {
            return Ok(None);
        };
        if shared_bytes(rows, dv, lanes, MAX_SPLITS) > self.l.options.target.max_shared_bytes {
            return Ok(None);
        }
        // A band keeps `lo <= q - key <= hi`: for queries 0..sq, keys `-hi ..= sq - 1 - lo`.
        let band = ops.band.unwrap_or_default();
        let clamp = |x: i64| x.clamp(0, sk as i64) as u64;
        let keys = (
            band.hi.map_or(0, |hi| clamp(-hi)),
            band.lo.map_or(sk, |lo| clamp(sq as i64 - lo)),
        );
        let units = batch / fold;
        if keys.0 >= keys.1 || units.saturating_mul(MAX_SPLITS) > i32::MAX as u64 {
            return Ok(None);
        }
        Ok(Some(DecodeShape {
            fold,
            units,
            rows,
            keys,
        }))
    }

    /// Whether every `g` consecutive batch entries read the same elements of `x` at `access`
    /// (`(m or k, n, batch)`): its buffer layout's batch mode composed with `g:1` has only
    /// zero strides (a K/V head broadcast over the query heads of its group).
    fn shared_by(&self, x: ValueId, access: &Layout, g: u64) -> bool {
        let Some((_, l)) = self.resolve_quiet(x, access) else {
            return false;
        };
        let (Ok(b), Ok(first)) = (l.mode(2), Layout::int(g as i64, 1)) else {
            return false;
        };
        composition(&b, &first).is_ok_and(|c| c.leaves().iter().all(|&(n, st)| n == 1 || st == 0))
    }

    /// The decoding kernel (module doc) for the group `ops` planned as `p`, at point `c`.
    pub(super) fn attention_decode(
        &mut self,
        ops: &AttentionOps<'_>,
        p: &AttPlan,
        c: DecodeConfig,
    ) -> R<()> {
        let shape = self.decode_shape(ops)?.ok_or_else(|| {
            Retry::Fail(crate::LowerError::Internal(
                "the decoding template for a group it does not take".into(),
            ))
        })?;
        let (q, k, v) = (
            ops.scores.operands[0],
            ops.scores.operands[1],
            ops.output.operands[1],
        );
        let DecodeShape {
            fold,
            units,
            rows,
            keys: (kbeg, kend),
        } = shape;
        let lanes = c.lanes;
        // Whole steps a split; the last split takes what remains.
        let step = step_keys(lanes, c.keys);
        let chunk = (kend - kbeg).div_ceil(step).div_ceil(c.splits) * step;
        let splits = (kend - kbeg).div_ceil(chunk);
        let (sq, dt) = (p.sq, p.dt);
        let (cq, cv) = (p.d.div_ceil(WIDTH), p.dv.div_ceil(WIDTH));
        let (nq, nv) = (cq.div_ceil(lanes), cv.div_ceil(lanes));
        let groups = THREADS / lanes;
        self.kernel.grid = [(units * splits) as u32, 1, 1];
        self.kernel.block = [THREADS as u32, 1, 1];
        let tid = bx(Builtin::TidX);
        let lane = self.let_(
            "lig",
            Ty::Idx,
            Expr::idx(IdxOp::Rem, tid.clone(), int(lanes)),
        );
        let grp = self.let_("grp", Ty::Idx, Expr::idx(IdxOp::Div, tid, int(lanes)));
        let bid = bx(Builtin::BidX);
        let unit = self.let_(
            "unit",
            Ty::Idx,
            Expr::idx(IdxOp::Div, bid.clone(), int(splits)),
        );
        let split = self.let_("split", Ty::Idx, Expr::idx(IdxOp::Rem, bid, int(splits)));
        let bi0 = self.let_("bi", Ty::Idx, mul(unit.clone(), int(fold)));
        let k0 = self.let_(
            "k0",
            Ty::Idx,
            add(int(kbeg), mul(split.clone(), int(chunk))),
        );
        let chunks: Vec<Expr> = (0..nq.max(nv))
            .map(|i| self.let_("c", Ty::Idx, add(lane.clone(), int(lanes * i))))
            .collect();
        let lanes_of = Lanes {
            lanes,
            chunks,
            lane,
            grp,
        };
        let qreg = self.registers(DType::F32, nq * WIDTH, rows)?;
        let oreg = self.registers(DType::F32, nv * WIDTH, rows)?;
        let kreg = self.registers(dt, nq * WIDTH, c.keys)?;
        let vreg = self.registers(dt, nv * WIDTH, c.keys)?;
        // Slices past a row's end stay zero (they add nothing to the dot products and are
        // not stored); O starts at zero.
        for (t, n, m, ty) in [
            (&qreg, nq, rows, DType::F32),
            (&oreg, nv, rows, DType::F32),
            (&kreg, nq, c.keys, dt),
            (&vreg, nv, c.keys, dt),
        ] {
            for j in 0..n * WIDTH {
                for r in 0..m {
                    self.out.push(Stmt::Store {
                        tensor: t.clone(),
                        coord: vec![int(j), int(r)],
                        value: lit(ty, 0.0),
                    });
                }
            }
        }
        // Row r of a unit is query r % sq of batch entry bi0 + r / sq.
        let row_at = |r: &Expr| -> (Expr, Expr) {
            (
                Expr::idx(IdxOp::Rem, r.clone(), int(sq)),
                add(bi0.clone(), Expr::idx(IdxOp::Div, r.clone(), int(sq))),
            )
        };
        let qa = p.qk.access_a.clone();
        for r in 0..rows {
            let (qr, bi) = row_at(&int(r));
            let dst = |i: u64, e: Expr| (qreg.clone(), vec![add(int(i * WIDTH), e), int(r)]);
            self.decode_vectors(q, &qa, (vec![qr, int(0), bi], 1), (cq, &lanes_of), &dst)?;
        }
        let (m, l) = self.decode_state(rows);
        let kk = p.prologue.scale.unwrap_or(1.0) * LOG2_E;
        let end = add(k0.clone(), int(chunk));
        let (ka, va) = (p.qk.access_b.clone(), p.pv.access_b.clone());
        self.for_("st", k0, end, int(step), false, |s, st| {
            // Steps past the kept keys' end are skipped.
            s.if_(lt(st.clone(), int(kend)), |s| {
                let keys: Vec<Expr> = (0..c.keys)
                    .map(|t| {
                        let key = add(st.clone(), add(int(t * groups), lanes_of.grp.clone()));
                        s.let_("key", Ty::Idx, key)
                    })
                    .collect();
                // Every load of the step before its math, unguarded: a key past the kept
                // ones reads a kept key's rows instead (`kbeg + (key - kbeg) % kept`), whose
                // score is -inf and whose V weighs 0 — as every V row does in the graph's
                // `P·V` where its probability is 0.
                let kept = kend - kbeg;
                for (t, key) in keys.iter().enumerate() {
                    let t = t as u64;
                    let key = if kept % step == 0 {
                        key.clone()
                    } else {
                        let wrapped = Expr::idx(
                            IdxOp::Rem,
                            Expr::idx(IdxOp::Sub, key.clone(), int(kbeg)),
                            int(kept),
                        );
                        s.let_("kr", Ty::Idx, add(int(kbeg), wrapped))
                    };
                    let kdst =
                        |i: u64, e: Expr| (kreg.clone(), vec![add(int(i * WIDTH), e), int(t)]);
                    let at = vec![int(0), key.clone(), bi0.clone()];
                    s.decode_vectors(k, &ka, (at, 0), (cq, &lanes_of), &kdst)?;
                    let vdst =
                        |i: u64, e: Expr| (vreg.clone(), vec![add(int(i * WIDTH), e), int(t)]);
                    let at = vec![key, int(0), bi0.clone()];
                    s.decode_vectors(v, &va, (at, 1), (cv, &lanes_of), &vdst)?;
                }
                let scores =
                    s.decode_scores(p, (&keys, kend), (&qreg, &kreg), (nq, lanes), &row_at, rows)?;
                s.decode_online(&scores, (&m, &l), (&oreg, &vreg), nv, kk)
            })
        })?;
        self.decode_merge(
            p,
            (rows, units, splits),
            (&m, &l, &oreg),
            &lanes_of,
            (&unit, &split),
            &row_at,
            kk,
        )
    }

    /// A register tensor `[n, m]`.
    fn registers(&mut self, dtype: DType, n: u64, m: u64) -> R<String> {
        let l = Layout::flat(&[n as i64, m as i64], &[1, n as i64]).map_err(internal)?;
        Ok(self.tensor(Space::Registers, dtype, l))
    }

    /// The lane's vectors `lane + lanes·i` of a row of `c` vectors of `x` read at `access`
    /// from `at` along mode `mode` (16-byte copies where the layout allows), each element
    /// stored to `dst(i, e)`; guarded only where the vectors do not divide among the lanes.
    #[allow(clippy::type_complexity)]
    fn decode_vectors(
        &mut self,
        x: ValueId,
        access: &Layout,
        (at, mode): (Vec<Expr>, usize),
        (c, ln): (u64, &Lanes),
        dst: &dyn Fn(u64, Expr) -> (String, Vec<Expr>),
    ) -> R<()> {
        let dtype = self.ty(x).dtype;
        for i in 0..c.div_ceil(ln.lanes) {
            let chunk = ln.chunks[i as usize].clone();
            let load = |s: &mut Self| -> R<()> {
                let mut at = at.clone();
                at[mode] = chunk.clone();
                s.vector_loop_along(WIDTH, mode, at.clone(), |s, kx, e| {
                    let mut coord = at.clone();
                    coord[mode] = kx;
                    s.coord = coord;
                    let val = s.value_at(x, access)?;
                    let (tensor, coord) = dst(i, e);
                    let to = s
                        .kernel
                        .tensors
                        .iter()
                        .find(|t| t.name == tensor)
                        .map_or(dtype, |t| t.dtype);
                    let value = cast_to(to, s.val_dtype(x), val);
                    s.out.push(Stmt::Store {
                        tensor,
                        coord,
                        value,
                    });
                    Ok(())
                })
            };
            if ln.lanes * (i + 1) > c {
                self.if_(lt(chunk.clone(), int(c)), load)?;
            } else {
                load(self)?;
            }
        }
        Ok(())
    }

    /// A row's running max (the one its probabilities are taken against) and sum.
    fn decode_state(&mut self, rows: u64) -> (Vec<String>, Vec<String>) {
        let mut state = (vec![], vec![]);
        for _ in 0..rows {
            for (list, hint, init) in [
                (&mut state.0, "m", f64::NEG_INFINITY),
                (&mut state.1, "l", 0.0),
            ] {
                let var = self.fresh(hint);
                self.out.push(Stmt::Var {
                    var: var.clone(),
                    ty: Ty::Elem(DType::F32),
                    init: lit(DType::F32, init),
                });
                list.push(var);
            }
        }
        state
    }

    /// Each row's scores of the step's keys through the prologue (`-inf` from `end` on): the
    /// lanes' partial dot products summed over the lane group.
    fn decode_scores(
        &mut self,
        p: &AttPlan,
        (keys, end): (&[Expr], u64),
        (qreg, kreg): (&str, &str),
        (nq, lanes): (u64, u64),
        row_at: &dyn Fn(&Expr) -> (Expr, Expr),
        rows: u64,
    ) -> R<Vec<Vec<Expr>>> {
        let mut scores = vec![];
        for r in 0..rows {
            let (qr, bi) = row_at(&int(r));
            let mut row = vec![];
            for (t, key) in keys.iter().enumerate() {
                let terms = (0..nq * WIDTH)
                    .map(|j| {
                        let kx = Expr::load(kreg, vec![int(j), int(t as u64)]);
                        Expr::call(
                            Func::Mul,
                            vec![
                                Expr::load(qreg, vec![int(j), int(r)]),
                                Expr::cast(DType::F32, kx),
                            ],
                        )
                    })
                    .collect();
                let dot = self.let_("dot", Ty::Elem(DType::F32), tree(Func::Add, terms));
                let sum = if lanes > 1 {
                    let var = self.fresh("s");
                    self.out.push(Stmt::WarpReduce {
                        var: var.clone(),
                        ty: Ty::Elem(DType::F32),
                        op: ReduceOp::Sum,
                        width: lanes as u32,
                        value: dot,
                    });
                    Expr::Var(var)
                } else {
                    dot
                };
                let x = self.fresh("x");
                self.out.push(Stmt::Var {
                    var: x.clone(),
                    ty: Ty::Elem(DType::F32),
                    init: lit(DType::F32, f64::NEG_INFINITY),
                });
                let coord = vec![qr.clone(), key.clone(), bi.clone()];
                let x2 = x.clone();
                self.if_(lt(key.clone(), int(end)), |s| {
                    let value = s.att_score(p, sum, coord, false)?;
                    s.out.push(Stmt::Assign { var: x2, value });
                    Ok(())
                })?;
                row.push(Expr::var(&x));
            }
            scores.push(row);
        }
        Ok(scores)
    }

    /// One online-softmax step of each row over its scores of the step's keys (lazy
    /// rescaling: the reference max moves only past [`RESCALE_MARGIN`]), then `O += P·V`.
    fn decode_online(
        &mut self,
        scores: &[Vec<Expr>],
        (m, l): (&[String], &[String]),
        (oreg, vreg): (&str, &str),
        nv: u64,
        kk: f64,
    ) -> R<()> {
        let f32v = |x: f64| lit(DType::F32, x);
        let call = |f: Func, a: Vec<Expr>| Expr::call(f, a);
        let f32t = Ty::Elem(DType::F32);
        for (r, row) in scores.iter().enumerate() {
            let mx = self.let_("mx", f32t.clone(), tree(Func::MaxNum, row.clone()));
            let old = Expr::var(&m[r]);
            let grow = self.let_(
                "mg",
                Ty::Elem(DType::I1),
                call(
                    Func::Gt,
                    vec![
                        call(
                            Func::Mul,
                            vec![call(Func::Sub, vec![mx.clone(), old.clone()]), f32v(kk)],
                        ),
                        f32v(RESCALE_MARGIN),
                    ],
                ),
            );
            let mnew = self.let_(
                "mn",
                f32t.clone(),
                call(
                    Func::Select,
                    vec![
                        grow.clone(),
                        call(Func::Max, vec![old.clone(), mx]),
                        old.clone(),
                    ],
                ),
            );
            // A row with no finite score yet subtracts 0, not -inf (no NaN).
            let is_inf = call(Func::Eq, vec![mnew.clone(), f32v(f64::NEG_INFINITY)]);
            let mr = self.let_(
                "mr",
                f32t.clone(),
                call(Func::Select, vec![is_inf, f32v(0.0), mnew.clone()]),
            );
            let sc = self.let_(
                "sc",
                f32t.clone(),
                call(
                    Func::Select,
                    vec![
                        grow,
                        call(
                            Func::Exp2,
                            vec![call(
                                Func::Mul,
                                vec![call(Func::Sub, vec![old, mr.clone()]), f32v(kk)],
                            )],
                        ),
                        f32v(1.0),
                    ],
                ),
            );
            self.out.push(Stmt::Assign {
                var: m[r].clone(),
                value: mnew,
            });
            let mk = self.let_("mk", f32t.clone(), call(Func::Mul, vec![mr, f32v(kk)]));
            let ps: Vec<Expr> = row
                .iter()
                .map(|x| {
                    let e = call(
                        Func::Exp2,
                        vec![call(
                            Func::Sub,
                            vec![call(Func::Mul, vec![x.clone(), f32v(kk)]), mk.clone()],
                        )],
                    );
                    self.let_("p", f32t.clone(), e)
                })
                .collect();
            let sum = tree(Func::Add, ps.clone());
            self.out.push(Stmt::Assign {
                var: l[r].clone(),
                value: call(
                    Func::Add,
                    vec![call(Func::Mul, vec![Expr::var(&l[r]), sc.clone()]), sum],
                ),
            });
            let r = r as u64;
            let at = |j: u64| vec![int(j), int(r)];
            // The O slices rescaled only where the reference max moved.
            let moved = call(Func::Lt, vec![sc.clone(), f32v(1.0)]);
            self.if_(moved, |s| {
                for j in 0..nv * WIDTH {
                    s.out.push(Stmt::Store {
                        tensor: oreg.to_string(),
                        coord: at(j),
                        value: call(Func::Mul, vec![Expr::load(oreg, at(j)), sc.clone()]),
                    });
                }
                Ok(())
            })?;
            for j in 0..nv * WIDTH {
                let mut acc = Expr::load(oreg, at(j));
                for (t, pt) in ps.iter().enumerate() {
                    let vx = Expr::cast(DType::F32, Expr::load(vreg, vec![int(j), int(t as u64)]));
                    acc = call(Func::Add, vec![acc, call(Func::Mul, vec![pt.clone(), vx])]);
                }
                self.out.push(Stmt::Store {
                    tensor: oreg.to_string(),
                    coord: at(j),
                    value: acc,
                });
            }
        }
        Ok(())
    }
}

impl Builder<'_, '_> {
    /// The block's merge of its lane groups, then the store (one split) or the partials and
    /// the last block's merge of the splits (module doc, 2 and 3).
    #[allow(clippy::too_many_arguments)]
    fn decode_merge(
        &mut self,
        p: &AttPlan,
        (rows, units, splits): (u64, u64, u64),
        (m, l, oreg): (&[String], &[String], &str),
        ln: &Lanes,
        (unit, split): (&Expr, &Expr),
        row_at: &dyn Fn(&Expr) -> (Expr, Expr),
        kk: f64,
    ) -> R<()> {
        let dv = p.dv;
        let groups = THREADS / ln.lanes;
        let cv = dv.div_ceil(WIDTH);
        let shared = |s: &mut Self, shape: &[u64]| -> R<String> {
            let l = Layout::flat(
                &shape.iter().map(|&n| n as i64).collect::<Vec<_>>(),
                &col_major(shape),
            )
            .map_err(internal)?;
            Ok(s.tensor(Space::Shared, DType::F32, l))
        };
        // Each group's (m, l) and O rows.
        let sm_ml = shared(self, &[2, rows, groups])?;
        let sm_o = shared(self, &[dv, rows, groups])?;
        let first = Expr::idx(IdxOp::Eq, ln.lane.clone(), Expr::Int(0));
        self.if_(first, |s| {
            for r in 0..rows {
                for (i, var) in [&m[r as usize], &l[r as usize]].into_iter().enumerate() {
                    s.out.push(Stmt::Store {
                        tensor: sm_ml.clone(),
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
                            tensor: sm_o.clone(),
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
            if ln.lanes * (i + 1) > cv {
                self.if_(lt(chunk.clone(), int(cv)), store)?;
            } else {
                store(self)?;
            }
        }
        self.out.push(Stmt::Sync);
        let tid = bx(Builtin::TidX);
        // Each row's weights of the groups and its (M, L), by one thread a row.
        let sm_w = shared(self, &[groups, rows])?;
        let sm_ref = shared(self, &[2, rows])?;
        let parts: Vec<(Expr, Expr)> = (0..groups)
            .map(|g| {
                let at = |i: u64| Expr::load(&sm_ml, vec![int(i), tid.clone(), int(g)]);
                (at(0), at(1))
            })
            .collect();
        self.if_(lt(tid.clone(), int(rows)), |s| {
            s.decode_weights(&parts, kk, &sm_w, &tid, &sm_ref)
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
        self.for_(
            "ix",
            tid.clone(),
            int(rows * dv),
            int(THREADS),
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
                    s.decode_split_weights(splits, &at, kk, &sm_w2, &t2, &sm_ref2)
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
                    s.over_splits(splits, |s, sp| {
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

    /// Row `tid`'s weights `2^((mᵢ - M)·c)` of its groups' partials `(mᵢ, lᵢ)` to `w[i, tid]`,
    /// and `(M, L = Σ lᵢ·wᵢ)` to `out[.., tid]` (`M` the groups' max; a row with no finite
    /// score subtracts 0).
    fn decode_weights(
        &mut self,
        parts: &[(Expr, Expr)],
        kk: f64,
        w: &str,
        tid: &Expr,
        out: &str,
    ) -> R<()> {
        let f32t = Ty::Elem(DType::F32);
        let big = tree(Func::Max, parts.iter().map(|(m, _)| m.clone()).collect());
        let big = self.let_("mm", f32t.clone(), big);
        let mr = self.reference(&big);
        let mut terms = vec![];
        for (i, (m, l)) in parts.iter().enumerate() {
            let wi = self.let_("w", f32t.clone(), weight(m.clone(), &mr, kk));
            self.out.push(Stmt::Store {
                tensor: w.to_string(),
                coord: vec![int(i as u64), tid.clone()],
                value: wi.clone(),
            });
            terms.push(Expr::call(Func::Mul, vec![l.clone(), wi]));
        }
        for (i, value) in [big, tree(Func::Add, terms)].into_iter().enumerate() {
            self.out.push(Stmt::Store {
                tensor: out.to_string(),
                coord: vec![int(i as u64), tid.clone()],
                value,
            });
        }
        Ok(())
    }

    /// [`Builder::decode_weights`] over the `splits` partials `at(0, s)`, `at(1, s)` in a loop.
    fn decode_split_weights(
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
                ty: f32t.clone(),
                init: lit(DType::F32, init),
            });
            v
        };
        let big = var(self, "mm", f64::NEG_INFINITY);
        self.over_splits(splits, |s, sp| {
            s.out.push(Stmt::Assign {
                var: big.clone(),
                value: Expr::call(Func::Max, vec![Expr::var(&big), at(0, sp)]),
            });
            Ok(())
        })?;
        let mr = self.reference(&Expr::var(&big));
        let sum = var(self, "ls", 0.0);
        self.over_splits(splits, |s, sp| {
            let wi = s.let_("w", f32t.clone(), weight(at(0, sp.clone()), &mr, kk));
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

    /// `f(s, sp)` for each split `sp` in order, [`IN_FLIGHT`] of them unrolled a turn: their
    /// loads of the partials are independent and in flight together, where a plain loop would
    /// wait on each (a unit's last block runs after every other block of its unit, so its
    /// latency is the kernel's), without unrolling them all (a register each).
    fn over_splits(&mut self, splits: u64, f: impl Fn(&mut Self, Expr) -> R<()>) -> R<()> {
        let n = IN_FLIGHT.min(splits);
        self.for_("sp", int(0), int(splits), int(n), false, |s, sp0| {
            s.for_("su", int(0), int(n), int(1), true, |s, u| {
                let sp = s.let_("sp", Ty::Idx, add(sp0, u));
                if splits % n == 0 {
                    f(s, sp)
                } else {
                    s.if_(lt(sp.clone(), int(splits)), |s| f(s, sp))
                }
            })
        })
    }

    /// `m`, or 0 where it is `-inf` (a row with no finite score: its weights are then 0).
    fn reference(&mut self, m: &Expr) -> Expr {
        let is_inf = Expr::call(
            Func::Eq,
            vec![m.clone(), lit(DType::F32, f64::NEG_INFINITY)],
        );
        self.let_(
            "mr",
            Ty::Elem(DType::F32),
            Expr::call(Func::Select, vec![is_inf, lit(DType::F32, 0.0), m.clone()]),
        )
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
        self.for_("ix", tid, int(rows * dv), int(THREADS), false, |s, ix| {
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

/// A block's lane groups: `lanes` threads a key, the thread's `lane` in its group `grp`, and
/// its vector indices `lane + lanes·i`.
struct Lanes {
    lanes: u64,
    chunks: Vec<Expr>,
    lane: Expr,
    grp: Expr,
}
