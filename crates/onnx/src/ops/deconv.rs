//! ONNX `ConvTranspose` as a direct convolution (the adjoint's usual form): the input is
//! spread by the stride (`s - 1` zeros between elements: a concat with zeros on a new axis, a
//! reshape and a slice), padded by `d·(k - 1)` less the node's padding on each side (cropped
//! where that is negative; `output_padding` more at the end), and convolved at stride 1 and
//! the node's dilation with the weights `[C, M/g, k...]` regrouped to `[M, C/g, k...]` and
//! flipped along each spatial axis (slices of step -1) — the same im2col and batched matmul as
//! `Conv`.

use super::Node;
use super::conv::{Geometry, convolve, kernel_of, pad_axis, positive};
use super::math::reshape_to;
use super::pad::slice_axis;
use crate::ctx::{Ctx, R, Val};
use irc_ir::{Attr, Attrs, OpKind, ints};

/// `x` with `s - 1` zeros between its elements along `axis`.
fn spread(cx: &mut Ctx, x: &Val, axis: usize, s: u64) -> R<Val> {
    if s == 1 {
        return Ok(x.clone());
    }
    let shape = cx.ty(x).shape;
    let n = shape[axis];
    let mut col = shape.clone();
    col.insert(axis + 1, 1);
    let xc = reshape_to(cx, x, &col)?;
    let mut zshape: Vec<i64> = col.iter().map(|&d| d as i64).collect();
    zshape[axis + 1] = (s - 1) as i64;
    let zero = cx.scalar(0.0, cx.ty(x).dtype);
    let zeros = cx.op(
        OpKind::Broadcast,
        &[&zero],
        Attrs::new().with("shape", ints(&zshape)),
    )?;
    let both = cx.op(
        OpKind::Concat,
        &[&xc, &zeros],
        Attrs::new().with("axis", Attr::Int(axis as i64 + 1)),
    )?;
    let mut flat = shape.clone();
    flat[axis] = n * s;
    let wide = reshape_to(cx, &both, &flat)?;
    slice_axis(cx, &wide, axis, 0, ((n - 1) * s + 1) as i64, 1)
}

/// `x` padded with `before` and `after` zeros along `axis`, or cropped where either is
/// negative.
fn pad_or_crop(cx: &mut Ctx, x: &Val, axis: usize, before: i64, after: i64) -> R<Val> {
    let n = cx.ty(x).shape[axis] as i64;
    let mut y = x.clone();
    if before < 0 || after < 0 {
        if n + before.min(0) + after.min(0) <= 0 {
            return Err(format!("the padding crops spatial dim {} away", axis - 2));
        }
        y = slice_axis(cx, &y, axis, -before.min(0), n + after.min(0), 1)?;
    }
    pad_axis(
        cx,
        &y,
        axis,
        (before.max(0) as u64, after.max(0) as u64),
        0.0,
    )
}

