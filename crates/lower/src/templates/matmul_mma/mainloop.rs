//! The tensor-core template's kernel: a ring of `S` swizzled shared stages filled by
//! `cp.async`, `ldmatrix` fragments through the stage layouts, `mma.sync.m16n8k16`.
//!
//! The schedule (CUTLASS's sm_80 multistage mainloop):
//!
//! ```text
//! prologue:  for s in 0..S-1 { copy k-tile s into stage s; commit }
//! for kt in 0..ktiles {
//!     cp.async.wait S-2; sync          // k-tile kt has landed, everyone is done with kt-1
//!     copy k-tile kt+S-1 into stage (kt+S-1) % S; commit   // the stage kt-1 used
//!     ldmatrix + mma on stage kt % S
//! }
//! cp.async.wait 0                      // before the epilogue reuses A's stages
//! ```
//!
//! A commit is issued every iteration, empty or not, so that `wait S-2` always means "all
//! but the last S-2 k-tiles have landed". Each operand's copies are as wide as its global
//! layout allows ([`copy_width`]): 16, 8 or 4 bytes per `cp.async`, out-of-range chunks
//! zero-filled (source size 0); an operand no copy can read (a row start that is not 4-byte
//! aligned, an operand computed in place) is loaded element by element into the same ring.

use super::epilogue::TcEpilogue;
use super::stage::StageTile;
use super::{TcPlan, copy_width, matmul_grid, vector_copy, vector_layout};
use crate::LowerError;
use crate::MmaConfig;
use crate::lower::*;
use irc_ir::{DType, Inst, ValueId};
use irc_kir::{self as kir, Builtin, Expr, IdxOp, Intrinsic, Space, Stmt, Ty};
use irc_layout::Layout;

/// The 16-bit path's `ldmatrix` operands: the rings' 16-byte chunks, the lanes' row starts,
/// the fragment registers.
struct Ldmatrix {
    sa8: String,
    sb8: String,
    rows_a: Layout,
    rows_b: Layout,
    fa: String,
    fb: String,
    fb_pairs: String,
}

/// The most bytes a thread holds of operands loaded element by element through registers
/// ([`Builder::ring_to_registers`]): 16 registers.
const DEFERRED_BYTES: u64 = 64;

/// One operand's copies into the ring.
struct RingLoad {
    v: ValueId,
    /// `(m, k, batch)` for A, `(k, n, batch)` for B → the operand's index.
    access: Layout,
    tile: StageTile,
    /// M or N, and the block's first row.
    extent: u64,
    row0: Expr,
    /// Where the row coordinate sits in `access`'s coordinate (0 for A, 1 for B).
    row_pos: usize,
    /// Elements per copy (16, 8 or 4 bytes) and, for a `cp.async`, the global tensor whose fast
    /// mode is divided into `w`-element vectors (`None`: element by element, `w` = 1).
    w: u64,
    global: Option<String>,
    /// The shared ring `(elems, S)` and its `w`-element view `(elems / w, S)`.
    ring: String,
    view: String,
}

