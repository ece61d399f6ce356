//! The norm prologue on the Hopper matmul (`templates/norm_prologue.rs` has the rule): each
//! consumer reads its A fragments out of the stage with `ldmatrix` instead of letting `wgmma`
//! read them from shared memory, adds their squares to its rows' sums, scales them by `g` along
//! K in registers, and issues `wgmma` with A in registers (`wgmma.rs`). Nothing is written back
//! to shared memory, so the stage is read once, as the plain kernel reads it, and no proxy
//! fence or barrier stands between a stage's arrival and its products.
//!
//! Within each warp's 16 rows the fragment is `mma_m16n8k16_a` (what `wgmma`'s register A
//! operand is, and what `ldmatrix.x4` delivers from the rows `ldmatrix_x4_rows` names). The
//! atom's value leaves along rows give each thread its row slots (two rows of a warp: the
//! lane's row and 8 below), its thread leaves along K the lanes sharing a row (a quad), whose
//! sums a warp reduction adds after the mainloop.
//!
//! The consumers issue the prologue's instructions between their products, one k-tile ahead
//! (the k-loop keeps one wgmma group in flight, `mod.rs`), so its instruction count is what
//! bounds the kernel where N is large (`bench/results/2026-11-28-norm-prologue-run112.md`):
//! where each fragment register (two adjacent K of one row) meets one register of `g`, `g`
//! multiplies whole registers (`mul.x2`, one packed instruction for two values, each product
//! rounded once as the f32 product is at the pack); without `g`, `wgmma` reads the fragments as
//! loaded; the squares go to [`PARTIALS`] partial sums a row slot in turn, so no chain of
//! dependent additions is long.

use super::super::matmul_mma::ldmatrix_x4_rows;
use super::super::norm_prologue::{NormPrologue, split_rows};
use super::super::tma::Operand;
use super::*;
use crate::LowerError;
use irc_kir::{Func, ReduceOp};

/// Partial sums per row slot: a k-tile's squares go to several accumulators in turn, so that
/// no chain of dependent additions is longer than a few (the consumers issue the prologue's
/// instructions between their products, and a long chain stalls the warp that issues them).
const PARTIALS: i64 = 4;
/// The shared row scales' bytes: `[64 rows, 2 consumers]` f32 (the ring's budget leaves them
/// room).
pub(super) const SCALE_BYTES: u64 = 64 * 2 * 4;

/// The consumer-side state of the norm prologue.
pub(super) struct RsPrologue {
    pub(super) pro: NormPrologue,
    /// The fragments as `ldmatrix` writes them, `(value, k-step)`, 16-bit.
    xa: String,
    /// The scaled fragments, `(value, k-step)`: `wgmma.rs`'s A. 16-bit where `g` is scaled in
    /// pairs (`pairs`), or is absent (then `xa` itself); else f32, rounded as packed.
    pub(super) pa: String,
    /// `xa` and `pa` as `(2, value pair, k-step)`, where `g` multiplies pairs (`mul.x2`).
    pairs: Option<(String, String)>,
    /// The thread's row sums, [`PARTIALS`] per row slot (`slot + slots * partial`).
    sums: String,
    /// A's stage ring in 8-element rows (what `ldmatrix` addresses).
    rows8: String,
    /// The row scales, `[row, consumer]` (shared; the epilogue reads them).
    pub(super) scales: String,
    /// `mma_m16n8k16_a`: `(lane, value)` → `row + 16 * k` of a warp's 16 x 16 block.
    atom: Layout,
    /// value → row slot, and slot → row offset.
    slot_of: Layout,
    slot_rows: Layout,
    /// Lanes sharing a row (consecutive).
    quad: u64,
    /// `g` as pairs of K for a k-tile, `(element, k-step * pairs + pair)`, prefetched a k-tile
    /// ahead; `None` where `g` is absent or not the operands' type (read element by element).
    g_pairs: Option<GPairs>,
}

