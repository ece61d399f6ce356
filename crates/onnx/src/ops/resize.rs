//! ONNX `Resize` (and `Upsample`'s successor semantics) in `nearest` and `linear` modes, one
//! resized axis at a time (the modes are separable): each output position's source coordinate
//! is computed at import time by the `coordinate_transformation_mode`, then
//!
//! - `nearest`: the rounded source index per position. An integer upsampling whose indices
//!   are `⌊x / k⌋` is a `broadcast` of a new axis and a `reshape` (no index in memory); an
//!   integer downsampling `c + k·x` a strided `slice`; anything else a `gather` of the indices.
//! - `linear` and `cubic`: the two (four) neighbours (clamped to the axis, as the input's edge
//!   repeated) picked as above and weighted, `Σ wₖ · xₖ` (linear's triangle; cubic, Keys'
//!   convolution with `cubic_coeff_a`; `exclude_outside` dropping and renormalizing weights
//!   outside the axis), in f32 for 16-bit inputs.
//!
//! `antialias` widens a downsampling's linear or cubic window by the factor, as ONNX's
//! reference does. `tf_crop_and_resize` is an error.

use super::Node;
use super::math::{bin, cast_to, one, reshape_to};
use crate::ctx::{Ctx, R, Val};
use irc_interp::{Data, Tensor};
use irc_ir::{Attr, Attrs, DType, OpKind, TensorType, ints};

/// The source coordinate of output position `x` along an axis of `n` resized to `out` by
/// `scale` (`roi`: the axis's crop, start and end as fractions, for `tf_crop_and_resize`). As
/// ONNX's reference, `align_corners`, `pytorch_half_pixel` and `tf_crop_and_resize` read the
/// resized length as `scale · n`, not rounded (the same when `sizes` gives it).
fn source(mode: &str, x: u64, n: u64, out: u64, scale: f64, roi: (f64, f64)) -> R<f64> {
    let x = x as f64;
    let length = scale * n as f64;
    let last = (n - 1) as f64;
    Ok(match mode {
        "tf_crop_and_resize" if length > 1.0 => {
            roi.0 * last + x * (roi.1 - roi.0) * last / (length - 1.0)
        }
        "tf_crop_and_resize" => 0.5 * (roi.0 + roi.1) * last,
        "half_pixel" => (x + 0.5) / scale - 0.5,
        "half_pixel_symmetric" => {
            let adjustment = out as f64 / (scale * n as f64);
            let center = n as f64 / 2.0;
            center * (1.0 - adjustment) + (x + 0.5) / scale - 0.5
        }
        "pytorch_half_pixel" if length > 1.0 => (x + 0.5) / scale - 0.5,
        "pytorch_half_pixel" => 0.0,
        "align_corners" if length != 1.0 => x * (n - 1) as f64 / (length - 1.0),
        "align_corners" => 0.0,
        "asymmetric" => x / scale,
        other => {
            return Err(format!(
                "coordinate_transformation_mode '{other}' is not an ONNX value (half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric, tf_crop_and_resize)"
            ));
        }
    })
}

/// `nearest_mode`'s rounding of a source coordinate.
fn round(mode: &str, c: f64) -> R<f64> {
    let half = (c - c.floor() - 0.5).abs() < 1e-9;
    Ok(match mode {
        "round_prefer_floor" if half => c.floor(),
        "round_prefer_ceil" if half => c.ceil(),
        "round_prefer_floor" | "round_prefer_ceil" => c.round(),
        "floor" => c.floor(),
        "ceil" => c.ceil(),
        other => return Err(format!("nearest_mode '{other}' is not an ONNX value")),
    })
}

/// The interpolation kernel at distance `d` (in source elements, scaled when antialiasing):
/// linear's triangle, or cubic convolution (Keys, coefficient `a`).
fn kernel(linear: bool, a: f64, d: f64) -> f64 {
    let x = d.abs();
    match (linear, x) {
        (true, _) => (1.0 - x).max(0.0),
        (false, x) if x <= 1.0 => ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0,
        (false, x) if x < 2.0 => ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a,
        _ => 0.0,
    }
}

