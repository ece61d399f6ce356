//! `--emit=mlir` and `--emit=ptx --backend=mlir` through the binary, with and without the `mlir`
//! feature.

mod common;
use common::irc;

/// `--emit=ptx` with the default CUDA backend is the emitted C++ compiled by NVRTC: PTX for the
/// requested chip whose entry points are the manifest's kernels, or (without an NVRTC toolchain)
/// a located error that says where it looked.
#[test]
fn ptx_of_the_cuda_backend() {
    let o = irc(&["--emit=ptx", "--arch=sm_80", "examples/small/gemm.ir"]);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    if o.status.success() {
        assert!(out.contains(".target sm_80"), "{out}");
        assert!(out.contains(".entry gemm_k0_matmul"), "{out}");
    } else {
        assert_eq!(o.status.code(), Some(1));
        assert!(
            err.contains("gemm.ir:") && (err.contains("searched") || err.contains("NVRTC")),
            "{err}"
        );
    }
}

#[cfg(not(feature = "mlir"))]
#[test]
fn mlir_without_the_feature_is_a_clear_error() {
    for args in [
        &["--emit=mlir", "examples/small/gemm.ir"][..],
        &["--emit=ptx", "--backend=mlir", "examples/small/gemm.ir"][..],
    ] {
        let o = irc(args);
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("built without the `mlir` feature"), "{err}");
        assert!(o.stdout.is_empty());
    }
}

#[cfg(feature = "mlir")]
#[test]
fn emit_mlir_prints_a_verified_container_module() {
    let o = irc(&["--emit=mlir", "examples/small/attention.ir"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("module attributes {gpu.container_module}"),
        "{out}"
    );
    for k in ["attention_k0_attention"] {
        assert!(out.contains(&format!("gpu.func @{k}(")), "{k}");
        assert!(
            out.contains(&format!("gpu.launch_func  @kernels::@{k} ")),
            "{k}"
        );
    }
}

#[cfg(feature = "mlir")]
#[test]
fn emit_ptx_through_mlir() {
    // A kernel without math functions needs no libdevice.
    let o = irc(&[
        "--emit=ptx",
        "--backend=mlir",
        "--arch=sm_80",
        "examples/small/gemm.ir",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(".target sm_80"), "{out}");
    assert!(out.contains(".visible .entry gemm_k0_matmul("), "{out}");
}
