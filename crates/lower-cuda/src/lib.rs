//! Lowering of irc graphs to GPU kernels.
//!
//! - [`layout`]: the CuTe-style layout algebra, pure math, from which every index an emitter
//!   writes is computed;
//! - [`manifest`]: the launch manifest a host uses to run an emitted file.
//!
//! API Boundary: no IO; emitters return text, the driver writes it.

pub mod cuda;
pub mod kir;
pub mod layout;
pub mod lower;
pub mod manifest;

pub use manifest::{Buffer, BufferKind, Launch, Manifest, ManifestError};

use irc_ir::Graph;

/// An emitted CUDA C++ file and how to launch it.
#[derive(Clone, Debug)]
pub struct CudaModule {
    /// One self-contained `.cu` file (`extern "C"` kernels, no includes beyond CUDA's own
    /// `cuda_fp16.h` / `cuda_bf16.h`).
    pub source: String,
    pub manifest: Manifest,
}

/// Why a graph could not be lowered.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LowerError {
    #[error("cannot lower `{op}`: {reason}")]
    Unsupported { op: String, reason: String },
    /// A bug in irc: the lowering produced something its own checks reject.
    #[error("internal error in lowering: {0}")]
    Internal(String),
}

pub use lower::{SourceInfo, lower_graph};

/// Lowers a verified graph to CUDA C++ and its launch manifest.
pub fn compile_to_cuda(graph: &Graph) -> Result<CudaModule, LowerError> {
    compile_to_cuda_with(graph, SourceInfo::default())
}

/// [`compile_to_cuda`], naming source locations of `src` in each kernel's header comment.
pub fn compile_to_cuda_with(graph: &Graph, src: SourceInfo<'_>) -> Result<CudaModule, LowerError> {
    let module = lower_graph(graph, src)?;
    Ok(cuda::emit(&module))
}
