//! The row-composite template (softmax, log_softmax, rmsnorm, layernorm) over any axis: the
//! row cached in registers (a warp per row up to 1024 elements, a block beyond), split over
//! several blocks (`split.rs`), or streamed by a block per row in two passes — the
//! statistics (softmax's running max and rescaled sum, layernorm's shifted moments, rmsnorm's
//! mean square), then the normalized row (measured on the H100, `bench/gpu/NOTES.md` run 91:
//! softmax_64k 0.150 → 0.144 ms and groupnorm_32 0.040 → 0.035 against three passes).

use super::config::{Config, RowConfig, row_heuristic};
use crate::LowerError;
use crate::lower::*;
use irc_ir::infer::normalize_axis;
use irc_ir::{Attr, DType, Inst, OpKind, ValueId};
use irc_kir::{Builtin, Expr, Func, ReduceOp, Ty};
use irc_layout::Layout;

impl Builder<'_, '_> {
    pub(crate) fn composite(&mut self, inst: &Inst) -> R<()> {
        let x = inst.operands[0];
        let xt = self.ty(x).clone();
        let axis_attr = inst.attrs.get("axis").and_then(Attr::as_int).unwrap_or(-1);
        let axis = normalize_axis(axis_attr, xt.rank())
            .ok_or_else(|| Retry::Fail(LowerError::Internal("axis out of range".into())))?;
        let st = row_major(&xt.shape);
        let k = xt.shape[axis];
        let kept: Vec<(u64, i64)> = (0..xt.rank())
            .filter(|&d| d != axis)
            .map(|d| (xt.shape[d], st[d]))
            .collect();
        let rows = xt.numel() / k;
        let access = concat(&[
            dims_layout(&[(k, st[axis])]).map_err(internal)?,
            dims_layout(&kept).map_err(internal)?,
        ])?;
        let param_access = concat(&[
            Layout::int(k as i64, 1).map_err(internal)?,
            Layout::int(rows as i64, 0).map_err(internal)?,
        ])?;
        let math = math_dtype(xt.dtype);
        let dtype = xt.dtype;
        let eps =
            inst.attrs
                .get("eps")
                .and_then(Attr::as_f64)
                .unwrap_or(if inst.op == OpKind::Rmsnorm {
                    dtype.epsilon().unwrap_or(1e-6)
                } else {
                    1e-5
                });
        // The stores: the row's input (the policy's rule 9), the composite itself or a view of
        // it, and its epilogue's values, each at the row's coordinate.
        let mut pre = None;
        let mut epilogue = vec![];
        let mut direct = false;
        let mut view_roots = vec![];
        for root in self.roots.clone() {
            if root == x && root != inst.result {
                pre = Some(self.global(x, access.clone()));
            } else if self.is_view_of(root, inst.result) {
                direct = true;
                if root != inst.result {
                    view_roots.push(root);
                }
            } else {
                epilogue.push((root, self.global(root, access.clone())));
            }
        }
        let out = if direct || epilogue.is_empty() {
            Some(self.output(inst.result, &access)?)
        } else {
            None
        };
        // Views of the composite stored in buffers of their own, beside its own store (which,
        // where the composite has no buffer, is the first of them: `output`).
        let mut views = vec![];
        let own = self.l.buffer_of.contains_key(&inst.result);
        for (i, root) in view_roots.into_iter().enumerate() {
            if own || i > 0 {
                views.extend(self.view_store(root, inst.result, &access)?);
            }
        }
        let (w, bias) = (inst.operands.get(1).copied(), inst.operands.get(2).copied());
        let spec = RowSpec {
            x,
            k,
            rows,
            access: access.clone(),
            param_access: param_access.clone(),
            math,
            dtype,
            eps,
            out,
            views,
            result: inst.result,
            pre,
            epilogue,
            w,
            bias,
        };
        let schedule = match self.config {
            Some(Config::Row(c)) => c,
            _ => row_heuristic(
                rows,
                k,
                super::problem::composite_passes(inst.op),
                u64::from(self.l.options.target.sms),
            ),
        };
        let threads = match schedule {
            RowConfig::Split { chunk } => {
                return self.composite_split(inst, spec, k.div_ceil(chunk), chunk);
            }
            RowConfig::Warp { warps, lanes } => {
                return self.composite_cached(inst.op, spec, (true, lanes), warps);
            }
            RowConfig::Block { threads } => {
                return self.composite_cached(inst.op, spec, (false, None), threads);
            }
            RowConfig::Streamed { threads } => threads,
        };
        self.kernel.block = [threads as u32, 1, 1];
        let width = super::row_cached::row_width(dtype, k, &access);
        let op = inst.op;
        let call = |f: Func, args: Vec<Expr>| Expr::call(f, args);
        let r = &spec;
        self.rows(rows, |b, row| {
            let xf = |b: &mut Self, read: Read| -> R<Expr> { b.row_x(r, read) };
            let n = lit(math, k as f64);
            if matches!(op, OpKind::Softmax | OpKind::LogSoftmax) {
                let (mx, sum) = b.online_softmax(r, k, &row, width)?;
                // log_softmax subtracts log(sum); softmax multiplies by 1 / sum.
                let log = op == OpKind::LogSoftmax;
                let (name, f) = if log {
                    ("lse", Func::Log)
                } else {
                    ("inv", Func::Recip)
                };
                let stat = b.let_(name, Ty::Elem(math), call(f, vec![sum]));
                let row2 = row.clone();
                return b.row_loop(k, &row2.clone(), width, |b, kv| {
                    b.coord = vec![kv.clone(), row2.clone()];
                    let e = xf(b, Read::Load)?;
                    let d = call(Func::Sub, vec![e, mx]);
                    let y = if log {
                        call(Func::Sub, vec![d, stat])
                    } else {
                        call(Func::Mul, vec![exp_of(math, d), stat])
                    };
                    b.row_store(r, vec![kv, row2], y)
                });
            }
            // Layernorm's moments in one pass; rmsnorm's mean square.
            let (mean, rstd) = if op == OpKind::Layernorm {
                b.shifted_moments(r, k, &row, width)?
            } else {
                let sq = b.row_reduce(k, &row, width, math, ReduceOp::Sum, 0.0, |b, _| {
                    let e = xf(b, Read::Store)?;
                    Ok(call(Func::Mul, vec![e.clone(), e]))
                })?;
                let var = call(Func::Div, vec![sq, n]);
                let rstd = b.let_("rstd", Ty::Elem(math), rstd_of(var, eps, math));
                (lit(math, 0.0), rstd)
            };
            let row2 = row.clone();
            b.row_loop(k, &row2.clone(), width, |b, kv| {
                b.coord = vec![kv.clone(), row2.clone()];
                let e = xf(b, Read::Load)?;
                let centered = if op == OpKind::Layernorm {
                    call(Func::Sub, vec![e, mean])
                } else {
                    e
                };
                let mut y = call(Func::Mul, vec![centered, rstd]);
                if let Some(w) = w {
                    let wv = b.value_at(w, &param_access)?;
                    y = call(Func::Mul, vec![y, cast_to(math, b.ty(w).dtype, wv)]);
                }
                if let Some(bias) = bias {
                    let bv = b.value_at(bias, &param_access)?;
                    y = call(Func::Add, vec![y, cast_to(math, b.ty(bias).dtype, bv)]);
                }
                b.row_store(r, vec![kv, row2], y)
            })
        })
    }

