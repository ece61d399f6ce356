//! The row-composite template (softmax, rmsnorm, layernorm) over any axis, with two schedules:
//! the row cached in registers (a warp per row up to 1024 elements, a block beyond) or
//! streamed in passes.

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
        let out = self.output(inst.result, &access)?;
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
            out: out.clone(),
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
        self.rows(rows, |b, row| {
            let xf = |b: &mut Self| -> R<Expr> {
                let e = b.value_at(x, &access)?;
                Ok(cast_to(math, dtype, e))
            };
            let n = lit(math, k as f64);
            if op == OpKind::Softmax {
                let mx = b.row_reduce(
                    k,
                    &row,
                    width,
                    math,
                    ReduceOp::Max,
                    f64::NEG_INFINITY,
                    |b, _| xf(b),
                )?;
                let mx = b.let_("max", Ty::Elem(math), mx);
                let sum = b.row_reduce(k, &row, width, math, ReduceOp::Sum, 0.0, |b, _| {
                    let e = xf(b)?;
                    Ok(call(Func::Exp, vec![call(Func::Sub, vec![e, mx.clone()])]))
                })?;
                let sum = b.let_("sum", Ty::Elem(math), sum);
                let row2 = row.clone();
                return b.row_loop(k, &row2.clone(), width, |b, kv| {
                    b.coord = vec![kv.clone(), row2.clone()];
                    let e = xf(b)?;
                    let y = call(
                        Func::Div,
                        vec![call(Func::Exp, vec![call(Func::Sub, vec![e, mx])]), sum],
                    );
                    b.store_elem(&out, vec![kv, row2], cast_to(dtype, math, y))
                });
            }
            let mean = if op == OpKind::Layernorm {
                let tot = b.row_reduce(k, &row, width, math, ReduceOp::Sum, 0.0, |b, _| xf(b))?;
                b.let_(
                    "mean",
                    Ty::Elem(math),
                    call(Func::Div, vec![tot, n.clone()]),
                )
            } else {
                lit(math, 0.0)
            };
            let m2 = mean.clone();
            let sq = b.row_reduce(k, &row, width, math, ReduceOp::Sum, 0.0, |b, _| {
                let e = xf(b)?;
                let d = if op == OpKind::Layernorm {
                    b.let_("d", Ty::Elem(math), call(Func::Sub, vec![e, m2]))
                } else {
                    e
                };
                Ok(call(Func::Mul, vec![d.clone(), d]))
            })?;
            let var = call(Func::Div, vec![sq, n]);
            let rstd = b.let_("rstd", Ty::Elem(math), rstd_of(var, eps, math));
            let row2 = row.clone();
            b.row_loop(k, &row2.clone(), width, |b, kv| {
                b.coord = vec![kv.clone(), row2.clone()];
                let e = xf(b)?;
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
                b.store_elem(&out, vec![kv, row2], cast_to(dtype, math, y))
            })
        })
    }
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
    pub(crate) out: String,
    pub(crate) w: Option<ValueId>,
    pub(crate) bias: Option<ValueId>,
}
