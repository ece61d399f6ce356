//! Split row composites: few long rows (softmax, rmsnorm, layernorm) over several blocks each,
//! with a deterministic merge, in one cooperative launch where the blocks fit on the GPU at
//! once, else in two.
//!
//! One block per row leaves most of the GPU idle when rows are few (16 rows of 4M elements use
//! 16 of 132 SMs) and no block can hold a row of more than 8192 elements in registers. The split
//! schedule cuts each row into `splits` chunks of `chunk` elements (a multiple of 1024), grid
//! `(splits, rows)`:
//!
//! 1. each block reduces its chunk to a partial — softmax `(max, Σ exp(x − max))` by the online
//!    rescaling, rmsnorm `Σ x²`, layernorm `(mean, M2, n)` from sums shifted by the chunk's
//!    first element — and thread 0 writes it to a temp buffer `[rows, splits, 3]` of the math
//!    dtype;
//! 2. each block merges the row's partials with a block reduction (the same tree in every
//!    block, so the result is deterministic and identical across blocks: rescaled sums for
//!    softmax, Chan's `Σ M2ᵢ + nᵢ(meanᵢ − mean)²` for layernorm), then normalizes its chunk.
//!
//! Where `rows × splits` blocks can all be resident ([`COOPERATIVE_PER_SM`] per SM), both
//! steps are one kernel launched cooperatively: between them the blocks of a row wait for
//! each other (`Builder::row_barrier`, `counter.wait`), and step 2 walks the chunk backwards,
//! so that its first steps are the ones step 1 read last, still in L2 (measured on the H100,
//! `bench/gpu/NOTES.md` run 90: 4 × 16M f16 layernorm 0.202 ms in two launches, 0.178 in one,
//! 0.176 backwards). Otherwise step 1 is a kernel of its own, `…_partial`.
//!
//! `x` is read twice and the output written once, as by the streamed one-block schedule, but
//! for a norm's one launch, whose blocks keep their chunk's first steps in shared memory for
//! step 2 ([`Builder::x_cache`]). Each thread handles four vectors per step of a 1024-vector
//! stride so four loads are in flight.

use super::row::{Read, RowSpec, rstd_of};
use crate::lower::*;
use irc_ir::{Inst, OpKind, ValueDef};
use irc_kir::{self as kir, Builtin, Expr, Func, IdxOp, ReduceOp, Space, Stmt, Ty};
use irc_layout::Layout;

/// Chunks are multiples of this many elements: 256 threads × 4 unrolled elements.
pub(crate) const STEP: u64 = 4 * THREADS as u64;

/// Blocks per SM a cooperative split launch may have: all must be resident at once (256
/// threads each; the emitters bound registers to 64 a thread so that 4 fit).
pub(crate) const COOPERATIVE_PER_SM: u64 = irc_kir::COOPERATIVE_BLOCKS_PER_SM as u64;

/// The identity of `max` in the math dtype.
pub(crate) fn lowest(math: irc_ir::DType) -> f64 {
    if math == irc_ir::DType::F64 {
        f64::MIN
    } else {
        f64::from(f32::MIN)
    }
}

/// How a row composite runs, chosen per shape by [`RowSchedule::choose`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RowSchedule {
    /// Rows of at most 1024 elements: a warp per row (8 rows per block), the row cached in
    /// registers (at most 32 values per lane), warp reductions only.
    WarpCached,
    /// Rows of 1025..=8192 elements (256 threads), or up to 32768 elements and at least 8
    /// rows per SM (1024 threads): a block per row, the row cached in registers (at most 32
    /// values per thread).
    BlockCached { threads: u64 },
    /// Rows longer than 8192 elements, too few for the streamed schedules (fewer than 4 × SMs
    /// of them, or 2 × SMs where they are at most 32768 elements): several blocks per row
    /// (this module).
    Split { splits: u64, chunk: u64 },
    /// Rows longer than 8192 elements, at least 4 × SMs of them (2 × SMs where they are at
    /// most 32768 elements, 512 threads): a block per row, reading `x` once per pass (the
    /// later passes mostly from L2).
    Streamed { threads: u64 },
}

