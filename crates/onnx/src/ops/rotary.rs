//! ONNX's `RotaryEmbedding` (opset 23) and the gated activations `Swish` and `SwiGLU`, as the
//! elementwise chains an exporter would otherwise write: the cosine and sine rows picked by a
//! `gather` of the position ids, the rotated halves (or the even and odd elements, interleaved)
//! as slices, `x₁·cos - x₂·sin` and `x₁·sin + x₂·cos`, and a concat back.

use super::Node;
use super::math::{bin, down, one, reshape_to, sc, un, up};
use super::pad::slice_axis;
use crate::ctx::{Ctx, R, Val};
use irc_ir::{Attr, Attrs, OpKind};

/// `x · sigmoid(alpha · x)` (`silu` for alpha 1).
fn swish_of(cx: &mut Ctx, x: &Val, alpha: f64) -> R<Val> {
    if alpha == 1.0 {
        return un(cx, OpKind::Silu, x);
    }
    let a = sc(cx, alpha, x);
    let ax = bin(cx, OpKind::Mul, x, &a)?;
    let s = un(cx, OpKind::Sigmoid, &ax)?;
    bin(cx, OpKind::Mul, x, &s)
}

pub fn swish(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    one(swish_of(cx, &x, n.float("alpha", 1.0) as f64)?)
}

/// `swish(A) · B`, `A` and `B` of one shape.
pub fn swiglu(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (a, b) = (n.x(0)?, n.x(1)?);
    let (sa, sb) = (cx.ty(&a).shape, cx.ty(&b).shape);
    if sa != sb {
        return Err(format!(
            "A {sa:?} and B {sb:?} must have one shape (no broadcasting)"
        ));
    }
    let g = swish_of(cx, &a, n.float("alpha", 1.0) as f64)?;
    one(bin(cx, OpKind::Mul, &g, &b)?)
}

fn concat(cx: &mut Ctx, parts: &[&Val], axis: i64) -> R<Val> {
    cx.op(
        OpKind::Concat,
        parts,
        Attrs::new().with("axis", Attr::Int(axis)),
    )
}

/// RotaryEmbedding of `[B, heads, S, D]` or `[B, S, heads · D]` (`num_heads`): the first
/// `rotary_embedding_dim` (default D) features of each head rotated by the cache rows of each
/// position (`cos_cache[position_ids]`, or caches of `[B, S, r/2]` without position ids).
pub fn rotary_embedding(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    super::math::require_float(cx, &n.x(0)?, "RotaryEmbedding")?;
    let (x, d0) = up(cx, &n.x(0)?)?;
    let (cos, sin) = (n.x(1)?, n.x(2)?);
    let shape = cx.ty(&x).shape;
    // The input as [B, heads, S, D] or [B, S, heads, D], and where its cache rows broadcast.
    let (xv, heads_first) = match shape.len() {
        4 => (x.clone(), true),
        3 => {
            let h = n.int("num_heads", 0);
            if h < 1 || shape[2] % h as u64 != 0 {
                return Err(format!(
                    "num_heads = {h} must divide the hidden size of a 3-D input {shape:?}"
                ));
            }
            let h = h as u64;
            (
                reshape_to(cx, &x, &[shape[0], shape[1], h, shape[2] / h])?,
                false,
            )
        }
        _ => return Err(format!("the input {shape:?} must be 3-D or 4-D")),
    };
    let vs = cx.ty(&xv).shape;
    let (b, s, d) = if heads_first {
        (vs[0], vs[2], vs[3])
    } else {
        (vs[0], vs[1], vs[3])
    };
    let r = match n.int("rotary_embedding_dim", 0) {
        0 => d,
        r if r > 0 && r as u64 <= d && r % 2 == 0 => r as u64,
        r => {
            return Err(format!(
                "rotary_embedding_dim = {r} (even, at most the head size {d})"
            ));
        }
    };
    if d % 2 != 0 {
        return Err(format!("the head size {d} must be even"));
    }
    let half = r / 2;
    let dt = cx.ty(&xv).dtype;
    let mut rows = |cache: &Val, what: &str| -> R<Val> {
        let c = super::math::cast_to(cx, cache, dt)?;
        let c = match n.opt(3) {
            Some(pos) => cx.op(
                OpKind::Gather,
                &[&c, &pos],
                Attrs::new().with("axis", Attr::Int(0)),
            )?,
            None => c,
        };
        let cs = cx.ty(&c).shape;
        if cs != [b, s, half] {
            return Err(format!(
                "{what} rows have shape {cs:?}, expected [{b}, {s}, {half}] (batch, sequence, rotary_embedding_dim / 2)"
            ));
        }
        let to = if heads_first {
            [b, 1, s, half]
        } else {
            [b, s, 1, half]
        };
        reshape_to(cx, &c, &to)
    };
    let cos = rows(&cos, "cos_cache")?;
    let sin = rows(&sin, "sin_cache")?;
    let rot = slice_axis(cx, &xv, 3, 0, r as i64, 1)?;
    let interleaved = n.int("interleaved", 0) != 0;
    let (x1, x2) = if interleaved {
        (
            slice_axis(cx, &rot, 3, 0, r as i64, 2)?,
            slice_axis(cx, &rot, 3, 1, r as i64, 2)?,
        )
    } else {
        (
            slice_axis(cx, &rot, 3, 0, half as i64, 1)?,
            slice_axis(cx, &rot, 3, half as i64, r as i64, 1)?,
        )
    };
    let (c1, s2) = (
        bin(cx, OpKind::Mul, &cos, &x1)?,
        bin(cx, OpKind::Mul, &sin, &x2)?,
    );
    let real = bin(cx, OpKind::Sub, &c1, &s2)?;
    let (s1, c2) = (
        bin(cx, OpKind::Mul, &sin, &x1)?,
        bin(cx, OpKind::Mul, &cos, &x2)?,
    );
    let imag = bin(cx, OpKind::Add, &s1, &c2)?;
    let rotated = if interleaved {
        // (real, imag) pairs: [.., r/2, 2] flattened to [.., r].
        let mut pair = cx.ty(&real).shape;
        pair.push(1);
        let re = reshape_to(cx, &real, &pair)?;
        let im = reshape_to(cx, &imag, &pair)?;
        let both = concat(cx, &[&re, &im], 4)?;
        let mut flat = pair;
        flat.pop();
        flat[3] = r;
        reshape_to(cx, &both, &flat)?
    } else {
        concat(cx, &[&real, &imag], 3)?
    };
    let y = if r < d {
        let pass = slice_axis(cx, &xv, 3, r as i64, d as i64, 1)?;
        concat(cx, &[&rotated, &pass], 3)?
    } else {
        rotated
    };
    let y = reshape_to(cx, &y, &shape)?;
    down(cx, d0, y)
}
