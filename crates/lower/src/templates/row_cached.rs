//! The cached schedules of the row-composite template (softmax, log_softmax, rmsnorm, layernorm): the row
//! held in registers, so `x` is read once.
//!
//! A row is cut into vectors of `width` elements (16 bytes where the row allows,
//! [`vector_width`]) and spread over a group of `lanes` threads: a warp or part of one (rows of
//! at most 1024 elements; a row of fewer than 32 vectors takes the next power of two of lanes,
//! so a warp holds `32 / lanes` rows), or a block (longer rows). Each thread caches at most 32
//! values. Reductions are over the group: `warp_reduce.OP.lanes` or `block_reduce`.

use super::row::{Read, RowSpec, exp_of, rstd_of};
use super::vector::{vector_layout, vector_width};
use crate::lower::*;
use irc_ir::{DType, OpKind};
use irc_kir::{Builtin, Expr, Func, IdxOp, ReduceOp, Space, Stmt, Ty};
use irc_layout::Layout;

/// How the threads of a cached schedule split the rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CachedShape {
    /// Elements per vector access.
    pub(crate) width: u64,
    /// Threads per row.
    pub(crate) lanes: u64,
    /// Rows per block.
    pub(crate) rows_per_block: u64,
    /// Threads per block.
    pub(crate) threads: u64,
    /// Vectors each thread caches.
    pub(crate) per_thread: u64,
}

impl CachedShape {
    /// `warp_mode`: `n` warps per block, each row on `lanes` <= 32 lanes (by default one a
    /// vector, up to 32); else `n` threads per row. `width` is 1 unless the row's access reads
    /// vectors.
    pub(crate) fn new(
        k: u64,
        width: u64,
        (warp_mode, lanes): (bool, Option<u64>),
        n: u64,
    ) -> CachedShape {
        let vecs = k.div_ceil(width).max(1);
        let (lanes, rows_per_block, threads) = if warp_mode {
            let natural = vecs.next_power_of_two().min(32);
            let lanes = lanes.map_or(natural, |l| l.min(natural));
            (lanes, n * (32 / lanes), 32 * n)
        } else {
            (n, 1, n)
        };
        CachedShape {
            width,
            lanes,
            rows_per_block,
            threads,
            per_thread: vecs.div_ceil(lanes),
        }
    }
}

/// The vector width of a row read at `access` (1 when the layout does not allow vectors).
pub(crate) fn row_width(dtype: DType, k: u64, access: &Layout) -> u64 {
    let w = vector_width(dtype, k);
    if w > 1 && vector_layout(access, w, 0).is_some() {
        w
    } else {
        1
    }
}

