//! The pointwise template: one thread per vector of output elements (16 bytes of the output's
//! type where the element count allows, else one element; 1-byte types one element), a
//! grid-stride loop; the whole elementwise chain (views as layouts) computed in registers and
//! stored once. Inside each vector the output and every operand whose layout reads the same
//! elements contiguously and aligned are one copy (`vector.rs`: a broadcast row too); a
//! transposed operand is read element by element.
//!
//! Where an operand is read through a transpose and the extents tile whole, the kernel goes
//! through shared memory instead (`transpose.rs`): a block per tile, the operand copied in
//! along its rows, the output computed along its own (run 160 on the H200: an 8192² f16
//! transpose with an add 0.193 → 0.102 ms, 93% of the copy floor; NHWC to NCHW 0.173 →
//! 0.031). Otherwise threads take the vectors in the output's order, except where an operand
//! is read through a matrix transpose (a 1-byte output, say: no 16-byte vectors to stage
//! for) and a block's vectors would lie in one or two output rows: then thread `i` takes its
//! vector from tiles of 32 rows by up to 8 vector columns, a warp down one column (its reads
//! of the transposed operand consecutive elements), a tile's warps side by side, the tiles
//! down the rows first (run 154: the 8192² transpose 0.490 → 0.196 ms).

use super::config::{Config, PointwiseConfig, pointwise_grid};
use crate::lower::*;
use irc_ir::ValueId;
use irc_kir::{Builtin, Expr, Ty};
use irc_layout::Layout;

/// Rows of a transposing pointwise kernel's tile: a warp's vectors down one column.
const TILE_ROWS: u64 = 32;

impl Builder<'_, '_> {
    /// Whether `v`'s inline computation reads a buffer transposed against `v`'s rows: along
    /// `v`'s innermost dimension (extent `cols`) with a stride other than 1, and contiguously
    /// along the next (a matrix transpose): read in the output's order, each element of a
    /// warp's load would be its own sector.
    fn reads_transposed_rows(&self, roots: &[ValueId], cols: u64) -> R<bool> {
        let n = self.ty(roots[0]).numel();
        let leaves = self.leaf_accesses(roots, &linear(n).map_err(internal)?);
        Ok(leaves.iter().any(|(_, l)| {
            irc_layout::coalesce(l).is_ok_and(|c| {
                matches!(c.leaves()[..], [(n, s), (_, 1), ..] if s != 0 && s != 1 && n as u64 == cols)
            })
        }))
    }

    /// Each root computed at flat index `kx` (a vector loop's) and stored to its output.
    pub(crate) fn roots_at(
        &mut self,
        roots: &[ValueId],
        outs: &[String],
        access: &Layout,
        kx: Expr,
    ) -> R<()> {
        self.coord = vec![kx.clone()];
        for (&r, out) in roots.iter().zip(outs) {
            let e = self.compute_at(r, access, false)?;
            self.store_elem(out, vec![kx.clone()], e)?;
        }
        Ok(())
    }

    /// `for %i = global thread index to n step (threads in grid)`: `out[i] = v[i]` for each
    /// root `v` the group stores (siblings of one shape and type, policy rule 12).
    pub(crate) fn elementwise(&mut self, roots: &[ValueId]) -> R<()> {
        let v = roots[0];
        if let Some(&r) = roots.iter().find(|&&r| self.ty(r) != self.ty(v)) {
            return Err(Retry::Fail(crate::LowerError::Unsupported {
                op: "pointwise".into(),
                reason: format!(
                    "a pointwise kernel stores values of one type; {} is {}, {} is {}",
                    self.l.names[v.index()],
                    self.ty(v),
                    self.l.names[r.index()],
                    self.ty(r)
                ),
            }));
        }
        let n = self.ty(v).numel();
        let cfg = match self.config {
            Some(Config::Pointwise(c)) => c,
            _ => PointwiseConfig {
                threads: u64::from(THREADS),
                blocks_per_sm: None,
            },
        };
        let width = super::vector::vector_width(self.ty(v).dtype, n);
        let vecs = n / width;
        self.kernel.block = [cfg.threads as u32, 1, 1];
        self.kernel.grid = [
            pointwise_grid(cfg, vecs, u64::from(self.l.options.target.sms)) as u32,
            1,
            1,
        ];
        let access = linear(n).map_err(internal)?;
        let outs: Vec<String> = roots
            .iter()
            .map(|&r| self.global(r, access.clone()))
            .collect();
        if let Some(st) = self.transpose_plan(roots, width)? {
            return self.elementwise_transposed(roots, st, (&outs, &access), cfg.threads);
        }
        let start = add(
            mul(bx(Builtin::BidX), bx(Builtin::NtidX)),
            bx(Builtin::TidX),
        );
        let step = mul(bx(Builtin::NctaidX), bx(Builtin::NtidX));
        // Tiles of 32 rows by `tw` vectors where an operand is read through a transpose
        // (module docs): a warp takes one vector column of 32 rows, a tile's warps the
        // neighbouring columns, tiles go down the rows first.
        let cols = self.ty(v).shape.last().copied().unwrap_or(1);
        let rows = n / cols.max(1);
        let cvecs = cols / width;
        let tw = [8, 4, 2, 1]
            .into_iter()
            .find(|w| cvecs % w == 0)
            .unwrap_or(1);
        // Only where a block's vectors would lie in one or two output rows: over shorter rows
        // a block already spans enough rows that the operand's sectors are read several times
        // (run 154: NCHW to NHWC with rows of 16 vectors 40% slower in tiles).
        let tiled = cols % width == 0
            && rows % TILE_ROWS == 0
            && 2 * cvecs >= cfg.threads
            && self.reads_transposed_rows(roots, cols)?;
        // Thread `i`'s vector: `(32, tw, rows / 32, cvecs / tw) : (cvecs, 1, 32·cvecs, tw)`
        // (a row within the tile, a column within it, the tile's row, its column), a
        // bijection onto the output's vectors.
        let order = if tiled {
            let t = TILE_ROWS as i64;
            let (r, cv, w) = (rows as i64, cvecs as i64, tw as i64);
            let l = Layout::flat(&[t, w, r / t, cv / w], &[cv, 1, t * cv, w]).map_err(internal)?;
            Some(l)
        } else {
            None
        };
        self.for_("i", start, int(vecs), step, false, |b, i| {
            let vb = match &order {
                Some(l) => {
                    let e = irc_kir::offset_expr(l, std::slice::from_ref(&i)).map_err(internal)?;
                    b.let_("vb", Ty::Idx, e)
                }
                None => i,
            };
            b.vector_loop(width, vec![vb], |b, kx, _| {
                b.roots_at(roots, &outs, &access, kx)
            })
        })
    }
}