impl Builder<'_, '_> {
    /// A matmul on tensor cores, storing `root` as `matmul` does: f16/bf16 in by
    /// `mma.m16n8k16`, or f32 in by three `mma.m16n8k8.tf32` per atom (`tf32.rs`), f32
    /// accumulate.
    pub(crate) fn matmul_tc(&mut self, inst: &Inst, roots: &[ValueId], p: TcPlan) -> R<()> {
        use irc_layout::mma_m16n8k16_c;
        let cfg = match self.config {
            Some(super::super::Config::Mma(c)) => c,
            _ => self.l.options.mma.unwrap_or_else(|| {
                let shape = (p.m, p.n, p.k, p.batch);
                MmaConfig::heuristic_for(&self.l.options.target, p.dtype.size_bytes(), shape)
            }),
        };
        let dt = p.dtype;
        let tf32 = dt == DType::F32;
        // The heuristic's point, refined: both operands K-major and read element by element
        // (rows not 4-byte aligned) spill at 4 stages of 128x128 tiles once the ring wraps
        // (ptxas, sm_80 and sm_90a: 80 bytes for A·Bᵀ from K = 129 on), not at 3.
        let heuristic = match self.config {
            Some(super::super::Config::Mma(_)) => self.heuristic,
            _ => self.l.options.mma.is_none(),
        };
        // The f16/bf16 point's 64x64 warps hold 128 accumulators a thread. Where an operand
        // is read in pieces narrower than 16 bytes, the output cannot take 16-byte stores, or a
        // norm prologue or the epilogue's reductions add registers, ptxas spilled (sm_80: 4-48
        // bytes on tests/gpu/matmul_realign.ir and wgmma_odd_n.ir): those take the 64x32
        // warps of `MmaConfig::DEFAULT`, refined below like any heuristic point.
        let cfg = if heuristic && cfg == MmaConfig::F16 && !self.f16_fits(inst, roots, &p) {
            let c = MmaConfig::DEFAULT;
            if matches!(self.config, Some(super::super::Config::Mma(_))) {
                self.config = Some(super::super::Config::Mma(c));
            }
            c
        } else {
            cfg
        };
        let wraps = p.k.div_ceil(cfg.bk) > cfg.stages;
        let cfg = if heuristic && wraps && cfg.stages > 3 && !tf32 && {
            let a = p.prologue.as_ref().map_or(inst.operands[0], |q| q.x);
            let by_element = |s: &mut Self, v, access: &Layout, fast| {
                vector_copy(s, v, access, fast, dt.size_bytes()).is_none()
            };
            p.a_k_fast
                && !p.b_n_fast
                && by_element(self, a, &p.access_a, 1)
                && by_element(self, inst.operands[1], &p.access_b, 0)
        } {
            let c = MmaConfig { stages: 3, ..cfg };
            if matches!(self.config, Some(super::super::Config::Mma(_))) {
                self.config = Some(super::super::Config::Mma(c));
            }
            c
        } else {
            cfg
        };
        cfg.check_for(&self.l.options.target, dt.size_bytes())
            .map_err(|why| {
                Retry::Fail(LowerError::Unsupported {
                    op: "matmul".into(),
                    reason: format!("the tensor-core configuration {why}"),
                })
            })?;
        // A norm prologue's A is its x, scaled in shared memory (`norm_prologue`).
        let a = p.prologue.as_ref().map_or(inst.operands[0], |q| q.x);
        let bv = inst.operands[1];
        self.kernel.grid = matmul_grid(p.m, p.n, p.batch, cfg.bm, cfg.bn)?;
        self.kernel.block = [cfg.threads() as u32, 1, 1];
        // Elements per 16-byte chunk.
        let w16 = 16 / dt.size_bytes();
        let cs: Vec<String> = roots
            .iter()
            .map(|&r| self.global(r, p.access_c.clone()))
            .collect();
        let mm = inst.result;
        // 16-byte stores of C where it is N-contiguous with N a multiple of 16 bytes and the
        // chain keeps the matmul's dtype.
        let c_vec = match vector_layout(&p.access_c, 1, w16 as i64) {
            Some(l)
                if !roots.is_empty()
                    && roots.iter().all(|&r| self.ty(r).dtype == dt)
                    && kir::is_vector_operand(&l, w16 as i64, p.access_c.rank()) =>
            {
                Some(roots.iter().map(|&r| self.global(r, l.clone())).collect())
            }
            _ => None,
        };
        let stages = cfg.stages as i64;
        let tile_a =
            StageTile::new(cfg.bm, cfg.bk, p.a_k_fast, dt.size_bytes()).map_err(internal)?;
        let tile_b =
            StageTile::new(cfg.bn, cfg.bk, !p.b_n_fast, dt.size_bytes()).map_err(internal)?;
        // A ring of `stages` tiles, in `w`-element units.
        let ring = |t: &StageTile, w: i64| {
            Layout::flat(&[t.elems() / w, stages], &[w, t.elems()]).map_err(internal)
        };
        let la = ring(&tile_a, 1)?;
        let sa = self.tensor(Space::Shared, dt, la);
        let lb = ring(&tile_b, 1)?;
        let sb = self.tensor(Space::Shared, dt, lb);
        // 16-bit: 16-byte chunks of each ring, what ldmatrix reads.
        let chunks = match tf32 {
            true => None,
            false => Some((
                self.tensor(Space::View(sa.clone()), dt, ring(&tile_a, 8)?),
                self.tensor(Space::View(sb.clone()), dt, ring(&tile_b, 8)?),
            )),
        };
        // The epilogue's staging tile reuses A's ring once the main loop is done: half the
        // block's rows, pitch bn + 8 (16-byte rows; the accumulator pairs a warp stores land
        // in distinct banks), and its view in 16-byte chunks.
        let stage = self.tensor(
            Space::View(sa.clone()),
            dt,
            Layout::flat(&[cfg.bm as i64 / 2, cfg.bn as i64], &[cfg.bn as i64 + 8, 1])
                .map_err(internal)?,
        );
        let w = w16 as i64;
        let stage_v = self.tensor(
            Space::View(sa.clone()),
            dt,
            Layout::flat(
                &[w, cfg.bm as i64 / 2, cfg.bn as i64 / w],
                &[1, cfg.bn as i64 + 8, w],
            )
            .map_err(internal)?,
        );
        let atom_c = mma_m16n8k16_c().map_err(internal)?;
        let (trans_a, trans_b) = (!p.a_k_fast, p.b_n_fast);
        // f32: fragments element by element through the tf32 domains (`tf32.rs`).
        let tf = if tf32 {
            Some(self.tf32_fragments(cfg, &tile_a, &tile_b, &sa, &sb)?)
        } else {
            None
        };
        // 16-bit: fragments come from shared memory by `ldmatrix.x4`: each lane names the
        // start of one 8-element row, the stage layout composed with `ldmatrix_domain` and
        // swizzled. `.trans` where the tile's contiguous dimension is M (A) or N (B).
        let ldm = match chunks {
            None => None,
            Some((sa8, sb8)) => {
                let rows = |tile: &StageTile, b: bool, trans: bool, atoms: u64, warps: u64| {
                    tile.ldmatrix_domain(b, trans, atoms, warps)
                        .and_then(|d| tile.through(&d))
                        .map_err(internal)
                };
                let rows_a = rows(&tile_a, false, trans_a, cfg.mt(), cfg.warps_m)?;
                let rows_b = rows(&tile_b, true, trans_b, cfg.nt() / 2, cfg.warps_n)?;
                let regs = |s: &mut Self, values: i64, atoms: u64| -> R<String> {
                    let l =
                        Layout::flat(&[values, atoms as i64], &[1, values]).map_err(internal)?;
                    Ok(s.tensor(Space::Registers, dt, l))
                };
                let fa = regs(self, 8, cfg.mt())?;
                let fb = regs(self, 4, cfg.nt())?;
                // One ldmatrix.x4 fills the B fragments of two atoms: 8 values, atom pairs.
                let pairs = Layout::flat(&[8, cfg.nt() as i64 / 2], &[1, 8]).map_err(internal)?;
                let fb_pairs = self.tensor(Space::View(fb.clone()), dt, pairs);
                Some(Ldmatrix {
                    sa8,
                    sb8,
                    rows_a,
                    rows_b,
                    fa,
                    fb,
                    fb_pairs,
                })
            }
        };
        let acc_layout = Layout::flat(
            &[4, cfg.mt() as i64, cfg.nt() as i64],
            &[1, 4, 4 * cfg.mt() as i64],
        )
        .map_err(internal)?;
        // f32: the partial sums of one part of the warp's A atoms (`tf32.rs`).
        let acc = if tf32 {
            let mt = (cfg.mt() / super::tf32::tf32_parts(cfg)) as i64;
            let l = Layout::flat(&[4, mt, cfg.nt() as i64], &[1, 4, 4 * mt]).map_err(internal)?;
            self.tensor(Space::Registers, DType::F32, l)
        } else {
            self.tensor(Space::Registers, DType::F32, acc_layout.clone())
        };
        // f32: the k-tile's products accumulate in `acc` on the tensor cores, which round toward
        // zero, then `total += acc` rounds to nearest (`tf32.rs`); the epilogue reads `total`.
        let total = match tf32 {
            true => Some(self.tensor(Space::Registers, DType::F32, acc_layout)),
            false => None,
        };
        let mt_acc = match tf32 {
            true => cfg.mt() / super::tf32::tf32_parts(cfg),
            false => cfg.mt(),
        };
        // Each operand's copies: as wide as its layout allows.
        let mut loads: Vec<RingLoad> = vec![];
        for (v, access, tile, extent, row_pos, smem) in [
            (a, &p.access_a, &tile_a, p.m, 0usize, &sa),
            (bv, &p.access_b, &tile_b, p.n, 1, &sb),
        ] {
            let fast = if tile.k_fast { 1 - row_pos } else { row_pos };
            let (w, global) = match copy_width(self, v, access, fast, dt.size_bytes()) {
                Some((w, g)) => (w, Some(g)),
                None => (1, None),
            };
            let lv = ring(tile, w as i64)?;
            let view = if global.is_none() {
                smem.clone()
            } else {
                self.tensor(Space::View(smem.clone()), dt, lv)
            };
            loads.push(RingLoad {
                v,
                access: access.clone(),
                tile: tile.clone(),
                extent,
                row0: Expr::Int(0),
                row_pos,
                w,
                global,
                ring: smem.clone(),
                view,
            });
        }
        // Operands read element by element (rows not 4-byte aligned): the loop's loads go to
        // registers and reach the ring after the k-tile's products, so their latency hides
        // under the mmas (a cp.async cannot take 2 bytes).
        // Only where they fit in 16 registers a thread beside the accumulators (the default
        // 16-bit point: 16 elements of each operand); larger shares would spill, and load
        // straight into the ring as before.
        let per_thread = |l: &RingLoad| l.tile.elems() as u64 / cfg.threads();
        let bytes: u64 = loads
            .iter()
            .filter(|l| l.global.is_none())
            .map(|l| per_thread(l) * dt.size_bytes())
            .sum();
        let deferred: Vec<Option<String>> = if bytes <= DEFERRED_BYTES {
            loads
                .iter()
                .map(|l| self.ring_registers(l, dt))
                .collect::<R<_>>()?
        } else {
            vec![None; loads.len()]
        };
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
        let wm = self.let_(
            "wm",
            Ty::Idx,
            Expr::idx(IdxOp::Div, warp.clone(), int(cfg.warps_n)),
        );
        let wn = self.let_("wn", Ty::Idx, Expr::idx(IdxOp::Rem, warp, int(cfg.warps_n)));
        let ktiles = p.k.div_ceil(cfg.bk);
        // A norm prologue: the block scales each A stage in place between two barriers; the
        // rows' scales go to shared memory for the epilogue.
        let prologue = match (&p.prologue, &ldm) {
            (None, _) => None,
            (Some(pro), Some(_)) if tile_a.k_fast => {
                // A's ring as 16-byte vectors: (8 elements, chunk, stage).
                let vectors = self.tensor(
                    Space::View(sa.clone()),
                    dt,
                    Layout::flat(&[8, tile_a.elems() / 8, stages], &[1, 8, tile_a.elems()])
                        .map_err(internal)?,
                );
                let scales = self.tensor(
                    Space::Shared,
                    DType::F32,
                    Layout::int(cfg.bm as i64, 1).map_err(internal)?,
                );
                let pt =
                    self.prologue_tile(cfg.bm, cfg.bk / 8, cfg.threads(), bx(Builtin::TidX))?;
                Some((pro.clone(), vectors, scales, pt))
            }
            (Some(_), _) => {
                return Err(Retry::Fail(LowerError::Internal(
                    "a norm prologue needs a 16-bit, K-contiguous A".into(),
                )));
            }
        };
        let reduce = match p.reductions.is_empty() {
            true => None,
            false => Some(self.reduce_tiles(&p, cfg.bm, cfg.bn, cfg.bm / 2)?),
        };
        let epi = TcEpilogue {
            reduce,
            row_scale: prologue.as_ref().map(|q| q.2.clone()),
            cfg,
            p: &p,
            dt,
            mm,
            roots,
            cs: &cs,
            c_vec,
            stage,
            stage_v,
            acc: total.clone().unwrap_or_else(|| acc.clone()),
            atom_c_layout: atom_c.layout().clone(),
            lane: lane.clone(),
            wm: wm.clone(),
            wn: wn.clone(),
        };
        let commit = || Stmt::Intrinsic {
            op: Intrinsic::CpAsyncCommit,
            args: vec![],
        };
        let wait = |n: i64| Stmt::Intrinsic {
            op: Intrinsic::CpAsyncWait,
            args: vec![kir::Arg::Expr(Expr::Int(n))],
        };
        self.batch_loop(p.batch, |s, bi| {
            let m0 = s.let_("m0", Ty::Idx, mul(bx(Builtin::BidY), int(cfg.bm)));
            let n0 = s.let_("n0", Ty::Idx, mul(bx(Builtin::BidX), int(cfg.bn)));
            // A block with more than one batch (beyond 65535 of them) must not refill A's
            // ring while slower threads still read the last epilogue's staging tile in it.
            if p.batch > u64::from(s.kernel.grid[2]) {
                s.out.push(Stmt::Sync);
            }
            loads[0].row0 = m0.clone();
            loads[1].row0 = n0.clone();
            for (t, atoms) in [(Some(&acc), mt_acc), (total.as_ref(), cfg.mt())] {
                let Some(t) = t else { continue };
                s.unrolled("v", 4, &mut |s, v| {
                    s.unrolled("i", atoms, &mut |s, i| {
                        let v = v.clone();
                        s.unrolled("j", cfg.nt(), &mut |s, j| {
                            s.out.push(Stmt::Store {
                                tensor: t.clone(),
                                coord: vec![v.clone(), i.clone(), j],
                                value: lit(DType::F32, 0.0),
                            });
                            Ok(())
                        })
                    })
                })?;
            }
            if let Some((_, _, _, pt)) = &prologue {
                s.prologue_zero(pt)?;
            }
            // Prologue: k-tiles 0..S-1 into stages 0..S-1 (a commit for each, loaded or
            // not).
            for st in 0..(stages as u64 - 1) {
                if st < ktiles {
                    for l in &loads {
                        s.ring_load(l, &int(st * cfg.bk), &int(st), &bi, p.k, dt)?;
                    }
                }
                s.out.push(commit());
            }
            s.for_(
                "kt",
                Expr::Int(0),
                int(ktiles),
                Expr::Int(1),
                false,
                |s, kt| {
                    // A norm prologue's g for this k-tile, loaded before the wait.
                    let mut g_regs = None;
                    if let Some((pro, _, _, pt)) = &prologue {
                        let k0 = s.let_("pk0", Ty::Idx, mul(kt.clone(), int(cfg.bk)));
                        g_regs = s.prologue_g(pro, pt, &k0, p.k)?;
                    }
                    s.out.push(wait(stages - 2));
                    s.out.push(Stmt::Sync);
                    if let Some((pro, sa8, _, pt)) = &prologue {
                        let k0 = s.let_("pk0", Ty::Idx, mul(kt.clone(), int(cfg.bk)));
                        let st = s.let_(
                            "ps",
                            Ty::Idx,
                            Expr::idx(IdxOp::Rem, kt.clone(), int(stages as u64)),
                        );
                        s.prologue_stage(
                            pro,
                            pt,
                            &k0,
                            p.k,
                            g_regs.as_deref(),
                            &mut |s, row, c| {
                                let off = kir::swizzled_offset_expr(
                                    &tile_a.swizzle,
                                    &tile_a.layout,
                                    &[row, mul(c, Expr::Int(8))],
                                )
                                .map_err(internal)?;
                                let at =
                                    s.let_("pa", Ty::Idx, Expr::idx(IdxOp::Div, off, Expr::Int(8)));
                                Ok(kir::Frag {
                                    tensor: sa8.clone(),
                                    at: vec![at, st.clone()],
                                })
                            },
                        )?;
                        s.out.push(Stmt::Sync);
                    }
                    let next = s.let_("kn", Ty::Idx, add(kt.clone(), int(stages as u64 - 1)));
                    let body = s.block(|s| {
                        let k0 = s.let_("k0", Ty::Idx, mul(next.clone(), int(cfg.bk)));
                        let st = s.let_(
                            "sn",
                            Ty::Idx,
                            Expr::idx(IdxOp::Rem, next.clone(), int(stages as u64)),
                        );
                        for (l, regs) in loads.iter().zip(&deferred) {
                            match regs {
                                Some(regs) => s.ring_to_registers(l, &k0, &bi, p.k, dt, regs)?,
                                None => s.ring_load(l, &k0, &st, &bi, p.k, dt)?,
                            }
                        }
                        Ok(())
                    })?;
                    s.out.push(Stmt::If {
                        cond: lt(next.clone(), int(ktiles)),
                        body,
                        orelse: vec![],
                    });
                    s.out.push(commit());
                    let cur = s.let_("sc", Ty::Idx, Expr::idx(IdxOp::Rem, kt, int(stages as u64)));
                    if let (Some(tf), Some(total)) = (&tf, &total) {
                        s.tf32_tile(tf, cfg, (&acc, total), (&lane, &wm, &wn, &cur))?;
                        return s.ring_from_registers(&loads, &deferred, &next, ktiles, stages);
                    }
                    let Some(Ldmatrix {
                        sa8,
                        sb8,
                        rows_a,
                        rows_b,
                        fa,
                        fb,
                        fb_pairs,
                    }) = &ldm
                    else {
                        return Err(Retry::Fail(LowerError::Internal(
                            "no ldmatrix fragments for 16-bit operands".into(),
                        )));
                    };
                    // The k-steps of a tile are unrolled, so that ptxas can load the next
                    // k-step's fragments under this one's mmas: about 30 more registers
                    // (199 for the default on sm_80; one block per SM either way).
                    s.for_(
                        "ks",
                        Expr::Int(0),
                        int(cfg.bk / 16),
                        Expr::Int(1),
                        true,
                        |s, ks| {
                            // B's fragments first, then per A atom its fragment and
                            // its row of mmas: one A fragment live at a time.
                            s.unrolled("j", cfg.nt() / 2, &mut |s, j| {
                                let at = s.swizzled_chunk(
                                    &tile_b,
                                    rows_b,
                                    vec![lane.clone(), j.clone(), ks.clone(), wn.clone()],
                                    8,
                                )?;
                                s.out.push(Stmt::Intrinsic {
                                    op: Intrinsic::ldmatrix_x4(trans_b),
                                    args: vec![
                                        kir::Arg::at(fb_pairs, vec![j]),
                                        kir::Arg::at(sb8, vec![at, cur.clone()]),
                                    ],
                                });
                                Ok(())
                            })?;
                            s.unrolled("i", cfg.mt(), &mut |s, i| {
                                let at = s.swizzled_chunk(
                                    &tile_a,
                                    rows_a,
                                    vec![lane.clone(), i.clone(), ks.clone(), wm.clone()],
                                    8,
                                )?;
                                s.out.push(Stmt::Intrinsic {
                                    op: Intrinsic::ldmatrix_x4(trans_a),
                                    args: vec![
                                        kir::Arg::at(fa, vec![i.clone()]),
                                        kir::Arg::at(sa8, vec![at, cur.clone()]),
                                    ],
                                });
                                s.unrolled("j", cfg.nt(), &mut |s, j| {
                                    s.out.push(Stmt::Intrinsic {
                                        op: Intrinsic::MmaM16n8k16,
                                        args: vec![
                                            kir::Arg::at(&acc, vec![i.clone(), j.clone()]),
                                            kir::Arg::at(fa, vec![i.clone()]),
                                            kir::Arg::at(fb, vec![j]),
                                        ],
                                    });
                                    Ok(())
                                })
                            })
                        },
                    )?;
                    s.ring_from_registers(&loads, &deferred, &next, ktiles, stages)
                },
            )?;
            // Every copy has landed before the epilogue reuses A's ring (its first step
            // is a barrier).
            s.out.push(wait(0));
            if let Some((pro, _, scales, pt)) = &prologue {
                s.prologue_scales(pro, pt, p.k, &|row| kir::Frag {
                    tensor: scales.clone(),
                    at: vec![row],
                })?;
            }
            s.tc_epilogue(&epi, &m0, &n0, &bi)
        })
    }

