//! The ops irc composes from others, against their definitions: the hyperbolic and inverse
//! trigonometric functions against Rust's `f64` ones on values from 1e-30 to 1e30 (in f32 and
//! f64, where the textbook formulas cancel or overflow), ReduceProd against a running product
//! (zeros, negatives, integers), LRN, Hardmax (ties), ReverseSequence (both axis orders),
//! Compress and TopK (ties, both orders, integers) on seeded random shapes.

mod common;
use common::{FLOAT, INT64, Lcg, int_attr, model_with, node, value};
use irc_interp::{Data, Tensor, run_graph};
use irc_ir::{DType, TensorType};
use irc_onnx::proto::{AttributeProto, TensorProto, ValueInfoProto};

const DOUBLE: i32 = 11;

/// Runs one node on graph inputs `inputs` (named `x0`, `x1`, ...) and known initializers;
/// every output's elements.
fn run_node(
    op: &str,
    inputs: &[Tensor],
    inits: Vec<TensorProto>,
    init_names: &[&str],
    attrs: Vec<AttributeProto>,
    n_out: usize,
) -> Result<Vec<Vec<f64>>, String> {
    let names: Vec<String> = (0..inputs.len()).map(|k| format!("x{k}")).collect();
    let mut ins: Vec<&str> = names.iter().map(String::as_str).collect();
    ins.extend_from_slice(init_names);
    let vi = inputs
        .iter()
        .zip(&names)
        .map(|(t, n)| {
            let elem = match t.ty.dtype {
                DType::F32 => FLOAT,
                DType::F64 => DOUBLE,
                DType::I64 => INT64,
                DType::I32 => 6,
                _ => unreachable!(),
            };
            value(n, elem, &t.ty.shape)
        })
        .collect();
    let outs: Vec<String> = (0..n_out).map(|k| format!("y{k}")).collect();
    let out_refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    let out_vi = outs
        .iter()
        .map(|o| ValueInfoProto {
            name: o.clone(),
            ..Default::default()
        })
        .collect();
    let m = model_with(vec![node(op, &ins, &out_refs, attrs)], inits, vi, out_vi);
    let imported = irc_onnx::import_model(&m, &Default::default()).map_err(|e| e.to_string())?;
    let mut all = inputs.to_vec();
    all.extend(imported.weights.iter().map(|(_, t)| t.clone()));
    let outs = run_graph(&imported.graph, all).map_err(|e| e.to_string())?;
    Ok(outs.iter().map(|t| t.data.to_f64()).collect())
}

fn tensor(shape: &[u64], dtype: DType, v: &[f64]) -> Tensor {
    Tensor {
        ty: TensorType::new(shape.to_vec(), dtype),
        data: Data::from_f64(dtype, v.to_vec()),
    }
}

fn i64_init(name: &str, shape: &[u64], v: Vec<i64>) -> TensorProto {
    common::i64_init(name, shape, v)
}

/// `got` within `rel` (relative) of `want`, NaN where `want` is, infinities equal.
fn check(got: &[f64], want: &[f64], rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (k, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= rel * w.abs() + 1e-300
        };
        assert!(ok, "{what}: element {k}: got {g:e}, expected {w:e}");
    }
}

