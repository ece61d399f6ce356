//! The last-block protocol of one-launch split reductions: blocks that each wrote a partial
//! arrive on a counter, and the last to arrive combines the partials.
//!
//! Every thread fences (`fence.gpu`) after writing its partials and the block synchronizes;
//! one thread fences again (its release then covers every thread's writes, which the barrier
//! ordered before it), adds 1 to the counter (`atom.arrive`, the old value to shared memory)
//! and fences (its acquire); the block synchronizes again and reads the old value. The block that reads `n - 1` arrived last of the `n` that
//! share the counter: every partial is visible to it once it fences again. It combines them in
//! a fixed order (the same whichever block is last, so the result does not depend on the
//! order blocks run in) and resets the counter to 0 for the next launch: counters live in a
//! `zeroed` buffer, which the host fills with zeros once.

use crate::lower::*;
use irc_ir::DType;
use irc_kir::{self as kir, Arg, Expr, Func, IdxOp, Intrinsic, Space, Stmt};
use irc_layout::Layout;

impl Builder<'_, '_> {
    /// A `zeroed` i32 buffer `<kernel>_<what>` of `n` counters, its tensor `[n]` and a shared
    /// i32 `[1]` for the value a block's arrival read.
    pub(crate) fn arrival_counters(&mut self, what: &str, n: u64) -> R<(String, String)> {
        let decl = kir::BufferDecl {
            name: format!("{}_{what}", self.kernel.name),
            dtype: DType::I32,
            shape: vec![n],
            kind: kir::BufferKind::Zeroed,
            tensor_map: None,
        };
        let name = decl.name.clone();
        self.temps.push(decl);
        let p = self.param(&name);
        let one = |n: u64| Layout::int(n as i64, 1).map_err(internal);
        let counter = self.tensor(Space::Global(p), DType::I32, one(n)?);
        let old = self.tensor(Space::Shared, DType::I32, one(1)?);
        Ok((counter, old))
    }

    /// After the block's partials are written: its arrival on `counter[at]`, shared by
    /// `arrivals` blocks, and `body` in the last of them (module doc). `tid` numbers the
    /// threads `barrier` synchronizes; `old[slot]` receives the arrival's count.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn when_last(
        &mut self,
        (counter, at): (&str, Vec<Expr>),
        arrivals: u64,
        (old, slot): (&str, i64),
        tid: &Expr,
        barrier: &Stmt,
        body: impl FnOnce(&mut Self) -> R<()>,
    ) -> R<()> {
        let fence = Stmt::Intrinsic {
            op: Intrinsic::FenceGpu,
            args: vec![],
        };
        let first = Expr::idx(IdxOp::Eq, tid.clone(), Expr::Int(0));
        self.out.push(fence.clone());
        self.out.push(barrier.clone());
        self.out.push(Stmt::If {
            cond: first.clone(),
            body: vec![
                fence.clone(),
                Stmt::Intrinsic {
                    op: Intrinsic::AtomicArrive,
                    args: vec![
                        Arg::at(counter, at.clone()),
                        Arg::Expr(Expr::Int(1)),
                        Arg::at(old, vec![Expr::Int(slot)]),
                    ],
                },
                fence.clone(),
            ],
            orelse: vec![],
        });
        self.out.push(barrier.clone());
        let last = Expr::call(
            Func::Eq,
            vec![
                Expr::load(old, vec![Expr::Int(slot)]),
                lit(DType::I32, (arrivals - 1) as f64),
            ],
        );
        let body = self.block(|s| {
            s.out.push(fence);
            body(s)?;
            // Ready for the next launch.
            s.if_(first, |s| {
                s.out.push(Stmt::Store {
                    tensor: counter.to_string(),
                    coord: at,
                    value: lit(DType::I32, 0.0),
                });
                Ok(())
            })
        })?;
        self.out.push(Stmt::If {
            cond: last,
            body,
            orelse: vec![],
        });
        Ok(())
    }
}
