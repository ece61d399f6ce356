//! The tensor-core template's f32 inner step: 3xTF32 on `mma.m16n8k8.tf32`.
//!
//! An f32 `x` is split into `big = tf32(x)` and `small = tf32(x - big)`; a product is
//! `a_small * b_big + a_big * b_small + a_big * b_big` (the `small * small` term, about 2^-22
//! of the product, is dropped), accumulated in f32 — about f32 accuracy at three TF32 tensor-core
//! instructions per atom, where one TF32 product alone keeps only 10 mantissa bits. The tensor
//! cores round their f32 sums toward zero, a bias that grows with the number of `mma` into one
//! accumulator (measured on the H100: relative error 2.9e-5 at K = 4096 with one accumulator,
//! linear in K); so each k-tile accumulates from zero and is then added, rounded to nearest,
//! into the running total ([`Builder::tf32_flush`]). The
//! fragments are read element by element from the same swizzled stages the `cp.async` ring fills,
//! at the offsets of [`StageTile::tf32_domain`] composed with the stage layout.

use super::stage::StageTile;
use crate::MmaConfig;
use crate::lower::*;
use irc_ir::DType;
use irc_kir::{self as kir, Expr, Func, Intrinsic, Space, Stmt, Ty};
use irc_layout::Layout;

/// The f32 fragments of one k-step and where they come from.
pub(super) struct Tf32Frags {
    tile_a: StageTile,
    tile_b: StageTile,
    /// `(lane, value, atom, k-step, warp)` → offset in a stage, before the swizzle.
    dom_a: Layout,
    dom_b: Layout,
    /// The shared rings `(elems, S)`.
    sa: String,
    sb: String,
    /// `(value, atom)` registers: A's 4 values per atom, B's 2, each as its big and small part.
    a_big: String,
    a_small: String,
    b_big: String,
    b_small: String,
}

/// The passes a k-tile makes over the warp's A atoms: two where they split evenly.
pub(super) fn tf32_parts(cfg: MmaConfig) -> u64 {
    if cfg.mt().is_multiple_of(2) { 2 } else { 1 }
}

impl Builder<'_, '_> {
    /// The fragment registers and read layouts of the f32 path. K is relabelled in pairs unless
    /// both stages are K-contiguous ([`StageTile::tf32_domain`]).
    pub(super) fn tf32_fragments(
        &mut self,
        cfg: MmaConfig,
        tile_a: &StageTile,
        tile_b: &StageTile,
        sa: &str,
        sb: &str,
    ) -> R<Tf32Frags> {
        let pairs = !(tile_a.k_fast && tile_b.k_fast);
        let dom = |t: &StageTile, b: bool, atoms: u64, warps: u64| {
            t.tf32_domain(b, pairs, atoms, warps)
                .and_then(|d| t.through(&d))
                .map_err(internal)
        };
        let dom_a = dom(tile_a, false, cfg.mt(), cfg.warps_m)?;
        let dom_b = dom(tile_b, true, cfg.nt(), cfg.warps_n)?;
        let mut regs = |values: i64, atoms: u64| -> R<String> {
            let l = Layout::flat(&[values, atoms as i64], &[1, values]).map_err(internal)?;
            Ok(self.tensor(Space::Registers, DType::F32, l))
        };
        Ok(Tf32Frags {
            tile_a: tile_a.clone(),
            tile_b: tile_b.clone(),
            dom_a,
            dom_b,
            sa: sa.to_string(),
            sb: sb.to_string(),
            a_big: regs(4, cfg.mt())?,
            a_small: regs(4, cfg.mt())?,
            b_big: regs(2, cfg.nt())?,
            b_small: regs(2, cfg.nt())?,
        })
    }

    /// The k-steps of stage `cur`, in runs of four (32 K), each run in [`tf32_parts`] passes over
    /// a part of the warp's A atoms (B's fragments read again per part), each pass accumulating
    /// from zero in `acc` and flushed into `total`. A pass's k-steps are unrolled (ptxas loads
    /// the next k-step's fragments under this one's mmas); the runs are not. With the whole
    /// tile in `acc` beside `total`, 128 accumulator registers spilled (124–360 bytes at 255
    /// registers, sm_80 and sm_90a); a part's partial sums take 32.
    pub(super) fn tf32_tile(
        &mut self,
        f: &Tf32Frags,
        cfg: MmaConfig,
        (acc, total): (&str, &str),
        at: (&Expr, &Expr, &Expr, &Expr),
    ) -> R<()> {
        let run = 4.min(cfg.bk / 8);
        let runs = cfg.bk / 8 / run;
        let parts = tf32_parts(cfg);
        self.for_(
            "kr",
            Expr::Int(0),
            int(runs),
            Expr::Int(1),
            false,
            |s, kr| {
                for part in 0..parts {
                    s.for_("ks", Expr::Int(0), int(run), Expr::Int(1), true, |s, ks| {
                        let ks = s.let_("kk", Ty::Idx, add(mul(kr.clone(), int(run)), ks));
                        s.tf32_kstep(f, cfg, acc, at, &ks, part)
                    })?;
                    s.tf32_flush(cfg, acc, total, part)?;
                }
                Ok(())
            },
        )
    }

