//! The tensor-core matmul template for sm_80+ (`mma.sync.m16n8k16` for f16/bf16, 3xTF32 on
//! `mma.sync.m16n8k8.tf32` for f32, `tf32.rs`): a multistage
//! `cp.async` pipeline into swizzled shared stages (`stage.rs`, `mainloop.rs`), ldmatrix
//! fragments through lane layouts, an epilogue staged through shared memory with 16-byte
//! stores (`epilogue.rs`). What the attention template shares with it lives here: the
//! ldmatrix row layout, the grid, and the single-stage tile load (`tc_tile_load`).

mod epilogue;
mod mainloop;
mod stage;
mod tf32;

use crate::LowerError;
use crate::lower::*;
use irc_ir::{DType, ValueId};
use irc_kir::{self as kir, Builtin, Expr, IdxOp, Space, Stmt, Ty};
use irc_layout::{Layout, LayoutError, coalesce};

/// The rows whose starts the 32 lanes give `ldmatrix.x4`, as a layout from the lane to an
/// element of a 16x16 tile (column-major index `row + 16*col`, rows being M for A and N for B,
/// columns K). The four 8x8 matrices are the mma fragment registers in order: for A
/// (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15); for B the two
/// registers of atom 0 then of atom 1: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7),
/// (n 8-15, k 8-15). Lane `i` gives row `i % 8` of matrix `i / 8`; with `trans` the tile is stored
/// K-major-by-rows (each 8x8 matrix's stored rows are K), so the lane's row is a K row.
pub(crate) fn ldmatrix_x4_rows(b_operand: bool, trans: bool) -> Result<Layout, LayoutError> {
    // Lane bits: (i % 8, (i / 8) % 2, i / 16). Without trans the first walks rows (stride 1);
    // with trans it walks K (stride 16).
    let s0 = if trans { 16 } else { 1 };
    let (s1, s2) = match (b_operand, trans) {
        // A: matrix bit 0 is rows + 8, bit 1 is k + 8.
        (false, false) => (8, 128),
        (false, true) => (8, 128),
        // B: matrix bit 0 is k + 8, bit 1 is n + 8.
        (true, _) => (128, 8),
    };
    Layout::flat(&[8, 2, 2], &[s0, s1, s2])
}

/// The grid of a tiled matmul: N tiles on x, M tiles on y, batches on z (a grid-stride loop
/// covers batches beyond 65535).
pub(crate) fn matmul_grid(m: u64, n: u64, batch: u64, bm: u64, bn: u64) -> R<[u32; 3]> {
    let (gx, gy) = (n.div_ceil(bn), m.div_ceil(bm));
    if gy > 65535 || gx > i32::MAX as u64 {
        return Err(Retry::Fail(LowerError::Unsupported {
            op: "matmul".into(),
            reason: format!(
                "{m}x{n} needs {gy}x{gx} tiles of {bm}x{bn}; at most 65535 row tiles and 2^31-1 column tiles are supported"
            ),
        }));
    }
    Ok([gx as u32, gy as u32, batch.clamp(1, 65535) as u32])
}

/// What the tensor-core matmul template needs to know about one matmul.
pub(crate) struct TcPlan {
    pub(crate) m: u64,
    pub(crate) n: u64,
    pub(crate) k: u64,
    pub(crate) batch: u64,
    pub(crate) dtype: DType,
    /// `(m, k, batch)` → A's index, `(k, n, batch)` → B's, `(m, n, batch)` → C's.
    pub(crate) access_a: Layout,
    pub(crate) access_b: Layout,
    pub(crate) access_c: Layout,
    pub(crate) a_k_fast: bool,
    pub(crate) b_n_fast: bool,
    /// An rmsnorm computed as A's prologue: the mainloop reads its `x` as A (`norm_prologue`).
    pub(crate) prologue: Option<super::norm_prologue::NormPrologue>,
    /// Row and column reductions of the epilogue, stored by this kernel (`epilogue_reduce`).
    pub(crate) reductions: Vec<super::epilogue_reduce::RowReduce>,
}

/// One operand tile of the tensor-core matmul: `rows x bk` elements of `v` into `smem`.
pub(crate) struct TileLoad {
    pub(crate) v: ValueId,
    /// `(m, k, batch)` for A, `(k, n, batch)` for B → the operand's index.
    pub(crate) access: Layout,
    pub(crate) rows: u64,
    /// M or N.
    pub(crate) extent: u64,
    pub(crate) row0: Expr,
    /// Where the row coordinate sits in `access`'s coordinate (0 for A, 1 for B).
    pub(crate) row_pos: usize,
    /// Whether K is the operand's contiguous dimension.
    pub(crate) k_fast: bool,
    pub(crate) smem: String,
    /// The shared tile's (row, k) strides.
    pub(crate) strides: (i64, i64),
    /// The K step and the block's threads.
    pub(crate) bk: u64,
    pub(crate) threads: u64,
}