impl RowSchedule {
    /// The heuristic on `sms` SMs for a composite reading `x` `passes` times when streamed:
    /// the cached schedules read `x` once whenever the row fits in registers; beyond that,
    /// split rows — into as many blocks as may all be resident ([`COOPERATIVE_PER_SM`] per SM:
    /// one cooperative launch) where at most 2 per SM are rows, else until the grid has about
    /// 8 blocks per SM (two launches) — in chunks of a multiple of 1024 elements; when the
    /// rows alone fill the grid, stream. Rows longer than 32768 elements
    /// (and a two-pass composite's of any length) stream from 4 rows per SM on (measured on
    /// the H100, 1024 rows of 64k f16, streamed by 1024 threads against split in two: rmsnorm
    /// 0.097 ms against 0.149, layernorm 0.105 against 0.152, softmax 0.150 against 0.163 —
    /// the streamed loop's four loads a step in flight together; `bench/gpu/NOTES.md` runs
    /// 86–87). Rows of at most 32768 elements
    /// are cached by 1024 threads from 8 rows per SM on, and streamed by 512 threads from 2
    /// (measured: a [2048, 32000] f32 log-softmax 0.265 ms cached against 0.312 streamed by
    /// 1024 and 0.283 split; a group norm's 512 rows of 32768 f16 0.040 streamed by 512
    /// against 0.050 split and 0.060 cached).
    pub(crate) fn choose(rows: u64, k: u64, passes: u64, sms: u64) -> RowSchedule {
        let target_blocks = 8 * sms;
        if k <= 1024 {
            return RowSchedule::WarpCached;
        }
        if k <= 8192 {
            return RowSchedule::BlockCached { threads: 256 };
        }
        if k <= 32 * 1024 && rows >= 8 * sms {
            return RowSchedule::BlockCached { threads: 1024 };
        }
        if rows >= 4 * sms && (passes <= 2 || k > 32 * 1024) {
            return RowSchedule::Streamed { threads: 1024 };
        }
        if k <= 32 * 1024 && rows >= 2 * sms {
            return RowSchedule::Streamed { threads: 512 };
        }
        if rows < target_blocks {
            // Few enough rows for one cooperative launch: as many blocks as may be resident.
            let coop = COOPERATIVE_PER_SM * sms;
            let splits = match rows * 2 <= coop {
                true => coop / rows,
                false => target_blocks.div_ceil(rows),
            };
            let chunk = k.div_ceil(splits).div_ceil(STEP) * STEP;
            let splits = k.div_ceil(chunk);
            if splits >= 2 {
                return RowSchedule::Split { splits, chunk };
            }
        }
        RowSchedule::Streamed { threads: 1024 }
    }
}

/// The first vectors of a block's chunk, kept in shared memory between the two passes of a
/// cooperative split launch (`Builder::x_cache`).
pub(crate) struct XCache {
    /// The shared tensor: element `e` of the chunk at `e`, in the math dtype.
    tensor: String,
    /// Vectors cached: whole steps of `chunk_loop`.
    vecs: u64,
}

/// Shared memory a block of a cooperative split launch may fill with its chunk at most: the
/// 48 KiB a block may hold statically ([`cache_bytes`] makes it less where the SM has less).
const CACHE_BYTES: u64 = 48 * 1024;

/// Shared memory a block of a cooperative split launch leaves for the rest (its barrier word
/// and reduction scratch) and the driver reserves per block (1 KiB).
const CACHE_SLACK: u64 = 2 * 1024;

/// The cache a block of a cooperative split launch may hold on `target`: the SM's shared
/// memory (a block's opt-in maximum plus the 1 KiB the driver reserves) over the blocks an SM
/// runs, less [`CACHE_SLACK`]: 48 KiB on the H100 (228 KiB an SM), 39 KiB on the A100 (164),
/// 23 KiB on sm_86/89 (100).
fn cache_bytes(target: &irc_target::Target) -> u64 {
    let per_sm = target.max_dynamic_shared_bytes + 1024;
    let per_block = per_sm / COOPERATIVE_PER_SM;
    per_block.saturating_sub(CACHE_SLACK).min(CACHE_BYTES)
}

