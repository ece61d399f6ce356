//! ONNX `Conv` as im2col and one batched `matmul`: the input is padded with zeros (`concat`
//! of a broadcast zero), each kernel offset is a strided `slice` of it (a view), the offsets
//! are stacked (`concat` on a new axis) into columns `[N, groups, C/groups · K, L]`, and the
//! weights `[groups, M/groups, C/groups · K]` multiply them; the bias is added. When the
//! kernel tiles the input exactly (stride = kernel, no padding, no dilation: a patch
//! embedding) the columns are a reshape and a transpose instead of K slices.

use super::Node;
use super::math::{bin, one, reshape_to};
use crate::ctx::{Ctx, R, Val};
use irc_ir::{Attr, Attrs, OpKind, ints};

/// The spatial geometry of one convolution or pooling window.
pub(super) struct Geometry {
    pub kernel: Vec<u64>,
    pub strides: Vec<u64>,
    pub dilations: Vec<u64>,
    /// Values added before and after each spatial dim (the `pads` attribute or `auto_pad`).
    pub pads: Vec<(u64, u64)>,
    /// Further values after each spatial dim, beyond `pads`, that the last window of a
    /// pooling with `ceil_mode` reaches (never counted as padding).
    pub overhang: Vec<u64>,
    pub out: Vec<u64>,
}

pub(super) fn positive(v: Vec<i64>, what: &str) -> R<Vec<u64>> {
    v.iter()
        .map(|&d| u64::try_from(d).ok().filter(|&d| d > 0))
        .collect::<Option<Vec<u64>>>()
        .ok_or_else(|| format!("{what} {v:?} must be positive"))
}

/// The geometry of a `kernel` sliding over `spatial` as the node's `strides`, `dilations`,
/// `pads` and `auto_pad` say; with `ceil`, a last partial window is kept when it starts inside
/// the input or its leading padding (ONNX's and PyTorch's `ceil_mode`).
pub(super) fn geometry(n: &Node, spatial: &[u64], kernel: Vec<u64>, ceil: bool) -> R<Geometry> {
    let r = spatial.len();
    if kernel.len() != r {
        return Err(format!(
            "kernel_shape {kernel:?} needs {r} values, one per spatial dim"
        ));
    }
    let strides = positive(n.ints("strides").unwrap_or(vec![1; r]), "strides")?;
    let dilations = positive(n.ints("dilations").unwrap_or(vec![1; r]), "dilations")?;
    if strides.len() != r || dilations.len() != r {
        return Err(format!("strides and dilations need {r} values"));
    }
    let span: Vec<u64> = (0..r).map(|i| dilations[i] * (kernel[i] - 1) + 1).collect();
    let auto = n.string("auto_pad").unwrap_or_else(|| "NOTSET".into());
    let pads: Vec<(u64, u64)> = match auto.as_str() {
        "NOTSET" => {
            let p = n.ints("pads").unwrap_or(vec![0; 2 * r]);
            if p.len() != 2 * r || p.iter().any(|&x| x < 0) {
                return Err(format!("pads {p:?} must be {} non-negative values", 2 * r));
            }
            (0..r).map(|i| (p[i] as u64, p[i + r] as u64)).collect()
        }
        "VALID" => vec![(0, 0); r],
        "SAME_UPPER" | "SAME_LOWER" => (0..r)
            .map(|i| {
                let out = spatial[i].div_ceil(strides[i]);
                let total = ((out - 1) * strides[i] + span[i]).saturating_sub(spatial[i]);
                let (small, big) = (total / 2, total - total / 2);
                if auto == "SAME_UPPER" {
                    (small, big)
                } else {
                    (big, small)
                }
            })
            .collect(),
        other => return Err(format!("auto_pad '{other}' is not an ONNX value")),
    };
    let mut out = Vec::with_capacity(r);
    for i in 0..r {
        let padded = spatial[i] + pads[i].0 + pads[i].1;
        if padded < span[i] {
            return Err(format!(
                "the kernel spans {} but spatial dim {i} is {padded} with padding",
                span[i]
            ));
        }
        let mut o = if ceil {
            (padded - span[i]).div_ceil(strides[i]) + 1
        } else {
            (padded - span[i]) / strides[i] + 1
        };
        if ceil && o > 1 && (o - 1) * strides[i] >= spatial[i] + pads[i].0 {
            o -= 1;
        }
        out.push(o);
    }
    let overhang = (0..r)
        .map(|i| {
            let padded = spatial[i] + pads[i].0 + pads[i].1;
            ((out[i] - 1) * strides[i] + span[i]).saturating_sub(padded)
        })
        .collect();
    Ok(Geometry {
        kernel,
        strides,
        dilations,
        pads,
        overhang,
        out,
    })
}