pub fn conv_transpose(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, w) = (n.x(0)?, n.x(1)?);
    let (xs, ws) = (cx.ty(&x).shape, cx.ty(&w).shape);
    if xs.len() < 3 || ws.len() != xs.len() {
        return Err(format!(
            "the input {xs:?} must be [N, C, spatial...] and the weights of the same rank, got {ws:?}"
        ));
    }
    let r = xs.len() - 2;
    let groups = u64::try_from(n.int("group", 1))
        .ok()
        .filter(|&g| g > 0)
        .ok_or("group must be positive")?;
    let (c, mg) = (xs[1], ws[1]);
    if ws[0] != c || c % groups != 0 {
        return Err(format!(
            "{c} input channels, weights {ws:?} and {groups} groups do not agree (weights are [C, M/group, k...])"
        ));
    }
    let m = mg * groups;
    let kernel = kernel_of(n, &ws)?;
    let list = |name: &str, default: u64| -> R<Vec<u64>> {
        let v = n.ints(name).unwrap_or(vec![default as i64; r]);
        if v.len() != r || v.iter().any(|&x| x < 0) {
            return Err(format!("{name} {v:?} must be {r} non-negative values"));
        }
        Ok(v.into_iter().map(|x| x as u64).collect())
    };
    let strides = positive(n.ints("strides").unwrap_or(vec![1; r]), "strides")?;
    let dilations = positive(n.ints("dilations").unwrap_or(vec![1; r]), "dilations")?;
    let extra = list("output_padding", 0)?;
    if strides.len() != r || dilations.len() != r {
        return Err(format!("strides and dilations need {r} values"));
    }
    let span: Vec<u64> = (0..r).map(|i| dilations[i] * (kernel[i] - 1) + 1).collect();
    let full: Vec<u64> = (0..r)
        .map(|i| strides[i] * (xs[2 + i] - 1) + extra[i] + span[i])
        .collect();
    let auto = n.string("auto_pad").unwrap_or_else(|| "NOTSET".into());
    // The padding taken off each side of the full result: from `output_shape` (or, with
    // `auto_pad` SAME, the input times the stride), split as ONNX says; else the `pads`.
    let target: Option<Vec<u64>> = match (n.ints("output_shape"), auto.as_str()) {
        (Some(shape), _) => {
            let s = if shape.len() == r + 2 {
                &shape[2..]
            } else {
                &shape[..]
            };
            if s.len() != r {
                return Err(format!("output_shape {shape:?} needs {r} spatial values"));
            }
            Some(positive(s.to_vec(), "output_shape")?)
        }
        (None, "SAME_UPPER" | "SAME_LOWER") => {
            Some((0..r).map(|i| xs[2 + i] * strides[i]).collect())
        }
        (None, "NOTSET" | "VALID") => None,
        (None, other) => return Err(format!("auto_pad '{other}' is not an ONNX value")),
    };
    // Signed: an output_shape past the full result pads it (ONNX splits the total with
    // floor division).
    let pads: Vec<(i64, i64)> = match target {
        Some(target) => (0..r)
            .map(|i| {
                let total = full[i] as i64 - target[i] as i64;
                let (small, big) = (total.div_euclid(2), total - total.div_euclid(2));
                if auto == "SAME_UPPER" {
                    (small, big)
                } else {
                    (big, small)
                }
            })
            .collect(),
        None => {
            let p = n.ints("pads").unwrap_or(vec![0; 2 * r]);
            if p.len() != 2 * r || p.iter().any(|&x| x < 0) {
                return Err(format!("pads {p:?} must be {} non-negative values", 2 * r));
            }
            (0..r).map(|i| (p[i], p[i + r])).collect()
        }
    };
    let out: Vec<u64> = (0..r)
        .map(|i| {
            u64::try_from(full[i] as i64 - pads[i].0 - pads[i].1)
                .ok()
                .filter(|&o| o > 0)
        })
        .collect::<Option<_>>()
        .ok_or("the padding leaves no output")?;
    // The input spread by the strides and padded for a stride-1 convolution.
    let mut z = x;
    for i in 0..r {
        z = spread(cx, &z, 2 + i, strides[i])?;
        let edge = (span[i] - 1) as i64;
        let before = edge - pads[i].0;
        let after = edge - pads[i].1 + extra[i] as i64;
        z = pad_or_crop(cx, &z, 2 + i, before, after)?;
    }
    // [C, M/g, k...] -> [g, C/g, M/g, k...] -> [g, M/g, C/g, k...] -> [M, C/g, k...], flipped.
    let cg = c / groups;
    let mut split = vec![groups, cg, mg];
    split.extend(&kernel);
    let wg = reshape_to(cx, &w, &split)?;
    let mut perm: Vec<i64> = vec![0, 2, 1];
    perm.extend((3..3 + r as i64).collect::<Vec<_>>());
    let wt = cx.op(
        OpKind::Transpose,
        &[&wg],
        Attrs::new().with("perm", ints(&perm)),
    )?;
    let mut merged = vec![m, cg];
    merged.extend(&kernel);
    let mut wf = reshape_to(cx, &wt, &merged)?;
    for (i, &k) in kernel.iter().enumerate() {
        if k > 1 {
            wf = slice_axis(cx, &wf, 2 + i, k as i64 - 1, -(k as i64) - 1, -1)?;
        }
    }
    let g = Geometry {
        kernel,
        strides: vec![1; r],
        dilations,
        pads: vec![(0, 0); r],
        overhang: vec![0; r],
        out,
    };
    let y = convolve(cx, &z, &wf, n.opt(2), groups, &g)?;
    Ok(vec![y])
}