#[test]
fn hyperbolic_and_inverse_trig_functions_keep_their_accuracy() {
    let mut xs = vec![0.0];
    for e in [-30, -12, -8, -6, -4, -3, -2, -1, 0, 1, 2, 10, 30] {
        for m in [1.0, 2.5, 4.9, 7.3] {
            let v = m * 10f64.powi(e);
            xs.push(v);
            xs.push(-v);
        }
    }
    xs.extend([
        0.49,
        0.4999,
        0.5,
        0.5001,
        0.51,
        0.99,
        0.999_999,
        1.0,
        1.000_001,
        1.01,
        88.0,
        89.0,
        300.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ]);
    xs.extend([-0.5, -0.999, -1.0, -89.0]);
    type F = fn(f64) -> f64;
    let funcs: [(&str, F); 8] = [
        ("Sinh", f64::sinh),
        ("Cosh", f64::cosh),
        ("Asinh", f64::asinh),
        ("Acosh", f64::acosh),
        ("Atanh", f64::atanh),
        ("Atan", f64::atan),
        ("Asin", f64::asin),
        ("Acos", f64::acos),
    ];
    for (op, f) in funcs {
        for (dtype, rel) in [(DType::F32, 1e-6), (DType::F64, 1e-12)] {
            // The input as the dtype holds it, and the function of that value, rounded once.
            let x: Vec<f64> = xs
                .iter()
                .map(|&v| {
                    if dtype == DType::F32 {
                        v as f32 as f64
                    } else {
                        v
                    }
                })
                .collect();
            let want: Vec<f64> = x
                .iter()
                .map(|&v| {
                    let y = f(v);
                    if dtype == DType::F32 {
                        y as f32 as f64
                    } else {
                        y
                    }
                })
                .collect();
            let t = tensor(&[x.len() as u64], dtype, &x);
            let got = run_node(op, &[t], vec![], &[], vec![], 1)
                .unwrap_or_else(|e| panic!("{op} {dtype:?}: {e}"));
            check(&got[0], &want, rel, &format!("{op} {dtype:?}"));
        }
    }
}

fn rand_shape(r: &mut Lcg, rank: usize, max: u64) -> Vec<u64> {
    (0..rank).map(|_| 1 + r.below(max)).collect()
}

/// Row-major multi-index of flat position `k`.
fn unravel(mut k: usize, shape: &[u64]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = k % shape[d] as usize;
        k /= shape[d] as usize;
    }
    idx
}

fn ravel(idx: &[usize], shape: &[u64]) -> usize {
    idx.iter()
        .zip(shape)
        .fold(0, |acc, (&i, &d)| acc * d as usize + i)
}

#[test]
fn reduce_prod_is_the_running_product() {
    let mut r = Lcg(5);
    for case in 0..120 {
        let rank = 1 + r.below(4) as usize;
        let shape = rand_shape(&mut r, rank, 5);
        let n: u64 = shape.iter().product();
        let dtype = [DType::F32, DType::I64][r.below(2) as usize];
        let x: Vec<f64> = (0..n).map(|_| r.below(7) as f64 - 3.0).collect();
        let x: Vec<f64> = if dtype == DType::F32 {
            x.iter().map(|v| v * 0.75).collect()
        } else {
            x
        };
        let reduced: Vec<bool> = (0..rank).map(|_| r.below(2) == 0).collect();
        let keep = r.below(2) == 1;
        let axes: Vec<i64> = (0..rank as i64)
            .filter(|&a| reduced[a as usize])
            .map(|a| if r.below(2) == 0 { a - rank as i64 } else { a })
            .collect();
        let out_shape: Vec<u64> = (0..rank)
            .map(|a| {
                if reduced[a] || axes.is_empty() {
                    1
                } else {
                    shape[a]
                }
            })
            .collect();
        let mut want = vec![1.0; out_shape.iter().product::<u64>() as usize];
        for k in 0..n as usize {
            let mut idx = unravel(k, &shape);
            for (a, i) in idx.iter_mut().enumerate() {
                if reduced[a] || axes.is_empty() {
                    *i = 0;
                }
            }
            want[ravel(&idx, &out_shape)] *= x[k];
        }
        let (inits, names) = if axes.is_empty() {
            (vec![], vec![])
        } else {
            (
                vec![i64_init("axes", &[axes.len() as u64], axes.clone())],
                vec!["axes"],
            )
        };
        let got = run_node(
            "ReduceProd",
            &[tensor(&shape, dtype, &x)],
            inits,
            &names,
            vec![int_attr("keepdims", keep as i64)],
            1,
        )
        .unwrap_or_else(|e| panic!("case {case}: {e}"));
        check(
            &got[0],
            &want,
            1e-6,
            &format!("case {case}: {shape:?} axes {axes:?}"),
        );
    }
}

