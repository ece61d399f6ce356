//! The CPU reference interpreter: the executable form of the graph IR's semantics.
//!
//! Every op runs with PyTorch's numerics on the same dtypes (see [`kernels`]); composites run
//! as PyTorch's fused kernels do (op math, one rounding). Multi-threaded with rayon; matmul uses
//! `matrixmultiply` with f32 accumulation. Every later level of the compiler is checked against
//! this crate.
//!
//! ```
//! use irc_interp::{Tensor, Data, run_graph};
//! let m = irc_frontend_free_example();
//! # fn irc_frontend_free_example() -> irc_ir::Graph {
//! #     let mut b = irc_ir::GraphBuilder::new("f");
//! #     let x = b.param("x", irc_ir::TensorType::new([3], irc_ir::DType::F32));
//! #     let y = b.unary(irc_ir::OpKind::Relu, x).unwrap();
//! #     b.finish(&[y]).unwrap()
//! # }
//! let x = Tensor::new(m.ty(m.params[0]).clone(), Data::F32(vec![-1.0, 0.5, 2.0])).unwrap();
//! let out = run_graph(&m, vec![x]).unwrap();
//! assert_eq!(out[0].data, Data::F32(vec![0.0, 0.5, 2.0]));
//! ```

pub mod compare;
pub mod indexing;
pub mod kernels;
pub mod random;
pub mod sample;
pub mod tensor;
mod walk;

pub use random::random_tensor;
pub use tensor::{Data, Tensor};

use irc_ir::{Category, Graph, OpKind};

/// The largest tensor the interpreter materializes, in bytes (8 GiB).
pub const MAX_TENSOR_BYTES: u64 = 8 << 30;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InterpError {
    #[error("{0}")]
    BadInput(String),
    #[error(
        "{what} would need {bytes} bytes, more than the interpreter's limit of {limit} bytes; run a smaller version of the graph"
    )]
    TooLarge {
        what: String,
        bytes: u64,
        limit: u64,
    },
    #[error("the reference interpreter does not support {0}")]
    Unsupported(String),
}

/// Runs `g` on `inputs` (one per parameter, of the parameter's type) and returns its results.
pub fn run_graph(g: &Graph, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, InterpError> {
    if inputs.len() != g.params.len() {
        return Err(InterpError::BadInput(format!(
            "graph @{} takes {} inputs, got {}",
            g.name,
            g.params.len(),
            inputs.len()
        )));
    }
    let mut env: Vec<Option<Tensor>> = vec![None; g.values.len()];
    for (i, (&p, t)) in g.params.iter().zip(inputs).enumerate() {
        if t.ty != *g.ty(p) {
            return Err(InterpError::BadInput(format!(
                "input {i} has type {}, expected {}",
                t.ty,
                g.ty(p)
            )));
        }
        env[p.index()] = Some(t);
    }
    let last_use = g.last_uses();
    for (i, inst) in g.insts.iter().enumerate() {
        let ty = g.ty(inst.result).clone();
        if ty.size_bytes() > MAX_TENSOR_BYTES {
            return Err(InterpError::TooLarge {
                what: format!("the result of '{}' ({ty})", inst.op),
                bytes: ty.size_bytes(),
                limit: MAX_TENSOR_BYTES,
            });
        }
        let args = inst
            .operands
            .iter()
            .map(|&o| env.get(o.index()).and_then(Option::as_ref))
            .collect::<Option<Vec<&Tensor>>>()
            .ok_or_else(|| {
                InterpError::BadInput(format!("statement {i} reads an undefined value"))
            })?;
        let data = eval(inst.op, &args, &inst.attrs, &ty)?;
        env[inst.result.index()] = Some(Tensor::new(ty, data)?);
        for &o in &inst.operands {
            if last_use[o.index()] == Some(i) {
                env[o.index()] = None;
            }
        }
    }
    g.results
        .iter()
        .map(|&r| {
            env[r.index()]
                .clone()
                .ok_or_else(|| InterpError::BadInput("result not computed".into()))
        })
        .collect()
}

/// Evaluates one op.
pub fn eval(
    op: OpKind,
    args: &[&Tensor],
    attrs: &irc_ir::Attrs,
    ty: &irc_ir::TensorType,
) -> Result<Data, InterpError> {
    use kernels::*;
    match op.category() {
        Category::Matmul => matmul(args[0], args[1], attrs, ty),
        Category::View => Ok(view(op, args[0], ty, attrs)),
        Category::Constant => Ok(constant(ty, attrs)),
        Category::Cast => Ok(cast(args[0], ty.dtype)),
        Category::Unary => unary(op, args[0]),
        Category::Binary => binary(op, args[0], args[1], ty),
        Category::Reduction => reduce(op, args[0], attrs),
        Category::Composite => composite(op, args, attrs),
        Category::Compare => indexing::compare(op, args[0], args[1], ty),
        Category::Select => indexing::select(args[0], args[1], args[2], ty),
        Category::Iota => indexing::iota(ty, attrs),
        Category::Slice => indexing::slice(args[0], attrs),
        Category::Concat => indexing::concat(args, attrs),
        Category::Gather => indexing::gather(args[0], args[1], attrs),
    }
}