/// Elements per `cp.async` of an operand of `elem_bytes`-byte elements read through `access`:
/// the widest of 16, 8 and 4 bytes whose vectors the operand's global layout holds, with the
/// layout split into them (modes after the `w:1` vector mode); `None` where the operand is not
/// a buffer (or views of one) or its fast dimension is not 4-byte aligned.
pub(crate) fn copy_width(
    b: &mut Builder<'_, '_>,
    v: ValueId,
    access: &Layout,
    fast: usize,
    elem_bytes: u64,
) -> Option<(u64, String)> {
    let found = vector_copy(b, v, access, fast, elem_bytes);
    // The views walked are the kernel's origins whether or not a width is found.
    b.resolve(v, access)?;
    found.map(|(w, buf, full)| (w, b.global(buf, full)))
}

/// [`copy_width`]'s question, asked without adding to the kernel: the width, the buffer and
/// its layout split into the vectors.
pub(crate) fn vector_copy(
    b: &Builder<'_, '_>,
    v: ValueId,
    access: &Layout,
    fast: usize,
    elem_bytes: u64,
) -> Option<(u64, ValueId, Layout)> {
    let (buf, l) = b.resolve_quiet(v, access)?;
    [16, 8, 4]
        .map(|bytes| bytes / elem_bytes as i64)
        .into_iter()
        .filter(|&w| w > 0)
        .find_map(|w| {
            let vl = vector_layout(&l, fast, w)?;
            if !kir::is_vector_operand(&vl, w, access.rank()) {
                return None;
            }
            let full = Layout::concat(&vl.modes()[1..]).ok()?;
            Some((w as u64, buf, full))
        })
}

/// `layout` with mode `fast` (which must be `size:1`, size a multiple of `w`) split into a
/// leading `w:1` vector mode and `(size/w):w`, when every other stride is a multiple of `w`.
pub(crate) fn vector_layout(layout: &Layout, fast: usize, w: i64) -> Option<Layout> {
    let modes = layout.modes();
    let f = coalesce(modes.get(fast)?).ok()?;
    let size = match f.leaves().as_slice() {
        [(s, 1)] if s % w == 0 => *s,
        _ => return None,
    };
    let aligned = modes
        .iter()
        .enumerate()
        .all(|(i, m)| i == fast || m.leaves().iter().all(|&(s, d)| s == 1 || d % w == 0));
    if !aligned {
        return None;
    }
    let mut out = vec![Layout::int(w, 1).ok()?];
    for (i, m) in modes.into_iter().enumerate() {
        out.push(if i == fast {
            Layout::int(size / w, w).ok()?
        } else {
            m
        });
    }
    Layout::concat(&out).ok()
}

