//! `MaxPool`, `AveragePool` and `Pad` against their definitions, on 1-D and 2-D inputs with
//! strides, dilations, asymmetric and automatic padding and `ceil_mode` (a last window that
//! overhangs the padding, and one that would start in it and is dropped), both
//! `count_include_pad` settings, and every `Pad` mode with negative pads (a crop).

mod common;
use common::{FLOAT, INT64, f32s, int_attr, ints_attr, model, model_with, node, str_attr, value};
use irc_onnx::proto::TensorProto;

struct Pool {
    x: Vec<u64>,
    kernel: Vec<u64>,
    strides: Vec<u64>,
    dil: Vec<u64>,
    pads: Vec<(u64, u64)>,
    ceil: bool,
}

fn coords(mut k: u64, dims: &[u64]) -> Vec<u64> {
    let mut v = vec![0; dims.len()];
    for i in (0..dims.len()).rev() {
        v[i] = k % dims[i];
        k /= dims[i];
    }
    v
}

/// PyTorch's output size: floor or ceil, a ceil window starting in the right padding dropped.
fn out_size(p: &Pool, i: usize) -> u64 {
    let padded = p.x[2 + i] + p.pads[i].0 + p.pads[i].1;
    let span = p.dil[i] * (p.kernel[i] - 1) + 1;
    let s = p.strides[i];
    if !p.ceil {
        return (padded - span) / s + 1;
    }
    let o = (padded - span).div_ceil(s) + 1;
    if (o - 1) * s >= p.x[2 + i] + p.pads[i].0 {
        o - 1
    } else {
        o
    }
}

/// Every output of max pooling and of average pooling (`include_pad`: the divisor counts the
/// explicit padding, never the ceil overhang past it).
fn reference(p: &Pool, x: &[f32], avg: Option<bool>) -> (Vec<u64>, Vec<f64>) {
    let r = p.x.len() - 2;
    let out: Vec<u64> = (0..r).map(|i| out_size(p, i)).collect();
    let taps: u64 = p.kernel.iter().product();
    let mut y = Vec::new();
    for nc in 0..p.x[0] * p.x[1] {
        for o in 0..out.iter().product() {
            let o = coords(o, &out);
            let (mut best, mut sum, mut count) = (f64::NEG_INFINITY, 0.0, 0u64);
            for t in 0..taps {
                let t = coords(t, &p.kernel);
                let (mut xi, mut inside, mut counted) = (nc as i64, true, true);
                for i in 0..r {
                    let pos = (o[i] * p.strides[i] + t[i] * p.dil[i]) as i64 - p.pads[i].0 as i64;
                    let n = p.x[2 + i] as i64;
                    inside &= pos >= 0 && pos < n;
                    counted &= if avg == Some(true) {
                        pos < n + p.pads[i].1 as i64
                    } else {
                        pos >= 0 && pos < n
                    };
                    xi = xi * n + pos;
                }
                if inside {
                    let v = x[xi as usize] as f64;
                    best = best.max(v);
                    sum += v;
                }
                count += counted as u64;
            }
            y.push(if avg.is_some() {
                sum / count as f64
            } else {
                best
            });
        }
    }
    let mut shape = p.x[..2].to_vec();
    shape.extend(out);
    (shape, y)
}

fn fill(n: u64) -> Vec<f32> {
    (0..n)
        .map(|k| ((k * 37 + 3) % 17) as f32 * 0.25 - 2.0)
        .collect()
}

fn check_pool(p: &Pool) {
    let x = fill(p.x.iter().product());
    for (op, avg) in [
        ("MaxPool", None),
        ("AveragePool", Some(false)),
        ("AveragePool", Some(true)),
    ] {
        let (oshape, want) = reference(p, &x, avg);
        let as_i64 = |v: &[u64]| v.iter().map(|&d| d as i64).collect::<Vec<_>>();
        let mut pads = as_i64(&p.pads.iter().map(|q| q.0).collect::<Vec<_>>());
        pads.extend(as_i64(&p.pads.iter().map(|q| q.1).collect::<Vec<_>>()));
        let mut attrs = vec![
            ints_attr("kernel_shape", &as_i64(&p.kernel)),
            ints_attr("strides", &as_i64(&p.strides)),
            ints_attr("dilations", &as_i64(&p.dil)),
            ints_attr("pads", &pads),
            int_attr("ceil_mode", p.ceil as i64),
        ];
        if avg == Some(true) {
            attrs.push(int_attr("count_include_pad", 1));
        }
        let m = model(
            vec![node(op, &["x"], &["y"], attrs)],
            vec![value("x", FLOAT, &p.x)],
            vec![value("y", FLOAT, &oshape)],
        );
        let what = format!("{op} {avg:?} {:?} k{:?} ceil {}", p.x, p.kernel, p.ceil);
        let got =
            common::run(&m, vec![f32s(&p.x, x.clone())]).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(got.len(), want.len(), "{what}");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "{what}: element {k}: {g} vs {w}"
            );
        }
    }
}

