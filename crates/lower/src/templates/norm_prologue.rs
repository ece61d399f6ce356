//! The norm prologue of the tensor-core matmul templates (the policy's rule 10,
//! `irc_fused::prologue`): `matmul(rmsnorm(x, g), W)` as one kernel.
//!
//! The mainloop reads tiles of `x` where it would read the normalized operand. Once a stage's
//! A tile has landed in shared memory, the threads that consume it walk its 16-byte chunks
//! (8 consecutive K of one row): each chunk is read into registers, its squares are added to
//! the thread's sum for that row, and, when there is a `g`, it is multiplied by `g` along K,
//! rounded to the operand type and written back in place, before any mma reads the stage.
//! After the mainloop the `C` threads sharing a row (consecutive lanes) add their sums, and
//! the first writes the row scale `1 / sqrt(sum / K + eps)` (f32, as the row template
//! computes it) to shared memory, where the epilogue multiplies each accumulator by its row's
//! scale before rounding it to the matmul's type.
//!
//! A thread covers `per = rows * C / threads` consecutive chunks (`C` the chunks of a row):
//! chunk `e = t * per + i` is at row `e / C`, chunk `e % C`. Where `per <= C` a thread stays
//! in one row, its sum is one register, and the `C / per` threads of a row are consecutive
//! lanes that add their sums with a warp reduction; otherwise a thread holds the sums of
//! `per / C` whole rows.

use crate::LowerError;
use crate::lower::*;
use irc_ir::{Attr, DType, Inst, OpKind, ValueId};
use irc_kir::{Expr, Frag, Func, IdxOp, ReduceOp, Space, Stmt, Ty};
use irc_layout::Layout;

/// `rmsnorm(x, g)` computed as a matmul's A prologue.
#[derive(Clone, Debug)]
pub(crate) struct NormPrologue {
    pub(crate) x: ValueId,
    pub(crate) g: Option<ValueId>,
    pub(crate) eps: f64,
}

/// How a group of threads covers one stage's A tile (`rows` rows of `chunks` 16-byte chunks),
/// with the registers of its row sums.
pub(crate) struct ProTile {
    pub(crate) rows: u64,
    pub(crate) chunks: u64,
    pub(crate) threads: u64,
    /// The thread's index in the group.
    pub(crate) t: Expr,
    /// Its row sums (`rows * chunks / threads` f32 registers).
    pub(crate) sums: String,
}

impl ProTile {
    fn per_thread(&self) -> u64 {
        self.rows * self.chunks / self.threads
    }

    /// Whether the thread's chunks are all in one row.
    fn one_row(&self) -> bool {
        self.per_thread() <= self.chunks
    }

    /// The row sums a thread holds.
    fn sums_held(&self) -> u64 {
        if self.one_row() {
            1
        } else {
            self.per_thread() / self.chunks
        }
    }

    /// The row and chunk of the thread's `i`-th chunk.
    fn at(&self, i: &Expr) -> (Expr, Expr) {
        let e = add(mul(self.t.clone(), int(self.per_thread())), i.clone());
        (
            Expr::idx(IdxOp::Div, e.clone(), int(self.chunks)),
            Expr::idx(IdxOp::Rem, e, int(self.chunks)),
        )
    }

    /// The register holding the sum of the thread's `i`-th chunk's row.
    fn sum_of(&self, i: &Expr) -> Expr {
        if self.one_row() {
            Expr::Int(0)
        } else {
            Expr::idx(IdxOp::Div, i.clone(), int(self.chunks))
        }
    }
}

