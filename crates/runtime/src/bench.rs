//! Timing a launch sequence the way `triton.testing.do_bench` does, and the roofline it is
//! judged against.
//!
//! Each repetition writes a buffer of at least twice the L2 size (so no input stays cached from
//! the previous run), then records a CUDA event, enqueues the launch sequence and records a
//! second event; only the time between the two events counts. The warm-up runs are not timed.
//! With `cuda_graph`, the launch sequence is captured once into a CUDA graph and each run
//! replays it (one launch instead of one per kernel: what a model's many small kernels need).
//! The report gives the median and the 20th/80th percentiles (linear interpolation, as
//! `torch.quantile` computes them).

use crate::RuntimeError;
use crate::device::{DeviceBuffer, Program, driver};
use cudarc::driver::sys::CUevent_flags;
use serde::Serialize;

/// How many runs to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BenchOptions {
    /// Untimed runs first (module JIT, caches, clocks).
    pub warmup: u32,
    /// Timed repetitions, each after an L2 flush.
    pub rep: u32,
    /// Replay the launch sequence as one captured CUDA graph.
    pub cuda_graph: bool,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            warmup: 10,
            rep: 100,
            cuda_graph: false,
        }
    }
}

/// Times in milliseconds over the repetitions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Timing {
    pub median_ms: f64,
    pub p20_ms: f64,
    pub p80_ms: f64,
    pub count: usize,
    /// Bytes written to flush L2 before each repetition.
    pub flush_bytes: u64,
}

pub use irc_target::Target;

/// A timing judged against a target.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub graph: String,
    pub device: String,
    pub timing: Timing,
    pub flops: u64,
    pub min_bytes: u64,
    pub tflops: f64,
    pub gbps: f64,
    pub target: Target,
    pub floor_ms: f64,
    /// floor / median × 100: 100 means the run is at the roofline floor.
    pub pct_of_floor: f64,
    /// median / floor: how many floors the run takes (the mission's bar is 1.15).
    pub x_floor: f64,
}

impl Report {
    pub fn new(
        graph: &str,
        device: &str,
        timing: Timing,
        flops: u64,
        min_bytes: u64,
        target: &Target,
    ) -> Report {
        let s = timing.median_ms * 1e-3;
        let floor_ms = target.floor_ms(flops, min_bytes);
        let per_s = |x: u64| if s > 0.0 { x as f64 / s } else { f64::INFINITY };
        Report {
            graph: graph.into(),
            device: device.into(),
            flops,
            min_bytes,
            tflops: per_s(flops) / 1e12,
            gbps: per_s(min_bytes) / 1e9,
            target: target.clone(),
            floor_ms,
            pct_of_floor: if timing.median_ms > 0.0 {
                floor_ms / timing.median_ms * 100.0
            } else {
                f64::INFINITY
            },
            x_floor: if floor_ms > 0.0 {
                timing.median_ms / floor_ms
            } else {
                f64::INFINITY
            },
            timing,
        }
    }
}

/// The `q` quantile (0..=1) of sorted samples, linearly interpolated; NaN for none.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n => {
            let pos = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let lo = pos.floor() as usize;
            let hi = pos.ceil() as usize;
            sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
        }
    }
}

/// Summarizes per-repetition times.
pub fn summarize(mut times_ms: Vec<f64>, flush_bytes: u64) -> Timing {
    times_ms.sort_by(f64::total_cmp);
    Timing {
        median_ms: quantile(&times_ms, 0.5),
        p20_ms: quantile(&times_ms, 0.2),
        p80_ms: quantile(&times_ms, 0.8),
        count: times_ms.len(),
        flush_bytes,
    }
}

/// The L2 flush size: twice the L2, at least 64 MiB.
pub fn flush_bytes(l2_bytes: u64) -> u64 {
    (2 * l2_bytes).max(64 << 20)
}

impl Program<'_> {
    /// Times the launch sequence (inputs must have been written).
    pub fn bench(&self, opts: BenchOptions) -> Result<Timing, RuntimeError> {
        if opts.rep == 0 {
            return Err(RuntimeError::Input("--rep must be at least 1".into()));
        }
        let gpu = self.gpu();
        let flush_n = flush_bytes(gpu.info().l2_bytes);
        let flush = DeviceBuffer::new(gpu, flush_n as usize, "the L2 flush buffer")?;
        let graph = if opts.cuda_graph {
            Some(self.capture()?)
        } else {
            None
        };
        let run = || match &graph {
            Some(g) => g.launch().map_err(driver("cuGraphLaunch")),
            None => self.enqueue(),
        };
        for _ in 0..opts.warmup {
            flush.fill(0)?;
            run()?;
        }
        self.sync()?;
        let mut events = Vec::with_capacity(opts.rep as usize);
        for _ in 0..opts.rep {
            let start = gpu
                .ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(driver("cuEventCreate"))?;
            let end = gpu
                .ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(driver("cuEventCreate"))?;
            flush.fill(0)?;
            start.record(&gpu.stream).map_err(driver("cuEventRecord"))?;
            run()?;
            end.record(&gpu.stream).map_err(driver("cuEventRecord"))?;
            events.push((start, end));
        }
        self.sync()?;
        let mut times = Vec::with_capacity(events.len());
        for (s, e) in &events {
            times.push(s.elapsed_ms(e).map_err(driver("cuEventElapsedTime"))? as f64);
        }
        Ok(summarize(times, flush_n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile(&v, 0.5), 3.0);
        assert!((quantile(&v, 0.2) - 1.8).abs() < 1e-12);
        assert!((quantile(&v, 0.8) - 4.2).abs() < 1e-12);
        assert!(quantile(&[], 0.5).is_nan());
        let t = summarize(vec![5.0, 1.0, 3.0], 1);
        assert_eq!((t.median_ms, t.count), (3.0, 3));
    }

    #[test]
    fn floor_of_the_mission_rows() {
        let h = Target::h100();
        // gemm 4096³: 2·4096³ flops dominate → 0.186 ms.
        let gemm = h.floor_ms(2 * 4096u64.pow(3), 3 * 4096 * 4096 * 2);
        assert!((gemm - 0.186).abs() < 0.001, "{gemm}");
        // softmax [262144, 1024] f16: read + write → 0.357 ms.
        let sm = h.floor_ms(0, 2 * 262144 * 1024 * 2);
        assert!((sm - 0.357).abs() < 0.001, "{sm}");
        let r = Report::new(
            "g",
            "d",
            summarize(vec![0.372], 0),
            2 * 4096u64.pow(3),
            0,
            &h,
        );
        assert!((r.x_floor - 2.0).abs() < 0.01 && (r.pct_of_floor - 50.0).abs() < 0.5);
        assert!((r.tflops - 369.4).abs() < 0.1, "{}", r.tflops);
    }

    #[test]
    fn flush_is_twice_l2() {
        assert_eq!(flush_bytes(50 << 20), 100 << 20);
        assert_eq!(flush_bytes(0), 64 << 20);
    }
}
