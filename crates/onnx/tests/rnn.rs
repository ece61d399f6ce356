//! `RNN`, `GRU` and `LSTM` against a scalar reference of ONNX's equations (each batch row run
//! on its own, step by step, in f64) on seeded random shapes and settings: every direction,
//! both layouts, with and without biases, initial states and peepholes, `sequence_lens`
//! equal or different per row, `linear_before_reset`, `input_forget`, `clip`, and named
//! activations with their alphas and betas. Then random bad attributes and shapes: an error
//! or a run, never a panic.

mod common;
use common::{FLOAT, Lcg, int_attr, model_with, node, str_attr, value};
use irc_interp::{Data, Tensor, run_graph};
use irc_ir::{DType, TensorType};
use irc_onnx::proto::{AttributeProto, TensorProto, ValueInfoProto};

#[derive(Clone, Copy, PartialEq, Debug)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    fn op(self) -> &'static str {
        match self {
            Cell::Rnn => "RNN",
            Cell::Gru => "GRU",
            Cell::Lstm => "LSTM",
        }
    }
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }
    fn defaults(self) -> Vec<&'static str> {
        match self {
            Cell::Rnn => vec!["Tanh"],
            Cell::Gru => vec!["Sigmoid", "Tanh"],
            Cell::Lstm => vec!["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// An activation as ONNX's RNN docs define it.
#[derive(Clone, Debug)]
struct Act(&'static str, f64, f64);

fn apply(a: &Act, x: f64) -> f64 {
    let Act(name, al, be) = *a;
    match name {
        "Sigmoid" => 1.0 / (1.0 + (-x).exp()),
        "Tanh" => x.tanh(),
        "Relu" => x.max(0.0),
        "Affine" => al * x + be,
        "LeakyRelu" => {
            if x >= 0.0 {
                x
            } else {
                al * x
            }
        }
        "ThresholdedRelu" => {
            if x >= al {
                x
            } else {
                0.0
            }
        }
        "ScaledTanh" => al * (be * x).tanh(),
        "HardSigmoid" => (al * x + be).clamp(0.0, 1.0),
        "Elu" => {
            if x >= 0.0 {
                x
            } else {
                al * (x.exp() - 1.0)
            }
        }
        "Softsign" => x / (1.0 + x.abs()),
        "Softplus" => (1.0 + x.exp()).ln(),
        _ => unreachable!(),
    }
}

/// One random case's settings and data (layout-0 order, f64).
struct Case {
    cell: Cell,
    s: usize,
    b: usize,
    i: usize,
    h: usize,
    dirs: Vec<bool>, // reverse per direction
    direction: &'static str,
    layout: i64,
    x: Vec<f64>,
    w: Vec<f64>,
    r: Vec<f64>,
    bias: Option<Vec<f64>>,
    h0: Option<Vec<f64>>,
    c0: Option<Vec<f64>>,
    p: Option<Vec<f64>>,
    lens: Option<Vec<usize>>,
    lbr: bool,
    input_forget: bool,
    clip: Option<f64>,
    /// Named activations (with the alpha and beta lists) or the defaults.
    acts: Option<(Vec<&'static str>, Vec<f32>, Vec<f32>)>,
    want_y: bool,
}

/// The activations per direction, as the importer reads them (an alpha or beta list is
/// consumed in order by the functions that take one).
fn resolve(c: &Case) -> Vec<Act> {
    let d = c.dirs.len();
    let (names, alphas, betas) = match &c.acts {
        Some((n, a, b)) => (n.clone(), a.clone(), b.clone()),
        None => (c.cell.defaults(), vec![], vec![]),
    };
    let names = if names.len() == c.cell.defaults().len() && d == 2 {
        [names.clone(), names].concat()
    } else {
        names
    };
    let (mut ai, mut bi) = (alphas.into_iter(), betas.into_iter());
    names
        .into_iter()
        .map(|n| {
            let (a, b) = match n {
                "LeakyRelu" => (Some(0.01), None),
                "ThresholdedRelu" | "Elu" => (Some(1.0), None),
                "Affine" => (Some(1.0), Some(0.0)),
                "ScaledTanh" => (Some(1.0), Some(1.0)),
                "HardSigmoid" => (Some(0.2), Some(0.5)),
                _ => (None, None),
            };
            let a = a.map_or(0.0, |d| ai.next().map_or(d, f64::from));
            let b = b.map_or(0.0, |d| bi.next().map_or(d, f64::from));
            Act(n, a, b)
        })
        .collect()
}

/// Y `[S, D, B, H]`, Y_h and Y_c `[D, B, H]` by ONNX's equations, row by row.
fn reference(c: &Case) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (s, b, i, h, nd) = (c.s, c.b, c.i, c.h, c.dirs.len());
    let g = c.cell.gates();
    let acts = resolve(c);
    let per = c.cell.defaults().len();
    let mut y = vec![0.0; s * nd * b * h];
    let mut yh = vec![0.0; nd * b * h];
    let mut yc = vec![0.0; nd * b * h];
    let clip = |v: f64| c.clip.map_or(v, |k| v.clamp(-k, k));
    for (d, &rev) in c.dirs.iter().enumerate() {
        let act = |k: usize, v: f64| apply(&acts[d * per + k], clip(v));
        let w = |row: usize, col: usize| c.w[(d * g * h + row) * i + col];
        let r = |row: usize, col: usize| c.r[(d * g * h + row) * h + col];
        let wb = |row: usize| c.bias.as_ref().map_or(0.0, |v| v[d * 2 * g * h + row]);
        let rb = |row: usize| {
            c.bias
                .as_ref()
                .map_or(0.0, |v| v[d * 2 * g * h + g * h + row])
        };
        for bb in 0..b {
            let len = c.lens.as_ref().map_or(s, |l| l[bb]);
            let mut hs: Vec<f64> = (0..h)
                .map(|k| c.h0.as_ref().map_or(0.0, |v| v[(d * b + bb) * h + k]))
                .collect();
            let mut cs: Vec<f64> = (0..h)
                .map(|k| c.c0.as_ref().map_or(0.0, |v| v[(d * b + bb) * h + k]))
                .collect();
            let times: Vec<usize> = if rev {
                (0..len).rev().collect()
            } else {
                (0..len).collect()
            };
            for t in times {
                let xt = &c.x[(t * b + bb) * i..(t * b + bb + 1) * i];
                // Xt·Wᵀ + Wb and Ht-1·Rᵀ per gate row.
                let xw: Vec<f64> = (0..g * h)
                    .map(|row| (0..i).map(|k| xt[k] * w(row, k)).sum::<f64>() + wb(row))
                    .collect();
                let hr = |v: &[f64], row: usize| (0..h).map(|k| v[k] * r(row, k)).sum::<f64>();
                let new_h: Vec<f64> = match c.cell {
                    Cell::Rnn => (0..h).map(|k| act(0, xw[k] + hr(&hs, k) + rb(k))).collect(),
                    Cell::Gru => {
                        let z: Vec<f64> =
                            (0..h).map(|k| act(0, xw[k] + hr(&hs, k) + rb(k))).collect();
                        let rr: Vec<f64> = (0..h)
                            .map(|k| act(0, xw[h + k] + hr(&hs, h + k) + rb(h + k)))
                            .collect();
                        let gated: Vec<f64> = (0..h).map(|k| rr[k] * hs[k]).collect();
                        (0..h)
                            .map(|k| {
                                let row = 2 * h + k;
                                let pre = if c.lbr {
                                    xw[row] + rr[k] * (hr(&hs, row) + rb(row))
                                } else {
                                    xw[row] + hr(&gated, row) + rb(row)
                                };
                                let cand = act(1, pre);
                                (1.0 - z[k]) * cand + z[k] * hs[k]
                            })
                            .collect()
                    }
                    Cell::Lstm => {
                        let p = |gate: usize, k: usize| {
                            c.p.as_ref().map_or(0.0, |v| v[d * 3 * h + gate * h + k])
                        };
                        let pre = |gate: usize, k: usize| {
                            let row = gate * h + k;
                            xw[row] + hr(&hs, row) + rb(row)
                        };
                        let mut out = vec![0.0; h];
                        let mut new_c = vec![0.0; h];
                        for k in 0..h {
                            let ig = act(0, pre(0, k) + p(0, k) * cs[k]);
                            let fg = if c.input_forget {
                                1.0 - ig
                            } else {
                                act(0, pre(2, k) + p(2, k) * cs[k])
                            };
                            let cand = act(1, pre(3, k));
                            new_c[k] = fg * cs[k] + ig * cand;
                            let og = act(0, pre(1, k) + p(1, k) * new_c[k]);
                            // h of the cell state unclipped (ONNX Runtime's LSTM).
                            out[k] = og * apply(&acts[d * per + 2], new_c[k]);
                        }
                        cs = new_c;
                        out
                    }
                };
                hs = new_h;
                for k in 0..h {
                    y[((t * nd + d) * b + bb) * h + k] = hs[k];
                }
            }
            for k in 0..h {
                yh[(d * b + bb) * h + k] = hs[k];
                yc[(d * b + bb) * h + k] = cs[k];
            }
        }
    }
    (y, yh, yc)
}

fn rand_vec(r: &mut Lcg, n: usize, scale: f64) -> Vec<f64> {
    (0..n)
        .map(|_| (r.below(2001) as f64 / 1000.0 - 1.0) * scale)
        .collect()
}

fn f32_init(name: &str, dims: &[usize], v: &[f64]) -> TensorProto {
    TensorProto {
        dims: dims.iter().map(|&d| d as i64).collect(),
        data_type: FLOAT,
        float_data: v.iter().map(|&x| x as f32).collect(),
        name: name.into(),
        ..Default::default()
    }
}

fn f32_tensor(dims: &[usize], v: &[f64]) -> Tensor {
    let shape: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
    Tensor {
        ty: TensorType::new(shape, DType::F32),
        data: Data::F32(v.iter().map(|&x| x as f32).collect()),
    }
}

/// `v` of shape `[a, b, rest]` with its first two axes swapped.
fn swap01(v: &[f64], a: usize, b: usize, rest: usize) -> Vec<f64> {
    let mut out = vec![0.0; v.len()];
    for i in 0..a {
        for j in 0..b {
            for k in 0..rest {
                out[(j * a + i) * rest + k] = v[(i * b + j) * rest + k];
            }
        }
    }
    out
}

fn random_case(r: &mut Lcg) -> Case {
    let cell = [Cell::Rnn, Cell::Gru, Cell::Lstm][r.below(3) as usize];
    let (s, b, i, h) = (
        1 + r.below(5) as usize,
        1 + r.below(4) as usize,
        1 + r.below(4) as usize,
        1 + r.below(4) as usize,
    );
    let (direction, dirs) = match r.below(3) {
        0 => ("forward", vec![false]),
        1 => ("reverse", vec![true]),
        _ => ("bidirectional", vec![false, true]),
    };
    let nd = dirs.len();
    let g = cell.gates();
    let some = |r: &mut Lcg| r.below(2) == 0;
    let bias = some(r).then(|| rand_vec(r, nd * 2 * g * h, 0.5));
    let h0 = some(r).then(|| rand_vec(r, nd * b * h, 1.0));
    let c0 = (cell == Cell::Lstm && some(r)).then(|| rand_vec(r, nd * b * h, 1.0));
    let p = (cell == Cell::Lstm && some(r)).then(|| rand_vec(r, nd * 3 * h, 0.5));
    let lens = match r.below(3) {
        0 => None,
        1 => {
            let l = 1 + r.below(s as u64) as usize;
            Some(vec![l; b])
        }
        _ => Some((0..b).map(|_| 1 + r.below(s as u64) as usize).collect()),
    };
    let names = [
        "Sigmoid",
        "Tanh",
        "Relu",
        "Affine",
        "LeakyRelu",
        "ThresholdedRelu",
        "ScaledTanh",
        "HardSigmoid",
        "Elu",
        "Softsign",
        "Softplus",
    ];
    let acts = (r.below(3) == 0).then(|| {
        let per = cell.defaults().len();
        let count = if nd == 2 && r.below(2) == 0 {
            per
        } else {
            per * nd
        };
        let list: Vec<&'static str> = (0..count)
            .map(|_| names[r.below(names.len() as u64) as usize])
            .collect();
        let alphas = (0..r.below(4))
            .map(|_| 0.1 + r.below(10) as f32 * 0.1)
            .collect();
        let betas = (0..r.below(4))
            .map(|_| 0.1 + r.below(10) as f32 * 0.1)
            .collect();
        (list, alphas, betas)
    });
    Case {
        cell,
        s,
        b,
        i,
        h,
        dirs,
        direction,
        layout: r.below(2) as i64,
        x: rand_vec(r, s * b * i, 1.0),
        w: rand_vec(r, nd * g * h * i, 0.8),
        r: rand_vec(r, nd * g * h * h, 0.8),
        bias,
        h0,
        c0,
        p,
        lens,
        lbr: cell == Cell::Gru && some(r),
        input_forget: cell == Cell::Lstm && r.below(4) == 0,
        clip: (r.below(4) == 0).then(|| 0.5 + r.below(4) as f64 * 0.5),
        acts,
        want_y: r.below(4) != 0,
    }
}

/// The case as a model (X, initial_h, initial_c as inputs; the rest initializers), with its
/// inputs in the case's layout.
fn build(c: &Case) -> (Vec<u8>, Vec<Tensor>) {
    let (s, b, i, h, nd) = (c.s, c.b, c.i, c.h, c.dirs.len());
    let g = c.cell.gates();
    let mut ins = vec!["X", "W", "R", "", "", ""];
    let mut inits = vec![
        f32_init("W", &[nd, g * h, i], &c.w),
        f32_init("R", &[nd, g * h, h], &c.r),
    ];
    let mut vi = vec![];
    let mut data = vec![];
    let (xd, xv) = if c.layout == 1 {
        ([b, s, i], swap01(&c.x, s, b, i))
    } else {
        ([s, b, i], c.x.clone())
    };
    vi.push(value("X", FLOAT, &xd.map(|d| d as u64)));
    data.push(f32_tensor(&xd, &xv));
    if let Some(bias) = &c.bias {
        ins[3] = "B";
        inits.push(f32_init("B", &[nd, 2 * g * h], bias));
    }
    if let Some(l) = &c.lens {
        ins[4] = "L";
        inits.push(TensorProto {
            dims: vec![b as i64],
            data_type: 6,
            int32_data: l.iter().map(|&v| v as i32).collect(),
            name: "L".into(),
            ..Default::default()
        });
    }
    let mut state = |name: &'static str, v: &Option<Vec<f64>>, slot: usize, ins: &mut Vec<&str>| {
        if let Some(v) = v {
            while ins.len() <= slot {
                ins.push("");
            }
            ins[slot] = name;
            let (dims, vals) = if c.layout == 1 {
                ([b, nd, h], swap01(v, nd, b, h))
            } else {
                ([nd, b, h], v.clone())
            };
            vi.push(value(name, FLOAT, &dims.map(|d| d as u64)));
            data.push(f32_tensor(&dims, &vals));
        }
    };
    state("H0", &c.h0, 5, &mut ins);
    state("C0", &c.c0, 6, &mut ins);
    if let Some(p) = &c.p {
        while ins.len() <= 7 {
            ins.push("");
        }
        ins[7] = "P";
        inits.push(f32_init("P", &[nd, 3 * h], p));
    }
    while ins.last() == Some(&"") {
        ins.pop();
    }
    let mut attrs = vec![
        int_attr("hidden_size", h as i64),
        str_attr("direction", c.direction),
        int_attr("layout", c.layout),
    ];
    if c.lbr {
        attrs.push(int_attr("linear_before_reset", 1));
    }
    if c.input_forget {
        attrs.push(int_attr("input_forget", 1));
    }
    if let Some(k) = c.clip {
        attrs.push(AttributeProto {
            name: "clip".into(),
            f: k as f32,
            r#type: 1,
            ..Default::default()
        });
    }
    if let Some((names, alphas, betas)) = &c.acts {
        attrs.push(AttributeProto {
            name: "activations".into(),
            strings: names.iter().map(|n| n.as_bytes().to_vec()).collect(),
            r#type: 8,
            ..Default::default()
        });
        for (name, v) in [("activation_alpha", alphas), ("activation_beta", betas)] {
            if !v.is_empty() {
                attrs.push(AttributeProto {
                    name: name.into(),
                    floats: v.clone(),
                    r#type: 6,
                    ..Default::default()
                });
            }
        }
    }
    let mut outs = vec![if c.want_y { "Y" } else { "" }, "Y_h"];
    if c.cell == Cell::Lstm {
        outs.push("Y_c");
    }
    let out_vi = output_infos(&outs);
    let m = model_with(
        vec![node(c.cell.op(), &ins, &outs, attrs)],
        inits,
        vi,
        out_vi,
    );
    (m, data)
}

fn close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 2e-5 + 1e-4 * w.abs(),
            "{what}: element {k}: got {g}, expected {w}"
        );
    }
}

