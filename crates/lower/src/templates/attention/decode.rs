//! Decoding attention: a few query rows a head over a long key/value cache (a decoding step,
//! a short chunk of speculative tokens), the keys split across blocks (flash-decoding); up to
//! [`CUDA_ROWS`] rows a unit on CUDA cores (this file), up to [`MMA_ROWS`] on tensor cores
//! (`decode_mma.rs`, where `cp.async` reads K and V).
//!
//! The tensor-core schedules give each block 64 query rows of one batch entry: with one real
//! row the products run on 1/64 of their tiles, and with grouped-query attention every query
//! head of a group streams the same K/V head again (measured on the H200, run 221: 32 query
//! heads over 8 K/V heads, 8k keys, 2.5× SDPA). Here a unit is the query rows that share one
//! K/V head: the batch entries whose K and V coincide ([`Builder::decode_shape`] proves it
//! with the layout algebra: K's and V's batch layouts composed with `fold:1` have only zero
//! strides) are folded into the unit's rows (`fold · sq ≤` [`MMA_ROWS`]), so K and V are read
//! once per unit. A unit's keys are cut into `splits` chunks, one block each (the heuristic:
//! `decode_config.rs`):
//!
//! 1. A block's 128 threads are lane groups of `lanes` threads; a group takes `keys` (2 or 4)
//!    keys per step (adjacent groups adjacent keys), each lane 16-byte vectors of the key's K
//!    and V rows (vector `lane + lanes·i`), every load of the step issued before its math, or
//!    (`stages` > 1) copied by `cp.async` into the thread's own slots of a ring in shared
//!    memory `stages - 1` steps ahead and read back at its step (no barrier: a thread reads
//!    only what it copied; its warp's 16-byte slots side by side). The Q rows live in
//!    registers (f32). A score is the lanes' partial dot products summed by a
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

use super::super::ProblemShape;
use super::super::decode_config::{
    CUDA_ROWS, DecodeConfig, MAX_SPLITS, MMA_ROWS, MMA_WARPS, THREADS, WIDTH, cuda_point,
    fewest_lanes, mma_fits, shared_bytes, step_keys,
};
use super::super::matmul_mma::copy_width;
use super::{AttPlan, AttentionOps, LOG2_E, tree};
use crate::lower::*;
use irc_ir::{DType, ValueId};
use irc_kir::{
    self as kir, Builtin, Expr, Frag, Func, IdxOp, Intrinsic, ReduceOp, Space, Stmt, Ty,
};
use irc_layout::{Layout, composition};

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
    /// Whether `cp.async` reads K's and V's rows (the rings' and the tensor-core kernel's
    /// condition).
    pub(crate) copies: bool,
}

impl DecodeShape {
    /// The problem its space and the tuning cache see, from the attention problem's head dims.
    pub(crate) fn problem_shape(&self, attention: &ProblemShape) -> Option<ProblemShape> {
        let ProblemShape::Attention { d, dv, .. } = *attention else {
            return None;
        };
        Some(ProblemShape::Decode {
            units: self.units,
            rows: self.rows,
            keys: self.keys.1 - self.keys.0,
            d,
            dv,
        })
    }
}

