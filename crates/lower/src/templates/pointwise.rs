//! The pointwise template: one thread per vector of output elements (16 bytes of the output's
//! type where the element count allows, else one element; 1-byte types one element), a
//! grid-stride loop; the whole elementwise chain (views as layouts) computed in registers and
//! stored once. Inside each vector the output and every operand whose layout reads the same
//! elements contiguously and aligned are one copy (`vector.rs`); broadcast or transposed
//! operands are read element by element.

use super::config::{Config, PointwiseConfig, pointwise_grid};
use crate::lower::*;
use irc_ir::ValueId;
use irc_kir::Builtin;

impl Builder<'_, '_> {
    /// `for %i = global thread index to n step (threads in grid)`: out[i] = v[i].
    pub(crate) fn elementwise(&mut self, v: ValueId) -> R<()> {
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
        let out = self.global(v, access.clone());
        let start = add(
            mul(bx(Builtin::BidX), bx(Builtin::NtidX)),
            bx(Builtin::TidX),
        );
        let step = mul(bx(Builtin::NctaidX), bx(Builtin::NtidX));
        self.for_("i", start, int(vecs), step, false, |b, i| {
            b.vector_loop(width, vec![i], |b, kx, _| {
                b.coord = vec![kx.clone()];
                let e = b.compute_at(v, &access, false)?;
                b.store_elem(&out, vec![kx], e)
            })
        })
    }
}
