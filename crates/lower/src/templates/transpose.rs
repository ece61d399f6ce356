//! Shared-memory transposes in the pointwise template: an operand read through a transpose
//! goes through a shared tile, so that both its reads and the output's writes are whole
//! 128-byte rows.
//!
//! The plan ([`Builder::transpose_plan`]) views the output's flat index as `[B, M, N]`: `N` the
//! extent of the output's innermost run, along which a transposed operand's stride is not 1,
//! and `M` the next run, along which that operand is contiguous (a matrix transpose: `N` the
//! output's columns, `M` its rows; NHWC to NCHW: `N = H·W`, `M = C`). A block owns a tile of
//! `tn × tm` elements (128 bytes each way where the extents allow): it first copies each staged
//! operand's tile into shared memory, 16-byte vectors along `M` (rows of the operand), then
//! computes the output's vectors along `N`, reading the staged operands from the tile's
//! columns and every other operand from global memory as usual. The tile is swizzled
//! (`Sw<b, log2 wo, log2 tm>`, `b = log2 min(tn/wo, tm/wo, 8)`, `wo` the operand's elements in
//! 16 bytes: the 16-byte chunk of a row XOR the row's index in vectors), so a warp reading
//! eight rows' chunks, or writing a row's eight, touches every bank once. A kernel's tiles
//! stay within 48 KiB; reads beyond are not staged.
//!
//! Which reads are staged is decided where they are built ([`Builder::staged_read`]): a read
//! at the output element's own coordinate of a buffer whose access, over `[N, M, B]`, is
//! contiguous along `M`, with elements of 2 to 8 bytes (its tile in its own type, copied in
//! 16-byte vectors of its elements) aligned to them; the plan is made only where one of the
//! leaves it finds is such a read. The copies into the tile are built after the compute that
//! asks for them and placed before it.

use crate::lower::*;
use irc_ir::{Category, DType, ValueId};
use irc_kir::{self as kir, Builtin, Expr, Frag, IdxOp, Space, Stmt, Ty};
use irc_layout::{Layout, Swizzle, coalesce, composition};
use std::collections::HashSet;

/// The shared-memory transpose of one pointwise kernel (module docs).
pub(crate) struct TransposeStage {
    /// The output's flat index as `(N, M, B) : (1, N, N·M)`.
    nmb: Layout,
    /// `M`, along which staged operands are contiguous.
    m: u64,
    tn: u64,
    tm: u64,
    /// Elements in a vector (16 bytes of the output's type).
    w: u64,
    /// A staged tile, `(tm, tn) : (1, tm)` (`[m, n]`).
    tile: Layout,
    /// The block's tile: its index along `M`, its first element along `N`, its `B` index.
    origin: Vec<Expr>,
    /// The current output vector's first column within the tile and its row (`n`, `m`).
    at: Option<(Expr, Expr)>,
    /// The operands staged so far.
    staged: Vec<Staged>,
}

/// A staged operand: its key, copy source, shared tile and the tile's vector view, and its
/// elements in a 16-byte vector.
struct Staged {
    key: String,
    src: String,
    flat: String,
    vecs: String,
    wo: u64,
}

/// The shared memory a kernel's staged tiles may take: the pointwise kernel stays within
/// static shared memory and several blocks an SM.
const STAGE_BYTES: u64 = 48 << 10;

impl TransposeStage {
    /// The swizzled offset of tile element `[m, n]` of an operand with `wo` elements in 16
    /// bytes (phase 1 writes and phase 2 reads through this one function): `Sw<b, log2 wo,
    /// log2 tm>`, `b = log2 min(tn/wo, tm/wo, 8)` — a row's 16-byte chunk XOR the row's
    /// index in vectors, within the tile.
    fn offset(&self, wo: u64, m: Expr, n: Expr) -> R<Expr> {
        let bits = (self.tn / wo).min(self.tm / wo).min(8).ilog2();
        let sw = Swizzle::new(bits as i64, wo.ilog2() as i64, self.tm.ilog2() as i64)
            .map_err(internal)?;
        kir::swizzled_offset_expr(&sw, &self.tile, &[m, n]).map_err(internal)
    }