impl Builder<'_, '_> {
    /// The decoding template's shape of the group where it applies (module doc): at most
    /// [`CUDA_ROWS`] query rows a unit whose registers some lane count holds, or up to
    /// [`MMA_ROWS`] for the tensor-core kernel (`decode_mma.rs`) where `cp.async` reads K and
    /// V; `None` otherwise (the tensor-core attention templates take the group).
    pub(crate) fn decode_shape(&mut self, ops: &AttentionOps<'_>) -> R<Option<DecodeShape>> {
        let qk = self.matmul_access(ops.scores)?;
        let pv = self.matmul_access(ops.output)?;
        let (sq, sk, d, dv) = (qk.ms.m, qk.ms.n, qk.ms.k, pv.ms.n);
        let batch: u64 = qk.ms.batch.iter().product();
        let dt = self.ty(ops.output.result).dtype;
        let head_dim_ok = irc_fused::attention::head_dim_ok;
        if sq > MMA_ROWS
            || sk == 0
            || batch == 0
            || !matches!(dt, DType::F16 | DType::BF16)
            || !head_dim_ok(d)
            || !head_dim_ok(dv)
        {
            return Ok(None);
        }
        let (k, v) = (ops.scores.operands[1], ops.output.operands[1]);
        // The most rows either kernel takes: the CUDA-core kernel's where its registers hold
        // them, the tensor-core kernel's where cp.async reads K and V.
        let copies = self.decode_copies((k, &qk.access_b), (v, &pv.access_b), dt);
        let takes = |rows: u64| {
            (rows <= CUDA_ROWS && fewest_lanes(rows, (d, dv)).is_some())
                || (copies && mma_fits(rows, (d, dv)))
        };
        let Some(fold) = (1..=MMA_ROWS / sq).rev().find(|&g| {
            batch.is_multiple_of(g)
                && takes(g * sq)
                && (g == 1
                    || (self.shared_by(k, &qk.access_b, g) && self.shared_by(v, &pv.access_b, g)))
        }) else {
            return Ok(None);
        };
        let rows = fold * sq;
        // The merge's shared memory at the most splits (the tensor-core kernel's warps merge
        // as lane groups of 32: 4 of them at the least).
        let groups = fewest_lanes(rows, (d, dv))
            .filter(|_| rows <= CUDA_ROWS)
            .map_or(MMA_WARPS[0], |lanes| THREADS / lanes);
        if shared_bytes(rows, dv, groups, MAX_SPLITS)
            > self.l.options.target.max_dynamic_shared_bytes
        {
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
            copies,
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
        if c.mma && shape.copies && mma_fits(shape.rows, (p.d, p.dv)) {
            return self.attention_decode_mma(ops, p, shape, c);
        }
        // A tensor-core point where its kernel cannot run (a tuning cache's point for a graph
        // whose K or V no copy reads): the CUDA-core kernel at its heuristic's point.
        let c = match c.mma {
            false => c,
            true => {
                let problem = (
                    shape.units,
                    shape.rows,
                    shape.keys.1 - shape.keys.0,
                    (p.d, p.dv),
                );
                cuda_point(problem, &self.l.options.target).ok_or_else(|| {
                    Retry::Fail(crate::LowerError::Internal(
                        "a decoding unit neither kernel takes".into(),
                    ))
                })?
            }
        };
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
        let lanes = c.lanes;
        let UnitSplit {
            unit,
            split,
            bi0,
            k0,
            step,
            chunk,
            splits,
        } = self.unit_split(&shape, &c);
        let (sq, dt) = (p.sq, p.dt);
        let (cq, cv) = (p.d.div_ceil(WIDTH), p.dv.div_ceil(WIDTH));
        let (nq, nv) = (cq.div_ceil(lanes), cv.div_ceil(lanes));
        let groups = THREADS / lanes;
        let tid = bx(Builtin::TidX);
        let lane = self.let_(
            "lig",
            Ty::Idx,
            Expr::idx(IdxOp::Rem, tid.clone(), int(lanes)),
        );
        let grp = self.let_("grp", Ty::Idx, Expr::idx(IdxOp::Div, tid, int(lanes)));
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
        // A step's K and V vectors: element, vector, key.
        let kv_regs = |s: &mut Self, n: u64| -> R<String> {
            let w = WIDTH as i64;
            let l = Layout::flat(&[w, n as i64, c.keys as i64], &[1, w, w * n as i64])
                .map_err(internal)?;
            Ok(s.tensor(Space::Registers, dt, l))
        };
        let kreg = kv_regs(self, nq)?;
        let vreg = kv_regs(self, nv)?;
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
                    let coord = match ty {
                        DType::F32 => vec![int(j), int(r)],
                        _ => vec![int(j % WIDTH), int(j / WIDTH), int(r)],
                    };
                    self.out.push(Stmt::Store {
                        tensor: t.clone(),
                        coord,
                        value: lit(ty, 0.0),
                    });
                }
            }
        }
        // Row r of a unit is query r % sq of batch entry bi0 + r / sq.
        let row_at = |r: &Expr| unit_row(r, sq, &bi0);
        let qa = p.qk.access_a.clone();
        for r in 0..rows {
            let (qr, bi) = row_at(&int(r));
            let dst = |i: u64, e: Expr| (qreg.clone(), vec![add(int(i * WIDTH), e), int(r)]);
            self.decode_vectors(q, &qa, (vec![qr, int(0), bi], 1), (cq, &lanes_of), &dst)?;
        }
        let (m, l) = self.decode_state(rows);
        let kk = p.prologue.scale.unwrap_or(1.0) * LOG2_E;
        let steps = chunk / step;
        let kv = KeySteps {
            kbeg,
            kend,
            groups,
            bi0: bi0.clone(),
            k: (k, p.qk.access_b.clone(), cq, kreg.clone()),
            v: (v, p.pv.access_b.clone(), cv, vreg.clone()),
        };
        let ring = match c.stages {
            1 => None,
            stages => self.decode_ring(&kv, stages, c.keys, (nq, nv))?,
        };
        let compute = |s: &mut Self, st: &Expr| -> R<()> {
            let keys = s.keys_of_step(&kv, st, &lanes_of, c.keys, false);
            let scores =
                s.decode_scores(p, (&keys, kend), (&qreg, &kreg), (nq, lanes), &row_at, rows)?;
            s.decode_online(&scores, (&m, &l), (&oreg, &vreg), nv, kk)
        };
        match &ring {
            // Each step's loads to registers, then its math.
            None => self.for_(
                "st",
                k0.clone(),
                add(k0, int(chunk)),
                int(step),
                false,
                |s, st| {
                    // Steps past the kept keys' end are skipped.
                    s.if_(lt(st.clone(), int(kend)), |s| {
                        let keys = s.keys_of_step(&kv, &st, &lanes_of, c.keys, true);
                        s.load_step(&kv, &keys, &lanes_of, None)?;
                        compute(s, &st)
                    })
                },
            )?,
            // The ring: steps `S - 1` ahead in flight (module doc).
            Some(r) => {
                let s1 = r.stages - 1;
                self.ring_fill(s1, (&k0, step), (steps, kend), &|s, st, stage| {
                    let keys = s.keys_of_step(&kv, st, &lanes_of, c.keys, true);
                    s.load_step(&kv, &keys, &lanes_of, Some((r, stage)))
                })?;
                self.for_("it", int(0), int(steps), int(1), false, |s, it| {
                    let RingStep {
                        st,
                        ahead,
                        next,
                        cond,
                    } = s.ring_step(&it, (&k0, step), (s1, steps, kend));
                    s.if_(cond, |s| {
                        let stage =
                            s.let_("sn", Ty::Idx, Expr::idx(IdxOp::Rem, next, int(r.stages)));
                        let keys = s.keys_of_step(&kv, &ahead, &lanes_of, c.keys, true);
                        s.load_step(&kv, &keys, &lanes_of, Some((r, &stage)))
                    })?;
                    s.out.push(cp_async_commit());
                    s.out.push(cp_async_wait(s1));
                    s.if_(lt(st.clone(), int(kend)), |s| {
                        let stage = s.let_("sc", Ty::Idx, Expr::idx(IdxOp::Rem, it, int(r.stages)));
                        s.ring_to_step(&kv, r, &stage, &lanes_of)?;
                        compute(s, &st)
                    })
                })?;
                self.out.push(cp_async_wait(0));
            }
        }
        let write = |s: &mut Self, sm_ml: &str, sm_o: &str| {
            s.decode_write_groups((&m, &l, &oreg), &lanes_of, (rows, p.dv), (sm_ml, sm_o))
        };
        self.decode_merge(
            p,
            (rows, units, splits),
            groups,
            &write,
            (&unit, &split),
            &row_at,
            kk,
        )
    }

    /// The launch of point `c` over `shape` (a block of `c.threads()`, `units · splits`
    /// blocks: whole steps of `step_keys(c)` keys a split, the last split taking what remains)
    /// and a block's unit and split (`bid.x = unit · splits + split`), the unit's first batch
    /// entry (`fold` a unit) and the split's first key (`chunk` keys a split from `kbeg`).
    pub(super) fn unit_split(&mut self, shape: &DecodeShape, c: &DecodeConfig) -> UnitSplit {
        let (kbeg, kend) = shape.keys;
        let step = step_keys(c);
        let chunk = (kend - kbeg).div_ceil(step).div_ceil(c.splits) * step;
        let splits = (kend - kbeg).div_ceil(chunk);
        self.kernel.grid = [(shape.units * splits) as u32, 1, 1];
        self.kernel.block = [c.threads() as u32, 1, 1];
        let fold = shape.fold;
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
        UnitSplit {
            unit,
            split,
            bi0,
            k0,
            step,
            chunk,
            splits,
        }
    }

    /// A ring's first fill: the copies of a split's first `s1` steps (of `step` keys from
    /// `k0`, `steps` of them, before the kept keys' end `kend`) into stages `0..s1` by
    /// `issue(st, stage)`, a commit each whether or not it copies.
    #[allow(clippy::type_complexity)]
    pub(super) fn ring_fill(
        &mut self,
        s1: u64,
        (k0, step): (&Expr, u64),
        (steps, kend): (u64, u64),
        issue: &dyn Fn(&mut Self, &Expr, &Expr) -> R<()>,
    ) -> R<()> {
        for i in 0..s1 {
            if i < steps {
                let st = self.let_("st", Ty::Idx, add(k0.clone(), int(i * step)));
                self.if_(lt(st.clone(), int(kend)), |s| issue(s, &st, &int(i)))?;
            }
            self.out.push(cp_async_commit());
        }
        Ok(())
    }

    /// Iteration `it` of a ring of `s1 + 1` stages over a split's `steps` steps of `step` keys
    /// from `k0`: the step's first key, the first key `s1` steps ahead, that step's index, and
    /// whether its copies are issued (it is one of the split's steps, before the kept keys'
    /// end `kend`).
    pub(super) fn ring_step(
        &mut self,
        it: &Expr,
        (k0, step): (&Expr, u64),
        (s1, steps, kend): (u64, u64, u64),
    ) -> RingStep {
        let st = self.let_("st", Ty::Idx, add(k0.clone(), mul(it.clone(), int(step))));
        let ahead = self.let_("sa", Ty::Idx, add(st.clone(), int(s1 * step)));
        let next = add(it.clone(), int(s1));
        let cond = Expr::idx(
            IdxOp::And,
            lt(next.clone(), int(steps)),
            lt(ahead.clone(), int(kend)),
        );
        RingStep {
            st,
            ahead,
            next,
            cond,
        }
    }

    /// The keys a lane group takes at step `st`: `st + t·groups + grp` for each `t`; with
    /// `wrap`, a key past the kept ones reads a kept key's rows instead
    /// (`kbeg + (key - kbeg) % kept`), whose score is -inf and whose V weighs 0 — as every V
    /// row does in the graph's `P·V` where its probability is 0 — so no load is guarded.
    fn keys_of_step(
        &mut self,
        kv: &KeySteps,
        st: &Expr,
        ln: &Lanes,
        keys: u64,
        wrap: bool,
    ) -> Vec<Expr> {
        let kept = kv.kend - kv.kbeg;
        let step = kv.groups * keys;
        (0..keys)
            .map(|t| {
                let key = add(st.clone(), add(int(t * kv.groups), ln.grp.clone()));
                let key = self.let_("key", Ty::Idx, key);
                if !wrap || kept.is_multiple_of(step) {
                    return key;
                }
                let wrapped = Expr::idx(
                    IdxOp::Rem,
                    Expr::idx(IdxOp::Sub, key, int(kv.kbeg)),
                    int(kept),
                );
                self.let_("kr", Ty::Idx, add(int(kv.kbeg), wrapped))
            })
            .collect()
    }

    /// A block's `cp.async` ring of `stages` steps where K and V are buffers (or views of
    /// them) whose rows copies can read; `None` otherwise.
    fn decode_ring(
        &mut self,
        kv: &KeySteps,
        stages: u64,
        keys: u64,
        (nq, nv): (u64, u64),
    ) -> R<Option<Ring>> {
        let bytes = self.ty(kv.k.0).dtype.size_bytes();
        let (Some((wk, gk)), Some((wv, gv))) = (
            copy_width(self, kv.k.0, &kv.k.1, 0, bytes),
            copy_width(self, kv.v.0, &kv.v.1, 1, bytes),
        ) else {
            return Ok(None);
        };
        let dt = self.ty(kv.k.0).dtype;
        // Element, slot (a key's K vectors, then its V vectors), thread, stage: a warp's
        // threads copy and read 16-byte vectors side by side (no bank conflicts).
        let (w, t) = (WIDTH as i64, THREADS as i64);
        let slots = (keys * (nq + nv)) as i64;
        let shape = [w, slots, t, stages as i64];
        let strides = [1, w * t, w, w * t * slots];
        let ring = self.tensor(
            Space::Shared,
            dt,
            Layout::flat(&shape, &strides).map_err(internal)?,
        );
        let view = |s: &mut Self, cw: u64| -> R<String> {
            let mut shape = shape;
            let mut strides = strides;
            (shape[0], strides[0]) = ((WIDTH / cw) as i64, cw as i64);
            let l = Layout::flat(&shape, &strides).map_err(internal)?;
            Ok(s.tensor(Space::View(ring.clone()), dt, l))
        };
        let (vk, vv) = (view(self, wk)?, view(self, wv)?);
        Ok(Some(Ring {
            stages,
            keys,
            tensor: ring,
            per_key: (nq, nv),
            k: (wk, gk, vk),
            v: (wv, gv, vv),
        }))
    }

    /// A step's K and V vectors of the lane's `keys`: into the registers, or with `ring`
    /// (and a stage) copied into the ring by `cp.async`.
    fn load_step(
        &mut self,
        kv: &KeySteps,
        keys: &[Expr],
        ln: &Lanes,
        ring: Option<(&Ring, &Expr)>,
    ) -> R<()> {
        let tid = bx(Builtin::TidX);
        for (t, key) in keys.iter().enumerate() {
            let t = t as u64;
            for (fast, (x, access, c, reg)) in [(0, &kv.k), (1, &kv.v)] {
                let Some((r, stage)) = ring else {
                    let dst = |i: u64, e: Expr| (reg.clone(), vec![e, int(i), int(t)]);
                    let mut at = vec![int(0), int(0), kv.bi0.clone()];
                    at[1 - fast] = key.clone();
                    self.decode_vectors(*x, access, (at, fast), (*c, ln), &dst)?;
                    continue;
                };
                let (w, global, view) = if fast == 0 { &r.k } else { &r.v };
                let base = t * (r.per_key.0 + r.per_key.1) + fast as u64 * r.per_key.0;
                let op = Intrinsic::cp_async(w * 2).ok_or_else(|| {
                    Retry::Fail(crate::LowerError::Internal(format!(
                        "no cp.async of {w} elements"
                    )))
                })?;
                for i in 0..c.div_ceil(ln.lanes) {
                    let chunk = ln.chunks[i as usize].clone();
                    let copies: Vec<Stmt> = (0..WIDTH / w)
                        .map(|q| {
                            let mut at = vec![int(0), int(0), kv.bi0.clone()];
                            at[1 - fast] = key.clone();
                            at[fast] = add(mul(chunk.clone(), int(WIDTH / w)), int(q));
                            let dst = vec![int(q), int(base + i), tid.clone(), stage.clone()];
                            Stmt::Intrinsic {
                                op,
                                args: vec![
                                    kir::Arg::at(view, dst),
                                    kir::Arg::at(global, at),
                                    kir::Arg::Expr(int(w * 2)),
                                ],
                            }
                        })
                        .collect();
                    self.guarded(ln.guard(i, *c), copies);
                }
            }
        }
        Ok(())
    }

    /// The current stage's vectors out of the ring into the step's registers.
    fn ring_to_step(&mut self, kv: &KeySteps, r: &Ring, stage: &Expr, ln: &Lanes) -> R<()> {
        let tid = bx(Builtin::TidX);
        let per_key = r.per_key.0 + r.per_key.1;
        for t in 0..r.keys {
            for (fast, (_, _, c, reg)) in [(0u64, &kv.k), (1, &kv.v)] {
                for i in 0..c.div_ceil(ln.lanes) {
                    let slot = t * per_key + fast * r.per_key.0 + i;
                    let copy = Stmt::Copy {
                        width: WIDTH as u32,
                        dst: Frag {
                            tensor: reg.clone(),
                            at: vec![int(i), int(t)],
                        },
                        src: Frag {
                            tensor: r.tensor.clone(),
                            at: vec![int(slot), tid.clone(), stage.clone()],
                        },
                        hint: irc_kir::CacheHint::Normal,
                    };
                    self.guarded(ln.guard(i, *c), vec![copy]);
                }
            }
        }
        Ok(())
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
            match ln.guard(i, c) {
                Some(inside) => self.if_(inside, load)?,
                None => load(self)?,
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
                        let kx = Expr::load(kreg, kv_at(j, t as u64));
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
            let mx = self.let_("mx", f32t, tree(Func::MaxNum, row.clone()));
            let (mnew, mr, sc) = self.att_max_step(Expr::var(&m[r]), mx, kk, true);
            self.out.push(Stmt::Assign {
                var: m[r].clone(),
                value: mnew,
            });
            let mk = self.let_("mk", f32t, call(Func::Mul, vec![mr, f32v(kk)]));
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
                    self.let_("p", f32t, e)
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
                    let vx = Expr::cast(DType::F32, Expr::load(vreg, kv_at(j, t as u64)));
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

/// A block's lane groups: `lanes` threads a key, the thread's `lane` in its group `grp`, and
/// its vector indices `lane + lanes·i`.
pub(super) struct Lanes {
    pub(super) lanes: u64,
    pub(super) chunks: Vec<Expr>,
    pub(super) lane: Expr,
    pub(super) grp: Expr,
}

impl Lanes {
    /// The guard of the lane's vector `i` of a row of `c`: none where the vectors divide
    /// among the lanes.
    pub(super) fn guard(&self, i: u64, c: u64) -> Option<Expr> {
        (self.lanes * (i + 1) > c).then(|| lt(self.chunks[i as usize].clone(), int(c)))
    }
}

/// What a step's loads need: the kept keys `[kbeg, kend)`, the lane groups a block, the unit's
/// first batch entry, and for K and V their value, access, 16-byte vectors a row and the
/// step's registers.
struct KeySteps {
    kbeg: u64,
    kend: u64,
    groups: u64,
    bi0: Expr,
    k: (ValueId, Layout, u64, String),
    v: (ValueId, Layout, u64, String),
}

/// A block's `cp.async` ring: `stages` steps of each thread's K and V vectors of `keys` keys
/// (`per_key` vectors of each a key), and for K and V the copy's elements, the global tensor
/// of copies and the ring's view in copies.
struct Ring {
    stages: u64,
    keys: u64,
    tensor: String,
    per_key: (u64, u64),
    k: (u64, String, String),
    v: (u64, String, String),
}

/// A decoding block's place ([`Builder::unit_split`]).
pub(super) struct UnitSplit {
    pub(super) unit: Expr,
    pub(super) split: Expr,
    pub(super) bi0: Expr,
    pub(super) k0: Expr,
    /// Keys a step, keys a split and the splits a unit's keys take.
    pub(super) step: u64,
    pub(super) chunk: u64,
    pub(super) splits: u64,
}

/// A ring's iteration ([`Builder::ring_step`]).
pub(super) struct RingStep {
    pub(super) st: Expr,
    pub(super) ahead: Expr,
    pub(super) next: Expr,
    pub(super) cond: Expr,
}

/// Row `r` of a unit: query `r % sq` of batch entry `bi0 + r / sq`.
pub(super) fn unit_row(r: &Expr, sq: u64, bi0: &Expr) -> (Expr, Expr) {
    (
        Expr::idx(IdxOp::Rem, r.clone(), int(sq)),
        add(bi0.clone(), Expr::idx(IdxOp::Div, r.clone(), int(sq))),
    )
}

/// Element `j` of key `t`'s slice in a step's K or V registers.
fn kv_at(j: u64, t: u64) -> Vec<Expr> {
    vec![int(j % WIDTH), int(j / WIDTH), int(t)]
}

pub(super) fn cp_async_commit() -> Stmt {
    Stmt::Intrinsic {
        op: Intrinsic::CpAsyncCommit,
        args: vec![],
    }
}

/// `cp.async.wait_group n`: all but the last `n` groups of copies have landed.
pub(super) fn cp_async_wait(n: u64) -> Stmt {
    Stmt::Intrinsic {
        op: Intrinsic::CpAsyncWait,
        args: vec![kir::Arg::Expr(Expr::Int(n as i64))],
    }
}
