//! Lowering of irc graphs to GPU kernels.
//!
//! - [`layout`]: the CuTe-style layout algebra, pure math, from which every index an emitter
//!   writes is computed;
//! - [`manifest`]: the launch manifest a host uses to run an emitted file.
//!
//! API Boundary: no IO; emitters return text, the driver writes it.

pub mod layout;
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
}

/// Lowers a verified graph to CUDA C++ and its launch manifest.
pub fn compile_to_cuda(graph: &Graph) -> Result<CudaModule, LowerError> {
    let _ = graph;
    Err(LowerError::Unsupported {
        op: "graph".into(),
        reason: "kernel lowering is being written".into(),
    })
}
