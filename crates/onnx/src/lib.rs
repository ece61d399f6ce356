//! The ONNX importer: an ONNX model (protobuf bytes) in, a verified irc [`Graph`] and its
//! weights out.
//!
//! - [`proto`]: the ONNX schema's messages the importer reads (prost derive, the schema's
//!   field numbers);
//! - [`ops`]: the one table of supported ONNX ops, each mapped to irc ops or a decomposition;
//! - [`import_model`]: decodes, checks the opset, fixes dynamic dims from [`Options::dims`],
//!   and walks the nodes in order, building the graph with [`irc_ir::GraphBuilder`];
//! - [`weights`]: the side file (safetensors) the weights travel in;
//! - [`ExternalData`]: where the bytes of tensors stored outside the model (models over 2 GB)
//!   come from: the caller reads them, the importer decodes them.
//!
//! # Values, constants and weights
//!
//! Every ONNX value is either computed (an irc value) or known at import time (a host tensor:
//! initializers, `Constant` nodes, `Shape` of a static shape, and any op whose operands are all
//! known and whose result is small, which the importer folds by running the reference
//! interpreter on it). Known tensors stay on the host until a computed op reads one: then a
//! small one (an initializer's scalar, or at most [`Options::inline_limit`] elements of what
//! the model computes or writes as a `Constant` node) is written into the graph as a
//! `constant`, and any other becomes a graph **parameter** named after the initializer,
//! after the model's own inputs; [`Imported::weights`] holds its value by that name. Shape
//! inputs (`Reshape`'s shape, `Slice`'s starts, ...) must be known: irc shapes are static.
//!
//! Architecture Invariant: no IO (bytes in, graph and bytes out; external tensor data comes
//! through the caller's [`Options::external`]) and no panic on any input: every failure is an
//! [`ImportError`] naming the node, its op and the opset, or the input, initializer or output.

mod ctx;
mod external;
pub mod ops;
pub mod proto;
mod tensor;
pub mod weights;

pub use external::{ExternalData, ExternalRef};
pub use tensor::decode_tensor;

use ctx::{Ctx, Val};
use irc_interp::Tensor;
use irc_ir::Graph;
use prost::Message;
use std::collections::BTreeMap;

/// The oldest and newest `ai.onnx` opset versions the importer accepts.
pub const MIN_OPSET: i64 = 13;
pub const MAX_OPSET: i64 = 28;

/// How to import.
#[derive(Clone, Debug)]
pub struct Options {
    /// Sizes for named dynamic dims (`--dim batch=16`).
    pub dims: BTreeMap<String, u64>,
    /// Known tensors with at most this many elements that are no initializer (those are
    /// weights, but scalars) are inlined as `constant`s; larger ones become weight parameters.
    pub inline_limit: u64,
    /// The graph's name (`@name`); default the ONNX graph's name.
    pub name: Option<String>,
    /// Values of graph inputs fixed at import time, by ONNX name: such an input is no
    /// parameter but a known tensor (for inputs that decide shapes, such as `Reshape`'s shape
    /// or a reduction's axes fed as graph inputs).
    pub known: BTreeMap<String, Tensor>,
    /// Reads the bytes of tensors stored outside the model (`data_location` EXTERNAL); without
    /// it such a model is an error naming the tensor and its file.
    pub external: Option<ExternalData>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            dims: BTreeMap::new(),
            inline_limit: 64,
            name: None,
            known: BTreeMap::new(),
            external: None,
        }
    }
}

/// An imported model.
#[derive(Clone, Debug)]
pub struct Imported {
    /// The graph: the model's inputs first, then one parameter per weight.
    pub graph: Graph,
    /// The value of each weight parameter, by parameter name, in parameter order.
    pub weights: Vec<(String, Tensor)>,
    /// The `ai.onnx` opset the model declares.
    pub opset: i64,
}

impl Imported {
    /// How many of the graph's parameters are the model's own inputs (the rest are weights).
    pub fn num_inputs(&self) -> usize {
        self.graph.params.len() - self.weights.len()
    }
}

/// Why a model could not be imported.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ImportError {
    /// The bytes are not an ONNX protobuf (truncated, corrupt, not ONNX at all).
    #[error("not a valid ONNX model: {0}")]
    Decode(String),
    /// The model as a whole: no graph, an unsupported opset or domain.
    #[error("{0}")]
    Model(String),
    /// A graph input or output.
    #[error("graph {what} '{name}': {message}")]
    Value {
        what: &'static str,
        name: String,
        message: String,
    },
    /// One node (its index in the graph, and its name when it has one).
    #[error("node #{index}{} ({op}, opset {opset}): {message}", quoted(.name))]
    Node {
        index: usize,
        name: String,
        op: String,
        opset: i64,
        message: String,
    },
}