/// `x` with `before` and `after` values `fill` along `axis` (a concat with a broadcast
/// scalar).
pub(super) fn pad_axis(
    cx: &mut Ctx,
    x: &Val,
    axis: usize,
    (before, after): (u64, u64),
    fill: f64,
) -> R<Val> {
    if before == 0 && after == 0 {
        return Ok(x.clone());
    }
    let ty = cx.ty(x);
    let value = cx.scalar(fill, ty.dtype);
    let mut ops: Vec<Val> = Vec::new();
    for (count, is_x) in [(before, false), (0, true), (after, false)] {
        if is_x {
            ops.push(x.clone());
            continue;
        }
        if count == 0 {
            continue;
        }
        let mut shape: Vec<i64> = ty.shape.iter().map(|&d| d as i64).collect();
        shape[axis] = count as i64;
        ops.push(cx.op(
            OpKind::Broadcast,
            &[&value],
            Attrs::new().with("shape", ints(&shape)),
        )?);
    }
    let refs: Vec<&Val> = ops.iter().collect();
    cx.op(
        OpKind::Concat,
        &refs,
        Attrs::new().with("axis", Attr::Int(axis as i64)),
    )
}

/// `x` `[N, C, spatial...]` padded for the windows of `g`: `fill` in the padding, `beyond`
/// in a pooling's overhang past it.
pub(super) fn pad_spatial(cx: &mut Ctx, x: &Val, g: &Geometry, fill: f64, beyond: f64) -> R<Val> {
    let mut p = x.clone();
    for (i, &(before, after)) in g.pads.iter().enumerate() {
        p = pad_axis(cx, &p, 2 + i, (before, after), fill)?;
        p = pad_axis(cx, &p, 2 + i, (0, g.overhang[i]), beyond)?;
    }
    Ok(p)
}

/// One window offset per kernel tap (the last spatial dim fastest, the weights' order): the
/// strided slice `[N, C, out...]` of the padded `p` that the tap reads at each output position.
pub(super) fn windows(cx: &mut Ctx, p: &Val, g: &Geometry) -> R<Vec<Val>> {
    let r = g.out.len();
    let k: u64 = g.kernel.iter().product();
    let mut taps = Vec::with_capacity(k as usize);
    for off in 0..k {
        let mut rem = off;
        let mut at = vec![0; r];
        for i in (0..r).rev() {
            at[i] = rem % g.kernel[i];
            rem /= g.kernel[i];
        }
        let starts: Vec<i64> = (0..r).map(|i| (at[i] * g.dilations[i]) as i64).collect();
        let ends: Vec<i64> = (0..r)
            .map(|i| starts[i] + ((g.out[i] - 1) * g.strides[i]) as i64 + 1)
            .collect();
        let axes: Vec<i64> = (0..r).map(|i| 2 + i as i64).collect();
        let steps: Vec<i64> = g.strides.iter().map(|&s| s as i64).collect();
        let attrs = Attrs::new()
            .with("axes", ints(&axes))
            .with("starts", ints(&starts))
            .with("ends", ints(&ends))
            .with("steps", ints(&steps));
        taps.push(cx.op(OpKind::Slice, &[p], attrs)?);
    }
    Ok(taps)
}

