//! ONNX DFT (opsets 17 and 20) as matrix products with known cosine and sine tables: the
//! signal axis moved next to the complex one, its real and imaginary parts multiplied by the
//! `[N, K]` tables (`N` the transform's length, `K` the frequencies kept), and the two results
//! stacked back as the complex axis. Forward, inverse (scaled by `1/N`), one-sided
//! (`rfft`: the first `N/2 + 1` frequencies) and inverse one-sided (`irfft`: a real signal from
//! Hermitian-symmetric frequencies). FNet's token mixing exports as two of them.

use super::Node;
use super::math::{axis, bin, broadcast_to, cast_to, known_ints, one, reshape_to};
use super::shape::transpose_to as transpose;
use crate::ctx::{Ctx, R, Val};
use irc_interp::{Data, Tensor};
use irc_ir::{Attr, Attrs, DType, OpKind, TensorType, ints};

/// A known `[n, k]` table of `f(i, j)` in `dtype`.
fn table(cx: &Ctx, n: u64, k: u64, dtype: DType, f: impl Fn(u64, u64) -> f64) -> Val {
    let v = (0..n)
        .flat_map(|i| (0..k).map(move |j| (i, j)))
        .map(|(i, j)| f(i, j))
        .collect();
    cx.konst(Tensor {
        ty: TensorType::new([n, k], dtype),
        data: Data::from_f64(dtype, v),
    })
}

/// Part `c` (0 real, 1 imaginary) of the complex axis, without it.
fn part(cx: &mut Ctx, x: &Val, c: i64) -> R<Val> {
    let s = cx.ty(x).shape;
    let r = s.len() as i64;
    let attrs = Attrs::new()
        .with("axes", ints(&[r - 1]))
        .with("starts", ints(&[c]))
        .with("ends", ints(&[c + 1]));
    let p = cx.op(OpKind::Slice, &[x], attrs)?;
    reshape_to(cx, &p, &s[..s.len() - 1])
}