#[test]
fn lrn_and_hardmax_match_their_definitions() {
    let mut r = Lcg(11);
    for case in 0..40 {
        let shape = vec![
            1 + r.below(2),
            1 + r.below(7),
            1 + r.below(3),
            1 + r.below(3),
        ];
        let n: u64 = shape.iter().product();
        let x: Vec<f64> = (0..n).map(|_| r.below(9) as f64 * 0.25 - 1.0).collect();
        let size = 1 + r.below(6) as i64;
        let (alpha, beta, bias) = (0.1 + r.below(5) as f64 * 0.1, 0.75, 1.5);
        let c = shape[1] as i64;
        let want: Vec<f64> = (0..n as usize)
            .map(|k| {
                let idx = unravel(k, &shape);
                let ch = idx[1] as i64;
                let lo = (ch - (size - 1) / 2).max(0);
                let hi = (ch + size - 1 - (size - 1) / 2).min(c - 1);
                let sq: f64 = (lo..=hi)
                    .map(|j| {
                        let mut i2 = idx.clone();
                        i2[1] = j as usize;
                        x[ravel(&i2, &shape)].powi(2)
                    })
                    .sum();
                x[k] / (bias + alpha / size as f64 * sq).powf(beta)
            })
            .collect();
        let f = |name: &str, v: f64| AttributeProto {
            name: name.into(),
            f: v as f32,
            r#type: 1,
            ..Default::default()
        };
        let attrs = vec![
            int_attr("size", size),
            f("alpha", alpha),
            f("beta", beta),
            f("bias", bias),
        ];
        let got = run_node(
            "LRN",
            &[tensor(&shape, DType::F32, &x)],
            vec![],
            &[],
            attrs,
            1,
        )
        .unwrap_or_else(|e| panic!("LRN case {case}: {e}"));
        check(
            &got[0],
            &want,
            1e-5,
            &format!("LRN case {case}: {shape:?} size {size}"),
        );

        // Hardmax along a random axis: 1 at the first maximum (the values repeat often).
        let a = r.below(4) as usize;
        let want: Vec<f64> = (0..n as usize)
            .map(|k| {
                let idx = unravel(k, &shape);
                let along = |j: usize| {
                    let mut i2 = idx.clone();
                    i2[a] = j;
                    x[ravel(&i2, &shape)]
                };
                let m = (0..shape[a] as usize).map(along).fold(f64::MIN, f64::max);
                let first = (0..shape[a] as usize).find(|&j| along(j) == m).unwrap();
                (first == idx[a]) as u8 as f64
            })
            .collect();
        let got = run_node(
            "Hardmax",
            &[tensor(&shape, DType::F32, &x)],
            vec![],
            &[],
            vec![int_attr("axis", a as i64 - 4 * r.below(2) as i64)],
            1,
        )
        .unwrap_or_else(|e| panic!("Hardmax case {case}: {e}"));
        check(
            &got[0],
            &want,
            0.0,
            &format!("Hardmax case {case}: axis {a}"),
        );
    }
}

