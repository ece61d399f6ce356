//! The MLIR backend's side of the driver: `--emit=mlir` and `--emit=ptx --backend=mlir`.
//!
//! The backend is `irc-emit-mlir`, behind the `mlir` cargo feature (it links LLVM/MLIR 22).
//! Without the feature these requests are refused with an error saying so.

use crate::opt::{Backend, Emit, OptArgs};

const NOT_BUILT: &str = "irc was built without the `mlir` feature, so the MLIR backend \
     (`--emit=mlir`, `--backend=mlir`) is not available (plain `--emit=ptx`, NVRTC's PTX of the \
     emitted CUDA, is); rebuild with `cargo build --release --features mlir` (the README's \
     \"MLIR backend\" section lists the LLVM/MLIR 22 packages it needs)";

/// Why an MLIR request cannot be served by this build, if it cannot.
pub fn unavailable(args: &OptArgs) -> Option<String> {
    let wants_mlir =
        args.emit == Emit::Mlir || (args.emit == Emit::Ptx && args.backend == Backend::Mlir);
    if wants_mlir && !cfg!(feature = "mlir") {
        return Some(NOT_BUILT.into());
    }
    None
}

/// The MLIR module (`Emit::Mlir`) or PTX (`Emit::Ptx`) of a kernel IR module.
#[cfg(feature = "mlir")]
pub fn emit(m: &irc_kir::Module, args: &OptArgs) -> Result<String, String> {
    let r = match args.emit {
        Emit::Ptx => irc_emit_mlir::compile_to_ptx_with(m, &ptx_options(&args.arch)),
        _ => irc_emit_mlir::emit_mlir(m),
    };
    r.map_err(|e| e.to_string())
}

#[cfg(not(feature = "mlir"))]
pub fn emit(_: &irc_kir::Module, args: &OptArgs) -> Result<String, String> {
    Err(unavailable(args).unwrap_or_default())
}

/// The PTX pipeline's options: libdevice from `irc_emit_mlir::find_cuda_toolkit`, else beside
/// the `ptxas` the runtime finds (a CUDA install or the `nvidia-cuda-nvcc` wheel).
#[cfg(feature = "mlir")]
fn ptx_options(arch: &str) -> irc_emit_mlir::PtxOptions {
    use std::path::Path;
    let mut opts = irc_emit_mlir::PtxOptions::new(arch);
    if opts.toolkit.is_none() {
        opts.toolkit = irc_runtime::toolkit::find_ptxas().ok().and_then(|ptxas| {
            let root = ptxas.parent().and_then(Path::parent)?;
            root.join("nvvm/libdevice/libdevice.10.bc")
                .is_file()
                .then(|| root.to_path_buf())
        });
    }
    opts
}

/// PTX of a graph through the MLIR backend, for `irc run --device gpu --backend=mlir` and
/// `irc bench --backend=mlir` (the CUDA backend's launch manifest runs it).
#[cfg(feature = "mlir")]
pub fn graph_ptx(graph: &irc_ir::Graph, arch: &str) -> anyhow::Result<String> {
    let m = irc_lower::lower_graph(graph, irc_lower::SourceInfo::default())?;
    Ok(irc_emit_mlir::compile_to_ptx_with(&m, &ptx_options(arch))?)
}

#[cfg(not(feature = "mlir"))]
pub fn graph_ptx(_: &irc_ir::Graph, _: &str) -> anyhow::Result<String> {
    anyhow::bail!(NOT_BUILT)
}