    /// Whether [`MmaConfig::F16`]'s 128 accumulators a thread leave room for the rest: both
    /// operands read by 16-byte copies, every root stored by 16-byte copies in the matmul's
    /// dtype, no norm prologue and no reductions in the epilogue.
    fn f16_fits(&self, inst: &Inst, roots: &[ValueId], p: &TcPlan) -> bool {
        let dt = p.dtype;
        let w16 = 16 / dt.size_bytes();
        let wide = |v, access: &Layout, fast| {
            vector_copy(self, v, access, fast, dt.size_bytes()).is_some_and(|(w, ..)| w == w16)
        };
        let a_fast = if p.a_k_fast { 1 } else { 0 };
        let b_fast = if p.b_n_fast { 1 } else { 0 };
        let c_vec = vector_layout(&p.access_c, 1, w16 as i64)
            .is_some_and(|l| kir::is_vector_operand(&l, w16 as i64, p.access_c.rank()));
        p.prologue.is_none()
            && p.reductions.is_empty()
            && wide(inst.operands[0], &p.access_a, a_fast)
            && wide(inst.operands[1], &p.access_b, b_fast)
            && c_vec
            && !roots.is_empty()
            && roots.iter().all(|&r| self.ty(r).dtype == dt)
    }

    /// `sw(L(coord)) / w`: the swizzled offset in `tile` of the coordinate layout `l` at
    /// `coord`, in `w`-element units (the chunks `w` divides: the swizzle keeps the low bits).
    fn swizzled_chunk(
        &mut self,
        tile: &StageTile,
        l: &Layout,
        coord: Vec<Expr>,
        w: u64,
    ) -> R<Expr> {
        let off = kir::swizzled_offset_expr(&tile.swizzle, l, &coord).map_err(internal)?;
        Ok(self.let_("so", Ty::Idx, Expr::idx(IdxOp::Div, off, int(w))))
    }

