//! `CumSum` against a running sum, in all four forms (exclusive, reversed), on axes short
//! enough to scan directly and long enough to scan in blocks (a square and a ragged split),
//! in f32 and i64, along a middle axis.

mod common;
use common::{FLOAT, INT64, int_attr, model_with, node, value};
use irc_interp::{Data, Tensor};
use irc_ir::{DType, TensorType};
use irc_onnx::proto::TensorProto;

fn reference(x: &[f64], shape: [u64; 3], exclusive: bool, reverse: bool) -> Vec<f64> {
    let [a, n, b] = shape.map(|d| d as usize);
    let mut y = vec![0.0; x.len()];
    for i in 0..a {
        for k in 0..b {
            let at = |j: usize| (i * n + j) * b + k;
            let mut acc = 0.0;
            let order: Vec<usize> = if reverse {
                (0..n).rev().collect()
            } else {
                (0..n).collect()
            };
            for j in order {
                if exclusive {
                    y[at(j)] = acc;
                    acc += x[at(j)];
                } else {
                    acc += x[at(j)];
                    y[at(j)] = acc;
                }
            }
        }
    }
    y
}

#[test]
fn cumulative_sums_match_a_running_sum() {
    let axis = TensorProto {
        dims: vec![],
        data_type: INT64,
        int64_data: vec![1],
        name: "axis".into(),
        ..Default::default()
    };
    for n in [7u64, 1024, 1025, 1089, 3000] {
        let shape = [2, n, 3];
        let count = (shape.iter().product::<u64>()) as usize;
        let ints: Vec<i64> = (0..count as i64).map(|k| (k * 7919) % 11 - 5).collect();
        for (elem, dtype) in [(FLOAT, DType::F32), (INT64, DType::I64)] {
            let x: Vec<f64> = ints
                .iter()
                .map(|&v| v as f64 * 0.5f64.powi((elem == FLOAT) as i32))
                .collect();
            for (exclusive, reverse) in [(false, false), (true, false), (false, true), (true, true)]
            {
                let m = model_with(
                    vec![node(
                        "CumSum",
                        &["x", "axis"],
                        &["y"],
                        vec![
                            int_attr("exclusive", exclusive as i64),
                            int_attr("reverse", reverse as i64),
                        ],
                    )],
                    vec![axis.clone()],
                    vec![value("x", elem, &shape)],
                    vec![value("y", elem, &shape)],
                );
                let data = match dtype {
                    DType::F32 => Data::F32(x.iter().map(|&v| v as f32).collect()),
                    _ => Data::I64(ints.clone()),
                };
                let input = Tensor::new(TensorType::new(shape.to_vec(), dtype), data).unwrap();
                let got = common::run(&m, vec![input])
                    .unwrap_or_else(|e| panic!("n {n} {dtype:?} {exclusive} {reverse}: {e}"));
                let want = reference(&x, shape, exclusive, reverse);
                assert_eq!(
                    got, want,
                    "n {n} {dtype:?} exclusive {exclusive} reverse {reverse}"
                );
            }
        }
    }
}