impl Builder<'_, '_> {
    /// Fills one shared tile for K step `k0`: 16-byte copies when the operand is a buffer (or
    /// views of one) whose contiguous dimension allows it, element by element otherwise; out of
    /// range elements are zero.
    pub(crate) fn tc_tile_load(
        &mut self,
        t: &TileLoad,
        k0: &Expr,
        bi: &Expr,
        kdim: u64,
        dt: DType,
    ) -> R<()> {
        const W: u64 = 8;
        let k_pos = 1 - t.row_pos;
        let coord_of = |row: Expr, k: Expr| -> Vec<Expr> {
            let mut c = vec![Expr::Int(0), Expr::Int(0), bi.clone()];
            c[t.row_pos] = row;
            c[k_pos] = k;
            c
        };
        let fast_pos = if t.k_fast { k_pos } else { t.row_pos };
        let (r_st, k_st) = t.strides;
        // A vector copy only where both sides are vector operands (a dimension of 1 or a
        // broadcast operand can leave the fast mode without a `W:1` vector).
        let smem_vector_ok = if t.k_fast {
            t.bk % W == 0 && (W as i64 * t.strides.1) % W as i64 == 0 && t.strides.0 % W as i64 == 0
        } else {
            t.rows % W == 0 && t.strides.1 % W as i64 == 0
        };
        let vector = if dt.size_bytes() * W == 16 && smem_vector_ok {
            self.resolve(t.v, &t.access)
                .and_then(|(buf, l)| vector_layout(&l, fast_pos, W as i64).map(|vl| (buf, vl)))
                .filter(|(_, vl)| kir::is_vector_operand(vl, W as i64, t.access.rank()))
        } else {
            None
        };
        let e_of = |s: &mut Self, l: Expr| {
            s.let_("e", Ty::Idx, add(mul(l, int(t.threads)), bx(Builtin::TidX)))
        };
        let split = |s: &mut Self, e: &Expr, fast: u64| -> (Expr, Expr) {
            let lo = s.let_("lo", Ty::Idx, Expr::idx(IdxOp::Rem, e.clone(), int(fast)));
            let hi = s.let_("hi", Ty::Idx, Expr::idx(IdxOp::Div, e.clone(), int(fast)));
            (lo, hi)
        };
        let li = |s: u64, d: i64| Layout::int(s as i64, d).map_err(internal);
        // Element (or vector) `e` of `total`, `total / threads` (rounded up) a thread: the last
        // step guarded where the threads do not divide the tile (an attention head dim of 80:
        // 32 x 80).
        let guarded =
            |s: &mut Self, total: u64, f: &mut dyn FnMut(&mut Self, Expr) -> R<()>| -> R<()> {
                s.unrolled("l", total.div_ceil(t.threads), &mut |s, l| {
                    let e = e_of(s, l);
                    if total % t.threads == 0 {
                        return f(s, e);
                    }
                    let body = s.block(|s| f(s, e.clone()))?;
                    s.out.push(Stmt::If {
                        cond: lt(e, int(total)),
                        body,
                        orelse: vec![],
                    });
                    Ok(())
                })
            };
        let Some((buf, gl)) = vector else {
            return guarded(self, t.rows * t.bk, &mut |s, e| {
                // Consecutive threads walk the operand's contiguous dimension.
                let (rr, kk) = if t.k_fast {
                    let (kk, rr) = split(s, &e, t.bk);
                    (rr, kk)
                } else {
                    split(s, &e, t.rows)
                };
                let grow = s.let_("gr", Ty::Idx, add(t.row0.clone(), rr.clone()));
                let gk = s.let_("gk", Ty::Idx, add(k0.clone(), kk.clone()));
                let cond = Expr::idx(
                    IdxOp::And,
                    lt(grow.clone(), int(t.extent)),
                    lt(gk.clone(), int(kdim)),
                );
                s.guarded_tile_load(
                    t.v,
                    &t.access,
                    coord_of(grow, gk),
                    cond,
                    dt,
                    dt,
                    &t.smem,
                    vec![rr, kk],
                )
            });
        };
        let g = self.global(buf, gl);
        let sv_layout = if t.k_fast {
            concat(&[li(W, 1)?, li(t.rows, r_st)?, li(t.bk / W, W as i64 * k_st)?])?
        } else {
            concat(&[li(W, 1)?, li(t.rows / W, W as i64 * r_st)?, li(t.bk, k_st)?])?
        };
        let sv = self.tensor(Space::View(t.smem.clone()), dt, sv_layout);
        guarded(self, t.rows * t.bk / W, &mut |s, e| {
            let (rr, kk, scoord) = if t.k_fast {
                let (kv, rr) = split(s, &e, t.bk / W);
                let kk = s.let_("kk", Ty::Idx, mul(kv.clone(), int(W)));
                (rr.clone(), kk, vec![rr, kv])
            } else {
                let (rv, kk) = split(s, &e, t.rows / W);
                let rr = s.let_("rr", Ty::Idx, mul(rv.clone(), int(W)));
                (rr, kk.clone(), vec![rv, kk])
            };
            let grow = s.let_("gr", Ty::Idx, add(t.row0.clone(), rr.clone()));
            let gk = s.let_("gk", Ty::Idx, add(k0.clone(), kk.clone()));
            let cond = Expr::idx(
                IdxOp::And,
                lt(grow.clone(), int(t.extent)),
                lt(gk.clone(), int(kdim)),
            );
            let mut gcoord = coord_of(grow, gk);
            gcoord[fast_pos] = Expr::idx(IdxOp::Div, gcoord[fast_pos].clone(), int(W));
            let body = vec![Stmt::Copy {
                width: W as u32,
                dst: kir::Frag {
                    tensor: sv.clone(),
                    at: scoord,
                },
                src: kir::Frag {
                    tensor: g.clone(),
                    at: gcoord,
                },
                hint: irc_kir::CacheHint::Normal,
            }];
            // Out of range: zeros, element by element.
            let (smem, rr2, kk2) = (t.smem.clone(), rr.clone(), kk.clone());
            let orelse = s.block(|s| {
                s.unrolled("z", W, &mut |s, z| {
                    let coord = if t.k_fast {
                        vec![rr2.clone(), add(kk2.clone(), z)]
                    } else {
                        vec![add(rr2.clone(), z), kk2.clone()]
                    };
                    s.out.push(Stmt::Store {
                        tensor: smem.clone(),
                        coord,
                        value: lit(dt, 0.0),
                    });
                    Ok(())
                })
            })?;
            s.out.push(Stmt::If { cond, body, orelse });
            Ok(())
        })
    }
}

