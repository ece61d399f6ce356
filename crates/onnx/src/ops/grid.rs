//! ONNX `GridSample` (opset 16's 4-D form and opset 20's N-D one; RAFT's correlation lookup,
//! spatial transformers): the input sampled at run-time coordinates, as ONNX's reference and
//! PyTorch's `grid_sample` compute it. Per spatial axis, the grid's normalized coordinate is
//! unnormalized (`align_corners`), rounded (`nearest`), brought back inside the axis
//! (`border`: clamped, `reflection`: reflected, where it is past the axis's borders), and
//! split into its taps: one (`nearest`), two weighted by the distances (`linear`), or four
//! weighted by Keys' cubic convolution with a = -0.75 (`cubic`). A tap outside the axis reads
//! zero (`zeros`: its weight selected to 0), the edge (`border`) or its reflection
//! (`reflection`). Each combination of the axes' taps is one `gather` from the input viewed as
//! `[N · spatial, C]` at the flat offset of its positions, times the product of the taps'
//! weights; the sum is transposed to `[N, C, out...]`.

use super::Node;
use super::math::{bin, cast_to, down, reshape_to, select, up};
use super::shape::transpose_to;
use crate::ctx::{Ctx, R, Val};
use irc_ir::{Attr, Attrs, DType, OpKind, TensorType};

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, PartialEq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// The per-axis geometry: the axis's size and the borders past which a coordinate is padded
/// (`-0.5` and `n - 0.5`, or `0` and `n - 1` with `align_corners`).
struct Axis {
    n: u64,
    lo: f64,
    hi: f64,
}

/// A known scalar of dtype `d`.
fn k(cx: &Ctx, x: f64, d: DType) -> Val {
    cx.scalar(x, d)
}

fn clamp(cx: &mut Ctx, c: &Val, lo: f64, hi: f64, d: DType) -> R<Val> {
    let lo = k(cx, lo, d);
    let hi = k(cx, hi, d);
    let c = bin(cx, OpKind::Max, c, &lo)?;
    bin(cx, OpKind::Min, &c, &hi)
}

/// `c` reflected by the borders until inside them (identity inside): the triangle wave
/// `lo + r - |((c - lo) mod 2r) - r|` of period `2r`, `r = hi - lo`; `lo` when `r` is 0.
fn reflect(cx: &mut Ctx, c: &Val, ax: &Axis, d: DType) -> R<Val> {
    let r = ax.hi - ax.lo;
    if r <= 0.0 {
        let zero = k(cx, 0.0, d);
        let c0 = bin(cx, OpKind::Mul, c, &zero)?;
        let lo = k(cx, ax.lo, d);
        return bin(cx, OpKind::Add, &c0, &lo);
    }
    let lo = k(cx, ax.lo, d);
    let u = bin(cx, OpKind::Sub, c, &lo)?;
    let inv = k(cx, 1.0 / (2.0 * r), d);
    let q = bin(cx, OpKind::Mul, &u, &inv)?;
    let q = cx.op(OpKind::Floor, &[&q], Attrs::new())?;
    let period = k(cx, 2.0 * r, d);
    let whole = bin(cx, OpKind::Mul, &q, &period)?;
    let t = bin(cx, OpKind::Sub, &u, &whole)?;
    let rv = k(cx, r, d);
    let t = bin(cx, OpKind::Sub, &t, &rv)?;
    let t = cx.op(OpKind::Abs, &[&t], Attrs::new())?;
    let top = k(cx, ax.lo + r, d);
    bin(cx, OpKind::Sub, &top, &t)
}

