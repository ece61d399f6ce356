//! The runtime on a real GPU with hand-written kernels and manifests. Runs only with
//! `IRC_GPU_TESTS=1` (and the CUDA toolchain, as for `toolchain.rs`); otherwise each test prints
//! that it was skipped.

use irc_kir::{Buffer, BufferKind, Launch, Manifest};
use irc_runtime::{Arch, BenchOptions, Gpu, HostTensor, Report, Target, nvrtc};

const N: usize = 1 << 20;

const SOURCE: &str = r#"
#include <cuda_fp16.h>

extern "C" __global__ void twice(const __half* x, __half* t) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    t[i] = __hmul(x[i], __float2half(2.0f));
}

// Reverses each 16384-float row through 64 KiB of dynamic shared memory, then adds t.
extern "C" __global__ void add_rev(const __half* t, const float* y, float* out) {
    extern __shared__ float row[];
    const int len = 16384;
    const float* src = y + blockIdx.x * len;
    for (int i = threadIdx.x; i < len; i += blockDim.x) row[i] = src[i];
    __syncthreads();
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
        int g = blockIdx.x * len + i;
        out[g] = row[len - 1 - i] + __half2float(t[g]);
    }
}
"#;

fn gpu_or_skip(test: &str) -> bool {
    if std::env::var("IRC_GPU_TESTS").is_ok_and(|v| v == "1") {
        true
    } else {
        eprintln!("SKIPPED {test}: set IRC_GPU_TESTS=1 to run GPU tests");
        false
    }
}

fn buffer(name: &str, dtype: &str, size: u64, kind: BufferKind) -> Buffer {
    Buffer {
        name: name.into(),
        dtype: dtype.into(),
        shape: vec![N as u64],
        bytes: N as u64 * size,
        kind,
        tensor_map: None,
    }
}

fn manifest() -> Manifest {
    Manifest {
        format: Manifest::FORMAT.into(),
        version: Manifest::VERSION,
        graph: "hand".into(),
        flops: 2 * N as u64,
        min_bytes: N as u64 * (2 + 4 + 4),
        buffers: vec![
            buffer("x", "f16", 2, BufferKind::Input),
            buffer("y", "f32", 4, BufferKind::Input),
            buffer("t", "f16", 2, BufferKind::Temp),
            buffer("out", "f32", 4, BufferKind::Output),
        ],
        inputs: vec![0, 1],
        // The second result is the input x itself.
        outputs: vec![3, 0],
        launches: vec![
            Launch {
                kernel: "twice".into(),
                grid: [(N / 256) as u32, 1, 1],
                block: [256, 1, 1],
                shared_bytes: 0,
                args: vec![0, 2],
                cooperative: false,
            },
            Launch {
                kernel: "add_rev".into(),
                grid: [(N / 16384) as u32, 1, 1],
                block: [512, 1, 1],
                shared_bytes: 16384 * 4,
                args: vec![2, 1, 3],
                cooperative: false,
            },
        ],
    }
}

