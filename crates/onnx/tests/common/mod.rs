//! Small ONNX models built in Rust (the `irc_onnx::proto` messages), imported and run on the
//! reference interpreter.

#![allow(dead_code)] // each test file uses its own subset
use irc_interp::{Data, Tensor, run_graph};
use irc_ir::{DType, TensorType};
use irc_onnx::proto::{
    AttributeProto, DimValue, Dimension, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    TensorProto, TensorShapeProto, TypeProto, TypeProtoTensor, ValueInfoProto,
};
use prost::Message;

pub const FLOAT: i32 = 1;
pub const INT64: i32 = 7;

/// A graph input or output of a static shape.
pub fn value(name: &str, elem: i32, shape: &[u64]) -> ValueInfoProto {
    let dim = shape
        .iter()
        .map(|&d| Dimension {
            value: Some(DimValue::DimValue(d as i64)),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: elem,
                shape: Some(TensorShapeProto { dim }),
            }),
            ..Default::default()
        }),
    }
}

/// An integer attribute.
pub fn int_attr(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        i,
        r#type: 2,
        ..Default::default()
    }
}

/// An integer-list attribute.
pub fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        ints: v.to_vec(),
        r#type: 7,
        ..Default::default()
    }
}

/// A string attribute.
pub fn str_attr(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        s: v.as_bytes().to_vec(),
        r#type: 3,
        ..Default::default()
    }
}

/// A tensor attribute.
pub fn tensor_attr(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        t: Some(t),
        r#type: 4,
        ..Default::default()
    }
}

pub fn node(op: &str, ins: &[&str], outs: &[&str], attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        op_type: op.into(),
        attribute,
        ..Default::default()
    }
}

/// An opset-17 model of these nodes.
pub fn model(
    nodes: Vec<NodeProto>,
    input: Vec<ValueInfoProto>,
    output: Vec<ValueInfoProto>,
) -> Vec<u8> {
    model_with(nodes, vec![], input, output)
}

/// An opset-17 model of these nodes and initializers.
pub fn model_with(
    nodes: Vec<NodeProto>,
    initializer: Vec<TensorProto>,
    input: Vec<ValueInfoProto>,
    output: Vec<ValueInfoProto>,
) -> Vec<u8> {
    let graph = GraphProto {
        node: nodes,
        name: "test".into(),
        initializer,
        input,
        output,
        ..Default::default()
    };
    ModelProto {
        ir_version: 10,
        graph: Some(graph),
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        ..Default::default()
    }
    .encode_to_vec()
}

pub fn f32s(shape: &[u64], v: Vec<f32>) -> Tensor {
    Tensor {
        ty: TensorType::new(shape.to_vec(), DType::F32),
        data: Data::F32(v),
    }
}

pub fn i64s(shape: &[u64], v: Vec<i64>) -> Tensor {
    Tensor {
        ty: TensorType::new(shape.to_vec(), DType::I64),
        data: Data::I64(v),
    }
}

/// Imports the model and runs it on `inputs` (the weights the import made are appended);
/// the first result's elements, as f64.
pub fn run(bytes: &[u8], mut inputs: Vec<Tensor>) -> Result<Vec<f64>, String> {
    let imported = irc_onnx::import_model(bytes, &Default::default()).map_err(|e| e.to_string())?;
    inputs.extend(imported.weights.iter().map(|(_, t)| t.clone()));
    let outs = run_graph(&imported.graph, inputs).map_err(|e| e.to_string())?;
    Ok(outs[0].data.to_f64())
}

/// `n` small values in a repeating pattern (multiples of 1/8 in [-1, 1)), offset by `seed`.
pub fn pattern(n: u64, seed: u64) -> Vec<f32> {
    (0..n)
        .map(|k| ((k * 37 + seed) % 17) as f32 * 0.125 - 1.0)
        .collect()
}

/// Every element of `got` within 1e-4 (relative, plus absolute at zero) of `want`.
pub fn assert_near(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
            "{what}: element {k}: {g} vs {w}"
        );
    }
}

/// A small linear congruential generator: the cases are the same on every run.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Row-major strides of `shape`.
pub fn strides(shape: &[u64]) -> Vec<u64> {
    let mut st = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        st[d] = st[d + 1] * shape[d + 1];
    }
    st
}

/// An i64 initializer.
pub fn i64_init(name: &str, dims: &[u64], v: Vec<i64>) -> TensorProto {
    TensorProto {
        dims: dims.iter().map(|&d| d as i64).collect(),
        data_type: INT64,
        int64_data: v,
        name: name.into(),
        ..Default::default()
    }
}

/// The model's bytes with its ai.onnx opset set to `version`.
pub fn with_opset(bytes: &[u8], version: i64) -> Vec<u8> {
    let mut m = ModelProto::decode(bytes).expect("a model");
    for o in &mut m.opset_import {
        o.version = version;
    }
    m.encode_to_vec()
}