#[test]
fn recurrent_layers_match_a_scalar_reference() {
    let mut r = Lcg(7);
    for case in 0..300 {
        let c = random_case(&mut r);
        let what = format!(
            "case {case}: {:?} S{} B{} I{} H{} {} layout {} bias {} h0 {} c0 {} P {} lens {:?} lbr {} input_forget {} clip {:?} acts {:?} Y {}",
            c.cell,
            c.s,
            c.b,
            c.i,
            c.h,
            c.direction,
            c.layout,
            c.bias.is_some(),
            c.h0.is_some(),
            c.c0.is_some(),
            c.p.is_some(),
            c.lens,
            c.lbr,
            c.input_forget,
            c.clip,
            c.acts,
            c.want_y
        );
        let (m, mut inputs) = build(&c);
        let imported = irc_onnx::import_model(&m, &Default::default())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        inputs.extend(imported.weights.iter().map(|(_, t)| t.clone()));
        let outs =
            run_graph(&imported.graph, inputs).unwrap_or_else(|e| panic!("{what}: run: {e}"));
        let (y, yh, yc) = reference(&c);
        let (s, b, h, nd) = (c.s, c.b, c.h, c.dirs.len());
        // Layout 1: Y [B, S, D, H], states [B, D, H].
        let (y, yh, yc) = if c.layout == 1 {
            let mut y1 = vec![0.0; y.len()];
            for t in 0..s {
                for d in 0..nd {
                    for bb in 0..b {
                        for k in 0..h {
                            y1[((bb * s + t) * nd + d) * h + k] =
                                y[((t * nd + d) * b + bb) * h + k];
                        }
                    }
                }
            }
            (y1, swap01(&yh, nd, b, h), swap01(&yc, nd, b, h))
        } else {
            (y, yh, yc)
        };
        let mut got = outs.iter().map(|t| t.data.to_f64());
        if c.want_y {
            close(&got.next().unwrap(), &y, &format!("{what}: Y"));
        }
        close(&got.next().unwrap(), &yh, &format!("{what}: Y_h"));
        if c.cell == Cell::Lstm {
            close(&got.next().unwrap(), &yc, &format!("{what}: Y_c"));
        }
    }
}