#[test]
fn reverse_sequence_and_compress_pick_the_right_elements() {
    let mut r = Lcg(3);
    for case in 0..60 {
        let (t, b, f) = (1 + r.below(5), 1 + r.below(4), 1 + r.below(3));
        let time_first = r.below(2) == 0;
        let shape = if time_first {
            vec![t, b, f]
        } else {
            vec![b, t, f]
        };
        let n: u64 = shape.iter().product();
        let x: Vec<f64> = (0..n).map(|k| k as f64).collect();
        let lens: Vec<i64> = (0..b).map(|_| r.below(t + 1) as i64).collect();
        let want: Vec<f64> = (0..n as usize)
            .map(|k| {
                let mut idx = unravel(k, &shape);
                let (ti, bi) = if time_first { (0, 1) } else { (1, 0) };
                let l = lens[idx[bi]] as usize;
                if idx[ti] < l {
                    idx[ti] = l - 1 - idx[ti];
                }
                x[ravel(&idx, &shape)]
            })
            .collect();
        let attrs = vec![
            int_attr("time_axis", !time_first as i64),
            int_attr("batch_axis", time_first as i64),
        ];
        let got = run_node(
            "ReverseSequence",
            &[tensor(&shape, DType::F32, &x)],
            vec![i64_init("lens", &[b], lens.clone())],
            &["lens"],
            attrs,
            1,
        )
        .unwrap_or_else(|e| panic!("ReverseSequence case {case}: {e}"));
        check(
            &got[0],
            &want,
            0.0,
            &format!("ReverseSequence {shape:?} {lens:?}"),
        );

        // Compress along an axis, or of the flattened input.
        let with_axis = r.below(3) != 0;
        let a = r.below(3) as usize;
        let len = if with_axis { shape[a] } else { n } as usize;
        let cond_len = 1 + r.below(len as u64) as usize;
        let mut cond: Vec<bool> = (0..cond_len).map(|_| r.below(2) == 0).collect();
        cond[r.below(cond_len as u64) as usize] = true;
        let want: Vec<f64> = if with_axis {
            (0..n as usize)
                .filter(|&k| cond.get(unravel(k, &shape)[a]).copied().unwrap_or(false))
                .map(|k| x[k])
                .collect()
        } else {
            (0..cond_len).filter(|&k| cond[k]).map(|k| x[k]).collect()
        };
        let cond_init = TensorProto {
            dims: vec![cond_len as i64],
            data_type: 9,
            int32_data: cond.iter().map(|&c| c as i32).collect(),
            name: "cond".into(),
            ..Default::default()
        };
        let attrs = if with_axis {
            vec![int_attr("axis", a as i64)]
        } else {
            vec![]
        };
        let got = run_node(
            "Compress",
            &[tensor(&shape, DType::F32, &x)],
            vec![cond_init],
            &["cond"],
            attrs,
            1,
        )
        .unwrap_or_else(|e| panic!("Compress case {case}: {e}"));
        // The picked slices keep the row-major order of the others (the indices ascend).
        let what = format!("Compress {shape:?} {cond:?} axis {a} {with_axis}");
        check(&got[0], &want, 0.0, &what);
    }
}

#[test]
fn top_k_matches_a_stable_sort() {
    let mut r = Lcg(17);
    for case in 0..120 {
        let rank = 1 + r.below(3) as usize;
        let shape = rand_shape(&mut r, rank, 6);
        let n: u64 = shape.iter().product();
        let dtype = [DType::F32, DType::I64, DType::I32][r.below(3) as usize];
        let x: Vec<f64> = (0..n).map(|_| r.below(7) as f64 - 3.0).collect();
        let a = r.below(rank as u64) as usize;
        let k = 1 + r.below(shape[a]) as usize;
        let largest = r.below(2) == 0;
        let mut out = shape.clone();
        out[a] = k as u64;
        let m: usize = out.iter().product::<u64>() as usize;
        let (mut vals, mut idxs) = (vec![0.0; m], vec![0.0; m]);
        for o in 0..m {
            let idx = unravel(o, &out);
            let mut order: Vec<usize> = (0..shape[a] as usize).collect();
            let at = |j: usize| {
                let mut i2 = idx.clone();
                i2[a] = j;
                x[ravel(&i2, &shape)]
            };
            // A stable sort: equal values keep the lower index first.
            order.sort_by(|&p, &q| {
                let c = at(p).total_cmp(&at(q));
                if largest { c.reverse() } else { c }
            });
            vals[o] = at(order[idx[a]]);
            idxs[o] = order[idx[a]] as f64;
        }
        let attrs = vec![
            int_attr("axis", a as i64),
            int_attr("largest", largest as i64),
        ];
        let got = run_node(
            "TopK",
            &[tensor(&shape, dtype, &x)],
            vec![i64_init("k", &[1], vec![k as i64])],
            &["k"],
            attrs,
            2,
        )
        .unwrap_or_else(|e| panic!("TopK case {case}: {e}"));
        let what = format!("TopK case {case}: {shape:?} axis {a} k {k} largest {largest}");
        check(&got[0], &vals, 0.0, &format!("{what}: values"));
        check(&got[1], &idxs, 0.0, &format!("{what}: indices"));
    }
}