impl Builder<'_, '_> {
    /// The norm prologue of a matmul whose first operand is an rmsnorm the group computes (no
    /// buffer holds it), if it has one.
    pub(crate) fn norm_prologue(&self, inst: &Inst) -> R<Option<NormPrologue>> {
        let a = inst.operands[0];
        if self.l.buffer_of.contains_key(&a) {
            return Ok(None);
        }
        let Some(n) = self.def(a) else {
            return Ok(None);
        };
        if n.op != OpKind::Rmsnorm {
            return Ok(None);
        }
        let (x, g) = (n.operands[0], n.operands.get(1).copied());
        if !self.l.buffer_of.contains_key(&x)
            || g.is_some_and(|g| !self.l.buffer_of.contains_key(&g))
        {
            return Err(Retry::Fail(LowerError::Internal(
                "a norm prologue's x and g must be in memory".into(),
            )));
        }
        let eps = n
            .attrs
            .get("eps")
            .and_then(Attr::as_f64)
            .unwrap_or_else(|| self.ty(a).dtype.epsilon().unwrap_or(1e-6));
        Ok(Some(NormPrologue { x, g, eps }))
    }

    /// A thread group's cover of a stage's A tile, its sums zeroed; an error when the threads
    /// do not divide the chunks evenly or a row's chunks do not fit in a warp.
    pub(crate) fn prologue_tile(
        &mut self,
        rows: u64,
        chunks: u64,
        threads: u64,
        t: Expr,
    ) -> R<ProTile> {
        let per = (rows * chunks).checked_div(threads).unwrap_or(0);
        let even = per > 0
            && (rows * chunks).is_multiple_of(threads)
            && chunks.is_power_of_two()
            && per.is_power_of_two()
            && chunks / per <= 32;
        if !even {
            return Err(Retry::Fail(LowerError::Internal(format!(
                "a norm prologue over {rows} x {chunks} chunks by {threads} threads"
            ))));
        }
        let mut pt = ProTile {
            rows,
            chunks,
            threads,
            t,
            sums: String::new(),
        };
        pt.sums = self.tensor(
            Space::Registers,
            DType::F32,
            Layout::int(pt.sums_held() as i64, 1).map_err(internal)?,
        );
        Ok(pt)
    }

    /// Zeroes the row sums (at the start of each output tile).
    pub(crate) fn prologue_zero(&mut self, pt: &ProTile) -> R<()> {
        let sums = pt.sums.clone();
        self.unrolled("ps", pt.sums_held(), &mut |s, i| {
            s.out.push(Stmt::Store {
                tensor: sums.clone(),
                coord: vec![i],
                value: lit(DType::F32, 0.0),
            });
            Ok(())
        })
    }

    /// `g`'s chunks for the thread's chunks of the stage at `k0` (of `kdim`), loaded into
    /// registers ahead of the stage (they do not depend on it), as 16-byte vectors: `None`
    /// where `g` cannot be read so (no `g`, a `g` of another type, or `kdim` not a multiple of
    /// 8), and [`Builder::prologue_stage`] reads it element by element.
    pub(crate) fn prologue_g(
        &mut self,
        pro: &NormPrologue,
        pt: &ProTile,
        k0: &Expr,
        kdim: u64,
    ) -> R<Option<String>> {
        let dt = self.ty(pro.x).dtype;
        let Some(g) = pro
            .g
            .filter(|&g| kdim.is_multiple_of(8) && self.ty(g).dtype == dt)
        else {
            return Ok(None);
        };
        let per = pt.per_thread() as i64;
        let gv = self.global(
            g,
            Layout::flat(&[8, (kdim / 8) as i64], &[1, 8]).map_err(internal)?,
        );
        let regs = self.tensor(
            Space::Registers,
            dt,
            Layout::flat(&[8, per], &[1, 8]).map_err(internal)?,
        );
        self.unrolled("pg", pt.per_thread(), &mut |s, i| {
            let (_, c) = pt.at(&i);
            let kc = s.let_("kg", Ty::Idx, add(k0.clone(), mul(c, Expr::Int(8))));
            let copy = Stmt::Copy {
                width: 8,
                dst: Frag {
                    tensor: regs.clone(),
                    at: vec![i.clone()],
                },
                src: Frag {
                    tensor: gv.clone(),
                    at: vec![Expr::idx(IdxOp::Div, kc.clone(), Expr::Int(8))],
                },
                hint: irc_kir::CacheHint::Normal,
            };
            s.out.push(Stmt::If {
                cond: lt(kc, int(kdim)),
                body: vec![copy],
                orelse: vec![],
            });
            Ok(())
        })?;
        Ok(Some(regs))
    }