/// The thread's `g` for one k-tile: its values' K offsets from the lane's first K (value 0)
/// come in pairs of adjacent K, `starts` of them per k-step (`mma_m16n8k16_a`: 0 and 8).
struct GPairs {
    regs: String,
    /// `g` in pairs of elements.
    view: String,
    starts: Vec<i64>,
    /// Each fragment register's (values `2j`, `2j + 1`) pair of `g` among `starts`.
    of_register: Vec<usize>,
}

impl RsPrologue {
    /// Where fragment value `z`'s square is added: its row slot's partial sum, the values of a
    /// slot taking the partials in turn.
    fn sum_at(&self, z: i64) -> R<Expr> {
        let slot = |v: i64| {
            self.slot_of
                .crd2idx(&irc_layout::IntTuple::Int(v))
                .map_err(internal)
        };
        let (s, slots) = (slot(z)?, self.slot_rows.size().map_err(internal)?);
        let mut turn = 0;
        for v in 0..z {
            turn += i64::from(slot(v)? == s);
        }
        Ok(Expr::Int(s + slots * (turn % PARTIALS)))
    }
}

impl Builder<'_, '_> {
    /// Registers and shared tensors of the prologue over A's `stages` ring `sa`.
    pub(super) fn rs_prologue(
        &mut self,
        pro: &NormPrologue,
        sa: &str,
        oa: &Operand,
        stages: u64,
        dt: DType,
    ) -> R<RsPrologue> {
        let li = |s: i64, d: i64| Layout::int(s, d).map_err(internal);
        let ks = (BK / 16) as i64;
        let frag = |s: &mut Self, t: DType| -> R<String> {
            let l = Layout::flat(&[8, ks], &[1, 8]).map_err(internal)?;
            Ok(s.tensor(Space::Registers, t, l))
        };
        let xa = frag(self, dt)?;
        let atom = irc_layout::mma_m16n8k16_a()
            .map_err(internal)?
            .layout()
            .clone();
        let (slot_of, slot_rows, quad) = split_rows(&atom, 16).ok_or_else(|| {
            Retry::Fail(LowerError::Internal(format!(
                "the A fragment {atom} does not split into rows per thread"
            )))
        })?;
        let slots = slot_rows.size().map_err(internal)?;
        let sums = self.tensor(Space::Registers, DType::F32, li(slots * PARTIALS, 1)?);
        let rows8 = self.tensor(
            Space::View(sa.to_string()),
            dt,
            li((stages * oa.tile_elems() / 8) as i64, 8)?,
        );
        let scales = self.tensor(
            Space::Shared,
            DType::F32,
            Layout::flat(&[64, 2], &[1, 64]).map_err(internal)?,
        );
        let g_pairs = match pro.g {
            Some(g) if self.ty(g).dtype == dt => self.g_pairs(g, &atom, dt)?,
            _ => None,
        };
        // `g` in pairs multiplies whole registers: one packed instruction a register, the
        // product rounded once, as the f32 product (exact for 16-bit inputs) rounded at the
        // pack is. Without `g`, wgmma reads the fragments as loaded; `g` read element by
        // element scales f32 values, rounded as they are packed.
        let (pa, pairs) = if g_pairs.is_some() {
            let pa = frag(self, dt)?;
            let view = |s: &mut Self, t: &str| -> R<String> {
                let l = Layout::flat(&[2, 4, ks], &[1, 2, 8]).map_err(internal)?;
                Ok(s.tensor(Space::View(t.to_string()), dt, l))
            };
            let pairs = (view(self, &xa)?, view(self, &pa)?);
            (pa, Some(pairs))
        } else if pro.g.is_none() {
            (xa.clone(), None)
        } else {
            (frag(self, DType::F32)?, None)
        };
        Ok(RsPrologue {
            pro: pro.clone(),
            xa,
            pa,
            pairs,
            sums,
            rows8,
            scales,
            atom,
            slot_of,
            slot_rows,
            quad,
            g_pairs,
        })
    }

