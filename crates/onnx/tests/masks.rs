//! What exporters fold into initializers and irc writes back as index arithmetic: an `arange`
//! of positions (`[1, 1, 1, S]` key indices, `[1, 1, S, 1]` query indices) and a boolean band
//! (a causal mask `[1, 1, S, S]`) become `iota`s and comparisons, not weights, and compute the
//! same values; a tensor that is neither stays a weight.

mod common;
use common::{FLOAT, f32s, i64_init, model_with, node, value};
use irc_onnx::proto::TensorProto;

const S: u64 = 6;

fn bools(name: &str, dims: &[u64], v: Vec<bool>) -> TensorProto {
    TensorProto {
        dims: dims.iter().map(|&d| d as i64).collect(),
        data_type: 9,
        int32_data: v.into_iter().map(i32::from).collect(),
        name: name.into(),
        ..Default::default()
    }
}

/// `where(mask, x, -1)` of a `[1, 1, S, S]` input through the model's mask nodes; the import's
/// weights and the result.
fn run(nodes: Vec<irc_onnx::proto::NodeProto>, inits: Vec<TensorProto>) -> (Vec<String>, Vec<f64>) {
    let mut nodes = nodes;
    nodes.push(node("Where", &["mask", "x", "minus"], &["y"], vec![]));
    let mut inits = inits;
    inits.push(TensorProto {
        dims: vec![],
        data_type: FLOAT,
        float_data: vec![-1.0],
        name: "minus".into(),
        ..Default::default()
    });
    let shape = [1, 1, S, S];
    let m = model_with(
        nodes,
        inits,
        vec![value("x", FLOAT, &shape)],
        vec![value("y", FLOAT, &shape)],
    );
    let imported = irc_onnx::import_model(&m, &Default::default()).expect("imports");
    let weights = imported.weights.iter().map(|(n, _)| n.clone()).collect();
    let x: Vec<f32> = (0..S * S).map(|v| v as f32).collect();
    (
        weights,
        common::run(&m, vec![f32s(&shape, x)]).expect("runs"),
    )
}

/// `x` where `lo <= i - j <= hi`, else -1.
fn want(lo: i64, hi: i64) -> Vec<f64> {
    let s = S as i64;
    (0..s * s)
        .map(|k| {
            let (i, j) = (k / s, k % s);
            if lo <= i - j && i - j <= hi {
                k as f64
            } else {
                -1.0
            }
        })
        .collect()
}

#[test]
fn folded_positions_become_iotas() {
    // q_idx >= kv_idx with both folded to aranges (as the dynamo exporter writes a causal
    // mask over long sequences), the key positions counted from 3 by 2 and shifted back.
    let kv: Vec<i64> = (0..S as i64).map(|j| 3 + 2 * j).collect();
    let q: Vec<i64> = (0..S as i64).collect();
    let nodes = vec![
        node("Mul", &["q", "two"], &["q2"], vec![]),
        node("Add", &["q2", "three"], &["q3"], vec![]),
        node("LessOrEqual", &["kv", "q3"], &["mask"], vec![]),
    ];
    let inits = vec![
        i64_init("kv", &[1, 1, 1, S], kv),
        i64_init("q", &[1, 1, S, 1], q),
        i64_init("two", &[], vec![2]),
        i64_init("three", &[], vec![3]),
    ];
    let (weights, got) = run(nodes, inits);
    assert!(weights.iter().all(|w| w != "kv" && w != "q"), "{weights:?}");
    assert_eq!(got, want(0, S as i64));
}

#[test]
fn a_folded_band_becomes_comparisons() {
    // A causal window of three keys: 0 <= i - j <= 2.
    let s = S as i64;
    let band: Vec<bool> = (0..s * s)
        .map(|k| (0..=2).contains(&(k / s - k % s)))
        .collect();
    let (weights, got) = run(
        vec![node("Identity", &["band"], &["mask"], vec![])],
        vec![bools("band", &[1, 1, S, S], band)],
    );
    assert!(!weights.contains(&"band".to_string()), "{weights:?}");
    assert_eq!(got, want(0, 2));
    // Not a band (one hole): a weight as before.
    let holed: Vec<bool> = (0..s * s).map(|k| k % s <= k / s && k != 7).collect();
    let (weights, got) = run(
        vec![node("Identity", &["band"], &["mask"], vec![])],
        vec![bools("band", &[1, 1, S, S], holed.clone())],
    );
    assert!(weights.contains(&"band".to_string()), "{weights:?}");
    let expect: Vec<f64> = (0..S * S)
        .map(|k| if holed[k as usize] { k as f64 } else { -1.0 })
        .collect();
    assert_eq!(got, expect);
}