/// A shape of rank 0 to 4, dims 1 to 4 (0 one time in ten).
fn odd_shape(r: &mut Lcg) -> Vec<u64> {
    let rank = r.below(5) as usize;
    (0..rank)
        .map(|_| if r.below(10) == 0 { 0 } else { 1 + r.below(4) })
        .collect()
}

#[test]
fn random_bad_recurrent_nodes_never_panic() {
    let mut r = Lcg(31);
    let mut imported = 0;
    for case in 0..1500 {
        let cell = [Cell::Rnn, Cell::Gru, Cell::Lstm][case % 3];
        let g = cell.gates() as u64;
        let (s, b, i, h) = (
            1 + r.below(3),
            1 + r.below(3),
            1 + r.below(3),
            1 + r.below(3),
        );
        let nd = 1 + r.below(2);
        // Mostly well-formed shapes, each one odd now and then.
        let pick = |good: Vec<u64>, r: &mut Lcg| {
            if r.below(6) == 0 { odd_shape(r) } else { good }
        };
        let shapes = [
            pick(vec![s, b, i], &mut r),
            pick(vec![nd, g * h, i], &mut r),
            pick(vec![nd, g * h, h], &mut r),
            pick(vec![nd, 2 * g * h], &mut r),
            pick(vec![b], &mut r),
            pick(vec![nd, b, h], &mut r),
            pick(vec![nd, b, h], &mut r),
            pick(vec![nd, 3 * h], &mut r),
        ];
        let names = ["X", "W", "R", "B", "L", "H0", "C0", "P"];
        let n_in = 3 + r.below(if cell == Cell::Lstm { 6 } else { 4 }) as usize;
        let mut ins = vec![];
        let (mut vi, mut data, mut inits) = (vec![], vec![], vec![]);
        for k in 0..n_in {
            if k >= 3 && r.below(3) == 0 {
                ins.push("");
                continue;
            }
            ins.push(names[k]);
            let sh = &shapes[k];
            let count: u64 = sh.iter().product();
            if k == 4 {
                let v: Vec<i64> = (0..count).map(|_| r.below(6) as i64 - 1).collect();
                if r.below(3) == 0 {
                    vi.push(value("L", common::INT64, sh));
                    data.push(Tensor {
                        ty: TensorType::new(sh.clone(), DType::I64),
                        data: Data::I64(v),
                    });
                } else {
                    inits.push(common::i64_init("L", sh, v));
                }
            } else if k == 0 || k >= 5 || r.below(4) == 0 {
                vi.push(value(names[k], FLOAT, sh));
                let d: Vec<usize> = sh.iter().map(|&x| x as usize).collect();
                data.push(f32_tensor(&d, &vec![0.5; count as usize]));
            } else {
                let d: Vec<usize> = sh.iter().map(|&x| x as usize).collect();
                inits.push(f32_init(names[k], &d, &vec![0.25; count as usize]));
            }
        }
        let mut attrs = vec![];
        if r.below(2) == 0 {
            attrs.push(int_attr("hidden_size", r.below(5) as i64 - 1));
        }
        if r.below(2) == 0 {
            let d = ["forward", "reverse", "bidirectional", "sideways"][r.below(4) as usize];
            attrs.push(str_attr("direction", d));
        }
        if r.below(3) == 0 {
            attrs.push(int_attr("layout", r.below(4) as i64 - 1));
        }
        if r.below(3) == 0 {
            let pool = ["Tanh", "relu", "Bogus", "HardSigmoid", "Elu", ""];
            let n = r.below(7);
            attrs.push(AttributeProto {
                name: "activations".into(),
                strings: (0..n)
                    .map(|_| pool[r.below(6) as usize].as_bytes().to_vec())
                    .collect(),
                r#type: 8,
                ..Default::default()
            });
        }
        if r.below(4) == 0 {
            attrs.push(AttributeProto {
                name: "clip".into(),
                f: r.below(5) as f32 - 2.0,
                r#type: 1,
                ..Default::default()
            });
        }
        if r.below(4) == 0 {
            attrs.push(int_attr("linear_before_reset", r.below(2) as i64));
            attrs.push(int_attr("input_forget", r.below(2) as i64));
        }
        let n_out = 1 + r.below(if cell == Cell::Lstm { 3 } else { 2 }) as usize;
        let outs: Vec<&str> = ["Y", "Y_h", "Y_c"][..n_out]
            .iter()
            .map(|&o| if r.below(4) == 0 { "" } else { o })
            .collect();
        let out_vi = output_infos(&outs);
        if out_vi.is_empty() {
            continue;
        }
        let m = model_with(vec![node(cell.op(), &ins, &outs, attrs)], inits, vi, out_vi);
        let res = std::panic::catch_unwind(|| {
            irc_onnx::import_model(&m, &Default::default()).map(|imp| {
                let mut all = data.clone();
                all.extend(imp.weights.iter().map(|(_, t)| t.clone()));
                let _ = run_graph(&imp.graph, all);
            })
        });
        match res {
            Ok(ok) => imported += usize::from(ok.is_ok()),
            Err(_) => panic!("case {case}: {:?} {ins:?} {shapes:?} panicked", cell),
        }
    }
    println!("{imported} of 1500 imported");
    assert!(
        imported > 30,
        "too few well-formed cases imported: {imported}"
    );
}

/// The graph outputs of a node's named outputs (an empty name is an output left out).
fn output_infos(outs: &[&str]) -> Vec<ValueInfoProto> {
    outs.iter()
        .filter(|o| !o.is_empty())
        .map(|o| ValueInfoProto {
            name: o.to_string(),
            ..Default::default()
        })
        .collect()
}