    /// Softmax's row statistics in one pass (the streamed schedule): the block's
    /// [`OnlineSoftmax`] of the row. Returns `(max, sum)`.
    fn online_softmax(&mut self, r: &RowSpec, k: u64, row: &Expr, width: u64) -> R<(Expr, Expr)> {
        let o = OnlineSoftmax::new(self, r.math);
        let (o2, row2) = (o.clone(), row.clone());
        self.row_loop(k, row, width, move |b, kv| {
            b.coord = vec![kv, row2];
            let x = b.row_x(r, Read::Store)?;
            o2.add(b, x);
            Ok(())
        })?;
        o.merge(self)
    }

    /// Layernorm's row statistics in one pass (the streamed schedule): the block's
    /// [`Moments`] of the row; `var = M2 / k`. Returns `(mean, rstd)`.
    fn shifted_moments(&mut self, r: &RowSpec, k: u64, row: &Expr, width: u64) -> R<(Expr, Expr)> {
        let (math, call) = (r.math, Expr::call);
        // Each thread's shift: its first value (`row_loop` gives thread t the vectors t,
        // t + threads, ...; every thread has one, streamed rows being longer than 8192).
        let threads = u64::from(self.kernel.block[0]);
        let first = match (threads - 1) * width < k {
            true => mul(bx(Builtin::TidX), int(width)),
            false => Expr::Int(0),
        };
        self.coord = vec![first, row.clone()];
        let c = self.row_x(r, Read::Compute)?;
        let m = Moments::new(self, math, Some(c));
        let (m2, row2) = (m.clone(), row.clone());
        self.row_loop(k, row, width, move |b, kv| {
            b.coord = vec![kv, row2];
            let x = b.row_x(r, Read::Store)?;
            m2.add(b, x);
            Ok(())
        })?;
        let (mean, m2, _) = m.merge(self, Some(lit(math, k as f64)))?;
        let var = call(
            Func::Max,
            vec![
                call(Func::Div, vec![m2, lit(math, k as f64)]),
                lit(math, 0.0),
            ],
        );
        let rstd = self.let_("rstd", Ty::Elem(math), rstd_of(var, r.eps, math));
        Ok((mean, rstd))
    }