/// ` 'name'`, or nothing for an unnamed node.
fn quoted(name: &str) -> String {
    if name.is_empty() {
        String::new()
    } else {
        format!(" '{name}'")
    }
}

/// Imports an ONNX model from its protobuf bytes.
pub fn import_model(bytes: &[u8], opts: &Options) -> Result<Imported, ImportError> {
    let model = proto::ModelProto::decode(bytes).map_err(|e| ImportError::Decode(e.to_string()))?;
    let opset = model_opset(&model)?;
    let graph = model.graph.as_ref().ok_or_else(|| {
        ImportError::Model("the model has no graph (ModelProto.graph is empty)".into())
    })?;
    let name = opts.name.clone().unwrap_or_else(|| {
        let n = ctx::sanitize(&graph.name);
        if n.is_empty() { "model".into() } else { n }
    });
    let mut cx = Ctx::new(&name, opset, opts);
    for init in &graph.initializer {
        let t = decode_initializer(init, opts.external.as_ref())?;
        cx.define_known(&init.name, t);
    }
    for input in &graph.input {
        if cx.is_defined(&input.name) {
            continue; // an initializer listed as an input too (IR version < 4): a weight.
        }
        if let Some(t) = opts.known.get(&input.name) {
            cx.define_known(&input.name, t.clone());
            continue;
        }
        let ty = tensor::value_type(input, &opts.dims).map_err(|message| ImportError::Value {
            what: "input",
            name: input.name.clone(),
            message,
        })?;
        cx.define_input(&input.name, ty);
    }
    for (index, node) in graph.node.iter().enumerate() {
        let err = |message: String| ImportError::Node {
            index,
            name: node.name.clone(),
            op: node.op_type.clone(),
            opset,
            message,
        };
        if !(node.domain.is_empty() || node.domain == "ai.onnx") {
            return Err(err(format!(
                "domain '{}' is not supported (only the default ai.onnx domain is)",
                node.domain
            )));
        }
        let inputs = node
            .input
            .iter()
            .map(|n| {
                if n.is_empty() {
                    Ok(None)
                } else {
                    cx.lookup(n)
                        .map(Some)
                        .ok_or_else(|| err(format!("input '{n}' is not defined before this node")))
                }
            })
            .collect::<Result<Vec<Option<Val>>, _>>()?;
        let outs = ops::import_node(&mut cx, index, node, inputs).map_err(err)?;
        for (name, v) in node.output.iter().zip(outs) {
            if !name.is_empty() {
                cx.define(name, v, index);
            }
        }
    }
    let mut results = Vec::new();
    for out in &graph.output {
        let v = cx.lookup(&out.name).ok_or_else(|| ImportError::Value {
            what: "output",
            name: out.name.clone(),
            message: "no node computes it".into(),
        })?;
        let id = cx.value(&v).map_err(|message| ImportError::Value {
            what: "output",
            name: out.name.clone(),
            message,
        })?;
        results.push(id);
    }
    cx.finish(&results, opset).map_err(ImportError::Model)
}

fn model_opset(model: &proto::ModelProto) -> Result<i64, ImportError> {
    let default = model
        .opset_import
        .iter()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx");
    let Some(op) = default else {
        return Err(ImportError::Model(
            "the model imports no ai.onnx opset (ModelProto.opset_import)".into(),
        ));
    };
    if !(MIN_OPSET..=MAX_OPSET).contains(&op.version) {
        return Err(ImportError::Model(format!(
            "ai.onnx opset {} is not supported: irc imports opsets {MIN_OPSET} to {MAX_OPSET} (convert older models with onnx.version_converter)",
            op.version
        )));
    }
    Ok(op.version)
}

fn decode_initializer(
    t: &proto::TensorProto,
    external: Option<&ExternalData>,
) -> Result<Tensor, ImportError> {
    tensor::from_proto(t, external).map_err(|message| ImportError::Value {
        what: "initializer",
        name: t.name.clone(),
        message,
    })
}

/// The names of a model's graph inputs that are not initializers, in order: the inputs a
/// caller feeds (or fixes with [`Options::known`]).
pub fn input_names(bytes: &[u8]) -> Result<Vec<String>, ImportError> {
    let model = proto::ModelProto::decode(bytes).map_err(|e| ImportError::Decode(e.to_string()))?;
    let g = model
        .graph
        .ok_or_else(|| ImportError::Model("the model has no graph".into()))?;
    let inits: std::collections::HashSet<&str> =
        g.initializer.iter().map(|t| t.name.as_str()).collect();
    Ok(g.input
        .iter()
        .filter(|i| !inits.contains(i.name.as_str()))
        .map(|i| i.name.clone())
        .collect())
}