    /// `g`'s pairs for the fragment `atom` (`(lane, value)` → `row + 16 k`), if every lane's
    /// first K is even and each register of the fragment (values `2j`, `2j + 1`) holds one
    /// pair of adjacent K (`k`, `k + 1`, `k` even), which `mul.x2` scales by one register of
    /// `g`.
    fn g_pairs(&mut self, g: ValueId, atom: &Layout, dt: DType) -> R<Option<GPairs>> {
        let at = |c: &[i64]| {
            atom.crd2idx(&irc_layout::IntTuple::ints(c))
                .map_err(internal)
        };
        let values = atom.mode(1).and_then(|m| m.size()).map_err(internal)?;
        for lane in 0..32 {
            if (at(&[lane, 0])? / 16) % 2 != 0 {
                return Ok(None);
            }
        }
        let mut starts: Vec<i64> = vec![];
        let mut of_value = vec![];
        for v in 0..values {
            let k = at(&[0, v])? / 16;
            let start = k - k % 2;
            let pair = match starts.iter().position(|&s| s == start) {
                Some(p) => p,
                None => {
                    starts.push(start);
                    starts.len() - 1
                }
            };
            of_value.push((pair, k % 2));
        }
        let registers = of_value
            .chunks(2)
            .all(|c| c.len() == 2 && c[0].0 == c[1].0 && (c[0].1, c[1].1) == (0, 1));
        if !registers {
            return Ok(None);
        }
        let kdim = self.ty(g).shape.iter().product::<u64>() as i64;
        if kdim % 2 != 0 {
            return Ok(None);
        }
        let view = self.global(g, Layout::flat(&[2, kdim / 2], &[1, 2]).map_err(internal)?);
        let n = (BK / 16) as i64 * starts.len() as i64;
        let regs = self.tensor(
            Space::Registers,
            dt,
            Layout::flat(&[2, n], &[1, 2]).map_err(internal)?,
        );
        Ok(Some(GPairs {
            regs,
            view,
            starts,
            of_register: of_value.chunks(2).map(|c| c[0].0).collect(),
        }))
    }

    /// Loads the thread's `g` pairs of the k-tile at `k0` (of `kdim`) into registers, where the
    /// prologue has them (before the k-tile's wait, so the loads overlap the products).
    pub(super) fn rs_prologue_g(&mut self, rp: &RsPrologue, k0: &Expr, kdim: u64) -> R<()> {
        let Some(gp) = &rp.g_pairs else {
            return Ok(());
        };
        let lane = rem(bx(Builtin::TidX), Expr::Int(32));
        let first = kir::offset_expr(&rp.atom, &[lane, Expr::Int(0)]).map_err(internal)?;
        let kb = self.let_("gb", Ty::Idx, add(k0.clone(), div(first, Expr::Int(16))));
        // The lane's first pair, once: each load is then that plus a constant (`kb` and every
        // start are even), which the compiler folds into the load's address.
        let pb = self.let_("gp", Ty::Idx, div(kb.clone(), Expr::Int(2)));
        for ks in 0..(BK / 16) as i64 {
            for (p, &start) in gp.starts.iter().enumerate() {
                let k = self.let_("gq", Ty::Idx, add(kb.clone(), Expr::Int(ks * 16 + start)));
                let copy = Stmt::Copy {
                    width: 2,
                    dst: Frag {
                        tensor: gp.regs.clone(),
                        at: vec![Expr::Int(ks * gp.starts.len() as i64 + p as i64)],
                    },
                    src: Frag {
                        tensor: gp.view.clone(),
                        at: vec![add(pb.clone(), Expr::Int((ks * 16 + start) / 2))],
                    },
                    hint: irc_kir::CacheHint::Normal,
                };
                let reg = Expr::Int(ks * gp.starts.len() as i64 + p as i64);
                if kdim.is_multiple_of(BK) {
                    self.out.push(copy);
                } else {
                    // Past K, x is TMA's zeros and g has no element: zeros (not stale
                    // registers, which could hold a NaN).
                    let zeros = (0..2)
                        .map(|e| Stmt::Store {
                            tensor: gp.regs.clone(),
                            coord: vec![Expr::Int(e), reg.clone()],
                            value: lit(self.ty(rp.pro.x).dtype, 0.0),
                        })
                        .collect();
                    self.out.push(Stmt::If {
                        cond: lt(k, int(kdim)),
                        body: vec![copy],
                        orelse: zeros,
                    });
                }
            }
        }
        Ok(())
    }