    /// The prologue on one stage's A tile holding K from `k0` (of `kdim`): `chunk(row, c)` is
    /// the 8-element shared vector of the tile's row `row`, K `k0 + 8c ..`; `g_regs` the
    /// thread's chunks of `g` from [`Builder::prologue_g`], if it could load them. The thread's
    /// chunks are unrolled, each in its own registers, so their loads overlap.
    pub(crate) fn prologue_stage(
        &mut self,
        pro: &NormPrologue,
        pt: &ProTile,
        k0: &Expr,
        kdim: u64,
        g_regs: Option<&str>,
        chunk: &mut dyn FnMut(&mut Self, Expr, Expr) -> R<Frag>,
    ) -> R<()> {
        let dt = self.ty(pro.x).dtype;
        let per = pt.per_thread() as i64;
        let regs = self.tensor(
            Space::Registers,
            dt,
            Layout::flat(&[8, per], &[1, 8]).map_err(internal)?,
        );
        let g_elem = self.prologue_g_elements(pro, kdim, g_regs.is_some())?;
        let sums = pt.sums.clone();
        self.unrolled("pc", pt.per_thread(), &mut |s, i| {
            let (row, c) = pt.at(&i);
            let si = pt.sum_of(&i);
            let row = s.let_("pr", Ty::Idx, row);
            let c = s.let_("pk", Ty::Idx, c);
            let kc = s.let_("kc", Ty::Idx, add(k0.clone(), mul(c.clone(), Expr::Int(8))));
            let at = chunk(s, row, c)?;
            let mine = Frag {
                tensor: regs.clone(),
                at: vec![i.clone()],
            };
            let body = s.block(|s| {
                s.out.push(Stmt::Copy {
                    width: 8,
                    dst: mine.clone(),
                    src: at.clone(),
                    hint: irc_kir::CacheHint::Normal,
                });
                for z in 0..8i64 {
                    let xv = s.prologue_value(
                        Expr::load(&regs, vec![Expr::Int(z), i.clone()]),
                        dt,
                        (&sums, si.clone()),
                    );
                    let k = add(kc.clone(), Expr::Int(z));
                    let gval = match (g_regs, &g_elem) {
                        (Some(gr), _) => cast_to(
                            DType::F32,
                            dt,
                            Expr::load(gr, vec![Expr::Int(z), i.clone()]),
                        ),
                        (None, Some((ge, gdt))) => {
                            cast_to(DType::F32, *gdt, Expr::load(ge, vec![k.clone()]))
                        }
                        (None, None) => continue,
                    };
                    let scaled = Stmt::Store {
                        tensor: regs.clone(),
                        coord: vec![Expr::Int(z), i.clone()],
                        value: cast_to(dt, DType::F32, Expr::call(Func::Mul, vec![xv, gval])),
                    };
                    // Past K the tile holds zeros and g has no element: leave them.
                    if kdim.is_multiple_of(8) {
                        s.out.push(scaled);
                    } else {
                        s.out.push(Stmt::If {
                            cond: lt(k, int(kdim)),
                            body: vec![scaled],
                            orelse: vec![],
                        });
                    }
                }
                if pro.g.is_some() {
                    s.out.push(Stmt::Copy {
                        width: 8,
                        dst: at,
                        src: mine,
                        hint: irc_kir::CacheHint::Normal,
                    });
                }
                Ok(())
            })?;
            // Chunks past K hold TMA's or cp.async's zeros: nothing to add or scale.
            s.out.push(Stmt::If {
                cond: lt(kc, int(kdim)),
                body,
                orelse: vec![],
            });
            Ok(())
        })
    }

