//! ONNX `CumSum` as masked sums: `y[i] = Σ_j x[j] · [j ≤ i]` (`<`, `≥`, `>` for the exclusive
//! and reversed forms) is the input broadcast along a new axis, a `select` by two `iota`s'
//! comparison and a `reduce_sum`, computed per element with nothing materialized. That is
//! `n²` additions along an axis of `n`; past [`DIRECT`] elements the axis is split into blocks
//! of about `√n`: each block is scanned the same way, and the (exclusive) scan of the block
//! totals is added to it, `n·√n` in all.

use super::Node;
use super::math::{axis, bin, cast_to, known_ints, one, reduce, reshape_to, select};
use crate::ctx::{Ctx, R, Val};
use irc_ir::{Attr, Attrs, DType, OpKind, TensorType, ints};

/// The longest axis scanned directly.
const DIRECT: u64 = 1024;

/// The scan of `x` along `a`.
fn scan(cx: &mut Ctx, x: &Val, a: usize, exclusive: bool, reverse: bool) -> R<Val> {
    let ty = cx.ty(x);
    let n = ty.shape[a];
    if n > DIRECT {
        return blocked(cx, x, a, exclusive, reverse);
    }
    // [.., n(j), ..] -> [.., n(j), 1, ..] -> [.., n(j), n(i), ..]
    let mut spread = ty.shape.clone();
    spread.insert(a + 1, 1);
    let mut square = ty.shape.clone();
    square.insert(a + 1, n);
    let xs = reshape_to(cx, x, &spread)?;
    let sq: Vec<i64> = square.iter().map(|&d| d as i64).collect();
    let xb = cx.op(
        OpKind::Broadcast,
        &[&xs],
        Attrs::new().with("shape", ints(&sq)),
    )?;
    let index = TensorType::new(square, DType::I64);
    let (j, i) = if cx.known(x).is_some() {
        // A known input folds: the indices too.
        let at = |cx: &mut Ctx, k: usize| {
            let attrs = Attrs::new().with("axis", Attr::Int(k as i64));
            cx.op_typed(OpKind::Iota, &[], attrs, Some(&index))
        };
        (at(cx, a)?, at(cx, a + 1)?)
    } else {
        (cx.iota(&index, a)?, cx.iota(&index, a + 1)?)
    };
    let cmp = match (exclusive, reverse) {
        (false, false) => OpKind::Le,
        (true, false) => OpKind::Lt,
        (false, true) => OpKind::Ge,
        (true, true) => OpKind::Gt,
    };
    let keep = bin(cx, cmp, &j, &i)?;
    let zero = cx.scalar(0.0, ty.dtype);
    let masked = select(cx, &keep, &xb, &zero)?;
    reduce(cx, OpKind::ReduceSum, &masked, &[a as i64], false)
}

/// [`scan`] of a long axis in blocks: zeros pad it to `B·T` (`T ≈ √n`), each block of `T` is
/// scanned, and each block's elements add the exclusive scan of the block totals.
fn blocked(cx: &mut Ctx, x: &Val, a: usize, exclusive: bool, reverse: bool) -> R<Val> {
    let ty = cx.ty(x);
    let n = ty.shape[a];
    let t = (n as f64).sqrt().ceil() as u64;
    let b = n.div_ceil(t);
    let mut padded = x.clone();
    if b * t > n {
        let mut zshape: Vec<i64> = ty.shape.iter().map(|&d| d as i64).collect();
        zshape[a] = (b * t - n) as i64;
        let zero = cx.scalar(0.0, ty.dtype);
        let zeros = cx.op(
            OpKind::Broadcast,
            &[&zero],
            Attrs::new().with("shape", ints(&zshape)),
        )?;
        padded = cx.op(
            OpKind::Concat,
            &[x, &zeros],
            Attrs::new().with("axis", Attr::Int(a as i64)),
        )?;
    }
    let mut split = ty.shape.clone();
    split[a] = b;
    split.insert(a + 1, t);
    let xs = reshape_to(cx, &padded, &split)?;
    let local = scan(cx, &xs, a + 1, exclusive, reverse)?;
    let totals = reduce(cx, OpKind::ReduceSum, &xs, &[a as i64 + 1], true)?;
    let carry = scan(cx, &totals, a, true, reverse)?;
    let y = bin(cx, OpKind::Add, &local, &carry)?;
    let mut joined = ty.shape.clone();
    joined[a] = b * t;
    let y = reshape_to(cx, &y, &joined)?;
    if b * t == n {
        return Ok(y);
    }
    let attrs = Attrs::new()
        .with("axes", ints(&[a as i64]))
        .with("starts", ints(&[0]))
        .with("ends", ints(&[n as i64]));
    cx.op(OpKind::Slice, &[&y], attrs)
}

pub fn cumsum(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let ty = cx.ty(&x);
    let axes = known_ints(cx, &n.x(1)?, "axis")?;
    let [ax] = axes[..] else {
        return Err(format!("axis must be one integer, got {axes:?}"));
    };
    let a = axis(ax, ty.rank())?;
    if ty.dtype == DType::I1 {
        return Err("CumSum of bool is not an ONNX type".into());
    }
    // 16-bit floats are summed in f32 and rounded once.
    let wide = match ty.dtype {
        DType::F16 | DType::BF16 => cast_to(cx, &x, DType::F32)?,
        _ => x,
    };
    let exclusive = n.int("exclusive", 0) != 0;
    let reverse = n.int("reverse", 0) != 0;
    let y = scan(cx, &wide, a, exclusive, reverse)?;
    one(cast_to(cx, &y, ty.dtype)?)
}