    /// The registers of a thread's elements of one k-tile of an operand read element by
    /// element (`None` for one read by `cp.async`).
    fn ring_registers(&mut self, t: &RingLoad, dt: DType) -> R<Option<String>> {
        if t.global.is_some() {
            return Ok(None);
        }
        let per_thread = t.tile.elems() as u64 / u64::from(self.kernel.block[0]);
        let l = Layout::int(per_thread as i64, 1).map_err(internal)?;
        Ok(Some(self.tensor(Space::Registers, dt, l)))
    }

    /// The `(row, k, shared offset)` layouts over `(thread, copy, batch)` of an operand's
    /// k-tile read in `t.w`-element copies, `inner` copies a batch ([`StageTile::copy_domain`]).
    fn ring_layouts(&self, t: &RingLoad, inner: u64) -> R<(Layout, Layout, Layout)> {
        let threads = u64::from(self.kernel.block[0]);
        let dom = t.tile.copy_domain(t.w, threads, inner).map_err(internal)?;
        let smem_l = t.tile.through(&dom).map_err(internal)?;
        let (row_of, k_of) = t.tile.projections().map_err(internal)?;
        let row_l = irc_layout::composition(&row_of, &dom).map_err(internal)?;
        let k_l = irc_layout::composition(&k_of, &dom).map_err(internal)?;
        Ok((row_l, k_l, smem_l))
    }