    /// `g` as a `[K]` tensor read element by element (with its dtype), for a prologue that
    /// has no `g` in registers (`ahead`: it has): `None` without a `g` or with it ahead.
    pub(crate) fn prologue_g_elements(
        &mut self,
        pro: &NormPrologue,
        kdim: u64,
        ahead: bool,
    ) -> R<Option<(String, DType)>> {
        match pro.g.filter(|_| !ahead) {
            Some(g) => Ok(Some((
                self.global(g, Layout::int(kdim as i64, 1).map_err(internal)?),
                self.ty(g).dtype,
            ))),
            None => Ok(None),
        }
    }

    /// One value `x` (of `dt`) of an A tile: widened to f32 (the returned value) and its square
    /// added to the row sum at `sum` (a register tensor and its coordinate), in order.
    pub(crate) fn prologue_value(&mut self, x: Expr, dt: DType, sum: (&str, Expr)) -> Expr {
        let xv = self.let_("px", Ty::Elem(DType::F32), cast_to(DType::F32, dt, x));
        let (t, at) = sum;
        let old = Expr::load(t, vec![at.clone()]);
        self.out.push(Stmt::Store {
            tensor: t.to_string(),
            coord: vec![at],
            value: Expr::call(
                Func::Add,
                vec![old, Expr::call(Func::Mul, vec![xv.clone(), xv.clone()])],
            ),
        });
        xv
    }

    /// After the mainloop: each row's sum over its lanes, and the row scale
    /// `1 / sqrt(sum / kdim + eps)` written by the row's first lane to `scale(row)`.
    pub(crate) fn prologue_scales(
        &mut self,
        pro: &NormPrologue,
        pt: &ProTile,
        kdim: u64,
        scale: &dyn Fn(Expr) -> Frag,
    ) -> R<()> {
        let sums = pt.sums.clone();
        let write = |s: &mut Self, total: Expr, row: Expr| {
            let mean = Expr::call(Func::Div, vec![total, lit(DType::F32, kdim as f64)]);
            let at = scale(row);
            s.out.push(Stmt::Store {
                tensor: at.tensor,
                coord: at.at,
                value: super::row::rstd_of(mean, pro.eps, DType::F32),
            });
        };
        if !pt.one_row() {
            // Whole rows: `per / C` of them from the thread's first.
            let held = pt.sums_held();
            return self.unrolled("pq", held, &mut |s, j| {
                let row = add(mul(pt.t.clone(), int(held)), j.clone());
                write(s, Expr::load(&sums, vec![j]), row);
                Ok(())
            });
        }
        let lanes = pt.chunks / pt.per_thread();
        let total = if lanes > 1 {
            let var = self.fresh("rsum");
            self.out.push(Stmt::WarpReduce {
                var: var.clone(),
                ty: Ty::Elem(DType::F32),
                op: ReduceOp::Sum,
                width: lanes as u32,
                value: Expr::load(&sums, vec![Expr::Int(0)]),
            });
            Expr::Var(var)
        } else {
            Expr::load(&sums, vec![Expr::Int(0)])
        };
        let row = Expr::idx(IdxOp::Div, pt.t.clone(), int(lanes));
        let body = self.block(|s| {
            write(s, total, row);
            Ok(())
        })?;
        self.out.push(Stmt::If {
            cond: Expr::idx(
                IdxOp::Eq,
                Expr::idx(IdxOp::Rem, pt.t.clone(), int(lanes)),
                Expr::Int(0),
            ),
            body,
            orelse: vec![],
        });
        Ok(())
    }
}

