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
use irc_kir::{Expr, Func, ReduceOp, Ty};
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
        for root in self.roots.clone() {
            if root == x && root != inst.result {
                pre = Some(self.global(x, access.clone()));
            } else if self.is_view_of(root, inst.result) {
                direct = true;
            } else {
                epilogue.push((root, self.global(root, access.clone())));
            }
        }
        let out = if direct || epilogue.is_empty() {
            Some(self.output(inst.result, &access)?)
        } else {
            None
        };
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
            RowConfig::Warp { warps } => return self.composite_cached(inst.op, spec, true, warps),
            RowConfig::Block { threads } => {
                return self.composite_cached(inst.op, spec, false, threads);
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
                let lse = (op == OpKind::LogSoftmax)
                    .then(|| b.let_("lse", Ty::Elem(math), call(Func::Log, vec![sum.clone()])));
                let row2 = row.clone();
                return b.row_loop(k, &row2.clone(), width, |b, kv| {
                    b.coord = vec![kv.clone(), row2.clone()];
                    let e = xf(b, Read::Load)?;
                    let d = call(Func::Sub, vec![e, mx]);
                    let y = match lse {
                        Some(lse) => call(Func::Sub, vec![d, lse]),
                        None => call(Func::Div, vec![call(Func::Exp, vec![d]), sum]),
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

    /// Softmax's row statistics in one pass (the streamed schedule): each thread keeps a
    /// running max `m` and the sum `s` of `exp(x − m)`, rescaled when `m` grows; then the
    /// block's max `M` and `Σ s·exp(m − M)`. Returns `(M, sum)`.
    fn online_softmax(&mut self, r: &RowSpec, k: u64, row: &Expr, width: u64) -> R<(Expr, Expr)> {
        let (math, call) = (r.math, Expr::call);
        let mt = Ty::Elem(math);
        let m = self.var("m", mt, lit(math, super::split::lowest(math)));
        let s = self.var("s", mt, lit(math, 0.0));
        let (m2, s2, row2) = (m.clone(), s.clone(), row.clone());
        self.row_loop(k, row, width, move |b, kv| {
            b.coord = vec![kv, row2];
            let x = b.row_x(r, Read::Store)?;
            let x = b.let_("xv", mt, x);
            let mn = b.let_("mn", mt, call(Func::Max, vec![m2.clone(), x.clone()]));
            let rescale = call(
                Func::Exp,
                vec![call(Func::Sub, vec![m2.clone(), mn.clone()])],
            );
            let ex = call(Func::Exp, vec![call(Func::Sub, vec![x, mn.clone()])]);
            let v = call(
                Func::Add,
                vec![call(Func::Mul, vec![s2.clone(), rescale]), ex],
            );
            b.assign(&s2, v);
            b.assign(&m2, mn);
            Ok(())
        })?;
        let mx = self.block_reduce(mt, ReduceOp::Max, m.clone());
        let mx = self.let_("max", mt, mx);
        let mine = call(
            Func::Mul,
            vec![
                s,
                call(Func::Exp, vec![call(Func::Sub, vec![m, mx.clone()])]),
            ],
        );
        let sum = self.block_reduce(mt, ReduceOp::Sum, mine);
        Ok((mx, self.let_("sum", mt, sum)))
    }

    /// Layernorm's row statistics in one pass (the streamed schedule): sums of `d = x − c`
    /// and `d²`, shifted by the row's first element `c` (so that they do not cancel when the
    /// mean is large against the spread); `mean = c + Σd/k`, `var = (Σd² − (Σd)²/k)/k` (at
    /// least 0). Returns `(mean, rstd)`.
    fn shifted_moments(&mut self, r: &RowSpec, k: u64, row: &Expr, width: u64) -> R<(Expr, Expr)> {
        let (math, call) = (r.math, Expr::call);
        let mt = Ty::Elem(math);
        self.coord = vec![Expr::Int(0), row.clone()];
        let c = self.row_x(r, Read::Compute)?;
        let c = self.let_("shift", mt, c);
        let s1 = self.var("s", mt, lit(math, 0.0));
        let s2 = self.var("q", mt, lit(math, 0.0));
        let (a1, a2, c2, row2) = (s1.clone(), s2.clone(), c.clone(), row.clone());
        self.row_loop(k, row, width, move |b, kv| {
            b.coord = vec![kv, row2];
            let x = b.row_x(r, Read::Store)?;
            let d = b.let_("d", mt, call(Func::Sub, vec![x, c2]));
            b.assign(&a1, call(Func::Add, vec![a1.clone(), d.clone()]));
            let dd = call(Func::Mul, vec![d.clone(), d]);
            b.assign(&a2, call(Func::Add, vec![a2.clone(), dd]));
            Ok(())
        })?;
        let n = lit(math, k as f64);
        let t1 = self.block_reduce(mt, ReduceOp::Sum, s1);
        let t1 = self.let_("t1", mt, t1);
        let t2 = self.block_reduce(mt, ReduceOp::Sum, s2);
        let mean = call(
            Func::Add,
            vec![c, call(Func::Div, vec![t1.clone(), n.clone()])],
        );
        let mean = self.let_("mean", mt, mean);
        let sq = call(
            Func::Div,
            vec![call(Func::Mul, vec![t1.clone(), t1]), n.clone()],
        );
        let var = call(
            Func::Max,
            vec![
                call(Func::Div, vec![call(Func::Sub, vec![t2, sq]), n]),
                lit(math, 0.0),
            ],
        );
        let rstd = self.let_("rstd", mt, rstd_of(var, r.eps, math));
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
        if r.epilogue.is_empty() {
            let out = r.out.as_deref().ok_or_else(|| {
                Retry::Fail(LowerError::Internal(
                    "a row kernel that stores nothing".into(),
                ))
            })?;
            return self.store_elem(out, coord, y);
        }
        let y = self.let_("y", Ty::Elem(r.dtype), y);
        if let Some(out) = &r.out {
            self.store_elem(out, coord.clone(), y.clone())?;
        }
        self.coord = coord.clone();
        let yw = self.widen(r.dtype, y);
        self.overrides.insert(r.result, (r.access.clone(), yw));
        for (root, out) in &r.epilogue {
            let e = self.compute_at(*root, &r.access, false)?;
            let wide = self.val_dtype(*root);
            let e = self.let_("ep", Ty::Elem(wide), e);
            self.overrides.insert(*root, (r.access.clone(), e.clone()));
            let d = self.ty(*root).dtype;
            self.store_elem(out, coord.clone(), cast_to(d, wide, e))?;
        }
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
    /// Computed, not stored (a kernel that runs before the store).
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
    /// The composite's value.
    pub(crate) result: ValueId,
    /// The row's input `x`, stored by this kernel where it is first computed (rule 9).
    pub(crate) pre: Option<String>,
    /// Epilogue values computed from the composite at the row's coordinate, and their stores.
    pub(crate) epilogue: Vec<(ValueId, String)>,
    pub(crate) w: Option<ValueId>,
    pub(crate) bias: Option<ValueId>,
}