#[test]
fn poolings_match_the_definition() {
    let pool = |x: &[u64], k: &[u64], s: &[u64], d: &[u64], pads: &[(u64, u64)], ceil| Pool {
        x: x.to_vec(),
        kernel: k.to_vec(),
        strides: s.to_vec(),
        dil: d.to_vec(),
        pads: pads.to_vec(),
        ceil,
    };
    // ResNet's stem: 3x3, stride 2, padding 1.
    check_pool(&pool(
        &[1, 2, 9, 8],
        &[3, 3],
        &[2, 2],
        &[1, 1],
        &[(1, 1), (1, 1)],
        false,
    ));
    // ceil_mode with an overhang past asymmetric padding, and a dilated 1-D window.
    check_pool(&pool(
        &[2, 1, 8, 7],
        &[3, 2],
        &[2, 3],
        &[1, 1],
        &[(1, 0), (0, 1)],
        true,
    ));
    check_pool(&pool(&[1, 3, 11], &[3], &[2], &[2], &[(2, 1)], true));
    // A ceil window that would start in the right padding is dropped: 5 + 1 + 1, k 2, s 2.
    check_pool(&pool(
        &[1, 1, 5, 5],
        &[2, 2],
        &[2, 2],
        &[1, 1],
        &[(1, 1), (1, 1)],
        true,
    ));
    // No padding (every window full, a constant divisor) and a kernel of one tap.
    check_pool(&pool(
        &[1, 2, 6, 6],
        &[2, 2],
        &[2, 2],
        &[1, 1],
        &[(0, 0), (0, 0)],
        false,
    ));
    check_pool(&pool(&[1, 2, 5], &[1], &[2], &[1], &[(0, 0)], true));
}

fn ints(name: &str, v: &[i64]) -> TensorProto {
    TensorProto {
        dims: vec![v.len() as i64],
        data_type: INT64,
        int64_data: v.to_vec(),
        name: name.into(),
        ..Default::default()
    }
}

/// `np.pad`'s index rule for one axis: the source index of padded position `j`, or `None` for
/// the constant.
fn source(mode: &str, j: i64, n: i64) -> Option<i64> {
    if (0..n).contains(&j) {
        return Some(j);
    }
    match mode {
        "constant" => None,
        "edge" => Some(j.clamp(0, n - 1)),
        "reflect" => Some(if j < 0 { -j } else { 2 * (n - 1) - j }),
        "wrap" => Some(j.rem_euclid(n)),
        _ => unreachable!(),
    }
}

#[test]
fn pad_modes_match_the_definition() {
    let shape = [3u64, 5];
    let x = fill(15);
    for mode in ["constant", "edge", "reflect", "wrap"] {
        for pads in [[1i64, 2, 2, 3], [0, -1, 2, -2], [-1, 4, 1, 0]] {
            let out: Vec<u64> = (0..2)
                .map(|i| (shape[i] as i64 + pads[i] + pads[i + 2]) as u64)
                .collect();
            let mut want = Vec::new();
            for o in 0..out[0] * out[1] {
                let o = coords(o, &out);
                let mut at = Some(0);
                for i in 0..2 {
                    // Crop first (a negative pad), then pad what is left.
                    let start = (-pads[i]).max(0);
                    let n = shape[i] as i64 - start - (-pads[i + 2]).max(0);
                    let j = o[i] as i64 - pads[i].max(0);
                    at = at
                        .zip(source(mode, j, n))
                        .map(|(a, s)| a * shape[i] as i64 + start + s);
                }
                want.push(at.map_or(1.5, |a| x[a as usize] as f64));
            }
            let constant = TensorProto {
                dims: vec![],
                data_type: FLOAT,
                float_data: vec![1.5],
                name: "c".into(),
                ..Default::default()
            };
            let m = model_with(
                vec![node(
                    "Pad",
                    &["x", "p", "c"],
                    &["y"],
                    vec![str_attr("mode", mode)],
                )],
                vec![ints("p", &pads), constant],
                vec![value("x", FLOAT, &shape)],
                vec![value("y", FLOAT, &out)],
            );
            let got = common::run(&m, vec![f32s(&shape, x.clone())])
                .unwrap_or_else(|e| panic!("{mode} {pads:?}: {e}"));
            let want: Vec<f64> = want.iter().map(|&w| w as f32 as f64).collect();
            assert_eq!(got, want, "{mode} {pads:?}");
        }
    }
}

#[test]
fn pads_a_mode_cannot_fill_are_errors() {
    let shape = [2u64, 3];
    for (mode, pads, msg) in [
        ("reflect", [0i64, 3, 0, 0], "reflect padding of 3"),
        ("wrap", [0, 0, 0, 4], "wrap padding of 4"),
        ("constant", [0, -2, 0, -1], "to nothing"),
        ("mirror", [0, 1, 0, 0], "not a Pad mode"),
    ] {
        let m = model_with(
            vec![node(
                "Pad",
                &["x", "p"],
                &["y"],
                vec![str_attr("mode", mode)],
            )],
            vec![ints("p", &pads)],
            vec![value("x", FLOAT, &shape)],
            vec![value("y", FLOAT, &[2, 3])],
        );
        let e = common::run(&m, vec![f32s(&shape, fill(6))]).unwrap_err();
        assert!(e.contains(msg), "{mode} {pads:?}: {e}");
    }
}
