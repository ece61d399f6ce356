//! DFT (opset 20: the axis an input) against a direct O(N²) transform in f64 on seeded random
//! cases: real and complex signals, any signal axis, forward and inverse, one-sided (rfft) and
//! inverse one-sided (irfft), with a `dft_length` shorter or longer than the signal.

mod common;
use common::{FLOAT, Lcg, f32s, i64_init, int_attr, model_with, node, strides, value};
use std::f64::consts::PI;

/// The definition: `(re, im)` of the signal along `axis` of `xs` (complex pairs last), cut or
/// zero-padded to `len`, transformed.
fn reference(
    xs: &[u64],
    x: &[f32],
    axis: usize,
    len: u64,
    inverse: bool,
    onesided: bool,
) -> (Vec<u64>, Vec<f64>) {
    let r = xs.len();
    let c = xs[r - 1] as usize;
    let n_in = xs[axis];
    let (k_out, real_out) = match (inverse, onesided) {
        (false, true) => (len / 2 + 1, false),
        (true, true) => (len, true),
        _ => (len, false),
    };
    let mut ys = xs.to_vec();
    ys[axis] = k_out;
    ys[r - 1] = if real_out { 1 } else { 2 };
    let (xst, yst) = (strides(xs), strides(&ys));
    let total: u64 = ys.iter().product::<u64>() / ys[r - 1];
    let mut y = vec![0.0; ys.iter().product::<u64>() as usize];
    for p in 0..total {
        // The output's coordinates but the complex one.
        let mut coord = vec![0u64; r];
        let mut rem = p;
        for d in (0..r - 1).rev() {
            coord[d] = rem % ys[d];
            rem /= ys[d];
        }
        let k = coord[axis];
        let (mut re, mut im) = (0.0, 0.0);
        let terms = if inverse && onesided {
            n_in.min(len / 2 + 1)
        } else {
            n_in.min(len)
        };
        for t in 0..terms {
            let mut at = coord.clone();
            at[axis] = t;
            let off: u64 = (0..r - 1).map(|d| at[d] * xst[d]).sum();
            let a = x[off as usize] as f64;
            let b = if c == 2 {
                x[(off + 1) as usize] as f64
            } else {
                0.0
            };
            let th = 2.0 * PI * (t * k % len) as f64 / len as f64;
            if inverse && onesided {
                let w = if t == 0 || (len % 2 == 0 && t == len / 2) {
                    1.0
                } else {
                    2.0
                };
                re += w * (a * th.cos() - b * th.sin()) / len as f64;
            } else if inverse {
                re += (a * th.cos() - b * th.sin()) / len as f64;
                im += (a * th.sin() + b * th.cos()) / len as f64;
            } else {
                re += a * th.cos() + b * th.sin();
                im += b * th.cos() - a * th.sin();
            }
        }
        let off: u64 = (0..r - 1).map(|d| coord[d] * yst[d]).sum();
        y[off as usize] = re;
        if !real_out {
            y[off as usize + 1] = im;
        }
    }
    (ys, y)
}

#[test]
fn transforms_match_the_definition() {
    let mut r = Lcg(5);
    for case in 0..60 {
        let rank = 2 + r.below(3) as usize;
        let mut xs: Vec<u64> = (0..rank - 1).map(|_| 1 + r.below(5)).collect();
        xs.push(1 + r.below(2));
        let axis = r.below(rank as u64 - 1) as usize;
        let inverse = r.below(2) == 0;
        let onesided = r.below(3) == 0;
        let n: u64 = xs.iter().product();
        let x: Vec<f32> = (0..n)
            .map(|v| ((v * 37 % 11) as f32 - 5.0) * 0.25)
            .collect();
        let len = match r.below(3) {
            0 => xs[axis],
            1 => xs[axis] + 1 + r.below(3),
            _ => 1 + r.below(xs[axis]),
        };
        let (ys, want) = reference(&xs, &x, axis, len, inverse, onesided);
        let m = model_with(
            vec![node(
                "DFT",
                &["x", "len", "axis"],
                &["y"],
                vec![
                    int_attr("inverse", inverse as i64),
                    int_attr("onesided", onesided as i64),
                ],
            )],
            vec![
                i64_init("len", &[], vec![len as i64]),
                i64_init("axis", &[], vec![axis as i64]),
            ],
            vec![value("x", FLOAT, &xs)],
            vec![value("y", FLOAT, &ys)],
        );
        let m = common::with_opset(&m, 20);
        let got = common::run(&m, vec![f32s(&xs, x)])
            .unwrap_or_else(|e| panic!("case {case} {xs:?} axis {axis} len {len}: {e}"));
        common::assert_near(
            &got,
            &want,
            &format!(
                "case {case}: {xs:?} axis {axis} len {len} inverse {inverse} onesided {onesided}"
            ),
        );
    }
}
