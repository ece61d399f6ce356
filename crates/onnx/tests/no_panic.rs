//! The indexing and attention handlers never panic: seeded random nodes of GatherND,
//! ScatterND, ScatterElements, NonZero, Attention, Slice and ConstantOfShape — odd ranks,
//! zero and mismatched dims, out-of-range attributes and indices, inputs known at import or
//! not — either import (and then run on the interpreter, which may refuse them) or are an
//! import error; none unwinds. (It found a Slice of a known tensor with more starts than dims
//! indexing past the shape.)

mod common;
use common::{FLOAT, INT64, Lcg, i64_init, int_attr, model_with, node, str_attr, value};
use irc_interp::{Data, Tensor};
use irc_ir::{DType, TensorType};

/// A shape of rank 1 to 4, dims 1 to 3 (0 one time in eight).
fn shape(r: &mut Lcg) -> Vec<u64> {
    let rank = 1 + r.below(4) as usize;
    (0..rank)
        .map(|_| if r.below(8) == 0 { 0 } else { 1 + r.below(3) })
        .collect()
}

fn zeros(shape: &[u64], dtype: DType) -> Tensor {
    let n: u64 = shape.iter().product();
    Tensor {
        ty: TensorType::new(shape.to_vec(), dtype),
        data: Data::from_f64(dtype, vec![0.0; n as usize]),
    }
}

/// Imports the model and runs it on `inputs` and its weights: whether it imported, or `None`
/// where either step panicked.
fn import_and_run(m: &[u8], inputs: &[Tensor]) -> Option<bool> {
    std::panic::catch_unwind(|| {
        irc_onnx::import_model(m, &Default::default()).map(|imp| {
            let mut ins = inputs.to_vec();
            ins.extend(imp.weights.iter().map(|(_, t)| t.clone()));
            let _ = irc_interp::run_graph(&imp.graph, ins);
        })
    })
    .ok()
    .map(|r| r.is_ok())
}

#[test]
fn random_indexing_and_attention_nodes_never_panic() {
    let mut r = Lcg(99);
    let ops = [
        "GatherND",
        "ScatterND",
        "ScatterElements",
        "NonZero",
        "Attention",
        "Slice",
        "ConstantOfShape",
    ];
    let mut imported = 0;
    for case in 0..4000 {
        let op = ops[case % ops.len()];
        let xs = shape(&mut r);
        let is = shape(&mut r);
        let n_i: u64 = is.iter().product();
        let idx: Vec<i64> = (0..n_i).map(|_| r.below(9) as i64 - 4).collect();
        let known = r.below(2) == 0;
        let mut attrs = vec![];
        let (ins, n_out): (Vec<&str>, usize) = match op {
            "GatherND" => {
                attrs.push(int_attr("batch_dims", r.below(4) as i64 - 1));
                (vec!["x", "i"], 1)
            }
            "ScatterND" | "ScatterElements" => {
                let red = ["none", "add", "mul", "max", "min", "bad"][r.below(6) as usize];
                attrs.push(str_attr("reduction", red));
                attrs.push(int_attr("axis", r.below(6) as i64 - 3));
                (vec!["x", "i", "u"], 1)
            }
            "NonZero" => (vec!["i"], 1),
            "Attention" => {
                attrs.push(int_attr("is_causal", r.below(2) as i64));
                attrs.push(int_attr("q_num_heads", r.below(3) as i64));
                attrs.push(int_attr("kv_num_heads", r.below(3) as i64));
                if r.below(2) == 0 {
                    attrs.push(int_attr("left_window_size", r.below(4) as i64 - 1));
                }
                (vec!["x", "x", "x", "m"], 1 + r.below(4) as usize)
            }
            "Slice" => (vec!["x", "i", "i"], 1),
            _ => (vec!["i"], 1),
        };
        let outs: Vec<String> = (0..n_out).map(|k| format!("y{k}")).collect();
        let out_refs: Vec<&str> = outs.iter().map(String::as_str).collect();
        let nodes = vec![node(op, &ins, &out_refs, attrs)];
        let mut inputs_vi = vec![value("x", FLOAT, &xs)];
        let mut inputs = vec![zeros(&xs, DType::F32)];
        let mut inits = vec![];
        if ins.contains(&"i") {
            if known {
                inits.push(i64_init("i", &is, idx.clone()));
            } else {
                inputs_vi.push(value("i", INT64, &is));
                inputs.push(Tensor {
                    ty: TensorType::new(is.clone(), DType::I64),
                    data: Data::I64(idx.clone()),
                });
            }
        }
        if ins.contains(&"u") {
            inputs_vi.push(value("u", FLOAT, &is));
            inputs.push(zeros(&is, DType::F32));
        }
        if ins.contains(&"m") {
            let ms = shape(&mut r);
            inputs_vi.push(value("m", 9, &ms));
            inputs.push(zeros(&ms, DType::I1));
        }
        if !ins.contains(&"x") {
            inputs_vi.remove(0);
            inputs.remove(0);
        }
        // Outputs by name alone (their types are what the import computes).
        let outs_vi: Vec<_> = outs
            .iter()
            .map(|o| irc_onnx::proto::ValueInfoProto {
                name: o.clone(),
                ..Default::default()
            })
            .collect();
        let m = model_with(nodes, inits, inputs_vi, outs_vi);
        match import_and_run(&m, &inputs) {
            Some(ok) => imported += usize::from(ok),
            None => panic!("case {case}: {op} of {xs:?} by {is:?} (known {known}) panicked"),
        }
    }
    println!("{imported} of 4000 imported and ran");
}

/// Every op of the table, with default attributes and one to four inputs, each a float
/// input, a known integer list or a run-time integer tensor of random shape: an import, a run
/// or an error, never a panic.
#[test]
fn every_op_with_random_inputs_never_panics() {
    let mut imported = 0;
    for round in 0..200 {
        let mut r = Lcg(round);
        for op in irc_onnx::ops::OPS {
            let n_in = 1 + r.below(4) as usize;
            let names: Vec<String> = (0..n_in).map(|k| format!("in{k}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let mut inputs_vi = vec![];
            let mut inputs = vec![];
            let mut inits = vec![];
            for name in &names {
                let s = shape(&mut r);
                match r.below(3) {
                    0 => {
                        inputs_vi.push(value(name, FLOAT, &s));
                        inputs.push(zeros(&s, DType::F32));
                    }
                    1 => {
                        let n = 1 + r.below(4);
                        let v = (0..n).map(|_| r.below(7) as i64 - 2).collect();
                        inits.push(i64_init(name, &[n], v));
                    }
                    _ => {
                        inputs_vi.push(value(name, INT64, &s));
                        inputs.push(zeros(&s, DType::I64));
                    }
                }
            }
            let out = irc_onnx::proto::ValueInfoProto {
                name: "y".into(),
                ..Default::default()
            };
            let m = model_with(
                vec![node(op.name, &refs, &["y"], vec![])],
                inits,
                inputs_vi,
                vec![out],
            );
            match import_and_run(&m, &inputs) {
                Some(ok) => imported += usize::from(ok),
                None => panic!("round {round}: {} with {n_in} inputs panicked", op.name),
            }
        }
    }
    println!("{imported} imported and ran");
}