    /// The copy source of an operand of `dtype` read through `access` (over the output's
    /// flat index), and its elements in 16 bytes `wo`: `(wo:1, M/wo:wo, N-mode, B-mode)` where
    /// the access is contiguous along `M`, the tile's rows hold whole vectors, and every other
    /// stride keeps them aligned (elements of 2 bytes or more: the MLIR backend's vector
    /// copies move 16-, 32- or 64-bit elements).
    fn source(&self, access: &Layout, dtype: DType) -> Option<(Layout, u64)> {
        let size = dtype.size_bytes();
        if !(2..=8).contains(&size) {
            return None;
        }
        let wo = 16 / size;
        if self.tm % wo != 0 || self.tn < wo {
            return None;
        }
        let c = composition(access, &self.nmb).ok()?;
        let (mn, mm, mb) = (c.mode(0).ok()?, c.mode(1).ok()?, c.mode(2).ok()?);
        if coalesce(&mm).ok()?.leaves() != [(self.m as i64, 1)] {
            return None;
        }
        let w = wo as i64;
        let lane = Layout::int(w, 1).ok()?;
        let chunk = Layout::int(self.m as i64 / w, w).ok()?;
        let src = Layout::concat(&[lane, chunk, mn, mb]).ok()?;
        kir::is_vector_operand(&src, w, src.rank() - 1).then_some((src, wo))
    }
}

fn no_stage(what: &str) -> Retry {
    Retry::Fail(crate::LowerError::Internal(format!(
        "transpose stage {what}"
    )))
}

/// The tile extent along a run of `len` elements: 128 bytes of `size`-byte elements, halved
/// (down to one vector of `w`) until it divides `len`.
fn tile_extent(len: u64, size: u64, w: u64) -> Option<u64> {
    let mut t = 128 / size;
    while t >= w && len % t != 0 {
        t /= 2;
    }
    (t >= w).then_some(t)
}

impl Builder<'_, '_> {
    /// The buffers `v`, computed at `access`, reads and the layouts it reads them through (views,
    /// elementwise ops and broadcasts); a worklist, not recursion, for chains of thousands of
    /// ops.
    pub(crate) fn leaf_accesses(
        &self,
        roots: &[ValueId],
        access: &Layout,
    ) -> Vec<(ValueId, Layout)> {
        let mut out = vec![];
        let mut seen = HashSet::new();
        let mut work: Vec<(ValueId, Layout)> = roots.iter().map(|&r| (r, access.clone())).collect();
        while let Some((x, a)) = work.pop() {
            if !seen.insert((x, a.to_string())) {
                continue;
            }
            if !roots.contains(&x) && self.l.buffer_of.contains_key(&x) {
                out.push((x, a));
                continue;
            }
            let Some(inst) = self.def(x) else {
                continue;
            };
            if is_view(inst.op) {
                // (A slice's window moves its reads by an offset, which the plan does not
                // need: `staged_read` sees it.)
                if let Ok(view) = self.view_layout(inst)
                    && let Ok(c) = composition(&view, &a)
                {
                    work.push((inst.operands[0], c));
                }
                continue;
            }
            if !matches!(
                inst.op.category(),
                Category::Unary
                    | Category::Binary
                    | Category::Compare
                    | Category::Select
                    | Category::Cast
            ) {
                continue;
            }
            let shape = &self.ty(x).shape;
            for &o in &inst.operands {
                let oshape = &self.ty(o).shape;
                if oshape == shape {
                    work.push((o, a.clone()));
                } else if let Ok(b) = broadcast_layout(oshape, shape)
                    && let Ok(c) = composition(&b, &a)
                {
                    work.push((o, c));
                }
            }
        }
        out
    }

