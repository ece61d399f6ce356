//! Ops that pick elements by a list known at import or by rank: ReverseSequence and Compress
//! as one `gather` of known indices, TopK by pairwise comparison.

use super::Node;
use super::math::{axis, bin, cast_to, known_ints, one, reduce, reshape_to, select};
use super::rnn::{reverse_index, reverse_within, take_rows};
use crate::ctx::{Ctx, R, Val};
use irc_ir::{Attr, Attrs, DType, OpKind, TensorType};

/// The longest axis TopK ranks (by comparing every pair of its elements).
const TOPK_AXIS: u64 = 4096;
/// The most elements TopK's pairwise comparison may hold (every element against every other
/// along the axis).
const TOPK_PAIRS: u64 = 1 << 26;

/// ReverseSequence: each batch row's first `sequence_lens[b]` steps along the time axis
/// reversed (the lengths known at import): a `gather` of the input flattened over its time
/// and batch axes (its first two, in either order).
pub fn reverse_sequence(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let shape = cx.ty(&x).shape;
    let lens = known_ints(cx, &n.x(1)?, "sequence_lens")?;
    let (ta, ba) = (n.int("time_axis", 0), n.int("batch_axis", 1));
    if shape.len() < 2 || !matches!((ta, ba), (0, 1) | (1, 0)) {
        return Err(format!(
            "time_axis {ta} and batch_axis {ba} of {shape:?} must be 0 and 1, in either order"
        ));
    }
    let (t, b) = (shape[ta as usize], shape[ba as usize]);
    if lens.len() as u64 != b || lens.iter().any(|&l| l < 0 || l as u64 > t) {
        return Err(format!(
            "sequence_lens {lens:?} must hold {b} lengths between 0 and {t}"
        ));
    }
    let lens: Vec<u64> = lens.into_iter().map(|l| l as u64).collect();
    if ta == 0 {
        return one(reverse_within(cx, &x, &lens)?);
    }
    let rows = (0..b)
        .flat_map(|r| (0..t).map(move |k| (r, k)))
        .map(|(r, k)| (r * t + reverse_index(k, lens[r as usize])) as i64)
        .collect();
    one(take_rows(cx, &x, rows, &[b, t])?)
}

/// Compress: the slices along `axis` (of the flattened input without one) where the known
/// condition is true: a `gather` of their indices.
pub fn compress(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let c = n.x(1)?;
    let cond = cx
        .known(&c)
        .ok_or("the condition must be known at import time (an initializer or a Constant); irc shapes are static")?
        .data
        .to_i64();
    let ty = cx.ty(&x);
    let (x, a) = match n.has("axis") {
        true => (x, axis(n.int("axis", 0), ty.rank())?),
        false => (reshape_to(cx, &x, &[ty.numel()])?, 0),
    };
    let len = cx.ty(&x).shape[a];
    let picked: Vec<i64> = (0..cond.len() as i64)
        .filter(|&k| cond[k as usize] != 0)
        .collect();
    if picked.last().is_some_and(|&k| k as u64 >= len) {
        return Err(format!(
            "the condition selects index {} of an axis of {len}",
            picked.last().copied().unwrap_or(0)
        ));
    }
    if picked.is_empty() {
        return Err("the condition selects nothing (irc tensors have no zero-sized dims)".into());
    }
    let idx = cx.ints_val(&picked);
    let attrs = Attrs::new().with("axis", Attr::Int(a as i64));
    one(cx.op(OpKind::Gather, &[&x, &idx], attrs)?)
}

/// `x` with a dim of 1 inserted at `at`.
fn unsqueeze(cx: &mut Ctx, x: &Val, at: usize) -> R<Val> {
    let mut s = cx.ty(x).shape;
    s.insert(at, 1);
    reshape_to(cx, x, &s)
}

/// TopK of a known `K` along `axis`: each element's rank is the count of elements that come
/// before it (greater, or smaller with `largest=0`, or equal at a lower index, so ranks are
/// distinct and ties keep index order), from comparing every pair along the axis; output `k`
/// is the element of rank `k` (a `select` against a lowest fill, reduced with `reduce_max`)
/// and its index. The result is sorted whatever `sorted` says (which ONNX allows). NaN inputs
/// have no defined order here.
pub fn top_k(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let ty = cx.ty(&x);
    let ks = known_ints(cx, &n.x(1)?, "K")?;
    let a = axis(n.int("axis", -1), ty.rank())?;
    let len = ty.shape[a];
    let [k] = ks[..] else {
        return Err(format!("K must be one integer, got {ks:?}"));
    };
    if k < 1 || k as u64 > len {
        return Err(format!("K = {k} must be between 1 and the axis's {len}"));
    }
    if len > TOPK_AXIS {
        return Err(format!(
            "TopK along an axis of {len} is not supported (at most {TOPK_AXIS}: it compares every pair)"
        ));
    }
    // The pairwise comparison holds numel · len elements (and two i64 iotas of that shape).
    let pairs = ty.shape.iter().try_fold(len, |n, &d| n.checked_mul(d));
    if pairs.is_none_or(|p| p > TOPK_PAIRS) {
        return Err(format!(
            "TopK of {} along an axis of {len} is not supported: its pairwise comparison would hold more than {TOPK_PAIRS} elements",
            ty
        ));
    }
    if ty.dtype == DType::I1 {
        return Err("TopK of bool is not an ONNX type".into());
    }
    let largest = n.int("largest", 1) != 0;
    // Pairs: i along `a`, j along `a + 1`.
    let xi = unsqueeze(cx, &x, a + 1)?;
    let xj = unsqueeze(cx, &x, a)?;
    let mut grid = ty.shape.clone();
    grid.insert(a + 1, len);
    let gty = TensorType::new(grid, DType::I64);
    let (ii, jj) = (cx.iota(&gty, a)?, cx.iota(&gty, a + 1)?);
    let before = bin(cx, if largest { OpKind::Gt } else { OpKind::Lt }, &xj, &xi)?;
    let tie = bin(cx, OpKind::Eq, &xj, &xi)?;
    let lower = bin(cx, OpKind::Lt, &jj, &ii)?;
    let f = cx.scalar(0.0, DType::I1);
    let tie_first = select(cx, &tie, &lower, &f)?;
    let t = cx.scalar(1.0, DType::I1);
    let beats = select(cx, &before, &t, &tie_first)?;
    let beats = cast_to(cx, &beats, DType::I64)?;
    let rank = reduce(cx, OpKind::ReduceSum, &beats, &[a as i64 + 1], false)?;
    // Outputs: rank along `a` against k along `a + 1`.
    let mut out = ty.shape.clone();
    out.insert(a + 1, k as u64);
    let oty = TensorType::new(out, DType::I64);
    let kk = cx.iota(&oty, a + 1)?;
    let pos = cx.iota(&oty, a)?;
    let ri = unsqueeze(cx, &rank, a + 1)?;
    let at = bin(cx, OpKind::Eq, &ri, &kk)?;
    let lowest = match ty.dtype {
        DType::I32 => i32::MIN as f64,
        DType::I64 => i64::MIN as f64,
        _ => f64::NEG_INFINITY,
    };
    let low = cx.scalar(lowest, ty.dtype);
    let vals = select(cx, &at, &xi, &low)?;
    let vals = reduce(cx, OpKind::ReduceMax, &vals, &[a as i64], false)?;
    let none = cx.scalar(-1.0, DType::I64);
    let idx = select(cx, &at, &pos, &none)?;
    let idx = reduce(cx, OpKind::ReduceMax, &idx, &[a as i64], false)?;
    Ok(vec![vals, idx])
}
