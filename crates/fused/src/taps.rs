//! Rule 13 of the fusion policy ([`crate::policy`]'s docs): **window taps**. A value rule 4
//! stored because several statements read it is computed inline instead when it is cheap and
//! every reader ends in one pointwise kernel, reading it through views at other coordinates:
//! the taps of a pooling window or of a convolution's columns (strided slices of a padded
//! input), a `Pad`'s reflected edges. Storing such a value costs a write and a read of the
//! whole tensor; computing it at each tap costs a few integer selects and the load the tap
//! makes anyway.
//!
//! Cheap: its cone inside the kernel (through inline nodes, down to buffers, parameters and
//! immediates) holds at most [`CONE`] ops, all of them views, `concat`s or elementwise ops
//! without a transcendental function, and the readers are at most [`TAPS`].

use crate::policy::{Dag, Home, NodeKind, Why};
use irc_ir::OpKind;

/// The most ops a value's inline cone may hold to be recomputed at each tap.
const CONE: usize = 16;
/// The most statements that may read it.
const TAPS: usize = 27;

/// Ops that cost a few instructions per element.
fn cheap(op: OpKind) -> bool {
    use OpKind::*;
    matches!(
        op,
        Add | Sub
            | Mul
            | Max
            | Min
            | Neg
            | Abs
            | Relu
            | Select
            | Eq
            | Ne
            | Lt
            | Le
            | Gt
            | Ge
            | Cast
            | Iota
            | Concat
            | Transpose
            | Reshape
            | Broadcast
            | Slice
            | Constant
    )
}

/// The ops of node `i`'s inline cone, or `None` past [`CONE`] or at an op that is not cheap.
fn cone(d: &impl Dag, home: &[Home], i: usize) -> Option<usize> {
    let mut seen = vec![i];
    let mut stack = vec![i];
    while let Some(x) = stack.pop() {
        if !d.op(x).is_some_and(cheap) {
            return None;
        }
        for &o in d.operands(x) {
            if home[o] == Home::Inline && !seen.contains(&o) {
                if seen.len() == CONE {
                    return None;
                }
                seen.push(o);
                stack.push(o);
            }
        }
    }
    Some(seen.len())
}

/// Rule 13. The kernels values end in are found from the last node back (each reader's before
/// its operands); the values are then decided from the first, so that the cone of a later one
/// counts the earlier ones computed inline. Inlining a value changes only where it and the
/// nodes before it end. `readers[i]`: the distinct statements reading node `i`.
pub(crate) fn taps_in_one_kernel(
    d: &impl Dag,
    readers: &[Vec<usize>],
    home: &mut [Home],
    claimed: &[bool],
    is_result: &[bool],
    forced_at: &impl Fn(usize) -> bool,
) {
    let n = d.len();
    // The one kernel node `i`'s value is computed in: its own if stored, its readers' common
    // kernel if inline (`None` for several, or for none).
    let mut end: Vec<Option<usize>> = vec![None; n];
    for i in (0..n).rev() {
        end[i] = match &home[i] {
            Home::Stored { kernel, .. } => Some(*kernel),
            Home::Inline => {
                let mut k = None;
                for &r in &readers[i] {
                    match (k, end[r]) {
                        (_, None) => {
                            k = None;
                            break;
                        }
                        (Some(k0), Some(kr)) if k0 != kr => {
                            k = None;
                            break;
                        }
                        (_, kr) => k = kr,
                    }
                }
                k
            }
            _ => None,
        };
    }
    for i in 0..n {
        let candidate = matches!(&home[i], Home::Stored { why: Why::SharedBy(_), kernel } if *kernel == i)
            && matches!(d.kind(i), NodeKind::Elementwise | NodeKind::Indexing)
            && d.op(i) != Some(OpKind::Gather)
            && !claimed[i]
            && !is_result[i]
            && !forced_at(i)
            && readers[i].len() <= TAPS
            && readers[i].iter().any(|&r| d.kind(r) == NodeKind::View);
        if !candidate {
            continue;
        }
        let mut ends = readers[i].iter().map(|&r| end[r]);
        let Some(Some(k)) = ends.next() else {
            continue;
        };
        let pointwise = matches!(d.kind(k), NodeKind::Elementwise | NodeKind::Indexing)
            && matches!(home[k], Home::Stored { kernel, .. } if kernel == k);
        if ends.all(|e| e == Some(k)) && pointwise && cone(d, home, i).is_some() {
            home[i] = Home::Inline;
        }
    }
}