    /// Whether `root` is `v` or a chain of views of it.
    fn is_view_of(&self, root: ValueId, v: ValueId) -> bool {
        let mut u = root;
        while u != v {
            match self.def(u) {
                Some(inst) if is_view(inst.op) => u = inst.operands[0],
                _ => return false,
            }
        }
        true
    }

    /// The row's input at the current coordinate, in the math dtype. Where the kernel stores
    /// the input (rule 9), [`Read::Store`] computes and stores it (the kernel's first pass over
    /// the row), [`Read::Compute`] computes it, and [`Read::Load`] reads it back.
    pub(crate) fn row_x(&mut self, r: &RowSpec, read: Read) -> R<Expr> {
        let e = match (&r.pre, read) {
            (Some(out), Read::Store | Read::Compute) => {
                let e = self.compute_at(r.x, &r.access, false)?;
                let wide = self.val_dtype(r.x);
                let e = self.let_("xs", Ty::Elem(wide), e);
                if read == Read::Store {
                    let coord = self.coord.clone();
                    self.store_elem(out, coord, cast_to(r.dtype, wide, e.clone()))?;
                }
                e
            }
            _ => self.value_at(r.x, &r.access)?,
        };
        Ok(cast_to(r.math, r.dtype, e))
    }

    /// Stores the composite's value `y` (in the math dtype) at the row coordinate `coord`, and
    /// the epilogue computed from it (the composite's value given to it through an override,
    /// as a matmul's epilogue is given its accumulator).
    pub(crate) fn row_store(&mut self, r: &RowSpec, coord: Vec<Expr>, y: Expr) -> R<()> {
        let y = cast_to(r.dtype, r.math, y);
        if r.epilogue.is_empty() && r.views.is_empty() {
            let out = r.out.as_deref().ok_or_else(|| {
                Retry::Fail(LowerError::Internal(
                    "a row kernel that stores nothing".into(),
                ))
            })?;
            return self.store_elem(out, coord, y);
        }
        let y = self.let_("y", Ty::Elem(r.dtype), y);
        for out in r.out.iter().chain(&r.views) {
            self.store_elem(out, coord.clone(), y.clone())?;
        }
        if r.epilogue.is_empty() {
            return Ok(());
        }
        self.coord = coord.clone();
        let yw = self.widen(r.dtype, y);
        self.overrides.insert(r.result, (r.access.clone(), yw));
        // The views of the composite that this kernel stores are computed through the view
        // from the value in hand, not read back from the memory just written.
        let views: Vec<ValueId> = (self.roots.iter().copied())
            .filter(|&v| v != r.result && self.is_view_of(v, r.result))
            .collect();
        let before = std::mem::take(&mut self.unstored);
        self.unstored = before.iter().copied().chain(views).collect();
        for (root, out) in &r.epilogue {
            let e = self.compute_at(*root, &r.access, false)?;
            let wide = self.val_dtype(*root);
            let e = self.let_("ep", Ty::Elem(wide), e);
            self.overrides.insert(*root, (r.access.clone(), e.clone()));
            let d = self.ty(*root).dtype;
            self.store_elem(out, coord.clone(), cast_to(d, wide, e))?;
        }
        self.unstored = before;
        self.overrides.remove(&r.result);
        for (root, _) in &r.epilogue {
            self.overrides.remove(root);
        }
        Ok(())
    }
}

