//! Running emitted CUDA on a GPU.
//!
//! - [`toolkit`]: where CUDA's headers, `ptxas` and libnvrtc are on this machine (a CUDA
//!   install, or the PyPI wheels);
//! - [`nvrtc`]: CUDA C++ to PTX for an [`Arch`];
//! - [`ptxas`]: registers, spills, stack frame and shared memory per kernel;
//! - [`device`]: a context on a GPU, a module and a [`Manifest`]'s buffers and launches;
//! - [`bench`]: `do_bench`-style timing (warm-up, L2 flush, CUDA events, median) and the
//!   roofline [`Target`].
//!
//! libcuda and libnvrtc are loaded when first used, so this crate builds, links and runs its
//! compile-only paths on a machine without a GPU.
//!
//! API Boundary: this is the only crate that touches CUDA. It takes CUDA C++ text and a
//! manifest (from `irc-kir`) and raw tensor bytes, and returns bytes, reports and
//! typed errors; it never panics on bad input.

pub mod bench;
pub mod device;
pub mod nvrtc;
pub mod ptxas;
mod tma;
pub mod toolkit;

pub use bench::{BenchOptions, Report, Target, Timing};
pub use device::{DeviceInfo, Gpu, HostTensor, Program};
pub use irc_kir::Manifest;
pub use nvrtc::{Arch, Ptx};
pub use ptxas::KernelResources;

use std::path::PathBuf;

/// Everything that can go wrong between CUDA C++ text and results.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot find {what}; searched:{}", list(searched))]
    NotFound {
        what: String,
        searched: Vec<PathBuf>,
    },
    #[error(
        "`{0}` is not a GPU architecture (expected sm_NN with an optional a/f suffix, e.g. sm_90a, sm_80)"
    )]
    BadArch(String),
    #[error("the CUDA source contains {0}")]
    BadSource(String),
    #[error("NVRTC: {log}")]
    Nvrtc { log: String },
    #[error("{what} failed:\n{log}")]
    Compile { what: String, log: String },
    #[error("{0}")]
    Io(String),
    #[error("no GPU: {0}")]
    NoDevice(String),
    #[error("CUDA driver: {what}: {error}")]
    Driver { what: String, error: String },
    #[error("{0}")]
    Launch(String),
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Manifest(#[from] irc_kir::ManifestError),
}

fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| format!("\n  {}", p.display()))
        .collect()
}

/// Compiles `source` with NVRTC for `arch` and assembles the PTX with ptxas for the resource
/// report: what CI checks of every emitted file.
pub fn compile_and_assemble(
    source: &str,
    name: &str,
    arch: &Arch,
) -> Result<(Ptx, Vec<KernelResources>), RuntimeError> {
    let ptx = nvrtc::compile(source, name, arch)?;
    let ptxas = toolkit::find_ptxas()?;
    let report = ptxas::assemble(&ptxas, &ptx, arch)?;
    Ok((ptx, report))
}