pub fn dft(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let ty = cx.ty(&x);
    let (xs, dt) = (ty.shape.clone(), ty.dtype);
    let r = xs.len();
    if r < 2 || !matches!(xs[r - 1], 1 | 2) || !dt.is_float() {
        return Err(format!(
            "DFT takes a float signal [.., n, 1] (real) or [.., n, 2] (complex); got {ty}"
        ));
    }
    let complex = xs[r - 1] == 2;
    let (inverse, onesided) = (n.int("inverse", 0) != 0, n.int("onesided", 0) != 0);
    // The signal axis: an attribute up to opset 19 (default 1), an input from 20 (default -2).
    let a = if cx.opset >= 20 {
        match n.opt(2) {
            Some(v) => known_ints(cx, &v, "the axis input")?
                .first()
                .copied()
                .ok_or("an empty axis input")?,
            None => -2,
        }
    } else {
        n.int("axis", 1)
    };
    let a = axis(a, r)?;
    if a == r - 1 {
        return Err("the signal axis cannot be the complex axis (the last)".into());
    }
    let len = xs[a];
    let dft_len = match n.opt(1) {
        Some(v) => {
            let l = known_ints(cx, &v, "dft_length")?;
            match l.first().copied() {
                Some(l) if l > 0 => l as u64,
                _ => return Err(format!("dft_length {l:?} must be one positive length")),
            }
        }
        None if inverse && onesided => 2 * (len.max(1) - 1).max(1),
        None => len,
    };
    // The signal axis next to the complex one: [rest.., n, c].
    let mut perm: Vec<i64> = (0..r as i64)
        .filter(|&d| d != a as i64 && d != r as i64 - 1)
        .collect();
    perm.extend([a as i64, r as i64 - 1]);
    let moved = transpose(cx, &x, &perm)?;
    let mut re = part(cx, &moved, 0)?;
    let mut im = if complex {
        Some(part(cx, &moved, 1)?)
    } else {
        None
    };
    // The inputs' length along the axis for the tables: N, or (irfft) the frequencies given,
    // at most N/2 + 1; a longer signal is cut, a shorter one padded with zeros.
    let rows = if inverse && onesided {
        len.min(dft_len / 2 + 1)
    } else {
        dft_len
    };
    let fit = |cx: &mut Ctx, v: &Val| -> R<Val> {
        let s = cx.ty(v).shape;
        let last = s.len() as i64 - 1;
        let have = s[s.len() - 1];
        if have > rows {
            let attrs = Attrs::new()
                .with("axes", ints(&[last]))
                .with("starts", ints(&[0]))
                .with("ends", ints(&[rows as i64]));
            cx.op(OpKind::Slice, &[v], attrs)
        } else if have < rows {
            let mut pad = s.clone();
            *pad.last_mut().expect("rank >= 1") = rows - have;
            let z = cx.scalar(0.0, dt);
            let z = broadcast_to(cx, &z, &pad)?;
            cx.op(
                OpKind::Concat,
                &[v, &z],
                Attrs::new().with("axis", Attr::Int(last)),
            )
        } else {
            Ok(v.clone())
        }
    };
    re = fit(cx, &re)?;
    im = match im {
        Some(i) => Some(fit(cx, &i)?),
        None => None,
    };
    let nn = dft_len as f64;
    let theta = move |i: u64, j: u64| 2.0 * std::f64::consts::PI * ((i * j) % dft_len) as f64 / nn;
    let mm = |cx: &mut Ctx, v: &Val, t: &Val| -> R<Val> {
        // A signal of rank 1 is a row of a matrix for the product.
        let s = cx.ty(v).shape;
        if s.len() == 1 {
            let v2 = reshape_to(cx, v, &[1, s[0]])?;
            let p = bin(cx, OpKind::Matmul, &v2, t)?;
            let k = cx.ty(&p).shape[1];
            return reshape_to(cx, &p, &[k]);
        }
        bin(cx, OpKind::Matmul, v, t)
    };
    let outs: Vec<Val> = if inverse && onesided {
        // x[n] = (1/N) Σ_k w_k (Re X_k cos θ - Im X_k sin θ), w 1 at k = 0 and (N even) N/2.
        let w = |k: u64| {
            if k == 0 || (dft_len % 2 == 0 && k == dft_len / 2) {
                1.0
            } else {
                2.0
            }
        };
        let c = table(cx, rows, dft_len, dt, |k, j| w(k) * theta(k, j).cos() / nn);
        let mut y = mm(cx, &re, &c)?;
        if let Some(im) = &im {
            let s = table(cx, rows, dft_len, dt, |k, j| -w(k) * theta(k, j).sin() / nn);
            let t = mm(cx, im, &s)?;
            y = bin(cx, OpKind::Add, &y, &t)?;
        }
        vec![y]
    } else {
        let k = if onesided && !inverse {
            dft_len / 2 + 1
        } else {
            dft_len
        };
        let (sign, scale) = if inverse {
            (1.0, 1.0 / nn)
        } else {
            (-1.0, 1.0)
        };
        // X_k = Σ_n x_n (cos θ + i·sign·sin θ) · scale.
        let c = table(cx, rows, k, dt, |i, j| theta(i, j).cos() * scale);
        let s = table(cx, rows, k, dt, |i, j| sign * theta(i, j).sin() * scale);
        let mut y_re = mm(cx, &re, &c)?;
        let mut y_im = mm(cx, &re, &s)?;
        if let Some(im) = &im {
            // (a + ib)(cos + i·sign·sin) = a cos - b sign sin + i (b cos + a sign sin).
            let b_s = mm(cx, im, &s)?;
            let b_c = mm(cx, im, &c)?;
            y_re = bin(cx, OpKind::Sub, &y_re, &b_s)?;
            y_im = bin(cx, OpKind::Add, &y_im, &b_c)?;
        }
        vec![y_re, y_im]
    };
    // Stacked as the complex axis, then the signal axis back in its place.
    let parts: Vec<Val> = outs
        .iter()
        .map(|v| {
            let mut s = cx.ty(v).shape;
            s.push(1);
            reshape_to(cx, v, &s)
        })
        .collect::<R<_>>()?;
    let refs: Vec<&Val> = parts.iter().collect();
    let stacked = if refs.len() == 1 {
        parts[0].clone()
    } else {
        cx.op(
            OpKind::Concat,
            &refs,
            Attrs::new().with("axis", Attr::Int(r as i64 - 1)),
        )?
    };
    let mut back = vec![0i64; r];
    for (i, &p) in perm.iter().enumerate() {
        back[p as usize] = i as i64;
    }
    let y = transpose(cx, &stacked, &back)?;
    one(cast_to(cx, &y, dt)?)
}
