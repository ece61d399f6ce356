//! The machine irc compiles for, described once.
//!
//! The cost model divides by its rates ([`Target::tensor_flops`] and the rest), `irc bench`
//! judges timings against its roofline ([`Target::floor_ms`]), the kernel-IR verifier checks
//! kernels against its limits ([`Target::max_shared_bytes`], [`Target::max_register_elems`]),
//! and the templates size their tiles from the same limits.

use serde::Serialize;

/// A GPU: its ceilings and its per-block limits.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Target {
    pub name: String,
    /// Streaming multiprocessors.
    pub sms: u32,
    /// Peak dense 16-bit tensor-core throughput, TFLOP/s.
    pub peak_tflops: f64,
    /// Peak device-memory bandwidth, GB/s (bytes read plus written).
    pub peak_gbps: f64,
    /// f32 throughput on CUDA cores, TFLOP/s.
    pub cuda_tflops: f64,
    /// The fixed cost of one kernel launch, µs.
    pub launch_us: f64,
    /// Statically allocated shared memory a block may use, bytes.
    pub max_shared_bytes: u64,
    /// Shared memory a block may use with the dynamic opt-in, bytes.
    pub max_dynamic_shared_bytes: u64,
    /// Elements a thread's register tensors may hold in total (the rest would spill).
    pub max_register_elems: u64,
    /// Threads resident on one SM at most.
    pub max_threads_per_sm: u32,
    /// Blocks resident on one SM at most.
    pub max_blocks_per_sm: u32,
    /// The L2 cache, bytes.
    pub l2_bytes: u64,
}

impl Target {
    /// The H100 80GB HBM3 (sm_90a): a bf16 8192³ matmul at 737 TFLOP/s and a device-to-device
    /// copy at 3006 GB/s as measured for MISSION.md, 67 TFLOP/s f32 (the data sheet), 132 SMs,
    /// about 3 µs per launch, 48 KiB of static and 227 KiB of opt-in shared memory per block, a
    /// 50 MiB L2.
    pub fn h100() -> Target {
        Target {
            name: "H100".into(),
            sms: 132,
            peak_tflops: 737.0,
            peak_gbps: 3006.0,
            cuda_tflops: 67.0,
            launch_us: 3.0,
            max_shared_bytes: 48 * 1024,
            max_dynamic_shared_bytes: 227 * 1024,
            max_register_elems: 256,
            max_threads_per_sm: 2048,
            max_blocks_per_sm: 32,
            l2_bytes: 50 << 20,
        }
    }

    /// The A100 80GB (sm_80) from its data sheet: 108 SMs, 312 TFLOP/s dense 16-bit, 2039 GB/s,
    /// 19.5 TFLOP/s f32, 48 KiB of static and 163 KiB of opt-in shared memory per block, a
    /// 40 MiB L2.
    pub fn a100() -> Target {
        Target {
            name: "A100".into(),
            sms: 108,
            peak_tflops: 312.0,
            peak_gbps: 2039.0,
            cuda_tflops: 19.5,
            launch_us: 3.0,
            max_shared_bytes: 48 * 1024,
            max_dynamic_shared_bytes: 163 * 1024,
            max_register_elems: 256,
            max_threads_per_sm: 2048,
            max_blocks_per_sm: 32,
            l2_bytes: 40 << 20,
        }
    }

    /// The target code for `arch` (`sm_90a`, `sm_80`, ...) is built for: the H100 for sm_90
    /// and later; the A100 for sm_80 to sm_89, with the smaller opt-in shared memory of sm_86
    /// and sm_89 (99 KiB a block), and the 1536 threads an SM of sm_86 to sm_89, so that no
    /// template picks tiles those GPUs cannot launch; the H100 for a name that is not `sm_` and
    /// a number.
    pub fn for_arch(arch: &str) -> Target {
        let digits: String = arch
            .strip_prefix("sm_")
            .unwrap_or("")
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        match digits.parse::<u32>() {
            Ok(v) if v < 90 => {
                let mut t = Target::a100();
                if matches!(v, 86 | 89) {
                    t.name = format!("{arch}-class");
                    t.max_dynamic_shared_bytes = 99 * 1024;
                }
                // sm_86, sm_87 and sm_89 run 1536 threads an SM, in 16 (24 on sm_89) blocks.
                if matches!(v, 86 | 87 | 89) {
                    t.max_threads_per_sm = 1536;
                    t.max_blocks_per_sm = if v == 89 { 24 } else { 16 };
                }
                t
            }
            _ => Target::h100(),
        }
    }

    /// The floor in ms: max(flops / peak rate, bytes / peak bandwidth).
    pub fn floor_ms(&self, flops: u64, bytes: u64) -> f64 {
        let compute = flops as f64 / (self.peak_tflops * 1e12);
        let memory = bytes as f64 / (self.peak_gbps * 1e9);
        compute.max(memory) * 1e3
    }
}

impl Default for Target {
    fn default() -> Self {
        Target::h100()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_the_slower_of_compute_and_memory() {
        let t = Target::h100();
        // 4096³ matmul: compute bound.
        let f = t.floor_ms(2 * 4096u64.pow(3), 3 * 2 * 4096 * 4096);
        assert!((f - 0.1865).abs() < 1e-3, "{f}");
        // 3.006 GB read and written: 1 ms, memory bound.
        assert!((t.floor_ms(0, 3_006_000_000) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn each_arch_gets_its_shared_memory_limit() {
        assert_eq!(Target::for_arch("sm_90a"), Target::h100());
        assert_eq!(Target::for_arch("sm_90"), Target::h100());
        assert_eq!(Target::for_arch("sm_80"), Target::a100());
        assert_eq!(
            Target::for_arch("sm_80").max_dynamic_shared_bytes,
            163 * 1024
        );
        assert_eq!(
            Target::for_arch("sm_89").max_dynamic_shared_bytes,
            99 * 1024
        );
        assert_eq!(Target::for_arch("sm_86").sms, 108);
        assert_eq!(Target::for_arch("gfx90a"), Target::h100());
    }
}
