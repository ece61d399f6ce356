//! `GridSample` against its definition (ONNX's reference, written out per output element), on
//! 1-D, 2-D and 3-D inputs in every mode, padding mode and `align_corners`, with grid points
//! on the corners, past them and several periods beyond (reflection's repeated bounces), and
//! opset 16's mode names (`bilinear`, `bicubic`) as RAFT's export writes them.

mod common;
use common::{FLOAT, Lcg, f32s, int_attr, model, node, run, str_attr, value, with_opset};

const MODES: [&str; 3] = ["nearest", "linear", "cubic"];
const PADS: [&str; 3] = ["zeros", "border", "reflection"];

/// ONNX's reflection: by the nearer border, bounce after bounce, until inside `[lo, hi]`.
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let r = hi - lo;
    if r <= 0.0 {
        return lo;
    }
    if x < lo {
        let dx = lo - x;
        let n = (dx / r).floor();
        let rest = dx - n * r;
        if n % 2.0 == 0.0 { lo + rest } else { hi - rest }
    } else if x > hi {
        let dx = x - hi;
        let n = (dx / r).floor();
        let rest = dx - n * r;
        if n % 2.0 == 0.0 { hi - rest } else { lo + rest }
    } else {
        x
    }
}

/// Keys' cubic convolution weight (a = -0.75) at distance `s`.
fn keys(s: f64) -> f64 {
    let a = -0.75;
    let s = s.abs();
    if s <= 1.0 {
        ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0
    } else if s < 2.0 {
        ((a * s - 5.0 * a) * s + 8.0 * a) * s - 4.0 * a
    } else {
        0.0
    }
}

struct Case {
    x: Vec<u64>,
    out: Vec<u64>,
    mode: &'static str,
    pad: &'static str,
    align: bool,
}

/// Every output of the case, sampling `x` at `grid`.
fn reference(c: &Case, x: &[f32], grid: &[f32]) -> Vec<f64> {
    let r = c.x.len() - 2;
    let sp = &c.x[2..];
    let s: u64 = sp.iter().product();
    let npos: u64 = c.out.iter().product();
    let mut y = vec![0.0; (c.x[0] * c.x[1] * npos) as usize];
    for n in 0..c.x[0] {
        for p in 0..npos {
            // Per spatial axis a: its taps (index inside the axis or None for zero, weight).
            let mut taps: Vec<Vec<(Option<u64>, f64)>> = Vec::new();
            for (a, &d) in sp.iter().enumerate() {
                let g = grid[((n * npos + p) * r as u64 + (r - 1 - a) as u64) as usize] as f64;
                let df = d as f64;
                let (lo, hi) = if c.align {
                    (0.0, df - 1.0)
                } else {
                    (-0.5, df - 0.5)
                };
                let mut v = if c.align {
                    (g + 1.0) / 2.0 * (df - 1.0)
                } else {
                    ((g + 1.0) * df - 1.0) / 2.0
                };
                if c.mode == "nearest" {
                    v = v.round_ties_even();
                }
                if v < lo || v > hi {
                    v = match c.pad {
                        "border" => v.clamp(0.0, df - 1.0),
                        "reflection" => reflect(v, lo, hi),
                        _ => v,
                    };
                }
                let pick = |i: f64| -> Option<u64> {
                    match c.pad {
                        "zeros" => (i >= 0.0 && i < df).then_some(i as u64),
                        "border" => Some(i.clamp(0.0, df - 1.0) as u64),
                        _ => Some((reflect(i, lo, hi).trunc()).clamp(0.0, df - 1.0) as u64),
                    }
                };
                let f = v.floor();
                taps.push(match c.mode {
                    "nearest" => vec![(pick(v), 1.0)],
                    "linear" => vec![(pick(f), 1.0 - (v - f)), (pick(f + 1.0), v - f)],
                    _ => (-1..=2)
                        .map(|k| (pick(f + k as f64), keys(v - (f + k as f64))))
                        .collect(),
                });
            }
            let combos: usize = taps.iter().map(|t| t.len()).product();
            for ch in 0..c.x[1] {
                let mut acc = 0.0;
                for mut k in 0..combos {
                    let (mut flat, mut w, mut zero) = (0u64, 1.0, false);
                    for (a, t) in taps.iter().enumerate().rev() {
                        let (i, wt) = t[k % t.len()];
                        k /= t.len();
                        w *= wt;
                        match i {
                            Some(i) => flat += i * sp[a + 1..].iter().product::<u64>(),
                            None => zero = true,
                        }
                    }
                    if !zero {
                        acc += w * x[((n * c.x[1] + ch) * s + flat) as usize] as f64;
                    }
                }
                y[((n * c.x[1] + ch) * npos + p) as usize] = acc;
            }
        }
    }
    y
}