/// A shape of rank 0 to 4, dims 1 to 3 (0 one time in ten).
fn odd_shape(r: &mut Lcg) -> Vec<u64> {
    let rank = r.below(5) as usize;
    (0..rank)
        .map(|_| if r.below(10) == 0 { 0 } else { 1 + r.below(3) })
        .collect()
}

#[test]
fn random_attributes_and_shapes_never_panic() {
    let mut r = Lcg(23);
    let ops = [
        "LRN",
        "Hardmax",
        "ReduceProd",
        "ReverseSequence",
        "Compress",
        "TopK",
        "Sinh",
        "Acosh",
        "Atan",
    ];
    for case in 0..3000 {
        let op = ops[case % ops.len()];
        let xs = odd_shape(&mut r);
        let is = odd_shape(&mut r);
        let n_i: u64 = is.iter().product();
        let ints: Vec<i64> = (0..n_i).map(|_| r.below(9) as i64 - 4).collect();
        let mut attrs = vec![];
        for name in [
            "axis",
            "size",
            "time_axis",
            "batch_axis",
            "largest",
            "keepdims",
        ] {
            if r.below(3) == 0 {
                attrs.push(int_attr(name, r.below(9) as i64 - 4));
            }
        }
        if r.below(4) == 0 {
            attrs.push(int_attr("noop_with_empty_axes", 1));
        }
        let x_count: u64 = xs.iter().product();
        let x = Tensor {
            ty: TensorType::new(xs.clone(), DType::F32),
            data: Data::F32(vec![0.5; x_count as usize]),
        };
        let (inits, names): (Vec<TensorProto>, Vec<&str>) = if r.below(4) == 0 || op == "LRN" {
            (vec![], vec![])
        } else if op == "Compress" && r.below(2) == 0 {
            let cond = TensorProto {
                dims: is.iter().map(|&d| d as i64).collect(),
                data_type: 9,
                int32_data: ints.iter().map(|&v| (v > 0) as i32).collect(),
                name: "i".into(),
                ..Default::default()
            };
            (vec![cond], vec!["i"])
        } else {
            (vec![i64_init("i", &is, ints.clone())], vec!["i"])
        };
        let n_out = if op == "TopK" { 2 } else { 1 };
        let res = std::panic::catch_unwind(|| run_node(op, &[x], inits, &names, attrs, n_out));
        assert!(
            res.is_ok(),
            "case {case}: {op} of {xs:?} with {is:?} {ints:?} panicked"
        );
    }
}