impl Builder<'_, '_> {
    /// The shared tensor holding the first whole steps of the block's chunk that fit
    /// [`cache_bytes`], if any step fits and the chunk has a step beyond them.
    fn x_cache(&mut self, math: irc_ir::DType, (chunk, width): (u64, u64)) -> Option<XCache> {
        let step = STEP * width;
        let bytes = cache_bytes(&self.l.options.target);
        let steps = (bytes / (step * math.size_bytes())).min(chunk.div_ceil(step) - 1);
        if steps == 0 {
            return None;
        }
        let elems = steps * step;
        let layout = Layout::int(elems as i64, 1).ok()?;
        let tensor = self.tensor(Space::Shared, math, layout);
        Some(XCache {
            tensor,
            vecs: steps * STEP,
        })
    }

    /// The chunk's elements `[start, start + chunk)` of row `row` (clipped to `k`) over the
    /// block: vectors of `width` elements (`templates/vector.rs`), four per thread in flight
    /// per step of `4 · 256` vectors; `f` gets the element index and whether it lies in the
    /// chunk's first `cached` vectors (whole steps, where a cooperative launch keeps `x` in
    /// shared memory between its passes).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn chunk_loop(
        &mut self,
        start: &Expr,
        (chunk, k): (u64, u64),
        row: &Expr,
        width: u64,
        reverse: bool,
        cached: u64,
        f: impl Fn(&mut Self, Expr, bool) -> R<()>,
    ) -> R<()> {
        let (cv, vecs) = (chunk / width, k.div_ceil(width));
        let first = self.let_(
            "sv",
            Ty::Idx,
            Expr::idx(IdxOp::Div, start.clone(), int(width)),
        );
        let row = row.clone();
        let lanes = u64::from(THREADS);
        let step = 4 * lanes;
        // A step whose vectors all exist loads without guards, so its four loads issue before
        // the first is used (a load under its own branch waits for the previous one's use).
        let u_loop = |b: &mut Self, base: &Expr, guard: bool, held: bool| -> R<()> {
            b.for_("u", int(0), int(4), int(1), true, |b, u| {
                let off = b.let_(
                    "o",
                    Ty::Idx,
                    add(add(base.clone(), mul(u, int(lanes))), bx(Builtin::TidX)),
                );
                let vb = b.let_("vb", Ty::Idx, add(first.clone(), off.clone()));
                let at = vec![vb.clone(), row.clone()];
                if !guard {
                    return b.vector_loop(width, at, |b, kx, _| f(b, kx, held));
                }
                let mut cond = lt(vb, int(vecs));
                if cv % step != 0 {
                    cond = Expr::idx(IdxOp::And, lt(off, int(cv)), cond);
                }
                b.if_(cond, |b| {
                    b.vector_loop(width, at, |b, kx, _| f(b, kx, held))
                })
            })
        };
        let last = (cv.max(1) - 1) / step * step;
        self.for_("base", int(0), int(cv), int(step), false, |b, base| {
            // Backwards, the steps a pass read last (still in L2) come first.
            let base = match reverse {
                true => b.let_("rb", Ty::Idx, Expr::idx(IdxOp::Sub, int(last), base)),
                false => base,
            };
            let end = add(base.clone(), int(step - 1));
            let inside = Expr::idx(
                IdxOp::And,
                lt(end.clone(), int(cv)),
                lt(add(first.clone(), end), int(vecs)),
            );
            let steps = |b: &mut Self, held: bool| -> R<Vec<Stmt>> {
                let fast = b.block(|b| u_loop(b, &base, false, held))?;
                let slow = b.block(|b| u_loop(b, &base, true, held))?;
                Ok(vec![Stmt::If {
                    cond: inside.clone(),
                    body: fast,
                    orelse: slow,
                }])
            };
            let plain = steps(b, false)?;
            if cached == 0 {
                b.out.extend(plain);
                return Ok(());
            }
            let held = steps(b, true)?;
            b.out.push(Stmt::If {
                cond: lt(base.clone(), int(cached)),
                body: held,
                orelse: plain,
            });
            Ok(())
        })
    }

    /// `y · w + bias` at the current coordinate, for the norms' optional weight and bias
    /// (`RowSpec::w`, `RowSpec::bias`), in the row's math type.
    pub(crate) fn row_affine(&mut self, r: &RowSpec, mut y: Expr) -> R<Expr> {
        let call = Expr::call;
        if let Some(w) = r.w {
            let wv = self.value_at(w, &r.param_access)?;
            y = call(Func::Mul, vec![y, cast_to(r.math, self.ty(w).dtype, wv)]);
        }
        if let Some(bias) = r.bias {
            let bv = self.value_at(bias, &r.param_access)?;
            y = call(Func::Add, vec![y, cast_to(r.math, self.ty(bias).dtype, bv)]);
        }
        Ok(y)
    }

    /// The split schedule's partial of the block's chunk, stored by thread 0 to
    /// `part[at(row, split, 0..3)]` (module docs).
    #[allow(clippy::too_many_arguments)]
    fn split_partial(
        &mut self,
        op: OpKind,
        r: &RowSpec,
        start: &Expr,
        (chunk, width): (u64, u64),
        part: &str,
        at: &dyn Fn(&Expr, Expr, u64) -> Expr,
        cache: Option<&XCache>,
    ) -> R<()> {
        let math = r.math;
        let mt = Ty::Elem(math);
        let call = Expr::call;
        let row = bx(Builtin::BidY);
        let start = start.clone();
        let held = cache.map_or(0, |c| c.vecs);
        // x, and where the chunk's first steps are cached, also into shared memory.
        let load_x = |b: &mut Builder, r: &RowSpec, kx: Expr, read: Read, keep: bool| -> R<Expr> {
            b.coord = vec![kx.clone(), row.clone()];
            let e = b.row_x(r, read)?;
            let x = b.let_("xv", mt, e);
            if let (Some(c), true) = (cache, keep) {
                b.out.push(Stmt::Store {
                    tensor: c.tensor.clone(),
                    coord: vec![Expr::idx(IdxOp::Sub, kx, start.clone())],
                    value: x.clone(),
                });
            }
            Ok(x)
        };
        // `f(x)` for each of the chunk's elements, in one pass.
        let each_x = |s: &mut Self, f: &dyn Fn(&mut Self, Expr)| -> R<()> {
            s.chunk_loop(
                &start,
                (chunk, r.k),
                &row,
                width,
                false,
                held,
                |b, kx, keep| {
                    let x = load_x(b, r, kx, Read::Store, keep)?;
                    f(b, x);
                    Ok(())
                },
            )
        };
        let values: [Expr; 3] = match op {
            OpKind::Softmax | OpKind::LogSoftmax => {
                // The chunk's (max, sum of exp(x - max)) in one pass (`row::OnlineSoftmax`).
                let o = super::row::OnlineSoftmax::new(self, math);
                each_x(self, &|b, x| o.add(b, x))?;
                let (mx, sum) = o.merge(self)?;
                [mx, sum, lit(math, 0.0)]
            }
            OpKind::Rmsnorm => {
                let s = self.var("s", mt, lit(math, 0.0));
                each_x(self, &|b, x| {
                    let v = call(
                        Func::Add,
                        vec![s.clone(), call(Func::Mul, vec![x.clone(), x])],
                    );
                    b.assign(&s, v);
                })?;
                let sum = self.block_reduce(mt, ReduceOp::Sum, s);
                [sum, lit(math, 0.0), lit(math, 0.0)]
            }
            _ => {
                // The chunk's (mean, M2, n) in one pass (`row::Moments`).
                let m = super::row::Moments::new(self, math, None);
                each_x(self, &|b, x| m.add(b, x))?;
                let (mean, m2, n) = m.merge(self, None)?;
                [mean, m2, n]
            }
        };
        let tid0 = Expr::idx(IdxOp::Eq, bx(Builtin::TidX), Expr::Int(0));
        self.if_(tid0, |b| {
            for (c, v) in values.into_iter().enumerate() {
                b.out.push(Stmt::Store {
                    tensor: part.to_string(),
                    coord: vec![at(&row, bx(Builtin::BidX), c as u64)],
                    value: v,
                });
            }
            Ok(())
        })?;
        Ok(())
    }

    pub(crate) fn var(&mut self, hint: &str, ty: Ty, init: Expr) -> Expr {
        let var = self.fresh(hint);
        self.out.push(Stmt::Var {
            var: var.clone(),
            ty,
            init,
        });
        Expr::Var(var)
    }

    pub(crate) fn assign(&mut self, var: &Expr, value: Expr) {
        if let Expr::Var(v) = var {
            self.out.push(Stmt::Assign {
                var: v.clone(),
                value,
            });
        }
    }

    pub(crate) fn block_reduce(&mut self, ty: Ty, op: ReduceOp, value: Expr) -> Expr {
        let var = self.fresh("red");
        self.out.push(Stmt::BlockReduce {
            var: var.clone(),
            ty,
            op,
            value,
        });
        Expr::Var(var)
    }

    /// The split schedule of a row composite (module docs): in `self`, one cooperative kernel,
    /// or the merge-and-apply kernel with the partial kernel pushed to `self.pre`.
    pub(crate) fn composite_split(
        &mut self,
        inst: &Inst,
        r: RowSpec,
        splits: u64,
        chunk: u64,
    ) -> R<()> {
        let op = inst.op;
        let math = r.math;
        let mt = Ty::Elem(math);
        let call = Expr::call;
        let width = super::row_cached::row_width(r.dtype, r.k, &r.access);
        let lowest = lowest(math);
        // The partials: [rows, splits, 3] of the math dtype.
        let part_name = format!("{}_partials", self.kernel.name);
        let decl = kir::BufferDecl {
            name: part_name.clone(),
            dtype: math,
            shape: vec![r.rows, splits, 3],
            kind: kir::BufferKind::Temp,
            tensor_map: None,
        };
        self.temps.push(decl.clone());
        let part_layout = Layout::int((r.rows * splits * 3) as i64, 1).map_err(internal)?;
        let at = |row: &Expr, s: Expr, c: u64| {
            add(mul(add(mul(row.clone(), int(splits)), s), int(3)), int(c))
        };
        let ValueDef::Inst(index) = self.l.g.values[inst.result.index()].def else {
            return Err(Retry::Fail(crate::LowerError::Internal(
                "a row composite without a statement".into(),
            )));
        };

        // The partials kernel: one partial per (split, row), then the merge-and-apply kernel
        // (two launches); or both in one cooperative launch where every block fits on the GPU
        // at once, the blocks of a row waiting for each other between them.
        let sms = u64::from(self.l.options.target.sms);
        let one = r.rows * splits <= COOPERATIVE_PER_SM * sms;
        let row = bx(Builtin::BidY);
        self.kernel.grid = [splits as u32, r.rows as u32, 1];
        self.kernel.block = [THREADS, 1, 1];
        let pp = self.param(&part_name);
        let part = self.tensor(Space::Global(pp), math, part_layout.clone());
        let start = self.let_("start", Ty::Idx, mul(bx(Builtin::BidX), int(chunk)));
        let tid = bx(Builtin::TidX);
        let mut depart = None;
        // In one launch, a norm's chunk keeps its first steps in shared memory between the
        // passes (read last by the backwards second pass, which finds the last ones in L2).
        // Measured on the H200 (runs 116, 125): layernorm_16x4m 0.2125 -> 0.2071 ms,
        // layernorm_16m 0.1323 -> 0.1295, rmsnorm_1m 0.1124 -> 0.1105; softmax_1m 2% slower
        // both times, so a softmax reads x again.
        let norm = matches!(op, OpKind::Rmsnorm | OpKind::Layernorm);
        let cache = match one && norm && r.pre.is_none() {
            true => self.x_cache(math, (chunk, width)),
            false => None,
        };
        let held = cache.as_ref().map_or(0, |c| c.vecs);
        if one {
            self.split_partial(op, &r, &start, (chunk, width), &part, &at, cache.as_ref())?;
            depart = Some(self.row_barrier(&row, r.rows, splits, &tid)?);
        } else {
            let mut p = Builder::new(self.l, format!("{}_partial", self.kernel.name), index);
            p.temps.push(decl);
            p.kernel.grid = [splits as u32, r.rows as u32, 1];
            p.kernel.block = [THREADS, 1, 1];
            let pp = p.param(&part_name);
            let part = p.tensor(Space::Global(pp), math, part_layout);
            let start = p.let_("start", Ty::Idx, mul(bx(Builtin::BidX), int(chunk)));
            // The partials kernel computes and stores a stored input (rule 9) through its
            // own tensor; the second reads it back.
            let rp = RowSpec {
                pre: r.pre.as_ref().map(|_| p.global(r.x, r.access.clone())),
                ..r.clone()
            };
            p.split_partial(op, &rp, &start, (chunk, width), &part, &at, None)?;
            p.temps.clear();
            self.pre.push(p.finish());
        }

        // Merge the row's partials (every thread, in split order), then apply.
        let load_x = |b: &mut Builder, r: &RowSpec, kx: Expr, read: Read| -> R<Expr> {
            b.coord = vec![kx, row.clone()];
            let e = b.row_x(r, read)?;
            Ok(b.let_("xv", mt, e))
        };
        let get = |i: &Expr, c: u64| Expr::load(&part, vec![at(&row, i.clone(), c)]);
        let n = lit(math, r.k as f64);
        // Each thread folds the partials i = tid, tid + 256, ... then the block reduces: the
        // same tree in every block of the row.
        let over =
            |b: &mut Builder, init: f64, f: &dyn Fn(&Expr) -> Expr, op: ReduceOp| -> R<Expr> {
                let acc = b.var("acc", mt, lit(math, init));
                let combine = if op == ReduceOp::Max {
                    Func::Max
                } else {
                    Func::Add
                };
                b.for_(
                    "i",
                    bx(Builtin::TidX),
                    int(splits),
                    bx(Builtin::NtidX),
                    false,
                    |b, i| {
                        b.assign(&acc, call(combine, vec![acc.clone(), f(&i)]));
                        Ok(())
                    },
                )?;
                let red = b.block_reduce(mt, op, acc);
                Ok(b.let_("merged", mt, red))
            };
        let (center, scale) = match op {
            OpKind::Softmax | OpKind::LogSoftmax => {
                let mx = over(self, lowest, &|i| get(i, 0), ReduceOp::Max)?;
                let m2 = mx.clone();
                let rescaled = move |i: &Expr| {
                    let w = super::row::exp_of(math, call(Func::Sub, vec![get(i, 0), m2.clone()]));
                    call(Func::Mul, vec![get(i, 1), w])
                };
                let sum = over(self, 0.0, &rescaled, ReduceOp::Sum)?;
                // log_softmax subtracts log(sum); softmax multiplies by 1 / sum.
                let f = if op == OpKind::LogSoftmax {
                    Func::Log
                } else {
                    Func::Recip
                };
                (mx, self.let_("stat", mt, call(f, vec![sum])))
            }
            OpKind::Rmsnorm => {
                let sum = over(self, 0.0, &|i| get(i, 0), ReduceOp::Sum)?;
                let var = call(Func::Div, vec![sum, n]);
                let rstd = self.let_("rstd", mt, rstd_of(var, r.eps, math));
                (lit(math, 0.0), rstd)
            }
            _ => {
                // mean = Σ nᵢ·meanᵢ / k; M2 = Σ M2ᵢ + nᵢ·(meanᵢ − mean)² (Chan et al.).
                let weighted = |i: &Expr| call(Func::Mul, vec![get(i, 2), get(i, 0)]);
                let tot = over(self, 0.0, &weighted, ReduceOp::Sum)?;
                let mean = self.let_("mu", mt, call(Func::Div, vec![tot, n.clone()]));
                let m = mean.clone();
                let spread = move |i: &Expr| {
                    let d = call(Func::Sub, vec![get(i, 0), m.clone()]);
                    let dd = call(Func::Mul, vec![d.clone(), d]);
                    call(
                        Func::Add,
                        vec![get(i, 1), call(Func::Mul, vec![get(i, 2), dd])],
                    )
                };
                let m2 = over(self, 0.0, &spread, ReduceOp::Sum)?;
                // At least 0: the partials' M2 may round below it (NaN with eps = 0).
                let var = call(
                    Func::Max,
                    vec![call(Func::Div, vec![m2, n]), lit(math, 0.0)],
                );
                let rstd = self.let_("rstd", mt, rstd_of(var, r.eps, math));
                (mean, rstd)
            }
        };
        if let Some(barrier) = depart {
            self.row_depart(barrier, &tid)?;
        }
        // In one launch, the chunk backwards: its last steps are still in L2.
        self.chunk_loop(
            &start,
            (chunk, r.k),
            &row,
            width,
            one,
            held,
            |b, kx, keep| {
                let x = match (&cache, keep) {
                    (Some(c), true) => {
                        // The coordinate the weight, bias and stores below are read at.
                        b.coord = vec![kx.clone(), row.clone()];
                        let at = Expr::idx(IdxOp::Sub, kx.clone(), start.clone());
                        b.let_("xv", mt, Expr::load(&c.tensor, vec![at]))
                    }
                    _ => load_x(b, &r, kx.clone(), Read::Load)?,
                };
                let y = match op {
                    // scale is log(sum) for log_softmax ([`Builder::composite_split`] above).
                    OpKind::LogSoftmax => call(
                        Func::Sub,
                        vec![call(Func::Sub, vec![x, center.clone()]), scale.clone()],
                    ),
                    // scale is 1 / sum for softmax.
                    OpKind::Softmax => call(
                        Func::Mul,
                        vec![
                            super::row::exp_of(math, call(Func::Sub, vec![x, center.clone()])),
                            scale.clone(),
                        ],
                    ),
                    OpKind::Rmsnorm => call(Func::Mul, vec![x, scale.clone()]),
                    _ => call(
                        Func::Mul,
                        vec![call(Func::Sub, vec![x, center.clone()]), scale.clone()],
                    ),
                };
                let y = b.row_affine(&r, y)?;
                b.row_store(&r, vec![kx, row.clone()], y)
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_stream_once_they_fill_the_gpu() {
        let choose = |rows, k, passes| RowSchedule::choose(rows, k, passes, 132);
        // 1024 rows of 64k: streamed, whatever the passes (runs 86–88 of bench/gpu/NOTES.md).
        for passes in [2, 3] {
            assert_eq!(
                choose(1024, 65536, passes),
                RowSchedule::Streamed { threads: 1024 }
            );
        }
        // Rows of at most 32768 elements keep the 512-thread stream from 2 rows per SM.
        assert_eq!(
            choose(600, 16384, 3),
            RowSchedule::Streamed { threads: 512 }
        );
        // Few long rows split: 16 rows of 4M into 33 chunks, 528 blocks (4 per SM, one
        // cooperative launch); 300 rows of 64k into 4 chunks (1200 blocks, about 8 per SM: two
        // launches).
        assert_eq!(
            choose(16, 1 << 22, 3),
            RowSchedule::Split {
                splits: 33,
                chunk: 125 * 1024
            }
        );
        assert_eq!(
            choose(300, 1 << 16, 3),
            RowSchedule::Split {
                splits: 4,
                chunk: 16 * 1024
            }
        );
        // Rows that fit in registers are cached.
        assert_eq!(
            choose(16384, 4096, 2),
            RowSchedule::BlockCached { threads: 256 }
        );
        assert_eq!(choose(16384, 1000, 3), RowSchedule::WarpCached);
    }

    #[test]
    fn the_x_cache_fits_four_blocks_on_every_target() {
        // 48 KiB on the H100; four blocks' share of the A100's 164 KiB and sm_86's 100 KiB.
        for (arch, want) in [("sm_90a", 48), ("sm_80", 39), ("sm_86", 23)] {
            let t = irc_target::Target::for_arch(arch);
            let bytes = cache_bytes(&t);
            assert_eq!(bytes / 1024, want, "{arch}");
            let per_sm = t.max_dynamic_shared_bytes + 1024;
            assert!(
                COOPERATIVE_PER_SM * (bytes + CACHE_SLACK) <= per_sm,
                "{arch}"
            );
        }
    }
}
