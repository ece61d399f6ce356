//! NVRTC + ptxas on a small hand-written kernel, for sm_90a and sm_80: proves the toolchain
//! plumbing without a GPU and independently of irc's emitter.
//!
//! Needs libnvrtc, the CUDA headers and ptxas (scripts/test.sh installs them from PyPI into
//! `.venv-cuda`). Without them the test prints SKIPPED, except under `CI=true`, where it fails.

mod common;
use common::toolchain_or_skip;
use irc_runtime::{Arch, RuntimeError, compile_and_assemble, nvrtc, ptxas, toolkit};

const KERNEL: &str = r#"
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ const float kScale[2] = {0.5f, 2.0f};

extern "C" __global__ void scale_add(const __half* x, const __nv_bfloat16* y, float* out) {
    __shared__ float tile[128];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = __half2float(x[i]) * kScale[i & 1];
    __syncthreads();
    out[i] = tile[127 - threadIdx.x] + __bfloat162float(y[i]);
}
"#;

#[test]
fn hand_written_kernel_compiles_for_both_archs() {
    if !toolchain_or_skip("hand_written_kernel_compiles_for_both_archs") {
        return;
    }
    let (major, minor) = nvrtc::nvrtc_version().unwrap();
    eprintln!("NVRTC {major}.{minor}");
    for arch in ["sm_90a", "sm_80"] {
        let arch = Arch::parse(arch).unwrap();
        let (ptx, report) = compile_and_assemble(KERNEL, "scale_add.cu", &arch).unwrap();
        assert!(ptx.text.contains(".entry scale_add"), "{}", ptx.text);
        assert_eq!(report.len(), 1, "{report:?}");
        let k = &report[0];
        eprintln!("{arch}: {k:?}");
        assert_eq!((k.name.as_str(), k.arch.as_str()), ("scale_add", arch.sm()));
        assert!(k.registers > 0 && k.registers <= 255);
        assert_eq!(k.shared, 512);
        assert!(!k.spills());
    }
}

#[test]
fn nvrtc_errors_carry_its_log() {
    if !toolchain_or_skip("nvrtc_errors_carry_its_log") {
        return;
    }
    let err = nvrtc::compile(
        "extern \"C\" __global__ void k() { undeclared_name = 1; }",
        "bad.cu",
        &Arch::default(),
    )
    .unwrap_err();
    match &err {
        RuntimeError::Compile { log, .. } => {
            assert!(
                log.contains("bad.cu") && log.contains("undeclared_name"),
                "{log}"
            )
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    assert!(matches!(
        nvrtc::compile("a\0b", "nul.cu", &Arch::default()),
        Err(RuntimeError::BadSource(_))
    ));
}

#[test]
fn ptxas_reports_stack_frames() {
    if !toolchain_or_skip("ptxas_reports_stack_frames") {
        return;
    }
    // A run-time-indexed local array lives in local memory: a stack frame, which ptxas
    // reports.
    let src = r#"extern "C" __global__ void local(const int* idx, float* out) {
        float a[512];
        float acc = 0.0f;
        for (int i = 0; i < 512; ++i) { acc = acc * 1.5f + out[i * 7]; a[i] = acc; }
        out[threadIdx.x] = a[idx[threadIdx.x] & 511];
    }"#;
    let arch = Arch::parse("sm_80").unwrap();
    let ptx = nvrtc::compile(src, "local.cu", &arch).unwrap();
    let report = ptxas::assemble(&toolkit::find_ptxas().unwrap(), &ptx, &arch).unwrap();
    assert_eq!(report.len(), 1);
    assert!(report[0].stack_frame >= 2048, "{report:?}");
}