    /// Zeroes the row sums (each output tile).
    pub(super) fn rs_prologue_zero(&mut self, rp: &RsPrologue) -> R<()> {
        let n = (rp.slot_rows.size().map_err(internal)? * PARTIALS) as u64;
        let sums = rp.sums.clone();
        self.unrolled("ps", n, &mut |s, i| {
            s.out.push(Stmt::Store {
                tensor: sums.clone(),
                coord: vec![i],
                value: lit(DType::F32, 0.0),
            });
            Ok(())
        })
    }

    /// Consumer `c`'s A fragments of stage `st` (K from `k0` of `kdim`) into `rp.pa`: read,
    /// squared into the row sums, scaled by `g`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rs_prologue_stage(
        &mut self,
        rp: &RsPrologue,
        oa: &Operand,
        st: &Expr,
        c: &Expr,
        k0: &Expr,
        kdim: u64,
        dt: DType,
    ) -> R<()> {
        let sw = irc_layout::Swizzle::new(3, 3, 3).map_err(internal)?;
        let tile = oa.smem_tile().map_err(internal)?;
        let tid = bx(Builtin::TidX);
        let lane = self.let_("ln", Ty::Idx, rem(tid.clone(), Expr::Int(32)));
        let warp = self.let_("wq", Ty::Idx, rem(div(tid, Expr::Int(32)), Expr::Int(4)));
        // The warp's 16 rows of the consumer's 64.
        let row0 = self.let_(
            "ra",
            Ty::Idx,
            add(mul(c.clone(), Expr::Int(64)), mul(warp, Expr::Int(16))),
        );
        let lrow = kir::offset_expr(
            &ldmatrix_x4_rows(false, false).map_err(internal)?,
            std::slice::from_ref(&lane),
        )
        .map_err(internal)?;
        let lrow = self.let_("lr", Ty::Idx, lrow);
        let base = self.let_("sb", Ty::Idx, mul(st.clone(), int(oa.tile_elems())));
        let g = self.prologue_g_elements(&rp.pro, kdim, rp.g_pairs.is_some())?;
        self.for_(
            "ks",
            Expr::Int(0),
            int(BK / 16),
            Expr::Int(1),
            true,
            |s, ks| {
                // The lane's row start for ldmatrix: row + 16 k of the 16 x 16 block.
                let row = add(row0.clone(), rem(lrow.clone(), Expr::Int(16)));
                let k = add(
                    mul(ks.clone(), Expr::Int(16)),
                    div(lrow.clone(), Expr::Int(16)),
                );
                let off = kir::swizzled_offset_expr(&sw, &tile, &[row, k]).map_err(internal)?;
                let at = s.let_("la", Ty::Idx, div(add(base.clone(), off), Expr::Int(8)));
                s.out.push(intr(
                    Intrinsic::LdmatrixX4,
                    vec![
                        Arg::at(&rp.xa, vec![ks.clone()]),
                        Arg::at(&rp.rows8, vec![at]),
                    ],
                ));
                if rp.pa == rp.xa || rp.pairs.is_some() {
                    // The squares only; `g`, if any, a register (two values) at a time.
                    for z in 0..8i64 {
                        s.prologue_value(
                            Expr::load(&rp.xa, vec![Expr::Int(z), ks.clone()]),
                            dt,
                            (&rp.sums, rp.sum_at(z)?),
                        );
                    }
                    if let (Some((xv, pv)), Some(gp)) = (&rp.pairs, &rp.g_pairs) {
                        for (j, &pair) in gp.of_register.iter().enumerate() {
                            let reg = add(
                                mul(ks.clone(), Expr::Int(gp.starts.len() as i64)),
                                Expr::Int(pair as i64),
                            );
                            let j = Expr::Int(j as i64);
                            s.out.push(intr(
                                Intrinsic::Mul2,
                                vec![
                                    Arg::at(pv, vec![j.clone(), ks.clone()]),
                                    Arg::at(xv, vec![j, ks.clone()]),
                                    Arg::at(&gp.regs, vec![reg]),
                                ],
                            ));
                        }
                    }
                    return Ok(());
                }
                for z in 0..8i64 {
                    let idx = kir::offset_expr(&rp.atom, &[lane.clone(), Expr::Int(z)])
                        .map_err(internal)?;
                    let x = s.prologue_value(
                        Expr::load(&rp.xa, vec![Expr::Int(z), ks.clone()]),
                        dt,
                        (&rp.sums, rp.sum_at(z)?),
                    );
                    let scaled = match &g {
                        Some((gt, gdt)) => {
                            let kk = s.let_(
                                "gk",
                                Ty::Idx,
                                add(
                                    add(k0.clone(), mul(ks.clone(), Expr::Int(16))),
                                    div(idx, Expr::Int(16)),
                                ),
                            );
                            let gv = if kdim.is_multiple_of(BK) {
                                cast_to(DType::F32, *gdt, Expr::load(gt, vec![kk]))
                            } else {
                                // Past K, x is TMA's zeros and g has no element.
                                let v = s.var("gv", Ty::Elem(DType::F32), lit(DType::F32, 0.0));
                                let load =
                                    cast_to(DType::F32, *gdt, Expr::load(gt, vec![kk.clone()]));
                                let body = s.block(|s| {
                                    s.assign(&v, load);
                                    Ok(())
                                })?;
                                s.out.push(Stmt::If {
                                    cond: lt(kk, int(kdim)),
                                    body,
                                    orelse: vec![],
                                });
                                v
                            };
                            Expr::call(Func::Mul, vec![x, gv])
                        }
                        None => x,
                    };
                    s.out.push(Stmt::Store {
                        tensor: rp.pa.clone(),
                        coord: vec![Expr::Int(z), ks.clone()],
                        value: scaled,
                    });
                }
                Ok(())
            },
        )
    }

    /// After consumer `c`'s mainloop: each row's sum over its quad, and its scale
    /// `1 / sqrt(sum / kdim + eps)` from the quad's first lane into `rp.scales`.
    pub(super) fn rs_prologue_scales(&mut self, rp: &RsPrologue, c: &Expr, kdim: u64) -> R<()> {
        let tid = bx(Builtin::TidX);
        let lane = self.let_("ln", Ty::Idx, rem(tid.clone(), Expr::Int(32)));
        let warp = rem(div(tid, Expr::Int(32)), Expr::Int(4));
        let first = kir::offset_expr(&rp.atom, &[lane.clone(), Expr::Int(0)]).map_err(internal)?;
        let row0 = self.let_(
            "rq",
            Ty::Idx,
            add(mul(warp, Expr::Int(16)), rem(first, Expr::Int(16))),
        );
        let n = rp.slot_rows.size().map_err(internal)?;
        for slot in 0..n {
            let value = (1..PARTIALS).fold(Expr::load(&rp.sums, vec![Expr::Int(slot)]), |v, p| {
                Expr::call(
                    Func::Add,
                    vec![v, Expr::load(&rp.sums, vec![Expr::Int(slot + n * p)])],
                )
            });
            let total = if rp.quad > 1 {
                let var = self.fresh("rsum");
                self.out.push(Stmt::WarpReduce {
                    var: var.clone(),
                    ty: Ty::Elem(DType::F32),
                    op: ReduceOp::Sum,
                    width: rp.quad as u32,
                    value,
                });
                Expr::Var(var)
            } else {
                value
            };
            let mean = Expr::call(Func::Div, vec![total, lit(DType::F32, kdim as f64)]);
            let off = rp
                .slot_rows
                .crd2idx(&irc_layout::IntTuple::Int(slot))
                .map_err(internal)?;
            let store = Stmt::Store {
                tensor: rp.scales.clone(),
                coord: vec![add(row0.clone(), Expr::Int(off)), c.clone()],
                value: super::super::row::rstd_of(mean, rp.pro.eps, DType::F32),
            };
            self.out.push(Stmt::If {
                cond: eq(rem(lane.clone(), int(rp.quad)), Expr::Int(0)),
                body: vec![store],
                orelse: vec![],
            });
        }
        Ok(())
    }
}