/// A known 1-D tensor.
fn known(cx: &Ctx, v: Vec<f64>, dtype: DType) -> Val {
    let ty = TensorType::new([v.len() as u64], dtype);
    cx.konst(Tensor {
        ty,
        data: Data::from_f64(dtype, v),
    })
}

/// `x` gathered along `a` at the source indices `idx` (each in range), as a view where the
/// indices are an integer upsampling or downsampling.
fn pick(cx: &mut Ctx, x: &Val, a: usize, idx: &[i64]) -> R<Val> {
    let shape = cx.ty(x).shape;
    let (n, out) = (shape[a] as i64, idx.len() as i64);
    if out % n == 0
        && idx
            .iter()
            .enumerate()
            .all(|(k, &i)| i == k as i64 / (out / n))
    {
        // [.., n, ..] -> [.., n, 1, ..] -> [.., n, k, ..] -> [.., n·k, ..]
        let mut spread = shape.clone();
        spread.insert(a + 1, 1);
        let mut wide: Vec<i64> = spread.iter().map(|&d| d as i64).collect();
        wide[a + 1] = out / n;
        let s = reshape_to(cx, x, &spread)?;
        let b = cx.op(
            OpKind::Broadcast,
            &[&s],
            Attrs::new().with("shape", ints(&wide)),
        )?;
        let mut joined = shape.clone();
        joined[a] = out as u64;
        return reshape_to(cx, &b, &joined);
    }
    let step = if out > 1 { idx[1] - idx[0] } else { 1 };
    if step > 0
        && idx
            .iter()
            .enumerate()
            .all(|(k, &i)| i == idx[0] + step * k as i64)
    {
        let attrs = Attrs::new()
            .with("axes", ints(&[a as i64]))
            .with("starts", ints(&[idx[0]]))
            .with("ends", ints(&[idx[out as usize - 1] + 1]))
            .with("steps", ints(&[step]));
        return cx.op(OpKind::Slice, &[x], attrs);
    }
    let i = known(cx, idx.iter().map(|&i| i as f64).collect(), DType::I64);
    cx.op(
        OpKind::Gather,
        &[x, &i],
        Attrs::new().with("axis", Attr::Int(a as i64)),
    )
}

/// The axes `scales`, `sizes` and `roi` list (the `axes` attribute, or every axis).
fn resized_axes(n: &Node, rank: usize) -> R<Vec<usize>> {
    match n.ints("axes") {
        Some(a) => a.into_iter().map(|a| super::math::axis(a, rank)).collect(),
        None => Ok((0..rank).collect()),
    }
}

/// The scales and output sizes per axis, from the `scales` or `sizes` input (over `axes`).
fn target(cx: &Ctx, n: &Node, shape: &[u64]) -> R<(Vec<f64>, Vec<u64>)> {
    let rank = shape.len();
    let axes = resized_axes(n, rank)?;
    let list = |i: usize| -> Option<Vec<f64>> {
        let v = n.opt(i)?;
        let t = cx.known(&v)?;
        (t.ty.numel() > 0).then(|| t.data.to_f64())
    };
    if n.opt(3).is_some_and(|v| cx.known(&v).is_none())
        || n.opt(2).is_some_and(|v| cx.known(&v).is_none())
    {
        return Err("scales and sizes must be known at import time".into());
    }
    let (mut scales, mut sizes) = (vec![1.0; rank], shape.to_vec());
    match (list(2), list(3)) {
        (_, Some(sz)) => {
            if sz.len() != axes.len() {
                return Err(format!(
                    "sizes has {} values for {} axes",
                    sz.len(),
                    axes.len()
                ));
            }
            let policy = n
                .string("keep_aspect_ratio_policy")
                .unwrap_or_else(|| "stretch".into());
            let ratios: Vec<f64> = axes
                .iter()
                .zip(&sz)
                .map(|(&a, &s)| s / shape[a] as f64)
                .collect();
            let common = match policy.as_str() {
                "stretch" => None,
                "not_larger" => ratios.iter().copied().reduce(f64::min),
                "not_smaller" => ratios.iter().copied().reduce(f64::max),
                other => {
                    return Err(format!(
                        "keep_aspect_ratio_policy '{other}' is not an ONNX value"
                    ));
                }
            };
            for (k, &a) in axes.iter().enumerate() {
                match common {
                    None => {
                        sizes[a] = sz[k] as u64;
                        scales[a] = ratios[k];
                    }
                    Some(r) => {
                        sizes[a] = (r * shape[a] as f64 + 0.5).floor() as u64;
                        scales[a] = r;
                    }
                }
            }
        }
        (Some(sc), None) => {
            if sc.len() != axes.len() {
                return Err(format!(
                    "scales has {} values for {} axes",
                    sc.len(),
                    axes.len()
                ));
            }
            for (k, &a) in axes.iter().enumerate() {
                if sc[k] <= 0.0 {
                    return Err(format!("scale {} must be positive", sc[k]));
                }
                scales[a] = sc[k];
                sizes[a] = (shape[a] as f64 * sc[k]).floor() as u64;
            }
        }
        (None, None) => return Err("one of scales and sizes is required".into()),
    }
    if let Some(a) = sizes.iter().position(|&s| s == 0) {
        return Err(format!("axis {a} would be resized to zero elements"));
    }
    Ok((scales, sizes))
}

