//! Policy rule 6, its reduction leaf: a **row or column reduction in a matmul's epilogue**. A
//! `reduce_sum`, `reduce_max`, `reduce_min` or `reduce_mean` over the last axis (a row
//! reduction: over N) or the one before it (a column reduction: over M) of the matmul's value,
//! or of a value of its epilogue closure, is computed by the matmul's kernel:
//!
//! ```text
//! s[.., i] = reduce_j f(matmul(A, B))[.., i, j]      (rows)
//! s[.., j] = reduce_i f(matmul(A, B))[.., i, j]      (columns)
//! ```
//!
//! Each block reduces its tile's part of every row (or column) it holds into a partial (in f32,
//! in a fixed order), writes it to a workspace, and the last block of a row (column) of tiles
//! to finish (an arrival counter) adds the partials in tile order and stores `s`. One launch;
//! the `[.., M, N]` value is never written unless something else reads it, and the result does
//! not depend on the order the blocks run in.
//!
//! Declined, with the reason, when the reduction is over other or several axes, when the matmul
//! is not one of the tensor-core templates' (f16, bf16 or f32 with both operands of the
//! result's type: the SIMT template has no epilogue reduction), for matrix-vector products
//! (their own template; a vector operand included, whose dim the result drops), and when the
//! reduced values are not f16, bf16 or f32 (the partials are f32).

use crate::policy::Dag;
use irc_ir::{Attr, DType, OpKind};

/// One reduction of a matmul's epilogue value the policy looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpilogueReduction {
    /// The reduction.
    pub reduction: usize,
    /// The matmul whose epilogue computes its operand.
    pub matmul: usize,
    /// Why it stays its own kernel; `None` when the matmul's kernel computes it.
    pub declined: Option<String>,
}

/// Whether `op` is a reduction the epilogue can take.
pub fn is_epilogue_reduction(op: OpKind) -> bool {
    matches!(
        op,
        OpKind::ReduceSum | OpKind::ReduceMax | OpKind::ReduceMin | OpKind::ReduceMean
    )
}

/// The axes a reduction's `axes` attribute names, normalized against `rank`.
fn axes(value: Option<Attr>, rank: usize) -> Option<Vec<usize>> {
    let Some(Attr::Array(items)) = value else {
        return None;
    };
    items
        .iter()
        .map(|a| {
            let a = a.as_int()?;
            let a = if a < 0 { a + rank as i64 } else { a };
            (0..rank as i64).contains(&a).then_some(a as usize)
        })
        .collect()
}

/// Why the matmul `m` cannot compute the reduction `r` (reading a value of `m`'s epilogue) in
/// its kernel, if it cannot.
pub(crate) fn why_not(d: &impl Dag, m: usize, r: usize) -> Option<String> {
    let op = d.op(r)?;
    let shape = d.shape(m);
    let rank = shape.len();
    let x = *d.operands(r).first()?;
    if !is_epilogue_reduction(op) {
        return Some(format!("{} is not a sum, max, min or mean", op.name()));
    }
    let axes = axes(d.attr(r, "axes"), d.shape(x).len());
    if rank < 2 || !(axes == Some(vec![rank - 1]) || axes == Some(vec![rank - 2])) {
        return Some(
            "it does not reduce one of the matmul's last two axes alone (a row or a column \
             reduction)"
                .into(),
        );
    }
    let dt = d.dtype(m);
    let tensor_cores = matches!(dt, Some(DType::F16 | DType::BF16 | DType::F32))
        && d.operands(m).iter().all(|&o| d.dtype(o) == dt);
    if !tensor_cores {
        return Some(
            "the matmul is not f16, bf16 or f32 with operands of its type (the SIMT template \
             has no epilogue reduction)"
                .into(),
        );
    }
    // A vector operand (its dim dropped from the result, as torch does) or an M or N of 1.
    let vector = d.operands(m).iter().any(|&o| d.shape(o).len() < 2);
    if vector || shape[rank - 2] < 2 || shape[rank - 1] < 2 {
        return Some("a matrix-vector product (its own template)".into());
    }
    // Partials and totals are f32: the operand must not need more (f64, integers).
    let xt = d.dtype(x);
    if !matches!(xt, Some(DType::F16 | DType::BF16 | DType::F32)) {
        return Some(format!(
            "it reduces {} values, and the epilogue accumulates in f32",
            xt.map_or("untyped".to_string(), |t| t.to_string())
        ));
    }
    None
}