    /// A thread's elements of an operand read element by element, all in one batch: the
    /// [`Builder::ring_layouts`] and their count.
    fn ring_elements(&self, t: &RingLoad) -> R<(Layout, Layout, Layout, u64)> {
        let per_thread = t.tile.elems() as u64 / u64::from(self.kernel.block[0]);
        let (row_l, k_l, smem_l) = self.ring_layouts(t, per_thread)?;
        Ok((row_l, k_l, smem_l, per_thread))
    }

    /// The thread's elements of an operand's k-tile at `k0` into `regs` (zeros out of range).
    fn ring_to_registers(
        &mut self,
        t: &RingLoad,
        k0: &Expr,
        bi: &Expr,
        kdim: u64,
        dt: DType,
        regs: &str,
    ) -> R<()> {
        let (row_l, k_l, _, per_thread) = self.ring_elements(t)?;
        let k_pos = 1 - t.row_pos;
        let tid = bx(Builtin::TidX);
        self.unrolled("l", per_thread, &mut |s, l| {
            let c = vec![tid.clone(), l.clone(), Expr::Int(0)];
            let rr = kir::offset_expr(&row_l, &c).map_err(internal)?;
            let kk = kir::offset_expr(&k_l, &c).map_err(internal)?;
            let grow = s.let_("gr", Ty::Idx, add(t.row0.clone(), rr));
            let gk = s.let_("gk", Ty::Idx, add(k0.clone(), kk));
            let cond = Expr::idx(
                IdxOp::And,
                lt(grow.clone(), int(t.extent)),
                lt(gk.clone(), int(kdim)),
            );
            let mut coord = vec![Expr::Int(0), Expr::Int(0), bi.clone()];
            coord[t.row_pos] = grow;
            coord[k_pos] = gk;
            s.out.push(Stmt::Store {
                tensor: regs.to_string(),
                coord: vec![l.clone()],
                value: lit(dt, 0.0),
            });
            let (access, v) = (t.access.clone(), t.v);
            s.if_(cond, |s| {
                s.coord = coord;
                let e = s.value_at(v, &access)?;
                s.out.push(Stmt::Store {
                    tensor: regs.to_string(),
                    coord: vec![l],
                    value: e,
                });
                Ok(())
            })
        })
    }