#[test]
fn hand_written_manifest_runs_and_times() {
    if !gpu_or_skip("hand_written_manifest_runs_and_times") {
        return;
    }
    let gpu = Gpu::new(0).unwrap();
    let info = gpu.info().clone();
    eprintln!("{info:?} arch {}", gpu.arch_name());
    assert!(info.sm_count > 0 && info.l2_bytes > 0);
    let arch = Arch::parse(&gpu.arch_name()).unwrap();
    let ptx = nvrtc::compile(SOURCE, "hand.cu", &arch).unwrap();
    let m = manifest();
    let mut prog = gpu.load(&ptx, &m).unwrap();

    let x: Vec<half::f16> = (0..N)
        .map(|i| half::f16::from_f32((i % 1000) as f32 * 0.25 - 100.0))
        .collect();
    let y: Vec<f32> = (0..N).map(|i| (i % 777) as f32 * 0.5).collect();
    let inputs = [
        HostTensor {
            dtype: "f16".into(),
            shape: vec![N as u64],
            bytes: x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        },
        HostTensor {
            dtype: "f32".into(),
            shape: vec![N as u64],
            bytes: y.iter().flat_map(|v| v.to_le_bytes()).collect(),
        },
    ];
    let out = prog.run(&inputs).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[1], inputs[0], "the aliased result is the input");
    let got: Vec<f32> = out[0]
        .bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    for (g, &v) in got.iter().enumerate() {
        let (row, i) = (g / 16384, g % 16384);
        let want = y[row * 16384 + 16383 - i] + 2.0 * x[g].to_f32();
        assert_eq!(v, want, "element {g}");
    }

    // Wrong inputs are typed errors.
    assert!(prog.write_inputs(&inputs[..1]).is_err());
    let mut bad = inputs.clone();
    bad[1].dtype = "f16".into();
    assert!(prog.write_inputs(&bad).is_err());

    let timing = prog
        .bench(BenchOptions {
            warmup: 5,
            rep: 50,
            cuda_graph: false,
        })
        .unwrap();
    assert_eq!(timing.count, 50);
    assert!(timing.p20_ms <= timing.median_ms && timing.median_ms <= timing.p80_ms);
    assert!(
        timing.median_ms > 0.0 && timing.median_ms < 100.0,
        "{timing:?}"
    );
    // The same sequence replayed as one captured CUDA graph computes the same results.
    let graphed = prog
        .bench(BenchOptions {
            warmup: 2,
            rep: 10,
            cuda_graph: true,
        })
        .unwrap();
    assert_eq!(graphed.count, 10);
    assert!(
        graphed.median_ms > 0.0 && graphed.median_ms < 100.0,
        "{graphed:?}"
    );
    assert_eq!(prog.read_outputs().unwrap()[0], out[0]);
    let r = Report::new(
        "hand",
        &info.name,
        timing,
        m.flops,
        m.min_bytes,
        &Target::h100(),
    );
    eprintln!("{r:?}");
    assert!(r.gbps > 1.0);
}

#[test]
fn missing_kernel_is_an_error() {
    if !gpu_or_skip("missing_kernel_is_an_error") {
        return;
    }
    let gpu = Gpu::new(0).unwrap();
    let arch = Arch::parse(&gpu.arch_name()).unwrap();
    let ptx = nvrtc::compile(SOURCE, "hand.cu", &arch).unwrap();
    let mut m = manifest();
    m.launches[0].kernel = "nope".into();
    let err = gpu.load(&ptx, &m).err().expect("an error");
    assert!(err.to_string().contains("nope"), "{err}");
    m.launches[0].kernel = "twice".into();
    m.launches[1].shared_bytes = 1 << 30;
    assert!(gpu.load(&ptx, &m).is_err());
}

/// Inputs land before the first kernel reads them and results are read after the last one
/// writes them, whatever else the GPU is doing: four threads, each with its own stream, run the
/// manifest on new inputs twenty times and check every element. (The copies once went through
/// `cuMemcpyHtoD`, on the legacy default stream, which the runtime's non-blocking stream does
/// not wait for: eight processes sharing a GPU saw kernels read inputs half-written.)
#[test]
fn copies_are_ordered_with_the_kernels() {
    if !gpu_or_skip("copies_are_ordered_with_the_kernels") {
        return;
    }
    std::thread::scope(|s| {
        for t in 0..4u32 {
            s.spawn(move || {
                let gpu = Gpu::new(0).unwrap();
                let arch = Arch::parse(&gpu.arch_name()).unwrap();
                let ptx = nvrtc::compile(SOURCE, "hand.cu", &arch).unwrap();
                let mut prog = gpu.load(&ptx, &manifest()).unwrap();
                for k in 0..20u32 {
                    let (xv, yv) = ((t * 20 + k) as f32, k as f32 * 0.5);
                    let x = half::f16::from_f32(xv).to_le_bytes().repeat(N);
                    let inputs = [
                        HostTensor {
                            dtype: "f16".into(),
                            shape: vec![N as u64],
                            bytes: x,
                        },
                        HostTensor {
                            dtype: "f32".into(),
                            shape: vec![N as u64],
                            bytes: yv.to_le_bytes().repeat(N),
                        },
                    ];
                    let out = prog.run(&inputs).unwrap();
                    let want = (yv + 2.0 * xv).to_le_bytes().repeat(N);
                    let wrong = out[0]
                        .bytes
                        .chunks_exact(4)
                        .zip(want.chunks_exact(4))
                        .filter(|(a, b)| a != b)
                        .count();
                    assert_eq!(wrong, 0, "thread {t}, run {k}: {wrong} elements wrong");
                }
            });
        }
    });
}