    /// The shared-memory transpose for the pointwise `roots` (one shape and type) of
    /// `w`-element vectors, where one of their operands is read transposed (module docs) and
    /// the extents tile whole.
    pub(crate) fn transpose_plan(&self, roots: &[ValueId], w: u64) -> R<Option<TransposeStage>> {
        let ty = self.ty(roots[0]);
        let (n_all, size) = (ty.numel(), ty.dtype.size_bytes());
        if w < 2 || size < 2 || n_all % w != 0 {
            return Ok(None);
        }
        for (leaf, l) in self.leaf_accesses(roots, &linear(n_all).map_err(internal)?) {
            let Ok(c) = coalesce(&l) else { continue };
            let runs = c.leaves();
            let [(n, sn), (m, 1), ..] = runs[..] else {
                continue;
            };
            let (n, m) = (n as u64, m as u64);
            if sn == 0 || sn == 1 {
                continue;
            }
            let (Some(tn), Some(tm)) = (tile_extent(n, size, w), tile_extent(m, size, w)) else {
                continue;
            };
            // At least a warp's vectors a tile, and a block per tile.
            let b = n_all / (n * m);
            if tn * tm / w < 32 || (n / tn) * (m / tm) * b > i32::MAX as u64 {
                continue;
            }
            let nmb = Layout::flat(
                &[n as i64, m as i64, b as i64],
                &[1, n as i64, (n * m) as i64],
            )
            .map_err(internal)?;
            let st = TransposeStage {
                nmb,
                m,
                tn,
                tm,
                w,
                tile: Layout::flat(&[tm as i64, tn as i64], &[1, tm as i64]).map_err(internal)?,
                origin: vec![],
                at: None,
                staged: vec![],
            };
            // The leaf itself must be one `staged_read` takes (its element size, alignment).
            if st.source(&l, self.ty(leaf).dtype).is_some() {
                return Ok(Some(st));
            }
        }
        Ok(None)
    }

    /// `out[i] = v[i]` for each root through the shared-memory transpose `st`: a block of
    /// `threads` (the configuration's, where they divide the tile's vectors) per tile, each
    /// thread `tn·tm / (w·threads)` vectors; `outs` are the roots' flat tensors, `access`
    /// their layout.
    pub(crate) fn elementwise_transposed(
        &mut self,
        roots: &[ValueId],
        mut st: TransposeStage,
        (outs, access): (&[String], &Layout),
        threads: u64,
    ) -> R<()> {
        let (tn, tm, w) = (st.tn, st.tm, st.w);
        let n = st.nmb.mode(0).map_err(internal)?.size().map_err(internal)? as u64;
        let vecs = tn * tm / w;
        // The configuration's threads where they divide the tile's vectors.
        let threads = match vecs % threads {
            0 => threads,
            _ => vecs.min(u64::from(THREADS)),
        };
        let tiles = st.nmb.size().map_err(internal)? as u64 / (tn * tm);
        self.kernel.block = [threads as u32, 1, 1];
        self.kernel.grid = [tiles as u32, 1, 1];
        // The block's tile `(n / tn, m / tm, b)`, tiles along N first: its coordinates and
        // its first vector in the output (each a layout of the block index); thread `q`'s
        // vector `(q mod tn/w, q / (tn/w))` of it, the tile's rows `N/w` vectors apart.
        let (nt, mt) = (n / tn, st.m / tm);
        let grid = |strides: [u64; 3]| {
            let shape = [nt as i64, mt as i64, (tiles / (nt * mt)) as i64];
            let l = Layout::flat(&shape, &strides.map(|s| s as i64)).map_err(internal)?;
            kir::offset_expr(&l, &[bx(Builtin::BidX)]).map_err(internal)
        };
        let n0 = grid([tn, 0, 0])?;
        let tile_m = grid([0, 1, 0])?;
        let b = grid([0, 0, 1])?;
        let first = grid([tn / w, tm * n / w, n * st.m / w])?;
        st.origin = vec![
            self.let_("tm", Ty::Idx, tile_m),
            self.let_("tn", Ty::Idx, n0),
            self.let_("tb", Ty::Idx, b),
        ];
        let base = self.let_("tv", Ty::Idx, first);
        let per_row = tn / w;
        let thread =
            Layout::flat(&[per_row as i64, tm as i64], &[1, (n / w) as i64]).map_err(internal)?;
        let tid = bx(Builtin::TidX);
        self.stage = Some(st);
        let body = self.block(|b| {
            for u in 0..vecs / threads {
                let q = b.let_("tq", Ty::Idx, add(tid.clone(), int(u * threads)));
                let nv = Expr::idx(IdxOp::Rem, q.clone(), int(per_row));
                let ml = Expr::idx(IdxOp::Div, q.clone(), int(per_row));
                let off = kir::offset_expr(&thread, std::slice::from_ref(&q)).map_err(internal)?;
                let vb = b.let_("vb", Ty::Idx, add(base.clone(), off));
                if let Some(s) = b.stage.as_mut() {
                    s.at = Some((mul(nv, int(w)), ml));
                }
                b.vector_loop(w, vec![vb], |b, kx, _| b.roots_at(roots, outs, access, kx))?;
            }
            Ok(())
        });
        let st = self.stage.take().ok_or_else(|| no_stage("closed twice"))?;
        let body = body?;
        // The staged operands' tiles: an operand's vector `q` is row `q / (tm/wo)`, chunk
        // `q mod tm/wo`; `tn·tm/wo` of them over the block's threads.
        for op in &st.staged {
            let (wo, chunks) = (op.wo, tm / op.wo);
            let count = tn * tm / op.wo;
            for u in 0..count.div_ceil(threads) {
                let q = self.let_("sq", Ty::Idx, add(tid.clone(), int(u * threads)));
                let mv = self.let_("sm", Ty::Idx, Expr::idx(IdxOp::Rem, q.clone(), int(chunks)));
                let nl = self.let_("sn", Ty::Idx, Expr::idx(IdxOp::Div, q.clone(), int(chunks)));
                let at = vec![
                    add(mul(st.origin[0].clone(), int(chunks)), mv.clone()),
                    add(st.origin[1].clone(), nl.clone()),
                    st.origin[2].clone(),
                ];
                let off = st.offset(wo, mul(mv, int(wo)), nl)?;
                let copy = Stmt::Copy {
                    width: wo as u32,
                    dst: Frag {
                        tensor: op.vecs.clone(),
                        at: vec![Expr::idx(IdxOp::Div, off, int(wo))],
                    },
                    src: Frag {
                        tensor: op.src.clone(),
                        at,
                    },
                    hint: irc_kir::CacheHint::Normal,
                };
                match (u + 1) * threads <= count {
                    true => self.out.push(copy),
                    false => self.out.push(Stmt::If {
                        cond: lt(q, int(count)),
                        body: vec![copy],
                        orelse: vec![],
                    }),
                }
            }
        }
        if !st.staged.is_empty() {
            self.out.push(Stmt::Sync);
        }
        self.out.extend(body);
        Ok(())
    }