/// The crop of each axis, `(start, end)` as fractions of it, from the `roi` input over
/// `axes` (`tf_crop_and_resize` only; the whole axis otherwise).
fn crop(cx: &Ctx, n: &Node, rank: usize, mode: &str) -> R<Vec<(f64, f64)>> {
    let mut roi = vec![(0.0, 1.0); rank];
    if mode != "tf_crop_and_resize" {
        return Ok(roi);
    }
    let v = n.opt(1).ok_or("tf_crop_and_resize needs the roi input")?;
    let r = cx
        .known(&v)
        .ok_or("roi must be known at import time")?
        .data
        .to_f64();
    let axes = resized_axes(n, rank)?;
    if r.len() != 2 * axes.len() {
        return Err(format!(
            "roi has {} values for {} axes",
            r.len(),
            axes.len()
        ));
    }
    for (k, &a) in axes.iter().enumerate() {
        roi[a] = (r[k], r[k + axes.len()]);
    }
    Ok(roi)
}

pub fn resize(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let ty = cx.ty(&x);
    let mode = n.string("mode").unwrap_or_else(|| "nearest".into());
    let ctm = n
        .string("coordinate_transformation_mode")
        .unwrap_or_else(|| "half_pixel".into());
    let nearest = n
        .string("nearest_mode")
        .unwrap_or_else(|| "round_prefer_floor".into());
    if !matches!(mode.as_str(), "nearest" | "linear" | "cubic") {
        return Err(format!(
            "mode '{mode}' is not an ONNX Resize mode (nearest, linear, cubic)"
        ));
    }
    let antialias = n.int("antialias", 0) != 0;
    let (scales, sizes) = target(cx, n, &ty.shape)?;
    let roi = crop(cx, n, ty.rank(), &ctm)?;
    let extrapolate = n.float("extrapolation_value", 0.0) as f64;
    let d = ty.dtype;
    if mode != "nearest" && !d.is_float() {
        return Err(format!("{mode} resizing of {d} is not supported"));
    }
    let mut y = if mode != "nearest" && matches!(d, DType::F16 | DType::BF16) {
        cast_to(cx, &x, DType::F32)?
    } else {
        x
    };
    for a in 0..ty.rank() {
        let (len, out) = (ty.shape[a], sizes[a]);
        if out == len && (scales[a] - 1.0).abs() < 1e-12 {
            continue;
        }
        let coords = (0..out)
            .map(|k| source(&ctm, k, len, out, scales[a], roi[a]))
            .collect::<R<Vec<f64>>>()?;
        let clamp = |i: f64| (i as i64).clamp(0, len as i64 - 1);
        if mode == "nearest" {
            let idx = coords
                .iter()
                .map(|&c| round(&nearest, c).map(clamp))
                .collect::<R<Vec<i64>>>()?;
            y = pick(cx, &y, a, &idx)?;
        } else {
            y = weighted(
                cx,
                n,
                &y,
                a,
                &coords,
                scales[a],
                antialias,
                mode == "linear",
            )?;
        }
        // tf_crop_and_resize: positions whose coordinate falls off the axis read
        // `extrapolation_value`.
        let off: Vec<bool> = coords
            .iter()
            .map(|&c| c < 0.0 || c > (len - 1) as f64)
            .collect();
        if ctm == "tf_crop_and_resize" && off.iter().any(|&o| o) {
            let mut mshape = vec![1u64; ty.rank()];
            mshape[a] = out;
            let mask = cx.konst(Tensor {
                ty: TensorType::new(mshape, DType::I1),
                data: Data::I1(off),
            });
            let e = cx.scalar(extrapolate, cx.ty(&y).dtype);
            y = cx.op(OpKind::Select, &[&mask, &e, &y], Attrs::new())?;
        }
    }
    one(cast_to(cx, &y, d)?)
}