#[test]
fn rotary_embedding_matches_its_definition() {
    let mut r = Lcg(41);
    for case in 0..60 {
        let (b, s, heads) = (1 + r.below(2), 1 + r.below(4), 1 + r.below(3));
        let d = 2 * (1 + r.below(4));
        let rot = if r.below(2) == 0 {
            d
        } else {
            2 * (1 + r.below(d / 2))
        };
        let half = (rot / 2) as usize;
        let three_d = r.below(2) == 0;
        let interleaved = r.below(2) == 0;
        let with_pos = r.below(2) == 0;
        let max_pos = 6;
        // x as [B, heads, S, D] (4-D) or [B, S, heads, D] (3-D, heads · D merged).
        let shape: Vec<u64> = if three_d {
            vec![b, s, heads * d]
        } else {
            vec![b, heads, s, d]
        };
        let n: u64 = shape.iter().product();
        let x: Vec<f64> = (0..n).map(|_| r.below(17) as f64 * 0.125 - 1.0).collect();
        let pos: Vec<i64> = (0..b * s).map(|_| r.below(max_pos) as i64).collect();
        let rows = if with_pos { max_pos } else { b * s };
        let cos: Vec<f64> = (0..rows * half as u64)
            .map(|k| (k as f64 * 0.37).cos())
            .collect();
        let sin: Vec<f64> = (0..rows * half as u64)
            .map(|k| (k as f64 * 0.37).sin())
            .collect();
        let at = |bi: u64, si: u64, hi: u64, j: u64| -> usize {
            if three_d {
                (((bi * s + si) * heads + hi) * d + j) as usize
            } else {
                (((bi * heads + hi) * s + si) * d + j) as usize
            }
        };
        let mut want = x.clone();
        for bi in 0..b {
            for si in 0..s {
                let row = if with_pos {
                    pos[(bi * s + si) as usize] as usize
                } else {
                    (bi * s + si) as usize
                };
                for hi in 0..heads {
                    for k in 0..half {
                        let (c, sn) = (cos[row * half + k], sin[row * half + k]);
                        let (i1, i2) = if interleaved {
                            (2 * k as u64, 2 * k as u64 + 1)
                        } else {
                            (k as u64, (k + half) as u64)
                        };
                        let (x1, x2) = (x[at(bi, si, hi, i1)], x[at(bi, si, hi, i2)]);
                        want[at(bi, si, hi, i1)] = c * x1 - sn * x2;
                        want[at(bi, si, hi, i2)] = sn * x1 + c * x2;
                    }
                }
            }
        }
        let cache_shape: Vec<u64> = if with_pos {
            vec![max_pos, half as u64]
        } else {
            vec![b, s, half as u64]
        };
        let mut inputs = vec![
            tensor(&shape, DType::F32, &x),
            tensor(&cache_shape, DType::F32, &cos),
            tensor(&cache_shape, DType::F32, &sin),
        ];
        if with_pos {
            inputs.push(Tensor {
                ty: TensorType::new(vec![b, s], DType::I64),
                data: Data::I64(pos.clone()),
            });
        }
        let mut attrs = vec![
            int_attr("interleaved", interleaved as i64),
            int_attr(
                "rotary_embedding_dim",
                if rot == d && r.below(2) == 0 {
                    0
                } else {
                    rot as i64
                },
            ),
        ];
        if three_d {
            attrs.push(int_attr("num_heads", heads as i64));
        }
        let what =
            format!("case {case}: {shape:?} rot {rot} interleaved {interleaved} pos {with_pos}");
        let got = run_node("RotaryEmbedding", &inputs, vec![], &[], attrs, 1)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(got[0].len(), want.len(), "{what}");
        // f32 products and sums: within a few units of the larger terms.
        for (k, (g, w)) in got[0].iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-6 * (1.0 + w.abs()),
                "{what}: element {k}: {g} vs {w}"
            );
        }
    }
}

/// LRN and RotaryEmbedding take float inputs only (ONNX's types): an integer input is an error,
/// not an LRN whose `alpha / size` truncated to 0.
#[test]
fn integer_lrn_and_rotary_inputs_are_errors() {
    let x = tensor(&[1, 4, 2, 2], DType::I32, &[1.0; 16]);
    let e = run_node("LRN", &[x], vec![], &[], vec![int_attr("size", 3)], 1);
    assert!(
        e.as_ref()
            .is_err_and(|e| e.contains("LRN of i32 is not supported")),
        "{e:?}"
    );
    let x = tensor(&[1, 1, 2, 4], DType::I32, &[1.0; 8]);
    let cache = tensor(&[2, 2], DType::I32, &[1.0; 4]);
    let e = run_node(
        "RotaryEmbedding",
        &[x, cache.clone(), cache],
        vec![],
        &[],
        vec![],
        1,
    );
    assert!(
        e.as_ref()
            .is_err_and(|e| e.contains("RotaryEmbedding of i32 is not supported")),
        "{e:?}"
    );
}
