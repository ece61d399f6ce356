//! The pointwise template: one thread per output element, a grid-stride loop; the whole
//! elementwise chain (views as layouts) computed in registers and stored once.

use super::config::{Config, PointwiseConfig, pointwise_grid};
use crate::lower::*;
use irc_ir::ValueId;
use irc_kir::{Builtin, Stmt};

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
        self.kernel.block = [cfg.threads as u32, 1, 1];
        self.kernel.grid = [
            pointwise_grid(cfg, n, u64::from(self.l.options.target.sms)) as u32,
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
        self.for_("i", start, int(n), step, false, |b, i| {
            b.coord = vec![i.clone()];
            let e = b.compute_at(v, &access, false)?;
            b.out.push(Stmt::Store {
                tensor: out,
                coord: vec![i],
                value: e,
            });
            Ok(())
        })
    }
}
