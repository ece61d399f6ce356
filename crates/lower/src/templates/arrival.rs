//! The last-block protocol of one-launch split reductions: blocks that each wrote a partial
//! arrive on a counter, and the last to arrive combines the partials.
//!
//! The block synchronizes after writing its partials; one thread fences (`fence.gpu`: its
//! release covers every thread's writes, which the barrier ordered before it — cumulativity,
//! the pattern of CUDA's cooperative-groups grid barrier), adds 1 to the counter
//! (`atom.arrive`, the old value to shared memory) and fences (its acquire); the block
//! synchronizes again and reads the old value. The block that reads `n - 1` arrived last of
//! the `n` that share the counter: every partial is visible to all its threads, which the
//! second barrier ordered after that thread's acquire. It combines them in
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
        let arrival = Arrival {
            counter,
            at,
            arrivals,
            slot,
        };
        self.arrive(std::slice::from_ref(&arrival), old, tid, barrier);
        self.if_last(&arrival, old, tid, body)
    }

    /// One arrival step for several counters: `barrier`, the thread `tid == 0` fences, arrives
    /// on each counter (its old value to `old[slot]`) and fences, `barrier`. (A fence by every
    /// thread before the first barrier, as this step had until session 33, adds nothing the
    /// one thread's does not.) Two steps in a row hung the MLIR backend's Hopper kernel where
    /// one step with both counters does not (`bench/gpu/NOTES.md`, runs 74-75).
    pub(crate) fn arrive(
        &mut self,
        counters: &[Arrival<'_>],
        old: &str,
        tid: &Expr,
        barrier: &Stmt,
    ) {
        let first = Expr::idx(IdxOp::Eq, tid.clone(), Expr::Int(0));
        self.out.push(barrier.clone());
        let mut body = vec![fence()];
        for a in counters {
            body.push(Stmt::Intrinsic {
                op: Intrinsic::AtomicArrive,
                args: vec![
                    Arg::at(a.counter, a.at.clone()),
                    Arg::Expr(Expr::Int(1)),
                    Arg::at(old, vec![Expr::Int(a.slot)]),
                ],
            });
        }
        body.push(fence());
        self.out.push(Stmt::If {
            cond: first,
            body,
            orelse: vec![],
        });
        self.out.push(barrier.clone());
    }

    /// `body` in the block whose arrival on `a` was the last, then the counter reset by the
    /// thread `tid == 0`.
    pub(crate) fn if_last(
        &mut self,
        a: &Arrival<'_>,
        old: &str,
        tid: &Expr,
        body: impl FnOnce(&mut Self) -> R<()>,
    ) -> R<()> {
        let first = Expr::idx(IdxOp::Eq, tid.clone(), Expr::Int(0));
        let last = Expr::call(
            Func::Eq,
            vec![
                Expr::load(old, vec![Expr::Int(a.slot)]),
                lit(DType::I32, (a.arrivals - 1) as f64),
            ],
        );
        let body = self.block(|s| {
            body(s)?;
            // Ready for the next launch.
            s.if_(first, |s| {
                s.out.push(Stmt::Store {
                    tensor: a.counter.to_string(),
                    coord: a.at.clone(),
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

/// A barrier of the blocks that share a row in a cooperative launch ([`Builder::row_barrier`]):
/// its counters and the shared slot arrivals read.
pub(crate) struct RowBarrier {
    counters: String,
    old: String,
    row: Expr,
    rows: u64,
    blocks: u64,
}

impl Builder<'_, '_> {
    /// The `blocks` blocks of row `row` (of `rows`) wait for each other: each arrives on the
    /// row's counter (after its fences, so its writes before are visible to the others), then
    /// thread 0 waits until all `blocks` have arrived (`counter.wait`, which makes the kernel a
    /// cooperative launch) and fences. Once past it, each block departs on a second counter
    /// ([`Builder::row_depart`]), and the last to depart resets both for the next launch.
    pub(crate) fn row_barrier(
        &mut self,
        row: &Expr,
        rows: u64,
        blocks: u64,
        tid: &Expr,
    ) -> R<RowBarrier> {
        let (counters, old) = self.arrival_counters("barrier", 2 * rows)?;
        let arrival = Arrival {
            counter: &counters,
            at: vec![row.clone()],
            arrivals: blocks,
            slot: 0,
        };
        self.arrive(std::slice::from_ref(&arrival), &old, tid, &Stmt::Sync);
        self.out.push(Stmt::If {
            cond: Expr::idx(IdxOp::Eq, tid.clone(), Expr::Int(0)),
            body: vec![
                Stmt::Intrinsic {
                    op: Intrinsic::CounterWait,
                    args: vec![
                        Arg::at(&counters, vec![row.clone()]),
                        Arg::Expr(Expr::Int(blocks as i64)),
                    ],
                },
                fence(),
            ],
            orelse: vec![],
        });
        self.out.push(Stmt::Sync);
        Ok(RowBarrier {
            counters,
            old,
            row: row.clone(),
            rows,
            blocks,
        })
    }

    /// After a [`Builder::row_barrier`]: the block departs, and the last of the row's blocks
    /// to depart resets the arrival counter (the departure counter resets itself).
    pub(crate) fn row_depart(&mut self, b: RowBarrier, tid: &Expr) -> R<()> {
        let away = Expr::idx(IdxOp::Add, Expr::Int(b.rows as i64), b.row.clone());
        let first = Expr::idx(IdxOp::Eq, tid.clone(), Expr::Int(0));
        let (counters, row) = (b.counters.clone(), b.row.clone());
        self.when_last(
            (&b.counters, vec![away]),
            b.blocks,
            (&b.old, 0),
            tid,
            &Stmt::Sync,
            |s| {
                s.if_(first, |s| {
                    s.out.push(Stmt::Store {
                        tensor: counters,
                        coord: vec![row],
                        value: lit(DType::I32, 0.0),
                    });
                    Ok(())
                })
            },
        )
    }
}

/// One counter of an arrival step: `counter[at]`, shared by `arrivals` blocks, its old value
/// to `old[slot]`.
pub(crate) struct Arrival<'a> {
    pub(crate) counter: &'a str,
    pub(crate) at: Vec<Expr>,
    pub(crate) arrivals: u64,
    pub(crate) slot: i64,
}

fn fence() -> Stmt {
    Stmt::Intrinsic {
        op: Intrinsic::FenceGpu,
        args: vec![],
    }
}
