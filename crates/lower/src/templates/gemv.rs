//! The matrix-vector template: a matmul with N = 1 (`A·x`) or M = 1 (`x·B`), batched or not,
//! whose matrix is K-contiguous, is a row reduction of a product, and is memory bound: each
//! output's row of the matrix is read once, on a warp (or a lane group of one, for rows of
//! fewer than 32 vectors), in 16-byte vectors (`templates/vector.rs`), the vector's elements
//! beside it; a warp reduction, then the group's epilogue at the output on the group's first
//! lane. A tiled matmul would leave all but one row (or column) of each tile idle.
//!
//! The iteration coordinate is `(k, o)`, `o` the output index over `(M or N, batch)`.

use super::row_cached::row_width;
use crate::lower::*;
use irc_ir::infer::matmul_shape;
use irc_ir::{Attr, Inst, ValueId};
use irc_kir::{Expr, Func, IdxOp, ReduceOp, Stmt, Ty};
use irc_layout::Layout;

/// The layouts of a matrix-vector product from `(k, o)`.
struct GemvAccess {
    /// Outputs: the non-unit dimension times the batch.
    rows: u64,
    k: u64,
    a: Layout,
    b: Layout,
    /// `o` → the result's index.
    c: Layout,
    /// The matrix operand (A when N = 1, else B) and its access.
    matrix: (ValueId, Layout),
}

impl Builder<'_, '_> {
    /// The matmul's `(k, o)` layouts when it is a matrix-vector product (M or N is 1).
    fn gemv_access(&self, inst: &Inst) -> R<Option<GemvAccess>> {
        let (a, b) = (inst.operands[0], inst.operands[1]);
        let flag = |n: &str| inst.attrs.get(n).and_then(Attr::as_bool).unwrap_or(false);
        let Ok(s) = matmul_shape(
            &self.ty(a).shape,
            &self.ty(b).shape,
            flag("transpose_a"),
            flag("transpose_b"),
        ) else {
            return Ok(None);
        };
        if s.m != 1 && s.n != 1 {
            return Ok(None);
        }
        let acc = self.matmul_access(inst)?;
        let mode = |l: &Layout, i: usize| l.mode(i).map_err(internal);
        let zero = |n: u64| Layout::int(n as i64, 0).map_err(internal);
        let batch: u64 = s.batch.iter().product();
        // N = 1 (a dot product too): o = (m, batch); else o = (n, batch).
        let (rows, a_o, b_o, c_o, matrix) = if s.n == 1 {
            (
                s.m * batch,
                concat(&[mode(&acc.access_a, 0)?, mode(&acc.access_a, 2)?])?,
                concat(&[zero(s.m)?, mode(&acc.access_b, 2)?])?,
                concat(&[mode(&acc.access_c, 0)?, mode(&acc.access_c, 2)?])?,
                a,
            )
        } else {
            (
                s.n * batch,
                concat(&[zero(s.n)?, mode(&acc.access_a, 2)?])?,
                concat(&[mode(&acc.access_b, 1)?, mode(&acc.access_b, 2)?])?,
                concat(&[mode(&acc.access_c, 1)?, mode(&acc.access_c, 2)?])?,
                b,
            )
        };
        let a_k = concat(&[mode(&acc.access_a, 1)?, a_o])?;
        let b_k = concat(&[mode(&acc.access_b, 0)?, b_o])?;
        let m_access = if matrix == a {
            a_k.clone()
        } else {
            b_k.clone()
        };
        Ok(Some(GemvAccess {
            rows,
            k: s.k,
            a: a_k,
            b: b_k,
            c: c_o,
            matrix: (matrix, m_access),
        }))
    }

    /// Which mode of the matrix's `(k, o)` access is contiguous in memory (0: K, 1: the
    /// outputs), following views to its buffer; `None` for a matrix that is computed, or
    /// contiguous in neither.
    fn gemv_contiguous(&mut self, g: &GemvAccess) -> Option<usize> {
        let (v, access) = &g.matrix;
        let (_, l) = self.resolve(*v, access)?;
        let unit = |i: usize| {
            l.mode(i)
                .ok()
                .and_then(|m| irc_layout::coalesce(&m).ok())
                .is_some_and(|m| m.leaves().first().is_some_and(|&(_, d)| d == 1))
        };
        [0, 1].into_iter().find(|&i| unit(i))
    }