fn case_model(c: &Case, opset16_names: bool) -> Vec<u8> {
    let r = c.x.len() - 2;
    let mut gshape = vec![c.x[0]];
    gshape.extend(&c.out);
    gshape.push(r as u64);
    let mut yshape = vec![c.x[0], c.x[1]];
    yshape.extend(&c.out);
    let mode = match (c.mode, opset16_names) {
        ("linear", true) => "bilinear",
        ("cubic", true) => "bicubic",
        (m, _) => m,
    };
    let n = node(
        "GridSample",
        &["x", "grid"],
        &["y"],
        vec![
            str_attr("mode", mode),
            str_attr("padding_mode", c.pad),
            int_attr("align_corners", c.align as i64),
        ],
    );
    let bytes = model(
        vec![n],
        vec![value("x", FLOAT, &c.x), value("grid", FLOAT, &gshape)],
        vec![value("y", FLOAT, &yshape)],
    );
    if opset16_names {
        bytes
    } else {
        with_opset(&bytes, 20)
    }
}

fn check(c: &Case, opset16_names: bool, rng: &mut Lcg) {
    let r = c.x.len() - 2;
    let xs: Vec<f32> = (0..c.x.iter().product::<u64>())
        .map(|_| rng.below(2001) as f32 / 1000.0 - 1.0)
        .collect();
    let npos: u64 = c.out.iter().product();
    let gn = c.x[0] * npos * r as u64;
    // Mostly in [-1.5, 1.5]; a few exactly on the corners; a few far out (several bounces).
    let grid: Vec<f32> = (0..gn)
        .map(|k| match k % 7 {
            0 => 1.0,
            3 => -1.0,
            5 => rng.below(1401) as f32 / 100.0 - 7.0,
            _ => rng.below(3001) as f32 / 1000.0 - 1.5,
        })
        .collect();
    let want = reference(c, &xs, &grid);
    let mut gshape = vec![c.x[0]];
    gshape.extend(&c.out);
    gshape.push(r as u64);
    let got = run(
        &case_model(c, opset16_names),
        vec![f32s(&c.x, xs), f32s(&gshape, grid)],
    )
    .unwrap_or_else(|e| panic!("{} {} align {}: {e}", c.mode, c.pad, c.align));
    common::assert_near(
        &got,
        &want,
        &format!("{:?} {} {} align {}", c.x, c.mode, c.pad, c.align),
    );
}

#[test]
fn grid_sample_every_mode_and_padding() {
    let mut rng = Lcg(7);
    let shapes: [(&[u64], &[u64]); 4] = [
        (&[2, 3, 5], &[4]),
        (&[2, 3, 5, 4], &[3, 4]),
        (&[1, 2, 1, 3], &[2, 2]),
        (&[1, 2, 3, 4, 2], &[2, 3, 2]),
    ];
    for (x, out) in shapes {
        for mode in MODES {
            for pad in PADS {
                for align in [false, true] {
                    let c = Case {
                        x: x.to_vec(),
                        out: out.to_vec(),
                        mode,
                        pad,
                        align,
                    };
                    check(&c, false, &mut rng);
                }
            }
        }
    }
}

#[test]
fn grid_sample_opset16_names() {
    let mut rng = Lcg(11);
    for mode in MODES {
        for pad in PADS {
            let c = Case {
                x: vec![1, 2, 6, 5],
                out: vec![3, 3],
                mode,
                pad,
                align: true,
            };
            check(&c, true, &mut rng);
        }
    }
}

#[test]
fn grid_sample_rejects_a_mismatched_grid() {
    let n = node("GridSample", &["x", "grid"], &["y"], vec![]);
    let bytes = model(
        vec![n],
        vec![
            value("x", FLOAT, &[1, 2, 4, 4]),
            value("grid", FLOAT, &[1, 3, 3, 3]),
        ],
        vec![value("y", FLOAT, &[1, 2, 3, 3])],
    );
    let e = irc_onnx::import_model(&bytes, &Default::default()).unwrap_err();
    assert!(e.to_string().contains("GridSample"), "{e}");
}
