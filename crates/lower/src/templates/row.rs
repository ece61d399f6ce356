//! The row-composite template (softmax, rmsnorm, layernorm) over any axis, with two schedules:
//! the row cached in registers (a warp per row up to 1024 elements, a block beyond) or
//! streamed in passes.

use super::config::{Config, RowConfig, row_heuristic};
use crate::LowerError;
use crate::lower::*;
use irc_ir::infer::normalize_axis;
use irc_ir::{Attr, DType, Inst, OpKind, ValueId};
use irc_kir::{Builtin, Expr, Func, IdxOp, ReduceOp, Space, Stmt, Ty};
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
            _ => row_heuristic(rows, k, u64::from(self.l.options.target.sms)),
        };
        let threads = match schedule {
            RowConfig::Split { chunk } => {
                return self.composite_split(inst, spec, k.div_ceil(chunk), chunk);
            }
            RowConfig::Warp { rows } => return self.composite_cached(inst.op, spec, true, rows),
            RowConfig::Block { threads } => {
                return self.composite_cached(inst.op, spec, false, threads);
            }
            RowConfig::Streamed { threads } => threads,
        };
        self.kernel.block = [threads as u32, 1, 1];
        let op = inst.op;
        let call = |f: Func, args: Vec<Expr>| Expr::call(f, args);
        self.rows(rows, |b, row| {
            let xf = |b: &mut Self| -> R<Expr> {
                let e = b.value_at(x, &access)?;
                Ok(cast_to(math, dtype, e))
            };
            let n = lit(math, k as f64);
            if op == OpKind::Softmax {
                let mx =
                    b.row_reduce(k, &row, math, ReduceOp::Max, f64::NEG_INFINITY, |b, _| {
                        xf(b)
                    })?;
                let mx = b.let_("max", Ty::Elem(math), mx);
                let sum = b.row_reduce(k, &row, math, ReduceOp::Sum, 0.0, |b, _| {
                    let e = xf(b)?;
                    Ok(call(Func::Exp, vec![call(Func::Sub, vec![e, mx.clone()])]))
                })?;
                let sum = b.let_("sum", Ty::Elem(math), sum);
                let row2 = row.clone();
                return b.row_loop(k, |b, kv| {
                    b.coord = vec![kv.clone(), row2.clone()];
                    let e = xf(b)?;
                    let y = call(
                        Func::Div,
                        vec![call(Func::Exp, vec![call(Func::Sub, vec![e, mx])]), sum],
                    );
                    b.out.push(Stmt::Store {
                        tensor: out,
                        coord: vec![kv, row2],
                        value: cast_to(dtype, math, y),
                    });
                    Ok(())
                });
            }
            let mean = if op == OpKind::Layernorm {
                let tot = b.row_reduce(k, &row, math, ReduceOp::Sum, 0.0, |b, _| xf(b))?;
                b.let_(
                    "mean",
                    Ty::Elem(math),
                    call(Func::Div, vec![tot, n.clone()]),
                )
            } else {
                lit(math, 0.0)
            };
            let m2 = mean.clone();
            let sq = b.row_reduce(k, &row, math, ReduceOp::Sum, 0.0, |b, _| {
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
            b.row_loop(k, |b, kv| {
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
                b.out.push(Stmt::Store {
                    tensor: out,
                    coord: vec![kv, row2],
                    value: cast_to(dtype, math, y),
                });
                Ok(())
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

impl Builder<'_, '_> {
    /// softmax / rmsnorm / layernorm with the row held in registers: `x` is read once. Rows of
    /// up to 1024 elements take one warp each (8 rows per block, warp reductions only); longer
    /// rows one block each. Each thread holds `ceil(k / threads per row)` <= 32 values.
    ///
    /// `warp_mode`: a warp per row and `n` rows per block; else a block of `n` threads per row.
    pub(crate) fn composite_cached(
        &mut self,
        op: OpKind,
        r: RowSpec,
        warp_mode: bool,
        n: u64,
    ) -> R<()> {
        let group = if warp_mode { 32 } else { n };
        let per_thread = r.k.div_ceil(group);
        let rows_per_block = if warp_mode { n } else { 1 };
        self.kernel.block = [(group * rows_per_block) as u32, 1, 1];
        self.kernel.grid = [
            r.rows.div_ceil(rows_per_block).clamp(1, MAX_BLOCKS) as u32,
            1,
            1,
        ];
        let cache = self.tensor(
            Space::Registers,
            r.math,
            Layout::int(per_thread as i64, 1).map_err(internal)?,
        );
        let (lane, start, step) = if warp_mode {
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
            (
                lane,
                add(mul(bx(Builtin::BidX), int(rows_per_block)), warp),
                mul(bx(Builtin::NctaidX), int(rows_per_block)),
            )
        } else {
            (bx(Builtin::TidX), bx(Builtin::BidX), bx(Builtin::NctaidX))
        };
        let math = r.math;
        let call = |f: Func, args: Vec<Expr>| Expr::call(f, args);
        let n = lit(math, r.k as f64);
        self.for_("row", start, int(r.rows), step, false, |s, row| {
            // One pass over the cached values: `f(k index, j) -> statements`, guarded by k < K.
            let pass = |s: &mut Self, f: &mut dyn FnMut(&mut Self, Expr, Expr) -> R<()>| -> R<()> {
                s.for_(
                    "j",
                    Expr::Int(0),
                    int(per_thread),
                    Expr::Int(1),
                    true,
                    |s, j| {
                        let kv =
                            s.let_("kx", Ty::Idx, add(lane.clone(), mul(j.clone(), int(group))));
                        s.if_(lt(kv.clone(), int(r.k)), |s| f(s, kv, j))
                    },
                )
            };
            let reduce = |s: &mut Self, op: ReduceOp, value: Expr| -> Expr {
                let var = s.fresh("red");
                let ty = Ty::Elem(math);
                s.out.push(if warp_mode {
                    Stmt::WarpReduce {
                        var: var.clone(),
                        ty,
                        op,
                        width: 32,
                        value,
                    }
                } else {
                    Stmt::BlockReduce {
                        var: var.clone(),
                        ty,
                        op,
                        value,
                    }
                });
                Expr::Var(var)
            };
            let accumulate = |s: &mut Self, init: f64| -> String {
                let acc = s.fresh("acc");
                s.out.push(Stmt::Var {
                    var: acc.clone(),
                    ty: Ty::Elem(math),
                    init: lit(math, init),
                });
                acc
            };
            let cached = |j: &Expr| Expr::load(&cache, vec![j.clone()]);
            // Pass 1: load the row, accumulating max (softmax), sum of squares (rmsnorm) or sum.
            let (first_op, init) = if op == OpKind::Softmax {
                (ReduceOp::Max, f64::NEG_INFINITY)
            } else {
                (ReduceOp::Sum, 0.0)
            };
            let acc1 = accumulate(s, init);
            pass(s, &mut |s, kv, j| {
                s.coord = vec![kv, row.clone()];
                let e = s.value_at(r.x, &r.access)?;
                let xv = s.let_("xv", Ty::Elem(math), cast_to(math, r.dtype, e));
                s.out.push(Stmt::Store {
                    tensor: cache.clone(),
                    coord: vec![j],
                    value: xv.clone(),
                });
                let contribution = if op == OpKind::Rmsnorm {
                    call(Func::Mul, vec![xv.clone(), xv])
                } else {
                    xv
                };
                let f = if first_op == ReduceOp::Max {
                    Func::Max
                } else {
                    Func::Add
                };
                s.out.push(Stmt::Assign {
                    var: acc1.clone(),
                    value: call(f, vec![Expr::var(&acc1), contribution]),
                });
                Ok(())
            })?;
            let r1 = reduce(s, first_op, Expr::var(&acc1));
            let store = |s: &mut Self, kv: Expr, y: Expr| {
                s.out.push(Stmt::Store {
                    tensor: r.out.clone(),
                    coord: vec![kv, row.clone()],
                    value: cast_to(r.dtype, math, y),
                });
            };
            let scale = |s: &mut Self, kv: &Expr, mut y: Expr| -> R<Expr> {
                s.coord = vec![kv.clone(), row.clone()];
                if let Some(w) = r.w {
                    let wv = s.value_at(w, &r.param_access)?;
                    y = call(Func::Mul, vec![y, cast_to(math, s.ty(w).dtype, wv)]);
                }
                if let Some(b) = r.bias {
                    let bv = s.value_at(b, &r.param_access)?;
                    y = call(Func::Add, vec![y, cast_to(math, s.ty(b).dtype, bv)]);
                }
                Ok(y)
            };
            match op {
                OpKind::Softmax => {
                    let mx = s.let_("max", Ty::Elem(math), r1);
                    let acc2 = accumulate(s, 0.0);
                    pass(s, &mut |s, _, j| {
                        let e = s.let_(
                            "ex",
                            Ty::Elem(math),
                            call(
                                Func::Exp,
                                vec![call(Func::Sub, vec![cached(&j), mx.clone()])],
                            ),
                        );
                        s.out.push(Stmt::Store {
                            tensor: cache.clone(),
                            coord: vec![j],
                            value: e.clone(),
                        });
                        s.out.push(Stmt::Assign {
                            var: acc2.clone(),
                            value: call(Func::Add, vec![Expr::var(&acc2), e]),
                        });
                        Ok(())
                    })?;
                    let sum = reduce(s, ReduceOp::Sum, Expr::var(&acc2));
                    let sum = s.let_("sum", Ty::Elem(math), sum);
                    pass(s, &mut |s, kv, j| {
                        store(s, kv, call(Func::Div, vec![cached(&j), sum.clone()]));
                        Ok(())
                    })
                }
                OpKind::Rmsnorm => {
                    let var = call(Func::Div, vec![r1, n.clone()]);
                    let rstd = s.let_("rstd", Ty::Elem(math), rstd_of(var, r.eps, math));
                    pass(s, &mut |s, kv, j| {
                        let y = scale(s, &kv, call(Func::Mul, vec![cached(&j), rstd.clone()]))?;
                        store(s, kv, y);
                        Ok(())
                    })
                }
                _ => {
                    let mean = s.let_("mean", Ty::Elem(math), call(Func::Div, vec![r1, n.clone()]));
                    let acc2 = accumulate(s, 0.0);
                    pass(s, &mut |s, _, j| {
                        let d = s.let_(
                            "d",
                            Ty::Elem(math),
                            call(Func::Sub, vec![cached(&j), mean.clone()]),
                        );
                        s.out.push(Stmt::Assign {
                            var: acc2.clone(),
                            value: call(
                                Func::Add,
                                vec![Expr::var(&acc2), call(Func::Mul, vec![d.clone(), d])],
                            ),
                        });
                        Ok(())
                    })?;
                    let q = reduce(s, ReduceOp::Sum, Expr::var(&acc2));
                    let var = call(Func::Div, vec![q, n.clone()]);
                    let rstd = s.let_("rstd", Ty::Elem(math), rstd_of(var, r.eps, math));
                    pass(s, &mut |s, kv, j| {
                        let centered = call(Func::Sub, vec![cached(&j), mean.clone()]);
                        let y = scale(s, &kv, call(Func::Mul, vec![centered, rstd.clone()]))?;
                        store(s, kv, y);
                        Ok(())
                    })
                }
            }
        })
    }
}
