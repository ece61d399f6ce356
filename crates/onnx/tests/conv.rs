//! `Conv` against a direct definition (every output position, every filter tap) on 1-D and 2-D
//! convolutions with groups, dilations, strides, asymmetric and automatic padding, a bias,
//! and the patch-embedding form (stride = kernel) that the importer writes without slices.

mod common;
use common::{FLOAT, f32s, int_attr, ints_attr, model, node, str_attr, value};

struct Case {
    x: Vec<u64>,
    w: Vec<u64>,
    group: u64,
    strides: Vec<u64>,
    dil: Vec<u64>,
    /// Begin and end padding per spatial dim, or an auto_pad mode.
    pads: Vec<(u64, u64)>,
    auto: Option<&'static str>,
    bias: bool,
}

/// The definition: y[n, m, o] = b[m] + Σ_{c in m's group, t} x[n, c, o·s + t·d - pad] w[m, c, t].
fn reference(
    c: &Case,
    x: &[f32],
    w: &[f32],
    b: &[f32],
    pads: &[(u64, u64)],
) -> (Vec<u64>, Vec<f64>) {
    let r = c.x.len() - 2;
    let (nb, ch, m) = (c.x[0], c.x[1], c.w[0]);
    let cg = ch / c.group;
    let out: Vec<u64> = (0..r)
        .map(|i| {
            let span = c.dil[i] * (c.w[2 + i] - 1) + 1;
            (c.x[2 + i] + pads[i].0 + pads[i].1 - span) / c.strides[i] + 1
        })
        .collect();
    let taps: u64 = c.w[2..].iter().product();
    let positions: u64 = out.iter().product();
    let coords = |mut k: u64, dims: &[u64]| -> Vec<u64> {
        let mut v = vec![0; dims.len()];
        for i in (0..dims.len()).rev() {
            v[i] = k % dims[i];
            k /= dims[i];
        }
        v
    };
    let mut y = Vec::new();
    for n in 0..nb {
        for f in 0..m {
            let grp = f / (m / c.group);
            for p in 0..positions {
                let o = coords(p, &out);
                let mut acc = if c.bias { b[f as usize] as f64 } else { 0.0 };
                for cc in 0..cg {
                    let ci = grp * cg + cc;
                    for t in 0..taps {
                        let tc = coords(t, &c.w[2..]);
                        let mut xi = (n * ch + ci) as i64;
                        let mut inside = true;
                        for i in 0..r {
                            let pos =
                                (o[i] * c.strides[i] + tc[i] * c.dil[i]) as i64 - pads[i].0 as i64;
                            inside &= pos >= 0 && pos < c.x[2 + i] as i64;
                            xi = xi * c.x[2 + i] as i64 + pos;
                        }
                        if inside {
                            let wi = ((f * cg + cc) * taps + t) as usize;
                            acc += x[xi as usize] as f64 * w[wi] as f64;
                        }
                    }
                }
                y.push(acc);
            }
        }
    }
    let mut shape = vec![nb, m];
    shape.extend(out);
    (shape, y)
}

fn check(c: Case) {
    let r = c.x.len() - 2;
    // The padding auto_pad = SAME_* gives (ONNX's rule), for the reference.
    let pads: Vec<(u64, u64)> = match c.auto {
        None => c.pads.clone(),
        Some(mode) => (0..r)
            .map(|i| {
                let out = c.x[2 + i].div_ceil(c.strides[i]);
                let span = c.dil[i] * (c.w[2 + i] - 1) + 1;
                let total = ((out - 1) * c.strides[i] + span).saturating_sub(c.x[2 + i]);
                if mode == "SAME_UPPER" {
                    (total / 2, total - total / 2)
                } else {
                    (total - total / 2, total / 2)
                }
            })
            .collect(),
    };
    let fill = common::pattern;
    let x = fill(c.x.iter().product(), 1);
    let w = fill(c.w.iter().product(), 5);
    let b = fill(c.w[0], 9);
    let (oshape, want) = reference(&c, &x, &w, &b, &pads);
    let mut attrs = vec![
        int_attr("group", c.group as i64),
        ints_attr(
            "strides",
            &c.strides.iter().map(|&s| s as i64).collect::<Vec<_>>(),
        ),
        ints_attr(
            "dilations",
            &c.dil.iter().map(|&s| s as i64).collect::<Vec<_>>(),
        ),
    ];
    match c.auto {
        Some(mode) => attrs.push(str_attr("auto_pad", mode)),
        None => {
            let mut p: Vec<i64> = c.pads.iter().map(|p| p.0 as i64).collect();
            p.extend(c.pads.iter().map(|p| p.1 as i64));
            attrs.push(ints_attr("pads", &p));
        }
    }
    let mut ins = vec!["x", "w"];
    let mut vals = vec![value("x", FLOAT, &c.x), value("w", FLOAT, &c.w)];
    let mut data = vec![f32s(&c.x, x), f32s(&c.w, w)];
    if c.bias {
        ins.push("b");
        vals.push(value("b", FLOAT, &[c.w[0]]));
        data.push(f32s(&[c.w[0]], b));
    }
    let m = model(
        vec![node("Conv", &ins, &["y"], attrs)],
        vals,
        vec![value("y", FLOAT, &oshape)],
    );
    let got = common::run(&m, data).unwrap_or_else(|e| panic!("{:?} {:?}: {e}", c.x, c.w));
    common::assert_near(&got, &want, &format!("{:?} {:?}", c.x, c.w));
}

#[test]
fn convolutions_match_the_definition() {
    let case =
        |x: &[u64], w: &[u64], group, strides: &[u64], dil: &[u64], pads: &[(u64, u64)]| Case {
            x: x.to_vec(),
            w: w.to_vec(),
            group,
            strides: strides.to_vec(),
            dil: dil.to_vec(),
            pads: pads.to_vec(),
            auto: None,
            bias: true,
        };
    check(case(
        &[2, 3, 9, 7],
        &[4, 3, 3, 3],
        1,
        &[1, 1],
        &[1, 1],
        &[(1, 1), (1, 1)],
    ));
    check(case(
        &[1, 4, 9, 8],
        &[6, 2, 3, 2],
        2,
        &[2, 1],
        &[1, 2],
        &[(1, 0), (0, 2)],
    ));
    check(case(&[1, 4, 10], &[4, 1, 3], 4, &[2], &[2], &[(2, 1)]));
    // A patch embedding: stride = kernel, no padding (the reshape/transpose form).
    check(case(
        &[2, 3, 8, 12],
        &[5, 3, 4, 4],
        1,
        &[4, 4],
        &[1, 1],
        &[(0, 0), (0, 0)],
    ));
    let mut same = case(&[1, 2, 7, 6], &[3, 2, 3, 3], 1, &[2, 2], &[1, 1], &[]);
    same.auto = Some("SAME_LOWER");
    same.bias = false;
    check(same);
    let mut upper = case(&[1, 2, 6], &[3, 2, 4], 1, &[1], &[1], &[]);
    upper.auto = Some("SAME_UPPER");
    check(upper);
}