impl Builder<'_, '_> {
    /// `for %i = 0 to n step 1 unroll { f(i) }`.
    pub(crate) fn unrolled(
        &mut self,
        hint: &str,
        n: u64,
        f: &mut dyn FnMut(&mut Self, Expr) -> R<()>,
    ) -> R<()> {
        self.for_(hint, Expr::Int(0), int(n), Expr::Int(1), true, |s, i| {
            f(s, i)
        })
    }

    /// [`Builder::unrolled`] as two nested loops of at most 32 steps each where `n` is a larger
    /// multiple of 32: NVRTC leaves a single loop of 128 steps with a long body rolled, which
    /// sends the register array it indexes (a wgmma accumulator) to local memory.
    pub(crate) fn unrolled_chunks(
        &mut self,
        hint: &str,
        n: u64,
        f: &mut dyn FnMut(&mut Self, Expr) -> R<()>,
    ) -> R<()> {
        if n <= 32 || !n.is_multiple_of(32) {
            return self.unrolled(hint, n, f);
        }
        self.unrolled(&format!("{hint}c"), n / 32, &mut |s, c| {
            s.unrolled(hint, 32, &mut |s, i| {
                let v = s.let_(hint, Ty::Idx, add(mul(c.clone(), Expr::Int(32)), i));
                f(s, v)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use irc_layout::{IntTuple, composition, mma_m16n8k16_a, mma_m16n8k16_b};

    /// What `ldmatrix.x4` hands lane `t` as value `v` (register `v / 2`, half `v % 2`), as a
    /// shared offset, given the row starts `rows(lane)` and the tile's contiguous stride 1:
    /// without `.trans` element `2(t%4) + v%2` of the row of lane `8(v/2) + t/4`; with it,
    /// element `t/4` of the row of lane `8(v/2) + 2(t%4) + v%2`.
    pub(crate) fn delivered(rows: &Layout, trans: bool, t: i64, v: i64) -> i64 {
        let j = v / 2;
        if trans {
            rows.eval(8 * j + 2 * (t % 4) + v % 2).unwrap() + t / 4
        } else {
            rows.eval(8 * j + t / 4).unwrap() + 2 * (t % 4) + v % 2
        }
    }

    #[test]
    pub(crate) fn ldmatrix_feeds_the_mma_atoms() {
        // (row stride, k stride) of the shared tile: K-contiguous (pitch 40), or rows contiguous
        // (pitch 136).
        for (r, k, trans) in [(40, 1, false), (1, 136, true)] {
            let tile16 = Layout::flat(&[16, 16], &[r, k]).unwrap();
            // A: 8 values of one 16x16 atom.
            let rows = composition(&tile16, &ldmatrix_x4_rows(false, trans).unwrap()).unwrap();
            let atom = composition(&tile16, mma_m16n8k16_a().unwrap().layout()).unwrap();
            for t in 0..32 {
                for v in 0..8 {
                    let want = atom.crd2idx(&IntTuple::ints(&[t, v])).unwrap();
                    assert_eq!(delivered(&rows, trans, t, v), want, "A r={r} t={t} v={v}");
                }
            }
            // B: values 0-3 are atom 0 (n 0-7), values 4-7 atom 1 (n 8-15).
            let rows = composition(&tile16, &ldmatrix_x4_rows(true, trans).unwrap()).unwrap();
            let tile8 = Layout::flat(&[8, 16], &[r, k]).unwrap();
            let atom = composition(&tile8, mma_m16n8k16_b().unwrap().layout()).unwrap();
            for t in 0..32 {
                for v in 0..8 {
                    let want =
                        atom.crd2idx(&IntTuple::ints(&[t, v % 4])).unwrap() + (v / 4) * 8 * r;
                    assert_eq!(delivered(&rows, trans, t, v), want, "B r={r} t={t} v={v}");
                }
            }
        }
    }
}
