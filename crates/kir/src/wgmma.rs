//! Which `wgmma` accumulators each `wgmma.wait_group` completes.
//!
//! An emitter passes the accumulators of the groups a wait completes through an empty asm
//! right after it, so that no read of them moves above the wait. Passing *every*
//! accumulator there instead keeps values alive that are dead — a score buffer about to be
//! overwritten — and, worse, pins the registers of a product still in flight, which makes
//! ptxas wait for it where the schedule meant to overlap it (the attention kernel's softmax
//! beside its `P·V`).
//!
//! [`wait_fences`] follows the commit groups through the body: each `wgmma` adds its
//! accumulator to the open group, `wgmma.commit_group` closes it, `wgmma.wait_group n`
//! completes all but the newest `n` closed groups. Where the groups in flight are not known
//! — a loop whose body does not end drained, branches that end differently — a wait
//! completes every accumulator, as if nothing were known.

use crate::{Intrinsic, Stmt};
use std::collections::{HashMap, VecDeque};

/// The accumulators (tensor names) each `wgmma.wait_group` statement completes, and those no
/// product has in flight when it starts, keyed by the statement's address in the body given to
/// [`wait_fences`]. A wait not in the maps completes every accumulator and has none idle.
#[derive(Debug, Default)]
pub struct WaitFences {
    at: HashMap<*const Stmt, Vec<String>>,
    idle: HashMap<*const Stmt, Vec<String>>,
    all: Vec<String>,
}

impl WaitFences {
    /// The accumulators the wait `s` (a statement of the analysed body) completes: an emitter
    /// fences them after it.
    pub fn of(&self, s: &Stmt) -> &[String] {
        self.at
            .get(&(s as *const Stmt))
            .map_or(&self.all[..], |v| &v[..])
    }

    /// The accumulators no product has in flight when the wait `s` starts. An emitter fences
    /// them before it, so that the work on them the schedule placed before the wait — a
    /// softmax on the scores while `P·V` computes — is not moved after it (an optimizing
    /// compiler may move register arithmetic across a volatile asm).
    pub fn idle_at(&self, s: &Stmt) -> &[String] {
        self.idle
            .get(&(s as *const Stmt))
            .map_or(&[][..], |v| &v[..])
    }
}

/// The `wgmma`s in flight: the committed groups, oldest first, and the uncommitted ("open")
/// group, each known (`Some`) or not (`None`). A wait retires committed groups only, so the
/// open group stays as it was.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Groups {
    closed: Option<VecDeque<Vec<String>>>,
    open: Option<Vec<String>>,
}

impl Groups {
    fn drained() -> Groups {
        Groups {
            closed: Some(VecDeque::new()),
            open: Some(vec![]),
        }
    }

    fn unknown() -> Groups {
        Groups {
            closed: None,
            open: None,
        }
    }

    /// What two paths that meet have in common: each part where both agree.
    fn join(self, other: Groups) -> Groups {
        Groups {
            closed: if self.closed == other.closed {
                self.closed
            } else {
                None
            },
            open: if self.open == other.open {
                self.open
            } else {
                None
            },
        }
    }
}

/// The fences of every `wgmma.wait_group` in `body` (see the module's text).
pub fn wait_fences(body: &[Stmt]) -> WaitFences {
    let mut all = vec![];
    crate::walk(body, &mut |s| {
        if let Some(acc) = accumulator(s)
            && !all.contains(acc)
        {
            all.push(acc.clone());
        }
    });
    let mut w = WaitFences {
        at: HashMap::new(),
        idle: HashMap::new(),
        all,
    };
    block(&mut w, body, Groups::drained());
    w
}

/// The accumulator a `wgmma` statement writes.
fn accumulator(s: &Stmt) -> Option<&String> {
    match s {
        Stmt::Intrinsic { op, args } if op.is_wgmma() => args.first()?.frag().map(|f| &f.tensor),
        _ => None,
    }
}

fn touches_groups(body: &[Stmt]) -> bool {
    let mut any = false;
    crate::walk(body, &mut |s| {
        if let Stmt::Intrinsic { op, .. } = s
            && (op.is_wgmma() || matches!(op, Intrinsic::WgmmaCommit | Intrinsic::WgmmaWait))
        {
            any = true;
        }
    });
    any
}

fn block(w: &mut WaitFences, body: &[Stmt], mut g: Groups) -> Groups {
    for s in body {
        g = stmt(w, s, g);
    }
    g
}