/// The columns `[N, C, K, L]` (K kernel offsets, L output positions) of `x` `[N, C, spatial]`.
fn columns(cx: &mut Ctx, x: &Val, g: &Geometry) -> R<Val> {
    let shape = cx.ty(x).shape;
    let (nb, c, spatial) = (shape[0], shape[1], &shape[2..]);
    let r = spatial.len();
    let k: u64 = g.kernel.iter().product();
    let l: u64 = g.out.iter().product();
    let tiles = (0..r).all(|i| {
        g.strides[i] == g.kernel[i]
            && g.dilations[i] == 1
            && g.pads[i] == (0, 0)
            && spatial[i] == g.out[i] * g.kernel[i]
    });
    if tiles {
        // [N, C, o0, k0, o1, k1, ...] -> [N, C, k0, k1, ..., o0, o1, ...]
        let mut split = vec![nb, c];
        for i in 0..r {
            split.extend([g.out[i], g.kernel[i]]);
        }
        let s = reshape_to(cx, x, &split)?;
        let mut perm = vec![0, 1];
        perm.extend((0..r).map(|i| 3 + 2 * i as i64));
        perm.extend((0..r).map(|i| 2 + 2 * i as i64));
        let t = cx.op(
            OpKind::Transpose,
            &[&s],
            Attrs::new().with("perm", ints(&perm)),
        )?;
        return reshape_to(cx, &t, &[nb, c, k, l]);
    }
    let p = pad_spatial(cx, x, g, 0.0, 0.0)?;
    let mut cols = Vec::with_capacity(k as usize);
    for tap in windows(cx, &p, g)? {
        cols.push(reshape_to(cx, &tap, &[nb, c, 1, l])?);
    }
    if cols.len() == 1 {
        return Ok(cols.remove(0));
    }
    let refs: Vec<&Val> = cols.iter().collect();
    cx.op(
        OpKind::Concat,
        &refs,
        Attrs::new().with("axis", Attr::Int(2)),
    )
}

pub fn conv(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, w) = (n.x(0)?, n.x(1)?);
    let (xs, ws) = (cx.ty(&x).shape, cx.ty(&w).shape);
    if xs.len() < 3 || ws.len() != xs.len() {
        return Err(format!(
            "the input {xs:?} must be [N, C, spatial...] and the weights of the same rank, got {ws:?}"
        ));
    }
    let groups = u64::try_from(n.int("group", 1))
        .ok()
        .filter(|&g| g > 0)
        .ok_or("group must be positive")?;
    let (c, m) = (xs[1], ws[0]);
    if c % groups != 0 || m % groups != 0 || ws[1] * groups != c {
        return Err(format!(
            "{c} input channels, {m} filters of {} channels and {groups} groups do not agree",
            ws[1]
        ));
    }
    let g = geometry(n, &xs[2..], kernel_of(n, &ws)?, false)?;
    one(convolve(cx, &x, &w, n.opt(2), groups, &g)?)
}

/// The kernel's spatial shape: the weights' `ws[2..]`, which `kernel_shape` must equal if given.
pub(super) fn kernel_of(n: &Node, ws: &[u64]) -> R<Vec<u64>> {
    let kernel = match n.ints("kernel_shape") {
        Some(k) => positive(k, "kernel_shape")?,
        None => ws[2..].to_vec(),
    };
    if kernel != ws[2..] {
        return Err(format!(
            "kernel_shape {kernel:?} differs from the weights' {:?}",
            &ws[2..]
        ));
    }
    Ok(kernel)
}

/// The convolution of `x` `[N, C, spatial...]` by `w` `[M, C/groups, k...]` over the windows
/// of `g`, plus the bias `[M]`: im2col and one batched matmul per group.
pub(super) fn convolve(
    cx: &mut Ctx,
    x: &Val,
    w: &Val,
    bias: Option<Val>,
    groups: u64,
    g: &Geometry,
) -> R<Val> {
    let (xs, ws) = (cx.ty(x).shape, cx.ty(w).shape);
    let (nb, c, m) = (xs[0], xs[1], ws[0]);
    let k: u64 = g.kernel.iter().product();
    let l: u64 = g.out.iter().product();
    let cols = columns(cx, x, g)?;
    // [N, C, K, L] -> [N, groups, C/groups · K, L]; weights [groups, M/groups, C/groups · K].
    let cols = reshape_to(cx, &cols, &[nb, groups, c / groups * k, l])?;
    let wg = reshape_to(cx, w, &[groups, m / groups, c / groups * k])?;
    let y = bin(cx, OpKind::Matmul, &wg, &cols)?;
    let mut out = vec![nb, m];
    out.extend(&g.out);
    let mut y = reshape_to(cx, &y, &out)?;
    if let Some(b) = bias {
        let mut bshape = vec![1, m];
        bshape.extend(std::iter::repeat_n(1, g.out.len()));
        let b = reshape_to(cx, &b, &bshape)?;
        y = bin(cx, OpKind::Add, &y, &b)?;
    }
    Ok(y)
}