    /// A read of buffer parameter `p` through `access` (+ `offset`) inside a shared-memory
    /// transpose: the element of its shared tile when the read is staged (module docs), else
    /// `None`.
    pub(crate) fn staged_read(
        &mut self,
        p: &str,
        dtype: DType,
        access: &Layout,
        offset: i64,
    ) -> R<Option<Expr>> {
        let Some(st) = self.stage.as_ref() else {
            return Ok(None);
        };
        let Some((nl, ml)) = st.at.clone() else {
            return Ok(None);
        };
        let (tn, tm) = (st.tn, st.tm);
        // Only reads at the output element's own coordinate: the tile holds the operand at
        // every element of the block's tile, and nothing else.
        let Some((src, wo)) = st.source(access, dtype) else {
            return Ok(None);
        };
        if !self.at_vector_coord() || offset % wo as i64 != 0 {
            return Ok(None);
        }
        // One tile for each operand, window and element type, within `STAGE_BYTES`.
        let key = format!("{p} {dtype} {src} {offset}");
        let flat = match st.staged.iter().find(|s| s.key == key) {
            Some(s) => s.flat.clone(),
            None if (st.staged.len() as u64 + 1) * tn * tm * dtype.size_bytes() > STAGE_BYTES => {
                return Ok(None);
            }
            None => {
                let src = self.tensor_at(Space::Global(p.to_string()), dtype, src, offset);
                let n = (tn * tm) as i64;
                let flat = self.tensor(Space::Shared, dtype, Layout::int(n, 1).map_err(internal)?);
                let w = wo as i64;
                let view = Layout::flat(&[w, n / w], &[1, w]).map_err(internal)?;
                let vecs = self.tensor(Space::View(flat.clone()), dtype, view);
                let st = self.stage.as_mut().ok_or_else(|| no_stage("not open"))?;
                st.staged.push(Staged {
                    key,
                    src,
                    flat: flat.clone(),
                    vecs,
                    wo,
                });
                flat
            }
        };
        let st = self.stage.as_ref().ok_or_else(|| no_stage("not open"))?;
        let off = st.offset(wo, ml, add(nl, self.vector_lane()))?;
        Ok(Some(self.let_(
            "v",
            Ty::Elem(dtype),
            Expr::load(&flat, vec![off]),
        )))
    }
}