/// The coordinate brought back inside the borders by the padding mode (ONNX's reference: only
/// a coordinate past them moves; `border` clamps it to the axis).
fn pad_coordinate(cx: &mut Ctx, c: &Val, ax: &Axis, p: Padding, d: DType) -> R<Val> {
    match p {
        Padding::Zeros => Ok(c.clone()),
        Padding::Border => {
            let clamped = clamp(cx, c, 0.0, (ax.n - 1) as f64, d)?;
            if ax.lo >= 0.0 {
                // Borders 0 and n - 1: clamping moves exactly the coordinates past them.
                return Ok(clamped);
            }
            let lo = k(cx, ax.lo, d);
            let hi = k(cx, ax.hi, d);
            let below = bin(cx, OpKind::Lt, c, &lo)?;
            let above = bin(cx, OpKind::Gt, c, &hi)?;
            let c = select(cx, &below, &clamped, c)?;
            select(cx, &above, &clamped, &c)
        }
        Padding::Reflection => reflect(cx, c, ax, d),
    }
}

/// A tap at the integral position `i` (a float): its index into the axis (i64, always inside
/// it) and, for `zeros`, whether it was inside.
fn tap_index(cx: &mut Ctx, i: &Val, ax: &Axis, p: Padding, d: DType) -> R<(Val, Option<Val>)> {
    let last = (ax.n - 1) as f64;
    let (i, inside) = match p {
        Padding::Zeros => {
            let zero = k(cx, 0.0, d);
            let top = k(cx, last, d);
            let ge = bin(cx, OpKind::Ge, i, &zero)?;
            let le = bin(cx, OpKind::Le, i, &top)?;
            let inside = select(cx, &ge, &le, &ge)?;
            (clamp(cx, i, 0.0, last, d)?, Some(inside))
        }
        Padding::Border => (clamp(cx, i, 0.0, last, d)?, None),
        // Reflected, truncated (as the reference's `int`), and clamped against rounding.
        Padding::Reflection => {
            let r = reflect(cx, i, ax, d)?;
            let r = cast_to(cx, &r, DType::I64)?;
            let r = cast_to(cx, &r, d)?;
            (clamp(cx, &r, 0.0, last, d)?, None)
        }
    };
    Ok((cast_to(cx, &i, DType::I64)?, inside))
}

/// Keys' cubic convolution weights (a = -0.75) of the four taps at `-1, 0, 1, 2` from the
/// floor, for the fraction `t` in `[0, 1)`, as ONNX's reference and PyTorch write them.
fn cubic_weights(cx: &mut Ctx, t: &Val, d: DType) -> R<Vec<Val>> {
    let a = -0.75;
    // Far taps: ((a·x - 5a)·x + 8a)·x - 4a at x = t + 1 and 2 - t.
    let far = |cx: &mut Ctx, x: &Val| -> R<Val> {
        let av = k(cx, a, d);
        let y = bin(cx, OpKind::Mul, x, &av)?;
        let c = k(cx, 5.0 * a, d);
        let y = bin(cx, OpKind::Sub, &y, &c)?;
        let y = bin(cx, OpKind::Mul, &y, x)?;
        let c = k(cx, 8.0 * a, d);
        let y = bin(cx, OpKind::Add, &y, &c)?;
        let y = bin(cx, OpKind::Mul, &y, x)?;
        let c = k(cx, 4.0 * a, d);
        bin(cx, OpKind::Sub, &y, &c)
    };
    // Near taps: ((a + 2)·x - (a + 3))·x·x + 1 at x = t and 1 - t.
    let near = |cx: &mut Ctx, x: &Val| -> R<Val> {
        let c = k(cx, a + 2.0, d);
        let y = bin(cx, OpKind::Mul, x, &c)?;
        let c = k(cx, a + 3.0, d);
        let y = bin(cx, OpKind::Sub, &y, &c)?;
        let y = bin(cx, OpKind::Mul, &y, x)?;
        let y = bin(cx, OpKind::Mul, &y, x)?;
        let one = k(cx, 1.0, d);
        bin(cx, OpKind::Add, &y, &one)
    };
    let one = k(cx, 1.0, d);
    let two = k(cx, 2.0, d);
    let t1 = bin(cx, OpKind::Add, t, &one)?;
    let u = bin(cx, OpKind::Sub, &one, t)?;
    let u2 = bin(cx, OpKind::Sub, &two, t)?;
    Ok(vec![
        far(cx, &t1)?,
        near(cx, t)?,
        near(cx, &u)?,
        far(cx, &u2)?,
    ])
}

