//! `ConvTranspose` against its definition, every input element scattered through every tap:
//! `y[n, m, i·s + t·d - pad] += x[n, c, i] · w[c, m', t]` (`m'` the filter within `m`'s group),
//! on 1-D and 2-D inputs with strides, dilations, asymmetric padding, `output_padding`, an
//! `output_shape` past the full result, and groups.

mod common;
use common::{FLOAT, f32s, int_attr, ints_attr, model, node, value};

struct Case {
    x: Vec<u64>,
    /// `[C, M/group, k...]`.
    w: Vec<u64>,
    group: u64,
    strides: Vec<u64>,
    dil: Vec<u64>,
    pads: Vec<(u64, u64)>,
    extra: Vec<u64>,
}

fn coords(mut k: u64, dims: &[u64]) -> Vec<u64> {
    let mut v = vec![0; dims.len()];
    for i in (0..dims.len()).rev() {
        v[i] = k % dims[i];
        k /= dims[i];
    }
    v
}

fn reference(c: &Case, x: &[f32], w: &[f32], b: &[f32]) -> (Vec<u64>, Vec<f64>) {
    let r = c.x.len() - 2;
    let (nb, ch, mg) = (c.x[0], c.x[1], c.w[1]);
    let m = mg * c.group;
    let cg = ch / c.group;
    let out: Vec<u64> = (0..r)
        .map(|i| {
            let span = c.dil[i] * (c.w[2 + i] - 1) + 1;
            c.strides[i] * (c.x[2 + i] - 1) + c.extra[i] + span - c.pads[i].0 - c.pads[i].1
        })
        .collect();
    let positions: u64 = out.iter().product();
    let mut y: Vec<f64> = (0..nb * m * positions)
        .map(|k| b[((k / positions) % m) as usize] as f64)
        .collect();
    let taps: u64 = c.w[2..].iter().product();
    let inputs: u64 = c.x[2..].iter().product();
    for n in 0..nb {
        for ci in 0..ch {
            let grp = ci / cg;
            for p in 0..inputs {
                let at = coords(p, &c.x[2..]);
                let xv = x[((n * ch + ci) * inputs + p) as usize] as f64;
                for t in 0..taps {
                    let tc = coords(t, &c.w[2..]);
                    let mut o = 0i64;
                    let mut inside = true;
                    for i in 0..r {
                        let pos =
                            (at[i] * c.strides[i] + tc[i] * c.dil[i]) as i64 - c.pads[i].0 as i64;
                        inside &= pos >= 0 && pos < out[i] as i64;
                        o = o * out[i] as i64 + pos;
                    }
                    if !inside {
                        continue;
                    }
                    for f in 0..mg {
                        let mo = grp * mg + f;
                        let wv = w[((ci * mg + f) * taps + t) as usize] as f64;
                        y[((n * m + mo) * positions) as usize + o as usize] += xv * wv;
                    }
                }
            }
        }
    }
    let mut shape = vec![nb, m];
    shape.extend(out);
    (shape, y)
}

fn check(c: Case) {
    let fill = common::pattern;
    let x = fill(c.x.iter().product(), 1);
    let w = fill(c.w.iter().product(), 5);
    let m = c.w[1] * c.group;
    let b = fill(m, 9);
    let (oshape, want) = reference(&c, &x, &w, &b);
    let as_i64 = |v: &[u64]| v.iter().map(|&d| d as i64).collect::<Vec<_>>();
    let mut pads = as_i64(&c.pads.iter().map(|p| p.0).collect::<Vec<_>>());
    pads.extend(as_i64(&c.pads.iter().map(|p| p.1).collect::<Vec<_>>()));
    let attrs = vec![
        int_attr("group", c.group as i64),
        ints_attr("strides", &as_i64(&c.strides)),
        ints_attr("dilations", &as_i64(&c.dil)),
        ints_attr("pads", &pads),
        ints_attr("output_padding", &as_i64(&c.extra)),
    ];
    let mdl = model(
        vec![node("ConvTranspose", &["x", "w", "b"], &["y"], attrs)],
        vec![
            value("x", FLOAT, &c.x),
            value("w", FLOAT, &c.w),
            value("b", FLOAT, &[m]),
        ],
        vec![value("y", FLOAT, &oshape)],
    );
    let inputs = vec![f32s(&c.x, x), f32s(&c.w, w), f32s(&[m], b)];
    let got = common::run(&mdl, inputs).unwrap_or_else(|e| panic!("{:?} {:?}: {e}", c.x, c.w));
    common::assert_near(&got, &want, &format!("{:?} {:?}", c.x, c.w));
}

#[test]
fn transposed_convolutions_match_the_definition() {
    let case =
        |x: &[u64], w: &[u64], group, s: &[u64], d: &[u64], pads: &[(u64, u64)], extra: &[u64]| {
            Case {
                x: x.to_vec(),
                w: w.to_vec(),
                group,
                strides: s.to_vec(),
                dil: d.to_vec(),
                pads: pads.to_vec(),
                extra: extra.to_vec(),
            }
        };
    // A UNet's 2x upsampling (k 2, s 2), and a 4x4 stride-2 padded one (DCGAN's).
    check(case(
        &[1, 3, 4, 5],
        &[3, 2, 2, 2],
        1,
        &[2, 2],
        &[1, 1],
        &[(0, 0), (0, 0)],
        &[0, 0],
    ));
    check(case(
        &[2, 2, 3, 3],
        &[2, 3, 4, 4],
        1,
        &[2, 2],
        &[1, 1],
        &[(1, 1), (1, 1)],
        &[0, 0],
    ));
    // Dilation, asymmetric padding, output_padding, groups.
    check(case(
        &[1, 4, 5, 4],
        &[4, 1, 3, 2],
        2,
        &[3, 2],
        &[2, 1],
        &[(1, 2), (0, 1)],
        &[1, 1],
    ));
    check(case(&[1, 2, 7], &[2, 3, 3], 1, &[2], &[2], &[(2, 0)], &[1]));
}