    /// After a k-tile's products: the registers [`Builder::ring_to_registers`] filled for
    /// k-tile `next` into its ring stage, where `next` is a k-tile (every thread has passed
    /// the barrier after its last read of that stage, and the barrier before the k-tile that
    /// reads it comes after).
    fn ring_from_registers(
        &mut self,
        loads: &[RingLoad],
        deferred: &[Option<String>],
        next: &Expr,
        ktiles: u64,
        stages: i64,
    ) -> R<()> {
        if deferred.iter().all(Option::is_none) {
            return Ok(());
        }
        let body = self.block(|s| {
            let st = s.let_(
                "sr",
                Ty::Idx,
                Expr::idx(IdxOp::Rem, next.clone(), int(stages as u64)),
            );
            for (t, regs) in loads.iter().zip(deferred) {
                let Some(regs) = regs else { continue };
                let (_, _, smem_l, per_thread) = s.ring_elements(t)?;
                let tid = bx(Builtin::TidX);
                s.unrolled("l", per_thread, &mut |s, l| {
                    let c = vec![tid.clone(), l.clone(), Expr::Int(0)];
                    let at = s.swizzled_chunk(&t.tile, &smem_l, c, 1)?;
                    s.out.push(Stmt::Store {
                        tensor: t.ring.clone(),
                        coord: vec![at, st.clone()],
                        value: Expr::load(regs, vec![l]),
                    });
                    Ok(())
                })?;
            }
            Ok(())
        })?;
        self.out.push(Stmt::If {
            cond: lt(next.clone(), int(ktiles)),
            body,
            orelse: vec![],
        });
        Ok(())
    }