/// One axis's taps: (index into the axis, weight; `None` for 1).
fn taps(
    cx: &mut Ctx,
    c: &Val,
    ax: &Axis,
    mode: Mode,
    p: Padding,
    d: DType,
) -> R<Vec<(Val, Option<Val>)>> {
    if mode == Mode::Nearest {
        let c = cx.op(OpKind::Round, &[c], Attrs::new())?;
        let c = pad_coordinate(cx, &c, ax, p, d)?;
        let (i, inside) = tap_index(cx, &c, ax, p, d)?;
        let w = match inside {
            Some(m) => {
                let (one, zero) = (k(cx, 1.0, d), k(cx, 0.0, d));
                Some(select(cx, &m, &one, &zero)?)
            }
            None => None,
        };
        return Ok(vec![(i, w)]);
    }
    let c = pad_coordinate(cx, c, ax, p, d)?;
    let f = cx.op(OpKind::Floor, &[&c], Attrs::new())?;
    let t = bin(cx, OpKind::Sub, &c, &f)?;
    let (first, weights) = if mode == Mode::Linear {
        let one = k(cx, 1.0, d);
        (0, vec![bin(cx, OpKind::Sub, &one, &t)?, t])
    } else {
        (-1, cubic_weights(cx, &t, d)?)
    };
    let mut out = Vec::new();
    for (j, w) in weights.into_iter().enumerate() {
        let off = k(cx, (first + j as i64) as f64, d);
        let pos = bin(cx, OpKind::Add, &f, &off)?;
        let (i, inside) = tap_index(cx, &pos, ax, p, d)?;
        let w = match inside {
            Some(m) => {
                let zero = k(cx, 0.0, d);
                select(cx, &m, &w, &zero)?
            }
            None => w,
        };
        out.push((i, Some(w)));
    }
    Ok(out)
}

