//! ONNX `Pad` (modes `constant`, `reflect`, `edge`, `wrap`) axis by axis as a `concat` of the
//! input with its padding: a broadcast constant, a broadcast edge slice, a reversed slice
//! (step -1, the reflection) or the opposite end's slice (the wrap); a negative pad crops the
//! axis with a slice first.

use super::Node;
use super::math::{axis, cast_to, known_ints, one, reshape_to};
use crate::ctx::{Ctx, R, Val};
use irc_ir::{Attr, Attrs, OpKind, ints};

/// `x[start:end:step]` along axis `a`.
pub(super) fn slice_axis(
    cx: &mut Ctx,
    x: &Val,
    a: usize,
    start: i64,
    end: i64,
    step: i64,
) -> R<Val> {
    let attrs = Attrs::new()
        .with("axes", ints(&[a as i64]))
        .with("starts", ints(&[start]))
        .with("ends", ints(&[end]))
        .with("steps", ints(&[step]));
    cx.op(OpKind::Slice, &[x], attrs)
}

/// `v` (one element along `a`, or a scalar) broadcast to `count` along `a` of `like`'s shape.
fn spread(cx: &mut Ctx, v: &Val, like: &[u64], a: usize, count: u64) -> R<Val> {
    let mut shape: Vec<i64> = like.iter().map(|&d| d as i64).collect();
    shape[a] = count as i64;
    cx.op(
        OpKind::Broadcast,
        &[v],
        Attrs::new().with("shape", ints(&shape)),
    )
}

/// The `count` values `mode` puts before (`before`) or after `x` along `a`.
fn padding(
    cx: &mut Ctx,
    x: &Val,
    a: usize,
    count: u64,
    before: bool,
    mode: &str,
    value: &Val,
) -> R<Val> {
    let shape = cx.ty(x).shape;
    let n = shape[a] as i64;
    let c = count as i64;
    match mode {
        "constant" => spread(cx, value, &shape, a, count),
        "edge" => {
            let at = if before { 0 } else { n - 1 };
            let e = slice_axis(cx, x, a, at, at + 1, 1)?;
            spread(cx, &e, &shape, a, count)
        }
        "reflect" => {
            if c >= n {
                return Err(format!(
                    "reflect padding of {c} needs more than {c} elements along axis {a}, which has {n}"
                ));
            }
            if before {
                // x[c], x[c-1], ..., x[1]
                slice_axis(cx, x, a, c, 0, -1)
            } else {
                // x[n-2], ..., x[n-1-c]; an end of -n-1 walks down through index 0.
                let end = if n - 2 - c >= 0 { n - 2 - c } else { -n - 1 };
                slice_axis(cx, x, a, n - 2, end, -1)
            }
        }
        "wrap" => {
            if c > n {
                return Err(format!(
                    "wrap padding of {c} is longer than axis {a}, which has {n} elements"
                ));
            }
            if before {
                slice_axis(cx, x, a, n - c, n, 1)
            } else {
                slice_axis(cx, x, a, 0, c, 1)
            }
        }
        _ => unreachable!("pad checks the mode"),
    }
}

pub fn pad(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let ty = cx.ty(&x);
    let rank = ty.rank();
    let mode = n.string("mode").unwrap_or_else(|| "constant".into());
    if !["constant", "reflect", "edge", "wrap"].contains(&mode.as_str()) {
        return Err(format!(
            "mode '{mode}' is not a Pad mode (constant, reflect, edge, wrap)"
        ));
    }
    let pads = known_ints(cx, &n.x(1)?, "pads")?;
    let axes: Vec<usize> = match n.opt(3) {
        Some(v) => known_ints(cx, &v, "axes")?
            .into_iter()
            .map(|a| axis(a, rank))
            .collect::<R<_>>()?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(format!(
            "pads has {} values; {} axes need {}",
            pads.len(),
            axes.len(),
            2 * axes.len()
        ));
    }
    let value = match n.opt(2) {
        Some(v) if cx.ty(&v).numel() != 1 => {
            return Err(format!(
                "constant_value must be one element, got {:?}",
                cx.ty(&v).shape
            ));
        }
        Some(v) => {
            let v = cast_to(cx, &v, ty.dtype)?;
            reshape_to(cx, &v, &[])?
        }
        None => cx.scalar(0.0, ty.dtype),
    };
    let mut y = x;
    for (i, &a) in axes.iter().enumerate() {
        let (b, e) = (pads[i], pads[i + axes.len()]);
        let len = cx.ty(&y).shape[a] as i64;
        if len + b.min(0) + e.min(0) <= 0 {
            return Err(format!(
                "pads {b} and {e} crop axis {a} of {len} elements to nothing"
            ));
        }
        if b < 0 || e < 0 {
            y = slice_axis(cx, &y, a, -b.min(0), len + e.min(0), 1)?;
        }
        let mut parts = Vec::with_capacity(3);
        if b > 0 {
            parts.push(padding(cx, &y, a, b as u64, true, &mode, &value)?);
        }
        parts.push(y.clone());
        if e > 0 {
            parts.push(padding(cx, &y, a, e as u64, false, &mode, &value)?);
        }
        if parts.len() > 1 {
            let refs: Vec<&Val> = parts.iter().collect();
            y = cx.op(
                OpKind::Concat,
                &refs,
                Attrs::new().with("axis", Attr::Int(a as i64)),
            )?;
        }
    }
    one(y)
}