    /// One operand's k-tile at `k0` into ring stage `st`: each thread's `w`-element chunks
    /// ([`StageTile::copy_domain`]) by `cp.async` (zero-filled out of range), or element by
    /// element where no copy can read the operand.
    fn ring_load(
        &mut self,
        t: &RingLoad,
        k0: &Expr,
        st: &Expr,
        bi: &Expr,
        kdim: u64,
        dt: DType,
    ) -> R<()> {
        let threads = self.kernel.block[0] as u64;
        // Copies per thread, unrolled in batches of at most 8 (element loads, or narrow
        // cp.async copies of more than 8: 32 of 4 bytes per thread for an f32 tile with odd
        // rows): unrolled, every address would stay live across the k loop, and spill.
        let per_thread = t.tile.elems() as u64 / t.w / threads;
        let inner = if (t.global.is_none() || per_thread > 8) && per_thread.is_multiple_of(8) {
            8
        } else {
            per_thread
        };
        let (row_l, k_l, smem_l) = self.ring_layouts(t, inner)?;
        let batches = per_thread / inner;
        let (layouts, at, sizes) = ((&row_l, &k_l, &smem_l), (k0, st, bi), (kdim, dt));
        if batches == 1 {
            return self.ring_batch(t, layouts, at, sizes, inner, &Expr::Int(0));
        }
        self.for_(
            "lo",
            Expr::Int(0),
            int(batches),
            Expr::Int(1),
            false,
            |s, lo| s.ring_batch(t, layouts, at, sizes, inner, &lo),
        )
    }