/// How a row template reads the row's input ([`Builder::row_x`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// From memory (or computed inline, when the kernel does not store it).
    Load,
    /// Computed, and stored where this kernel stores it.
    Store,
    /// Computed, not stored (before the pass that stores it).
    Compute,
}

/// `1 / sqrt(var + eps)`, as the reference interpreter computes it.
pub(crate) fn rstd_of(var: Expr, eps: f64, math: DType) -> Expr {
    let call = Expr::call;
    call(
        Func::Recip,
        vec![call(
            Func::Sqrt,
            vec![call(Func::Add, vec![var, lit(math, eps)])],
        )],
    )
}

/// A row composite: `x` read at `access` (`(k, row)` → index), `rows` rows of `k` elements.
#[derive(Clone)]
pub(crate) struct RowSpec {
    pub(crate) x: ValueId,
    pub(crate) k: u64,
    pub(crate) rows: u64,
    pub(crate) access: Layout,
    /// `(k, row)` → index of the weight and bias (`[k]`).
    pub(crate) param_access: Layout,
    pub(crate) math: DType,
    pub(crate) dtype: DType,
    pub(crate) eps: f64,
    /// The composite's own store (its buffer, or a result view of it), if it has one.
    pub(crate) out: Option<String>,
    /// Further views of the composite stored in buffers of their own, through the views'
    /// inverse layouts (the same value at the row's coordinate).
    pub(crate) views: Vec<String>,
    /// The composite's value.
    pub(crate) result: ValueId,
    /// The row's input `x`, stored by this kernel where it is first computed (rule 9).
    pub(crate) pre: Option<String>,
    /// Epilogue values computed from the composite at the row's coordinate, and their stores.
    pub(crate) epilogue: Vec<(ValueId, String)>,
    pub(crate) w: Option<ValueId>,
    pub(crate) bias: Option<ValueId>,
}

/// A thread's running moments of the values it is given, for a block's `(mean, M2, n)` in
/// one pass: the thread sums `d = x − c` and `d²`, shifted by a value of its own data `c` (the
/// one given, else the first it is given: so that the sums do not cancel however far the mean is from 0:
/// shifting by one value for the whole row lost 2-6% of the variance's precision on rows of
/// N(0,1) values with one 1000), then the block merges the threads' `(n, mean, M2)` by Chan et
/// al.: `mean = Σ nᵢ·meanᵢ / n`, `M2 = Σ M2ᵢ + nᵢ·(meanᵢ − mean)²`.
#[derive(Clone)]
pub(crate) struct Moments {
    math: DType,
    /// `c` is given, not the first value.
    fixed: bool,
    c: Expr,
    s1: Expr,
    s2: Expr,
    n: Expr,
}