fn stmt(w: &mut WaitFences, s: &Stmt, mut g: Groups) -> Groups {
    match s {
        Stmt::Intrinsic { op, .. } if op.is_wgmma() => {
            if let (Some(open), Some(acc)) = (g.open.as_mut(), accumulator(s))
                && !open.contains(acc)
            {
                open.push(acc.clone());
            }
            g
        }
        Stmt::Intrinsic {
            op: Intrinsic::WgmmaCommit,
            ..
        } => {
            g.closed = match (g.closed, g.open) {
                (Some(mut closed), Some(open)) => {
                    closed.push_back(open);
                    Some(closed)
                }
                _ => None,
            };
            g.open = Some(vec![]);
            g
        }
        Stmt::Intrinsic {
            op: Intrinsic::WgmmaWait,
            args,
        } => {
            let key = s as *const Stmt;
            let keep = match args.first() {
                Some(crate::Arg::Expr(crate::Expr::Int(n))) => usize::try_from(*n).ok(),
                _ => None,
            };
            match (g.closed.as_mut(), keep) {
                (Some(closed), Some(n)) => {
                    let open = g.open.as_deref();
                    let busy = |t: &String| {
                        open.is_none_or(|o| o.contains(t)) || closed.iter().any(|c| c.contains(t))
                    };
                    let idle = w.all.iter().filter(|t| !busy(t)).cloned().collect();
                    w.idle.insert(key, idle);
                    let mut done: Vec<String> = vec![];
                    while closed.len() > n {
                        for acc in closed.pop_front().unwrap_or_default() {
                            if !done.contains(&acc) {
                                done.push(acc);
                            }
                        }
                    }
                    w.at.insert(key, done);
                }
                // Nothing known of the committed groups: the wait completes every accumulator
                // (a second walk of a loop's body forgets what the first one assumed). After
                // `wait 0` none is committed and in flight.
                (_, keep) => {
                    w.at.remove(&key);
                    w.idle.remove(&key);
                    g.closed = (keep == Some(0)).then(VecDeque::new);
                }
            }
            g
        }
        Stmt::For { body, .. } => {
            if !touches_groups(body) {
                return g;
            }
            // A loop that starts drained and whose body ends drained runs every iteration
            // from the drained state; otherwise nothing is known inside it.
            if g == Groups::drained() && block(w, body, Groups::drained()) == Groups::drained() {
                return g;
            }
            let after = block(w, body, Groups::unknown());
            // The loop may run no iteration.
            g.join(after)
        }
        Stmt::If { body, orelse, .. } => {
            if !touches_groups(body) && !touches_groups(orelse) {
                return g;
            }
            let (a, b) = (block(w, body, g.clone()), block(w, orelse, g));
            a.join(b)
        }
        _ => g,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Arg, Expr};

    fn mma(acc: &str) -> Stmt {
        Stmt::Intrinsic {
            op: Intrinsic::Wgmma(64),
            args: vec![Arg::at(acc, vec![])],
        }
    }
    fn commit() -> Stmt {
        Stmt::Intrinsic {
            op: Intrinsic::WgmmaCommit,
            args: vec![],
        }
    }
    fn wait(n: i64) -> Stmt {
        Stmt::Intrinsic {
            op: Intrinsic::WgmmaWait,
            args: vec![Arg::Expr(Expr::Int(n))],
        }
    }
    fn looped(body: Vec<Stmt>) -> Stmt {
        Stmt::For {
            var: "i".into(),
            start: Expr::Int(0),
            end: Expr::Int(4),
            step: Expr::Int(1),
            unroll: false,
            body,
        }
    }
    fn names(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    /// The pipelined attention loop: S issued beside P·V, `wait 1` completes S alone (O is
    /// still in flight, neither fenced after nor idle before), `wait 0` completes O.
    #[test]
    fn a_wait_completes_the_groups_it_waits_for() {
        let body = vec![looped(vec![
            mma("s"),
            commit(),
            mma("o"),
            commit(),
            wait(1),
            wait(0),
        ])];
        let f = wait_fences(&body);
        let Stmt::For { body: inner, .. } = &body[0] else {
            unreachable!()
        };
        assert_eq!(names(f.of(&inner[4])), ["s"]);
        assert!(f.idle_at(&inner[4]).is_empty());
        assert_eq!(names(f.of(&inner[5])), ["o"]);
        assert_eq!(names(f.idle_at(&inner[5])), ["s"]);
    }

    /// A loop whose body leaves a group in flight: nothing is known inside it, so each wait
    /// completes every accumulator.
    #[test]
    fn unknown_groups_complete_every_accumulator() {
        let body = vec![looped(vec![
            mma("s"),
            commit(),
            wait(1),
            mma("o"),
            commit(),
        ])];
        let f = wait_fences(&body);
        let Stmt::For { body: inner, .. } = &body[0] else {
            unreachable!()
        };
        assert_eq!(names(f.of(&inner[2])), ["s", "o"]);
        assert!(f.idle_at(&inner[2]).is_empty());
    }

    /// A wait retires committed groups only: a product issued but not committed when the
    /// state is unknown stays in flight past `wait 0`, and joins the next commit's group.
    #[test]
    fn uncommitted_products_outlive_a_wait() {
        let body = vec![
            looped(vec![mma("x"), commit(), wait(1)]),
            mma("y"),
            wait(0),
            commit(),
            wait(0),
        ];
        let f = wait_fences(&body);
        // After the loop nothing is known of the open group: y is not idle at the first wait.
        assert!(!names(f.idle_at(&body[2])).contains(&"y"));
        // The second wait completes every accumulator (the committed group's contents are
        // not known).
        assert!(names(f.of(&body[4])).contains(&"y"));
        assert!(!names(f.idle_at(&body[4])).contains(&"y"));
    }

    /// Branches that leave different groups in flight forget what they knew.
    #[test]
    fn branches_that_differ_forget_the_groups() {
        let body = vec![
            Stmt::If {
                cond: Expr::Int(1),
                body: vec![mma("s"), commit()],
                orelse: vec![],
            },
            wait(0),
        ];
        let f = wait_fences(&body);
        assert_eq!(names(f.of(&body[1])), ["s"]);
        let same = vec![
            Stmt::If {
                cond: Expr::Int(1),
                body: vec![mma("s"), commit()],
                orelse: vec![mma("s"), commit()],
            },
            mma("o"),
            commit(),
            wait(1),
        ];
        let f = wait_fences(&same);
        assert_eq!(names(f.of(&same[3])), ["s"]);
    }
}