/// The `count` taps of one axis, as ONNX's reference takes them, summed: `Σ wₖ · x[pₖ]`.
#[allow(clippy::too_many_arguments)]
fn weighted(
    cx: &mut Ctx,
    n: &Node,
    y: &Val,
    a: usize,
    coords: &[f64],
    scale: f64,
    antialias: bool,
    linear: bool,
) -> R<Val> {
    let ty = cx.ty(y);
    let (len, out) = (ty.shape[a], coords.len() as u64);
    {
        // Each tap: a neighbour's index per position (clamped: the edge repeated) and its
        // weight. Linear: floor and floor + 1; cubic: floor - 1 ..= floor + 2.
        // The taps, as ONNX's reference takes them: the points `base + start ..` around the
        // coordinate `c` (`base = ⌈c⌉ - 1`), weighted by the kernel at their distance, scaled
        // by the resize's factor when antialiasing a downsampling (a wider window), then
        // normalized; `exclude_outside` zeroes the weights of points off the axis and
        // normalizes again. A point off the axis reads the edge.
        let a_coef = n.float("cubic_coeff_a", -0.75) as f64;
        let exclude = n.int("exclude_outside", 0) != 0;
        let narrow = if antialias { scale.min(1.0) } else { 1.0 };
        let support = if linear { 1.0 } else { 2.0 };
        let start = (-support / narrow).floor() as i64 + 1;
        let count = (2 - 2 * start) as usize;
        let mut taps: Vec<(Vec<i64>, Vec<f64>)> = vec![(vec![], vec![]); count];
        for &c in coords {
            let base = c.ceil() as i64 - 1;
            let at: Vec<i64> = (0..count as i64).map(|k| base + start + k).collect();
            let mut w: Vec<f64> = at
                .iter()
                .map(|&p| kernel(linear, a_coef, (p as f64 - c) * narrow))
                .collect();
            let normalize = |w: &mut Vec<f64>| {
                let total: f64 = w.iter().sum();
                w.iter_mut().for_each(|x| *x /= total);
            };
            if antialias {
                normalize(&mut w);
            }
            if exclude {
                for (k, &p) in at.iter().enumerate() {
                    if p < 0 || p >= len as i64 {
                        w[k] = 0.0;
                    }
                }
                normalize(&mut w);
            }
            for (k, &p) in at.iter().enumerate() {
                taps[k].0.push(p.clamp(0, len as i64 - 1));
                taps[k].1.push(w[k]);
            }
        }
        let wd = ty.dtype;
        let mut tshape = vec![1u64; ty.rank()];
        tshape[a] = out;
        let mut acc: Option<Val> = None;
        for (idx, w) in taps {
            if w.iter().all(|&x| x == 0.0) {
                continue;
            }
            let v = pick(cx, y, a, &idx)?;
            let w = known(cx, w, wd);
            let w = reshape_to(cx, &w, &tshape)?;
            let term = bin(cx, OpKind::Mul, &v, &w)?;
            acc = Some(match acc {
                None => term,
                Some(s) => bin(cx, OpKind::Add, &s, &term)?,
            });
        }
        acc.ok_or_else(|| "every resize weight is zero".to_string())
    }
}