pub fn grid_sample(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, dt) = up(cx, &n.x(0)?)?;
    let grid = n.x(1)?;
    let (xs, gs) = (cx.ty(&x).shape, cx.ty(&grid).shape);
    let d = cx.ty(&x).dtype;
    if !d.is_float() || !cx.ty(&grid).dtype.is_float() {
        return Err("GridSample of non-float tensors is not supported".into());
    }
    let r = xs.len().saturating_sub(2);
    if r == 0 || gs.len() != r + 2 || gs[0] != xs[0] || gs[r + 1] != r as u64 {
        return Err(format!(
            "GridSample wants X of [N, C, spatial...] and a grid of [N, out..., {r}]; got {xs:?} and {gs:?}"
        ));
    }
    let mode = match n.string("mode").as_deref() {
        None | Some("bilinear" | "linear") => Mode::Linear,
        Some("nearest") => Mode::Nearest,
        Some("bicubic" | "cubic") => Mode::Cubic,
        Some(m) => return Err(format!("GridSample mode '{m}' is not an ONNX value")),
    };
    let padding = match n.string("padding_mode").as_deref() {
        None | Some("zeros") => Padding::Zeros,
        Some("border") => Padding::Border,
        Some("reflection") => Padding::Reflection,
        Some(m) => {
            return Err(format!(
                "GridSample padding_mode '{m}' is not an ONNX value"
            ));
        }
    };
    let align = n.int("align_corners", 0) != 0;
    let (batch, chans) = (xs[0], xs[1]);
    let spatial = &xs[2..];
    let positions: Vec<u64> = gs[..=r].to_vec();
    let grid = cast_to(cx, &grid, d)?;
    // Per spatial axis (grid component r - 1 - a), its taps.
    let mut axes_taps = Vec::with_capacity(r);
    for (a, &size) in spatial.iter().enumerate() {
        let comp = cx.scalar((r - 1 - a) as f64, DType::I64);
        let g = cx.op(
            OpKind::Gather,
            &[&grid, &comp],
            Attrs::new().with("axis", Attr::Int(r as i64 + 1)),
        )?;
        let one = k(cx, 1.0, d);
        let g1 = bin(cx, OpKind::Add, &g, &one)?;
        let size_f = size as f64;
        // PyTorch's and the reference's forms: ((g + 1) / 2)·(n - 1), ((g + 1)·n - 1) / 2.
        let c = if align {
            let half = k(cx, 0.5, d);
            let h = bin(cx, OpKind::Mul, &g1, &half)?;
            let m = k(cx, size_f - 1.0, d);
            bin(cx, OpKind::Mul, &h, &m)?
        } else {
            let m = k(cx, size_f, d);
            let s = bin(cx, OpKind::Mul, &g1, &m)?;
            let s = bin(cx, OpKind::Sub, &s, &one)?;
            let half = k(cx, 0.5, d);
            bin(cx, OpKind::Mul, &s, &half)?
        };
        let ax = if align {
            Axis {
                n: size,
                lo: 0.0,
                hi: size_f - 1.0,
            }
        } else {
            Axis {
                n: size,
                lo: -0.5,
                hi: size_f - 0.5,
            }
        };
        axes_taps.push(taps(cx, &c, &ax, mode, padding, d)?);
    }
    // The input as rows of C: [N, spatial..., C] flattened to [N · S, C].
    let s: u64 = spatial.iter().product();
    let mut perm: Vec<i64> = vec![0];
    perm.extend(2..r as i64 + 2);
    perm.push(1);
    let rows = transpose_to(cx, &x, &perm)?;
    let rows = reshape_to(cx, &rows, &[batch * s, chans])?;
    let pty = TensorType::new(positions.clone(), DType::I64);
    let n_iota = cx.iota(&pty, 0)?;
    let s_v = cx.scalar(s as f64, DType::I64);
    let base = bin(cx, OpKind::Mul, &n_iota, &s_v)?;
    // Each axis's taps scaled by the axis's stride, then every combination.
    let mut stride = s;
    let mut combos: Vec<(Val, Option<Val>)> = vec![(base, None)];
    for (a, ts) in axes_taps.into_iter().enumerate() {
        stride /= spatial[a];
        let st = cx.scalar(stride as f64, DType::I64);
        let mut next = Vec::with_capacity(combos.len() * ts.len());
        for (ci, cw) in &combos {
            for (ti, tw) in &ts {
                let off = bin(cx, OpKind::Mul, ti, &st)?;
                let idx = bin(cx, OpKind::Add, ci, &off)?;
                let w = match (cw, tw) {
                    (Some(a), Some(b)) => Some(bin(cx, OpKind::Mul, a, b)?),
                    (Some(w), None) | (None, Some(w)) => Some(w.clone()),
                    (None, None) => None,
                };
                next.push((idx, w));
            }
        }
        combos = next;
    }
    let mut wshape = positions.clone();
    wshape.push(1);
    let mut acc: Option<Val> = None;
    for (idx, w) in combos {
        let g = cx.op(
            OpKind::Gather,
            &[&rows, &idx],
            Attrs::new().with("axis", Attr::Int(0)),
        )?;
        let term = match w {
            Some(w) => {
                let w = reshape_to(cx, &w, &wshape)?;
                bin(cx, OpKind::Mul, &g, &w)?
            }
            None => g,
        };
        acc = Some(match acc {
            Some(a) => bin(cx, OpKind::Add, &a, &term)?,
            None => term,
        });
    }
    let acc = acc.ok_or("GridSample without taps")?;
    // [N, out..., C] to [N, C, out...].
    let mut back: Vec<i64> = vec![0, r as i64 + 1];
    back.extend(1..=r as i64);
    let y = transpose_to(cx, &acc, &back)?;
    down(cx, dt, y)
}