    /// One batch `lo` of [`Builder::ring_load`]'s copies: `inner` of them, unrolled.
    #[allow(clippy::too_many_arguments)]
    fn ring_batch(
        &mut self,
        t: &RingLoad,
        (row_l, k_l, smem_l): (&Layout, &Layout, &Layout),
        (k0, st, bi): (&Expr, &Expr, &Expr),
        (kdim, dt): (u64, DType),
        inner: u64,
        lo: &Expr,
    ) -> R<()> {
        let k_pos = 1 - t.row_pos;
        let coord_of = |row: Expr, k: Expr| -> Vec<Expr> {
            let mut c = vec![Expr::Int(0), Expr::Int(0), bi.clone()];
            c[t.row_pos] = row;
            c[k_pos] = k;
            c
        };
        let fast_pos = if t.tile.k_fast { k_pos } else { t.row_pos };
        let tid = bx(Builtin::TidX);
        self.unrolled("l", inner, &mut |s, l| {
            let c = vec![tid.clone(), l, lo.clone()];
            let rr = kir::offset_expr(row_l, &c).map_err(internal)?;
            let kk = kir::offset_expr(k_l, &c).map_err(internal)?;
            let grow = s.let_("gr", Ty::Idx, add(t.row0.clone(), rr));
            let gk = s.let_("gk", Ty::Idx, add(k0.clone(), kk));
            let cond = Expr::idx(
                IdxOp::And,
                lt(grow.clone(), int(t.extent)),
                lt(gk.clone(), int(kdim)),
            );
            let at = s.swizzled_chunk(&t.tile, smem_l, c, t.w)?;
            let Some(g) = &t.global else {
                return s.guarded_tile_load(
                    t.v,
                    &t.access,
                    coord_of(grow, gk),
                    cond,
                    dt,
                    dt,
                    &t.ring,
                    vec![at, st.clone()],
                );
            };
            let op = Intrinsic::cp_async(t.w * dt.size_bytes()).ok_or_else(|| {
                Retry::Fail(LowerError::Internal(format!(
                    "no cp.async of {} elements",
                    t.w
                )))
            })?;
            let mut gcoord = coord_of(grow, gk);
            gcoord[fast_pos] = Expr::idx(IdxOp::Div, gcoord[fast_pos].clone(), int(t.w));
            let dst = kir::Arg::at(&t.view, vec![at, st.clone()]);
            let copy = |src: Vec<Expr>, bytes: u64| Stmt::Intrinsic {
                op,
                args: vec![
                    dst.clone(),
                    kir::Arg::at(g, src),
                    kir::Arg::Expr(int(bytes)),
                ],
            };
            // Where the tiles divide the extent and K, every copy is in range: no guard, so
            // that each copy's address is a constant offset from the block's first (on a
            // 4096³ product, the guards' addresses and predicates held 13 registers more
            // than ptxas had with 64x64 warp tiles).
            if t.extent.is_multiple_of(t.tile.rows) && kdim.is_multiple_of(t.tile.bk) {
                s.out.push(copy(gcoord, t.w * dt.size_bytes()));
                return Ok(());
            }
            // Out of range: a zero-filled copy from the operand's first element.
            s.out.push(Stmt::If {
                cond,
                body: vec![copy(gcoord, t.w * dt.size_bytes())],
                orelse: vec![copy(vec![Expr::Int(0); 3], 0)],
            });
            Ok(())
        })
    }
}