    /// One 8-deep k-step `ks` of stage `cur` for part `part` of the A atoms: B's fragments of
    /// every atom, then per A atom of the part its fragment and its row of `3 * nt` mmas into
    /// `acc` (indexed within the part).
    pub(super) fn tf32_kstep(
        &mut self,
        f: &Tf32Frags,
        cfg: MmaConfig,
        acc: &str,
        (lane, wm, wn, cur): (&Expr, &Expr, &Expr, &Expr),
        ks: &Expr,
        part: u64,
    ) -> R<()> {
        self.unrolled("j", cfg.nt(), &mut |s, j| {
            s.unrolled("v", 2, &mut |s, v| {
                let at = vec![lane.clone(), v.clone(), j.clone(), ks.clone(), wn.clone()];
                let frag = (&f.b_big, &f.b_small);
                s.tf32_split(
                    &f.tile_b,
                    &f.dom_b,
                    &f.sb,
                    at,
                    cur,
                    frag,
                    vec![v, j.clone()],
                )
            })
        })?;
        let per = cfg.mt() / tf32_parts(cfg);
        self.unrolled("i", per, &mut |s, i| {
            let atom = add(int(part * per), i.clone());
            s.unrolled("v", 4, &mut |s, v| {
                let at = vec![
                    lane.clone(),
                    v.clone(),
                    atom.clone(),
                    ks.clone(),
                    wm.clone(),
                ];
                let frag = (&f.a_big, &f.a_small);
                s.tf32_split(
                    &f.tile_a,
                    &f.dom_a,
                    &f.sa,
                    at,
                    cur,
                    frag,
                    vec![v, i.clone()],
                )
            })?;
            s.unrolled("j", cfg.nt(), &mut |s, j| {
                // The small terms first: the big product is added to the larger partial sum last.
                for (a, b) in [
                    (&f.a_small, &f.b_big),
                    (&f.a_big, &f.b_small),
                    (&f.a_big, &f.b_big),
                ] {
                    s.out.push(Stmt::Intrinsic {
                        op: Intrinsic::MmaM16n8k8Tf32,
                        args: vec![
                            kir::Arg::at(acc, vec![i.clone(), j.clone()]),
                            kir::Arg::at(a, vec![i.clone()]),
                            kir::Arg::at(b, vec![j.clone()]),
                        ],
                    });
                }
                Ok(())
            })
        })
    }

    /// `total[.., part atoms, ..] += acc; acc = 0`: the end of a pass.
    pub(super) fn tf32_flush(
        &mut self,
        cfg: MmaConfig,
        acc: &str,
        total: &str,
        part: u64,
    ) -> R<()> {
        let per = cfg.mt() / tf32_parts(cfg);
        self.unrolled("v", 4, &mut |s, v| {
            s.unrolled("i", per, &mut |s, i| {
                s.unrolled("j", cfg.nt(), &mut |s, j| {
                    let at = vec![v.clone(), i.clone(), j.clone()];
                    let to = vec![v.clone(), add(int(part * per), i.clone()), j];
                    let sum = Expr::call(
                        Func::Add,
                        vec![Expr::load(total, to.clone()), Expr::load(acc, at.clone())],
                    );
                    s.out.push(Stmt::Store {
                        tensor: total.to_string(),
                        coord: to,
                        value: sum,
                    });
                    s.out.push(Stmt::Store {
                        tensor: acc.to_string(),
                        coord: at,
                        value: lit(DType::F32, 0.0),
                    });
                    Ok(())
                })
            })
        })
    }

    /// Reads the stage element at `dom(at)` (swizzled) of ring stage `cur` and stores its big and
    /// small TF32 parts at `reg` of the two register tensors.
    #[allow(clippy::too_many_arguments)]
    fn tf32_split(
        &mut self,
        tile: &StageTile,
        dom: &Layout,
        ring: &str,
        at: Vec<Expr>,
        cur: &Expr,
        (big, small): (&String, &String),
        reg: Vec<Expr>,
    ) -> R<()> {
        let off = kir::swizzled_offset_expr(&tile.swizzle, dom, &at).map_err(internal)?;
        let off = self.let_("so", Ty::Idx, off);
        let x = self.let_(
            "x",
            Ty::Elem(DType::F32),
            Expr::load(ring, vec![off, cur.clone()]),
        );
        let hi = self.let_(
            "hi",
            Ty::Elem(DType::F32),
            Expr::call(Func::Tf32, vec![x.clone()]),
        );
        let lo = Expr::call(Func::Tf32, vec![Expr::call(Func::Sub, vec![x, hi.clone()])]);
        self.out.push(Stmt::Store {
            tensor: big.clone(),
            coord: reg.clone(),
            value: hi,
        });
        self.out.push(Stmt::Store {
            tensor: small.clone(),
            coord: reg,
            value: lo,
        });
        Ok(())
    }
}
