//! The irc graph IR: tensor ops in SSA form.
//!
//! - [`DType`], [`TensorType`]: element types and static shapes;
//! - [`OpKind`] and the op table ([`ops`]): every op declared once;
//! - [`Graph`], [`Module`], [`GraphBuilder`]: the SSA graph and the API to build one;
//! - [`check_op`]: type inference and the typing rule of each op;
//! - [`verify_graph`], [`verify_module`]: the verifier;
//! - [`print_module`]: the deterministic printer;
//! - [`decompose_graph`]: composites into primitives.
//!
//! Architecture Invariant: this crate does no IO and knows nothing of parsing, egg or CUDA.

pub mod attr;
pub mod decompose;
pub mod dtype;
pub mod graph;
pub mod indexing;
pub mod infer;
pub mod ops;
pub mod print;
pub mod span;
pub mod types;
pub mod verify;

pub use attr::{Attr, AttrSpans, Attrs};
pub use decompose::{decompose_graph, opmath_dtype};
pub use dtype::DType;
pub use graph::{Graph, GraphBuilder, Inst, Module, ValueData, ValueDef, ValueId, ints};
pub use infer::{Blame, OpError, check_op};
pub use ops::{ALL_OPS, Category, OpInfo, OpKind};
pub use print::{print_graph, print_module};
pub use span::{Diagnostic, Provenance, Span};
pub use types::TensorType;
pub use verify::{verify_graph, verify_module};