/// How a (thread, value) layout `d` onto `row + m * column` splits into rows per thread: each
/// value's row slot (`value → slot`), each slot's row offset from the thread's value 0
/// (`slot → offset`), and how many consecutive lanes share their rows. Value leaves of strides
/// below `m` move along rows and those of multiples of `m` along columns; the leading thread
/// leaves of multiples of `m` are the lanes of one row. `None` where `d` does not split so;
/// the split is checked against `d` at every (thread, value).
pub(crate) fn split_rows(d: &Layout, m: i64) -> Option<(Layout, Layout, u64)> {
    let values = d.mode(1).ok()?.leaves();
    let mut compact = 1;
    let (mut slot_strides, mut rows) = (vec![], vec![]);
    for &(n, st) in &values {
        if st % m == 0 {
            slot_strides.push(0);
        } else if st * (n - 1) < m {
            slot_strides.push(compact);
            compact *= n;
            rows.push((n, st));
        } else {
            return None;
        }
    }
    let shapes: Vec<i64> = values.iter().map(|&(n, _)| n).collect();
    let slot_of = Layout::flat(&shapes, &slot_strides).ok()?;
    let (rn, rd): (Vec<i64>, Vec<i64>) = rows.into_iter().unzip();
    let slot_rows = if rn.is_empty() {
        Layout::int(1, 0).ok()?
    } else {
        Layout::flat(&rn, &rd).ok()?
    };
    let quad: i64 = d
        .mode(0)
        .ok()?
        .leaves()
        .iter()
        .take_while(|&&(_, st)| st % m == 0)
        .map(|&(n, _)| n)
        .product();
    let at = |l: &Layout, c: &[i64]| -> Option<i64> {
        let crd = if c.len() == 1 {
            irc_layout::IntTuple::Int(c[0])
        } else {
            irc_layout::IntTuple::ints(c)
        };
        l.crd2idx(&crd).ok()
    };
    let (threads, nvalues) = (d.mode(0).ok()?.size().ok()?, d.mode(1).ok()?.size().ok()?);
    for t in 0..threads {
        let base = at(d, &[t, 0])? % m;
        if base != at(d, &[t - t % quad, 0])? % m {
            return None;
        }
        for v in 0..nvalues {
            let row = at(d, &[t, v])? % m;
            if row != base + at(&slot_rows, &[at(&slot_of, &[v])?])? {
                return None;
            }
        }
    }
    Some((slot_of, slot_rows, quad as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wgmma_accumulators_hold_two_rows_a_thread() {
        // m64nNk16's D: a warp's 16 rows, lane / 4 and 8 below; the quad's 4 lanes share them.
        let d = irc_layout::wgmma_m64nk16_d(64).unwrap().layout().clone();
        let (slot_of, slot_rows, quad) = split_rows(&d, 64).expect("splits");
        assert_eq!(slot_rows.size().unwrap(), 2);
        let at = |l: &Layout, i: i64| l.crd2idx(&irc_layout::IntTuple::Int(i)).unwrap();
        assert_eq!((at(&slot_rows, 0), at(&slot_rows, 1)), (0, 8));
        assert_eq!(quad, 4);
        // Values 0, 1 (columns 2t, 2t+1) in the first row, 2, 3 in the row 8 below.
        assert_eq!(
            (0..4).map(|v| at(&slot_of, v)).collect::<Vec<_>>(),
            [0, 0, 1, 1]
        );
    }

    #[test]
    fn the_mma_a_fragment_splits_by_16_row_blocks() {
        let a = irc_layout::mma_m16n8k16_a().unwrap().layout().clone();
        let (_, slot_rows, quad) = split_rows(&a, 16).expect("splits");
        assert_eq!(slot_rows.size().unwrap(), 2);
        assert_eq!(quad, 4);
    }

    #[test]
    fn a_layout_mixing_rows_and_columns_in_one_leaf_does_not_split() {
        // Value leaf 4:24 crosses from row to column (stride 24 < 64 but 24 * 3 >= 64).
        let d = Layout::flat(&[32, 4], &[1, 24]).unwrap();
        assert!(split_rows(&d, 64).is_none());
    }
}