    /// Whether the matmul is a matrix-vector product whose matrix is read contiguously along
    /// K or along the outputs (the matrix-vector template's condition).
    pub(crate) fn gemv_applies(&mut self, inst: &Inst) -> bool {
        match self.gemv_access(inst) {
            Ok(Some(g)) => self.gemv_contiguous(&g).is_some(),
            _ => false,
        }
    }

    /// The matrix-vector kernel (module docs), storing `roots` through the epilogue.
    pub(crate) fn gemv(&mut self, inst: &Inst, roots: &[ValueId]) -> R<()> {
        let g = self.gemv_access(inst)?.ok_or_else(|| {
            Retry::Fail(crate::LowerError::Internal(
                "not a matrix-vector product".into(),
            ))
        })?;
        let (a, b, mm) = (inst.operands[0], inst.operands[1], inst.result);
        let dtype = self.ty(mm).dtype;
        let acc_t = math_dtype(dtype);
        let (ad, bd) = (self.ty(a).dtype, self.ty(b).dtype);
        let outs: Vec<String> = roots.iter().map(|&r| self.global(r, g.c.clone())).collect();
        if self.gemv_contiguous(&g) == Some(1) {
            // The matrix is contiguous along the outputs (x·B, B [K, N]): a split column
            // reduction, `w` adjacent outputs per vector.
            let swap = |l: &Layout| -> R<Layout> {
                concat(&[l.mode(1).map_err(internal)?, l.mode(0).map_err(internal)?])
            };
            let (sa, sb) = (swap(&g.a)?, swap(&g.b)?);
            let w = match self.resolve(g.matrix.0, &swap(&g.matrix.1)?) {
                Some((v, l)) => row_width(self.ty(v).dtype, g.rows, &l),
                None => 1,
            };
            let elem = |s: &mut Builder<'_, '_>, _: Expr, _: Expr| -> R<Expr> {
                let x = s.value_at(a, &sa)?;
                let y = s.value_at(b, &sb)?;
                Ok(Expr::call(
                    Func::Mul,
                    vec![cast_to(acc_t, ad, x), cast_to(acc_t, bd, y)],
                ))
            };
            let split = super::column::ColumnSplit {
                outs: g.rows,
                k: g.k,
                w,
                acc_t,
                op: ReduceOp::Sum,
                init: 0.0,
            };
            let lc = g.c.clone();
            return self.column_split(split, &elem, |s, o, red| {
                s.coord = vec![o.clone()];
                let value = cast_to(dtype, acc_t, red);
                s.epilogue_stores(mm, value, &lc, roots, &outs, vec![o])
            });
        }
        let width = match self.resolve(g.matrix.0, &g.matrix.1) {
            Some((v, l)) => row_width(self.ty(v).dtype, g.k, &l),
            None => 1,
        };
        let vecs = g.k.div_ceil(width);
        let lanes = vecs.next_power_of_two().min(32);
        let (la, lb, lc) = (g.a.clone(), g.b.clone(), g.c.clone());
        self.lane_group_rows(g.rows, lanes, 8, |s, row, valid, lane| {
            let acc = s.accumulator(acc_t, 0.0);
            let (acc2, r) = (acc.clone(), row.clone());
            s.strided_vectors(
                vecs,
                lane.clone(),
                lanes,
                4,
                width,
                vec![row.clone()],
                valid.clone(),
                move |s, kv| {
                    s.coord = vec![kv, r];
                    let x = s.value_at(a, &la)?;
                    let y = s.value_at(b, &lb)?;
                    let p = Expr::call(
                        Func::Mul,
                        vec![cast_to(acc_t, ad, x), cast_to(acc_t, bd, y)],
                    );
                    s.combine(&acc2, ReduceOp::Sum, p);
                    Ok(())
                },
            )?;
            let red = if lanes > 1 {
                let var = s.fresh("red");
                s.out.push(Stmt::WarpReduce {
                    var: var.clone(),
                    ty: Ty::Elem(acc_t),
                    op: ReduceOp::Sum,
                    width: lanes as u32,
                    value: Expr::var(&acc),
                });
                Expr::Var(var)
            } else {
                Expr::var(&acc)
            };
            let mut cond = Expr::idx(IdxOp::Eq, lane, Expr::Int(0));
            if let Some(v) = valid {
                cond = Expr::idx(IdxOp::And, v, cond);
            }
            s.if_(cond, |s| {
                s.coord = vec![row.clone()];
                let value = cast_to(dtype, acc_t, red);
                s.epilogue_stores(mm, value, &lc, roots, &outs, vec![row])
            })
        })
    }
}