impl Moments {
    /// Moments shifted by `shift` (a value of the thread's data), else by its first value
    /// (a select per value).
    pub(crate) fn new(b: &mut Builder<'_, '_>, math: DType, shift: Option<Expr>) -> Moments {
        let mt = Ty::Elem(math);
        let (c, fixed) = match shift {
            Some(c) => (b.let_("shift", mt, c), true),
            None => (b.var("shift", mt, lit(math, 0.0)), false),
        };
        Moments {
            math,
            fixed,
            c,
            s1: b.var("s", mt, lit(math, 0.0)),
            s2: b.var("q", mt, lit(math, 0.0)),
            n: b.var("n", mt, lit(math, 0.0)),
        }
    }

    /// One value `x` (in the math dtype).
    pub(crate) fn add(&self, b: &mut Builder<'_, '_>, x: Expr) {
        let (math, call) = (self.math, Expr::call);
        let mt = Ty::Elem(math);
        let x = b.let_("xv", mt, x);
        if !self.fixed {
            let first = call(Func::Eq, vec![self.n.clone(), lit(math, 0.0)]);
            b.assign(
                &self.c,
                call(Func::Select, vec![first, x.clone(), self.c.clone()]),
            );
        }
        let d = b.let_("d", mt, call(Func::Sub, vec![x, self.c.clone()]));
        b.assign(&self.s1, call(Func::Add, vec![self.s1.clone(), d.clone()]));
        let dd = call(Func::Mul, vec![d.clone(), d]);
        b.assign(&self.s2, call(Func::Add, vec![self.s2.clone(), dd]));
        b.assign(
            &self.n,
            call(Func::Add, vec![self.n.clone(), lit(math, 1.0)]),
        );
    }

    /// The block's `(mean, M2, n)` (every thread of the block: two block reductions, one after
    /// the other, and a third for `n` unless the block's count is given).
    pub(crate) fn merge(
        self,
        b: &mut Builder<'_, '_>,
        total: Option<Expr>,
    ) -> R<(Expr, Expr, Expr)> {
        let (math, call) = (self.math, Expr::call);
        let mt = Ty::Elem(math);
        // The thread's mean and M2 (a thread without values: weight 0, M2 0).
        let n1 = b.let_(
            "n1",
            mt,
            call(Func::Max, vec![self.n.clone(), lit(math, 1.0)]),
        );
        let mine = call(
            Func::Add,
            vec![self.c, call(Func::Div, vec![self.s1.clone(), n1.clone()])],
        );
        let mine = b.let_("tm", mt, mine);
        let sq = call(
            Func::Div,
            vec![call(Func::Mul, vec![self.s1.clone(), self.s1]), n1],
        );
        let m2 = call(Func::Sub, vec![self.s2, sq]);
        let m2 = b.let_("tq", mt, call(Func::Max, vec![m2, lit(math, 0.0)]));
        let n = match total {
            Some(n) => n,
            None => b.block_reduce(mt, ReduceOp::Sum, self.n.clone()),
        };
        let n = b.let_("bn", mt, n);
        let tot = b.block_reduce(
            mt,
            ReduceOp::Sum,
            call(Func::Mul, vec![self.n.clone(), mine.clone()]),
        );
        let n_1 = call(Func::Max, vec![n.clone(), lit(math, 1.0)]);
        let mean = b.let_("mean", mt, call(Func::Div, vec![tot, n_1]));
        let dm = call(Func::Sub, vec![mine, mean.clone()]);
        let spread = call(
            Func::Add,
            vec![
                m2,
                call(
                    Func::Mul,
                    vec![self.n, call(Func::Mul, vec![dm.clone(), dm])],
                ),
            ],
        );
        let m2 = b.block_reduce(mt, ReduceOp::Sum, spread);
        let m2 = b.let_("m2", mt, m2);
        Ok((mean, m2, n))
    }
}