impl Builder<'_, '_> {
    /// softmax / rmsnorm / layernorm with the row held in registers (module docs).
    /// `mode.0`: `n` warps per block, a row on a warp or part of one (`mode.1` lanes, by
    /// default one a vector up to 32); else a block of `n` threads per row.
    pub(crate) fn composite_cached(
        &mut self,
        op: OpKind,
        r: RowSpec,
        mode: (bool, Option<u64>),
        n: u64,
    ) -> R<()> {
        let warp_mode = mode.0;
        let width = row_width(r.dtype, r.k, &r.access);
        let sh = CachedShape::new(r.k, width, mode, n);
        let vecs = r.k.div_ceil(width);
        self.kernel.block = [sh.threads as u32, 1, 1];
        self.kernel.grid = [r.rows.clamp(1, MAX_BLOCKS) as u32, 1, 1];
        let cache = self.tensor(
            Space::Registers,
            r.math,
            Layout::int((sh.per_thread * width) as i64, 1).map_err(internal)?,
        );
        let math = r.math;
        let call = |f: Func, args: Vec<Expr>| Expr::call(f, args);
        let nk = lit(math, r.k as f64);
        let body = |s: &mut Self, row: Expr, valid: Option<Expr>, lane: Expr| -> R<()> {
            // One pass over the cached values: `f(k index, cache index)` per element of each
            // vector in the row, vector reads and stores where the layouts allow.
            let pass = |s: &mut Self, f: &mut dyn FnMut(&mut Self, Expr, Expr) -> R<()>| -> R<()> {
                s.for_(
                    "j",
                    Expr::Int(0),
                    int(sh.per_thread),
                    Expr::Int(1),
                    true,
                    |s, j| {
                        let vb = s.let_(
                            "vb",
                            Ty::Idx,
                            add(lane.clone(), mul(j.clone(), int(sh.lanes))),
                        );
                        let mut cond = lt(vb.clone(), int(vecs));
                        if let Some(v) = &valid {
                            cond = Expr::idx(IdxOp::And, v.clone(), cond);
                        }
                        s.if_(cond, |s| {
                            s.vector_loop(width, vec![vb, row.clone()], |s, kx, v| {
                                let c = add(mul(j.clone(), int(width)), v);
                                f(s, kx, c)
                            })
                        })
                    },
                )
            };
            let reduce = |s: &mut Self, op: ReduceOp, value: Expr| -> Expr {
                if warp_mode && sh.lanes == 1 {
                    return value;
                }
                let var = s.fresh("red");
                let ty = Ty::Elem(math);
                s.out.push(if warp_mode {
                    Stmt::WarpReduce {
                        var: var.clone(),
                        ty,
                        op,
                        width: sh.lanes as u32,
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
            let cached = |c: &Expr| Expr::load(&cache, vec![c.clone()]);
            // Pass 1: load the row, accumulating max (softmax), sum of squares (rmsnorm) or sum.
            let (first_op, init) = if matches!(op, OpKind::Softmax | OpKind::LogSoftmax) {
                (ReduceOp::Max, f64::NEG_INFINITY)
            } else {
                (ReduceOp::Sum, 0.0)
            };
            let acc1 = accumulate(s, init);
            pass(s, &mut |s, kv, c| {
                s.coord = vec![kv, row.clone()];
                let e = s.row_x(&r, Read::Store)?;
                let xv = s.let_("xv", Ty::Elem(math), e);
                s.out.push(Stmt::Store {
                    tensor: cache.clone(),
                    coord: vec![c],
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
            let store = |s: &mut Self, kv: Expr, y: Expr| s.row_store(&r, vec![kv, row.clone()], y);
            let scale = |s: &mut Self, kv: &Expr, y: Expr| -> R<Expr> {
                s.coord = vec![kv.clone(), row.clone()];
                s.row_affine(&r, y)
            };
            match op {
                OpKind::Softmax | OpKind::LogSoftmax => {
                    // exp(x - max) by `row::exp_of` (exp2 in f32), the difference taken first.
                    let mx = s.let_("max", Ty::Elem(math), r1);
                    let acc2 = accumulate(s, 0.0);
                    // The cache keeps exp(x - max) for softmax, x - max for log_softmax.
                    let log = op == OpKind::LogSoftmax;
                    pass(s, &mut |s, _, c| {
                        let d = s.let_(
                            "d",
                            Ty::Elem(math),
                            call(Func::Sub, vec![cached(&c), mx.clone()]),
                        );
                        let e = s.let_("ex", Ty::Elem(math), exp_of(math, d.clone()));
                        s.out.push(Stmt::Store {
                            tensor: cache.clone(),
                            coord: vec![c],
                            value: if log { d } else { e.clone() },
                        });
                        s.out.push(Stmt::Assign {
                            var: acc2.clone(),
                            value: call(Func::Add, vec![Expr::var(&acc2), e]),
                        });
                        Ok(())
                    })?;
                    let sum = reduce(s, ReduceOp::Sum, Expr::var(&acc2));
                    if log {
                        let lse = s.let_("lse", Ty::Elem(math), call(Func::Log, vec![sum]));
                        return pass(s, &mut |s, kv, c| {
                            store(s, kv, call(Func::Sub, vec![cached(&c), lse.clone()]))
                        });
                    }
                    let inv = s.let_("inv", Ty::Elem(math), call(Func::Recip, vec![sum]));
                    pass(s, &mut |s, kv, c| {
                        store(s, kv, call(Func::Mul, vec![cached(&c), inv.clone()]))
                    })
                }
                OpKind::Rmsnorm => {
                    let var = call(Func::Div, vec![r1, nk.clone()]);
                    let rstd = s.let_("rstd", Ty::Elem(math), rstd_of(var, r.eps, math));
                    pass(s, &mut |s, kv, c| {
                        let y = scale(s, &kv, call(Func::Mul, vec![cached(&c), rstd.clone()]))?;
                        store(s, kv, y)
                    })
                }
                _ => {
                    let mean = s.let_(
                        "mean",
                        Ty::Elem(math),
                        call(Func::Div, vec![r1, nk.clone()]),
                    );
                    let acc2 = accumulate(s, 0.0);
                    pass(s, &mut |s, _, c| {
                        let d = s.let_(
                            "d",
                            Ty::Elem(math),
                            call(Func::Sub, vec![cached(&c), mean.clone()]),
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
                    let var = call(Func::Div, vec![q, nk.clone()]);
                    let rstd = s.let_("rstd", Ty::Elem(math), rstd_of(var, r.eps, math));
                    pass(s, &mut |s, kv, c| {
                        let centered = call(Func::Sub, vec![cached(&c), mean.clone()]);
                        let y = scale(s, &kv, call(Func::Mul, vec![centered, rstd.clone()]))?;
                        store(s, kv, y)
                    })
                }
            }
        };
        if warp_mode {
            // A thread holding one vector of its row has one load in flight, so the bytes in
            // flight are the resident threads': the kernel asks for a full SM (32 registers a
            // thread). Measured on the H200 (run 125): layernorm over rows of 128 f16 took
            // 40 registers, 6 blocks of 256 an SM. Not where an epilogue adds its values.
            if sh.per_thread == 1 && r.epilogue.is_empty() && r.pre.is_none() {
                let t = &self.l.options.target;
                let blocks = (u64::from(t.max_threads_per_sm) / sh.threads)
                    .min(u64::from(t.max_blocks_per_sm));
                self.kernel.occupancy = blocks.max(1) as u32;
            }
            self.lane_group_rows(r.rows, sh.lanes, n, body)
        } else {
            self.for_(
                "row",
                bx(Builtin::BidX),
                int(r.rows),
                bx(Builtin::NctaidX),
                false,
                |s, row| body(s, row, None, bx(Builtin::TidX)),
            )
        }
    }

    /// `rows` rows over lane groups of `lanes` threads (a power of two up to 32), `warps`
    /// warps per block: `f(row, valid, lane)` per row. The loop is uniform across each warp,
    /// so every lane reaches the group's `warp_reduce`; where the rows run out within a warp,
    /// `valid` (`row < rows`) masks the idle groups (`None` when a warp holds one row).
    pub(crate) fn lane_group_rows(
        &mut self,
        rows: u64,
        lanes: u64,
        warps: u64,
        f: impl FnOnce(&mut Self, Expr, Option<Expr>, Expr) -> R<()>,
    ) -> R<()> {
        let per_warp = 32 / lanes;
        let per_block = warps * per_warp;
        self.kernel.block = [(32 * warps) as u32, 1, 1];
        self.kernel.grid = [rows.div_ceil(per_block).clamp(1, MAX_BLOCKS) as u32, 1, 1];
        let tid = bx(Builtin::TidX);
        let lane = self.let_(
            "lane",
            Ty::Idx,
            Expr::idx(IdxOp::Rem, tid.clone(), int(lanes)),
        );
        let warp = self.let_(
            "warp",
            Ty::Idx,
            Expr::idx(IdxOp::Div, tid.clone(), Expr::Int(32)),
        );
        let first = add(
            mul(bx(Builtin::BidX), int(per_block)),
            mul(warp, int(per_warp)),
        );
        let step = mul(bx(Builtin::NctaidX), int(per_block));
        self.for_("rows", first, int(rows), step, false, |s, base| {
            if per_warp == 1 {
                return f(s, base, None, lane);
            }
            let sub = Expr::idx(
                IdxOp::Div,
                Expr::idx(IdxOp::Rem, tid, Expr::Int(32)),
                int(lanes),
            );
            let row = s.let_("row", Ty::Idx, add(base, sub));
            let valid = lt(row.clone(), int(rows));
            f(s, row, Some(valid), lane)
        })
    }
}