/// `log2(e)`: softmax's `exp(x - max)` is `exp2((x - max)·log2e)` on `ex2`.
const LOG2E: f64 = std::f64::consts::LOG2_E;

/// `exp(d)` in the math dtype: in f32, `exp2(d·log2e)` (PTX `ex2.approx`, one MUFU
/// instruction, where `expf` takes about eight); the exact exponential otherwise. Callers take
/// the difference `d = x − max` first: with a row masked by the type's lowest value,
/// `x·log2e − max·log2e` would be `inf − inf`.
pub(crate) fn exp_of(math: DType, d: Expr) -> Expr {
    if math == DType::F32 {
        Expr::call(
            Func::Exp2,
            vec![Expr::call(Func::Mul, vec![d, lit(math, LOG2E)])],
        )
    } else {
        Expr::call(Func::Exp, vec![d])
    }
}

/// A thread's running softmax statistics of the values it is given: the max `m` and the sum
/// `s` of `exp(x − m)`, rescaled when `m` grows (one exponential a value); then the block's
/// max `M` and `Σ s·exp(m − M)`. `m` starts at the math type's lowest finite value, so a
/// thread without values adds 0 and a row of that value is uniform.
#[derive(Clone)]
pub(crate) struct OnlineSoftmax {
    math: DType,
    m: Expr,
    s: Expr,
}

impl OnlineSoftmax {
    pub(crate) fn new(b: &mut Builder<'_, '_>, math: DType) -> OnlineSoftmax {
        let mt = Ty::Elem(math);
        OnlineSoftmax {
            math,
            m: b.var("m", mt, lit(math, super::split::lowest(math))),
            s: b.var("s", mt, lit(math, 0.0)),
        }
    }

    /// One value `x` (in the math dtype), with one exponential: of `m` and `x` one is the new
    /// max, so one of the two factors is `exp(0) = 1` and the other is `e = exp(-|x − m|)`.
    /// When `x` grows the max, `s ← s·e + 1`; else `s ← s + e`. A NaN `x` makes `s` and `m`
    /// NaN (as two exponentials did); an `x` of `-inf` adds 0.
    pub(crate) fn add(&self, b: &mut Builder<'_, '_>, x: Expr) {
        let (mt, call) = (Ty::Elem(self.math), Expr::call);
        let x = b.let_("xv", mt, x);
        let d = call(Func::Sub, vec![x.clone(), self.m.clone()]);
        let e = b.let_(
            "e",
            mt,
            exp_of(self.math, call(Func::Neg, vec![call(Func::Abs, vec![d])])),
        );
        let one = lit(self.math, 1.0);
        let grown = call(
            Func::Add,
            vec![call(Func::Mul, vec![self.s.clone(), e.clone()]), one],
        );
        let kept = call(Func::Add, vec![self.s.clone(), e]);
        let grows = call(Func::Gt, vec![x.clone(), self.m.clone()]);
        b.assign(&self.s, call(Func::Select, vec![grows, grown, kept]));
        b.assign(&self.m, call(Func::Max, vec![self.m.clone(), x]));
    }

    /// The block's `(max, sum)` (every thread of the block).
    pub(crate) fn merge(self, b: &mut Builder<'_, '_>) -> R<(Expr, Expr)> {
        let (mt, call) = (Ty::Elem(self.math), Expr::call);
        let mx = b.block_reduce(mt, ReduceOp::Max, self.m.clone());
        let mx = b.let_("max", mt, mx);
        let mine = call(
            Func::Mul,
            vec![
                self.s,
                exp_of(self.math, call(Func::Sub, vec![self.m, mx.clone()])),
            ],
        );
        let sum = b.block_reduce(mt, ReduceOp::Sum, mine);
        Ok((mx, b.let_("sum", mt, sum)))
    }
}
