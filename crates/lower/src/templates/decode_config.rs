//! The decoding attention kernel's configuration space (`attention/decode.rs`): how many lanes
//! share a key, and how many blocks share a unit's keys.
//!
//! A key's `lanes` threads each hold `ceil(vectors / lanes)` 16-byte vectors of its K and V
//! rows and the same slices of the unit's Q and O rows in f32: fewer lanes a key mean fewer
//! butterfly steps a score and more keys in flight, more lanes fewer registers. The heuristic
//! takes the fewest whose values fit [`VALUES`] a thread at 2 keys a step (the kernel then
//! builds without spills on either backend), and 4 keys a step where those still fit. `splits` blocks share a
//! unit's keys (its partials merged by the last to arrive). With `stages` above 1 each thread
//! streams its K and V vectors through a ring of that many steps in shared memory
//! (`cp.async`: the next steps' copies in flight while a step's math runs, without using
//! registers). The heuristic takes a two-stage ring and splits up to two blocks an SM where
//! two such blocks fit an SM's shared memory, else loads to registers and splits until about
//! four blocks an SM, each at least four steps of keys.

use super::config::{Config, TemplateSpace, fields, memory_us, resident, wrong};
use super::problem::{Problem, ProblemShape};
use irc_target::Target;
use std::fmt;

/// Threads a block.
pub(crate) const THREADS: u64 = 128;
/// Keys a lane group takes per step by default (2 or 4: [`DecodeConfig::keys`]).
pub(crate) const STEP_KEYS: u64 = 2;
/// Elements a vector (16 bytes of f16/bf16).
pub(crate) const WIDTH: u64 = 8;
/// Values a thread may hold: its Q and O slices (f32, `rows` each) and a step's K and V
/// vectors. At 192 the CUDA backend's kernel of 4 rows at head dim 128 took 190 registers
/// and the MLIR backend's spilled 136 bytes (`ptxas -v`); at 160 neither spills.
pub(crate) const VALUES: u64 = 160;
/// The most splits of a unit's keys (the last block's merge weights sit in shared memory).
pub(crate) const MAX_SPLITS: u64 = 256;

/// A point of the decoding kernel's space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DecodeConfig {
    /// Threads a key (a power of two up to 32).
    pub lanes: u64,
    /// Keys a lane group takes per step (2 or 4), their K and V vectors loaded before the
    /// step's math.
    pub keys: u64,
    /// Blocks a unit's keys are split across.
    pub splits: u64,
    /// Steps of K/V vectors a thread has in its `cp.async` ring in shared memory (2 to 4); 1:
    /// the step's loads go straight to registers. (A ring needs K and V read from buffers in
    /// whole vectors; where they are not, the kernel loads to registers at any point.)
    pub stages: u64,
    /// The products on tensor cores (`attention/decode_mma.rs`): `warps` warps of 16 keys a
    /// step ([`DecodeConfig::mma`] sets `lanes` and `keys` to that), up to 16 rows a unit,
    /// head dims up to 128, K and V through a ring of `stages` (2 to 4).
    pub mma: bool,
    /// Warps a block: 4 on CUDA cores ([`THREADS`]), 4 or 8 on tensor cores.
    pub warps: u64,
}

impl DecodeConfig {
    /// The tensor-core point of `warps`, `splits` and `stages`.
    pub fn mma(warps: u64, splits: u64, stages: u64) -> DecodeConfig {
        DecodeConfig {
            lanes: 32,
            keys: WARP_KEYS,
            splits,
            stages,
            mma: true,
            warps,
        }
    }

    /// Threads a block.
    pub fn threads(&self) -> u64 {
        32 * self.warps
    }
}

/// The tensor-core kernel's warps a block (4 or 8) and keys a warp takes per step.
pub(crate) const MMA_WARPS: [u64; 2] = [4, 8];
pub(crate) const WARP_KEYS: u64 = 16;
/// The most rows a unit holds: one mma atom's (the CUDA-core kernel's registers hold 8).
pub(crate) const MMA_ROWS: u64 = 16;
/// The most rows a unit of the CUDA-core kernel holds.
pub(crate) const CUDA_ROWS: u64 = 8;

/// Whether the tensor-core kernel takes `rows` rows of head dims `(d, dv)`.
pub(crate) fn mma_fits(rows: u64, (d, dv): (u64, u64)) -> bool {
    rows <= MMA_ROWS && d.max(dv) <= 128
}

impl fmt::Display for DecodeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mma {
            return write!(
                f,
                "mma,warps={},splits={},stages={}",
                self.warps, self.splits, self.stages
            );
        }
        write!(
            f,
            "lanes={},keys={},splits={},stages={}",
            self.lanes, self.keys, self.splits, self.stages
        )
    }
}

/// Values a thread holds at `lanes` a key and `keys` keys a step for `rows` rows of head dims
/// `d` and `dv`.
pub(crate) fn values(rows: u64, (d, dv): (u64, u64), lanes: u64, keys: u64) -> u64 {
    let slices = d.div_ceil(WIDTH).div_ceil(lanes) + dv.div_ceil(WIDTH).div_ceil(lanes);
    slices * WIDTH * (rows + keys)
}

/// The fewest lanes a key whose values fit.
pub(crate) fn fewest_lanes(rows: u64, dims: (u64, u64)) -> Option<u64> {
    (0..=5)
        .map(|e| 1u64 << e)
        .find(|&lanes| values(rows, dims, lanes, STEP_KEYS) <= VALUES)
}

/// Shared memory a block takes for the merge (f32): its `groups` (lane groups or warps) `(m,
/// l)` and O rows, each row's weights and `(M, L)`, and the last block's weights of the
/// splits and its rows' `L`.
pub(crate) fn shared_bytes(rows: u64, dv: u64, groups: u64, splits: u64) -> u64 {
    4 * (groups * rows * (dv + 3) + 2 * rows + if splits > 1 { (splits + 2) * rows } else { 0 })
}

/// 16-byte K and V vectors a thread copies a step: `keys` keys' slices of both rows.
pub(crate) fn step_vectors((d, dv): (u64, u64), lanes: u64, keys: u64) -> u64 {
    keys * (d.div_ceil(WIDTH).div_ceil(lanes) + dv.div_ceil(WIDTH).div_ceil(lanes))
}

/// Shared memory of a block's `cp.async` ring (none at one stage).
pub(crate) fn ring_bytes(dims: (u64, u64), lanes: u64, keys: u64, stages: u64) -> u64 {
    match stages {
        0 | 1 => 0,
        s => s * THREADS * step_vectors(dims, lanes, keys) * WIDTH * 2,
    }
}

/// All the shared memory a block takes at point `c`.
fn block_shared(rows: u64, (d, dv): (u64, u64), c: &DecodeConfig) -> u64 {
    let (ring, groups) = if c.mma {
        // Each warp's K and V tiles of 16 keys a stage and the block's tile of Q's 16 rows,
        // rows padded by 8 elements.
        let d16 = d.next_multiple_of(16);
        let cols = d16 + dv.next_multiple_of(16) + 16;
        let ring = c.stages * c.warps * WARP_KEYS * cols * 2 + MMA_ROWS * (d16 + 8) * 2;
        (ring, c.warps)
    } else {
        let ring = ring_bytes((d, dv), c.lanes, c.keys, c.stages);
        (ring, THREADS / c.lanes)
    };
    shared_bytes(rows, dv, groups, c.splits) + ring
}

/// Half an SM's shared memory, less the 1 KiB the hardware keeps for each block (an SM holds
/// about a block's opt-in maximum and that 1 KiB).
fn half_sm(t: &Target) -> u64 {
    (t.max_dynamic_shared_bytes + 1024) / 2 - 1024
}

/// The most stages of a ring.
pub(crate) const MAX_STAGES: u64 = 4;

/// Keys a block takes per step at point `c`: `keys` a lane group of `lanes` threads, or 16 a
/// warp on tensor cores.
pub(crate) fn step_keys(c: &DecodeConfig) -> u64 {
    c.threads() / c.lanes * c.keys
}

/// The decoding problem's shape: `units` units of `rows` rows over `keys` kept keys.
fn shape(p: &Problem) -> Option<(u64, u64, u64, (u64, u64))> {
    match p.shape {
        ProblemShape::Decode {
            units,
            rows,
            keys,
            d,
            dv,
        } => Some((units, rows, keys, (d, dv))),
        _ => None,
    }
}

/// As many splits as whole chunks of `steps` steps make, about `splits` and none shorter than
/// `min_steps` steps.
fn whole(steps: u64, splits: u64, min_steps: u64) -> u64 {
    let splits = splits.min(steps.div_ceil(min_steps)).clamp(1, MAX_SPLITS);
    steps.div_ceil(steps.div_ceil(splits))
}

/// The tensor-core kernel's heuristic point: about a block an SM, and the deepest ring up to 4
/// stages that a split's steps fill (one more than its steps: the fill issues all of them); 8
/// warps a block where their ring is as deep as a split's steps (or 3 stages) and a unit's
/// keys are split (one split of 8 warps spilled), else 4 warps, each split at least two
/// steps. Run 232 on the H200: 32 query heads over one K/V head (4k keys, head dim 128) at 4
/// warps, 8 splits of 16 units, 3 or 4 stages 0.0219 ms against 0.0245 at 2 stages and 0.0255
/// at 16 splits; run 242: there, 8 warps (at most 2 stages fit beside their merge) 0.0222
/// against 4 warps' 0.0209; 16 heads over 777 keys at head dim 96, 8 warps of one step a split
/// 0.0132-0.0134 against 4 warps' 0.0149; run 243: 32 heads over 1k keys at head dim 64, 8
/// warps of two steps a split, 3 stages 0.0111 against 2 stages' 0.0114.
fn mma_point((units, rows, keys, dims): (u64, u64, u64, (u64, u64)), t: &Target) -> DecodeConfig {
    let sms = u64::from(t.sms).max(1);
    let point = |warps: u64, min_steps: u64| {
        let steps = keys.div_ceil(warps * WARP_KEYS);
        let splits = whole(steps, (sms / units.max(1)).max(1), min_steps);
        let per_split = steps.div_ceil(splits);
        let fits = |s: u64| {
            block_shared(rows, dims, &DecodeConfig::mma(warps, splits, s))
                <= t.max_dynamic_shared_bytes
        };
        let stages = (2..=MAX_STAGES.min(per_split + 1)).rev().find(|&s| fits(s));
        let stages = stages.or_else(|| fits(2).then_some(2));
        (
            stages.map(|s| DecodeConfig::mma(warps, splits, s)),
            per_split,
        )
    };
    if let (Some(eight), per_split) = point(MMA_WARPS[1], 1)
        && eight.splits > 1
        && eight.stages >= per_split.min(3)
    {
        return eight;
    }
    let (four, _) = point(MMA_WARPS[0], 2);
    four.unwrap_or(DecodeConfig::mma(MMA_WARPS[0], 1, 2))
}

/// The CUDA-core kernel's heuristic point for `units` units of `rows` rows over `keys` keys of
/// head dims `dims`, where its registers hold the rows.
pub(crate) fn cuda_point(
    (units, rows, keys, dims): (u64, u64, u64, (u64, u64)),
    t: &Target,
) -> Option<DecodeConfig> {
    let lanes = fewest_lanes(rows, dims).filter(|_| rows <= CUDA_ROWS)?;
    let sms = u64::from(t.sms).max(1);
    let units = units.max(1);
    // Four keys a step where they fit beside those lanes' slices (run 226 on the H200: 0.057
    // ms against two keys' 0.075 on the grouped-query row, even on the multi-head).
    let step = if values(rows, dims, lanes, 4) <= VALUES {
        4
    } else {
        STEP_KEYS
    };
    let steps = keys.div_ceil(THREADS / lanes * step);
    // A two-stage ring (one step's copies in flight beside a step's math) and at most two
    // blocks an SM, where a split has two steps and two blocks fit an SM's shared memory: run
    // 228 on the H200 measured 0.0493 ms at 8 splits of the grouped-query row's 32 units
    // against 0.0513 at 16, 0.1321 at one split of the multi-head row's 256 units against
    // 0.1374 at 3 without a ring, and deeper rings 1-4% slower. Otherwise loads to registers
    // and about four blocks an SM, each at least four steps (run 226).
    let ring = DecodeConfig {
        lanes,
        keys: step,
        splits: whole(steps, (2 * sms / units).max(1), 2),
        stages: 2,
        mma: false,
        warps: THREADS / 32,
    };
    Some(
        if steps.div_ceil(ring.splits) >= 2 && block_shared(rows, dims, &ring) <= half_sm(t) {
            ring
        } else {
            DecodeConfig {
                splits: whole(steps, (4 * sms).div_ceil(units), 4),
                stages: 1,
                ..ring
            }
        },
    )
}

pub struct DecodeSpace;

impl TemplateSpace for DecodeSpace {
    fn template(&self) -> &'static str {
        "attention_decode"
    }
    fn version(&self) -> u32 {
        4
    }
    fn heuristic(&self, p: &Problem, t: &Target) -> Config {
        let (units, rows, keys, dims) = shape(p).unwrap_or((1, 1, 1, (64, 64)));
        // More rows than the CUDA-core kernel's registers hold: tensor cores.
        Config::Decode(
            cuda_point((units, rows, keys, dims), t)
                .unwrap_or_else(|| mma_point((units, rows, keys, dims), t)),
        )
    }
    fn enumerate(&self, p: &Problem, t: &Target) -> Vec<Config> {
        let (Config::Decode(h), Some((_, rows, _, dims))) = (self.heuristic(p, t), shape(p)) else {
            return vec![];
        };
        let splits = [
            1,
            h.splits / 4,
            h.splits / 2,
            h.splits,
            2 * h.splits,
            4 * h.splits,
        ];
        let mut out = vec![];
        if let Some(base) = fewest_lanes(rows, dims) {
            for lanes in [base, 2 * base, 4 * base] {
                for keys in [2, 4] {
                    for splits in splits {
                        for stages in 1..=MAX_STAGES {
                            out.push(Config::Decode(DecodeConfig {
                                lanes,
                                keys,
                                splits: splits.max(1),
                                stages,
                                mma: false,
                                warps: THREADS / 32,
                            }));
                        }
                    }
                }
            }
        }
        // Tensor-core points only where the CUDA-core kernel cannot hold the rows: at 4 rows
        // (run 232) they measured the same as the CUDA-core kernel's, and ptxas took all 255
        // registers of some (one split, two stages at head dim 128) and spilled.
        if rows > CUDA_ROWS && mma_fits(rows, dims) {
            for warps in MMA_WARPS {
                for splits in splits {
                    for stages in 2..=MAX_STAGES {
                        out.push(Config::Decode(DecodeConfig::mma(
                            warps,
                            splits.max(1),
                            stages,
                        )));
                    }
                }
            }
        }
        out
    }
    fn check(&self, c: &Config, p: &Problem, t: &Target) -> Result<(), String> {
        let (Config::Decode(c), Some((_, rows, keys, dims))) = (c, shape(p)) else {
            return Err(wrong("attention_decode"));
        };
        if c.mma {
            if !MMA_WARPS.contains(&c.warps) {
                return Err(format!("{c}: warps must be 4 or 8"));
            }
            // A one-split kernel of 8 warps took all 255 registers and spilled on the CUDA
            // backend (ptxas 13.0, head dim 128), so 8 warps share a unit's keys with others.
            if c.warps == MMA_WARPS[1] && c.splits == 1 {
                return Err(format!(
                    "{c}: 8 warps a block take a unit's keys in 2 splits or more"
                ));
            }
            if *c != DecodeConfig::mma(c.warps, c.splits, c.stages) {
                return Err(format!(
                    "{c}: a tensor-core point takes 32 lanes and 16 keys a step"
                ));
            }
            if rows <= CUDA_ROWS {
                return Err(format!(
                    "{c}: {rows} rows a unit take the CUDA-core kernel (tensor cores above {CUDA_ROWS})"
                ));
            }
            if !mma_fits(rows, dims) {
                return Err(format!(
                    "{c}: the tensor-core kernel takes up to {MMA_ROWS} rows of head dims up to 128 ({rows} rows of {} and {})",
                    dims.0, dims.1
                ));
            }
            if c.stages < 2 || c.stages > MAX_STAGES {
                return Err(format!("{c}: stages must be 2..={MAX_STAGES}"));
            }
        } else {
            if !c.lanes.is_power_of_two() || c.lanes > 32 {
                return Err(format!("{c}: lanes a key must be a power of two up to 32"));
            }
            if !matches!(c.keys, 2 | 4) {
                return Err(format!("{c}: keys a step must be 2 or 4"));
            }
            if rows > CUDA_ROWS {
                return Err(format!(
                    "{c}: {rows} rows a unit (at most {CUDA_ROWS} on CUDA cores)"
                ));
            }
            let v = values(rows, dims, c.lanes, c.keys);
            if v > VALUES {
                return Err(format!(
                    "{c}: {v} values a thread for {rows} rows of head dims {} and {} (at most {VALUES})",
                    dims.0, dims.1
                ));
            }
            if c.stages == 0 || c.stages > MAX_STAGES {
                return Err(format!("{c}: stages must be 1..={MAX_STAGES}"));
            }
        }
        let bytes = block_shared(rows, dims, c);
        if bytes > t.max_dynamic_shared_bytes {
            return Err(format!(
                "{c}: {bytes} bytes of shared memory a block (at most {})",
                t.max_dynamic_shared_bytes
            ));
        }
        if !c.mma && c.warps != THREADS / 32 {
            return Err(format!(
                "{c}: the CUDA-core kernel takes {} warps",
                THREADS / 32
            ));
        }
        let steps = keys.div_ceil(step_keys(c));
        if c.splits == 0 || c.splits > MAX_SPLITS.min(steps) {
            return Err(format!(
                "{c}: splits must be 1..={} ({steps} steps of {} keys)",
                MAX_SPLITS.min(steps),
                step_keys(c)
            ));
        }
        Ok(())
    }
    fn estimate_us(&self, c: &Config, p: &Problem, t: &Target) -> f64 {
        let (Config::Decode(c), Some((units, rows, keys, (d, dv)))) = (c, shape(p)) else {
            return f64::INFINITY;
        };
        // K and V once per unit, and the partials twice where split; each thread keeps a
        // step's 16-byte vectors in flight (counted as loads, not elements: run 226 measured
        // 32 blocks of 4 splits at 2.2× the time of 512 blocks of 16 on the grouped-query row).
        let bytes = (units * keys * (d + dv) * 2) as f64
            + if c.splits > 1 {
                (2 * units * c.splits * rows * (dv + 2) * 4) as f64
            } else {
                0.0
            };
        // A ring keeps its later stages' copies in flight while a step's math runs.
        let per_step = match c.mma {
            true => WARP_KEYS * (d.div_ceil(WIDTH) + dv.div_ceil(WIDTH)) / 32,
            false => step_vectors((d, dv), c.lanes, c.keys),
        };
        let vectors = per_step * c.stages.saturating_sub(1).max(1);
        // Blocks resident at once: as many as the shared memory holds.
        let per_sm = (t.max_dynamic_shared_bytes + 1024) / (block_shared(rows, (d, dv), c) + 1024);
        let blocks = (units * c.splits).min(per_sm * u64::from(t.sms));
        let in_flight = resident(blocks, c.threads(), t) * vectors as f64;
        memory_us(bytes, in_flight, 1.0, t)
    }
    fn parse(&self, text: &str) -> Result<Config, String> {
        let bad = || {
            format!(
                "`{text}` is not `lanes=N,keys=N,splits=N,stages=N` or `mma,warps=N,splits=N,stages=N`"
            )
        };
        let (word, f) = fields(text);
        match (word, f.as_slice()) {
            (
                Some("mma"),
                [
                    ("warps", Ok(warps)),
                    ("splits", Ok(splits)),
                    ("stages", Ok(stages)),
                ],
            ) => Ok(Config::Decode(DecodeConfig::mma(*warps, *splits, *stages))),
            (
                None,
                [
                    ("lanes", Ok(lanes)),
                    ("keys", Ok(keys)),
                    ("splits", Ok(splits)),
                    ("stages", Ok(stages)),
                ],
            ) => Ok(Config::Decode(DecodeConfig {
                lanes: *lanes,
                keys: *keys,
                splits: *splits,
                stages: *stages,
                mma: false,
                warps: THREADS / 32,
            })),
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(units: u64, rows: u64, keys: u64, d: u64) -> Problem {
        Problem {
            template: "attention_decode",
            shape: ProblemShape::Decode {
                units,
                rows,
                keys,
                d,
                dv: d,
            },
            dtype: irc_ir::DType::BF16,
            bytes: 0,
            flops: 0,
            signature: String::new(),
        }
    }

    /// The heuristic on the H100: 32 units of 4 grouped-query rows over 8k keys at head dim
    /// 128 take 16 lanes a key (one 16-byte vector each of Q and O a lane, and of K and V for
    /// each of 4 keys a step: 128 values; 8 lanes would hold 192 at 2 keys) and 16 splits of 16
    /// steps (about 4 blocks on each of 132 SMs); one row fits 8 lanes, 8 rows need 16 (160
    /// values at 2 keys a step).
    #[test]
    fn the_heuristic_fits_the_registers_and_fills_the_gpu() {
        let t = Target::h100();
        let h = |p: &Problem| match DecodeSpace.heuristic(p, &t) {
            Config::Decode(c) => c,
            c => panic!("{c:?}"),
        };
        assert_eq!(
            h(&problem(32, 4, 8192, 128)),
            DecodeConfig {
                lanes: 16,
                keys: 4,
                splits: 8,
                stages: 2,
                mma: false,
                warps: 4
            }
        );
        // Its ring: two stages of 8 vectors a thread (32 KiB) beside the merge's 17 KiB, and
        // 2 blocks on each of 132 SMs (8 splits of 32 units); on an A100, of 108 SMs, 6.
        let a100 = Target::a100();
        match DecodeSpace.heuristic(&problem(32, 4, 8192, 128), &a100) {
            Config::Decode(c) => assert_eq!((c.splits, c.stages), (6, 2)),
            c => panic!("{c:?}"),
        }
        // The multi-head row's 256 units: one split, its ring's 64 KiB beside the merge.
        assert_eq!(
            h(&problem(256, 1, 4096, 128)),
            DecodeConfig {
                lanes: 8,
                keys: 4,
                splits: 1,
                stages: 2,
                mma: false,
                warps: 4
            }
        );
        // A split of one step (32 keys) loads to registers.
        assert_eq!(h(&problem(1, 4, 32, 128)).stages, 1);
        assert_eq!(h(&problem(1, 4, 64, 128)).stages, 2);
        assert_eq!(h(&problem(256, 1, 4096, 128)).lanes, 8);
        assert_eq!(h(&problem(256, 8, 4096, 128)).lanes, 16);
        assert_eq!(h(&problem(256, 8, 4096, 128)).keys, 2);
        // Few keys: no more splits than pairs of steps (10 steps of 32 keys).
        assert_eq!(h(&problem(4, 4, 300, 128)).splits, 5);
        for p in [problem(32, 4, 8192, 128), problem(1, 8, 100, 256)] {
            let all = super::super::config::space(&p, &t);
            assert!(all.contains(&DecodeSpace.heuristic(&p, &t)));
            for c in all {
                assert_eq!(DecodeSpace.parse(&c.to_string()), Ok(c));
            }
        }
        // 16 rows of head dim 256 fit no lane count, nor the tensor-core kernel.
        assert!(fewest_lanes(16, (256, 256)).is_none());
        assert!(!mma_fits(16, (256, 256)));
        // Multi-query attention's 16 folded rows: tensor cores, 4 splits of 64 steps of 64
        // keys for 32 units (about a block an SM), a 4-stage ring; its points parse back.
        let mq = problem(32, 16, 4096, 128);
        assert_eq!(h(&mq), DecodeConfig::mma(4, 4, 4));
        let all = super::super::config::space(&mq, &t);
        assert!(all.iter().all(|c| matches!(c, Config::Decode(c) if c.mma)));
        for c in &all {
            assert_eq!(DecodeSpace.parse(&c.to_string()).as_ref(), Ok(c));
        }
        assert_eq!(all[0].to_string(), "mma,warps=4,splits=4,stages=4");
        // A short cache (16 heads over 777 keys at head dim 96, 2 units): 8 warps, whose
        // two-stage ring holds a split's one step.
        assert_eq!(h(&problem(2, 16, 777, 96)), DecodeConfig::mma(8, 7, 2));
        // 32 heads over 1k keys at head dim 64 (32 units): 8 warps, 4 splits of two steps, a
        // three-stage ring (the fill issues both).
        assert_eq!(h(&problem(32, 16, 1024, 64)), DecodeConfig::mma(8, 4, 3));
        // Units enough for a block an SM each: one split, so 4 warps.
        assert_eq!(h(&problem(256, 16, 512, 64)).warps, 4);
        assert!(
            DecodeSpace
                .check(&Config::Decode(DecodeConfig::mma(8, 1, 2)), &mq, &t)
                .is_err()
        );
        assert!(
            super::super::config::space(&problem(2, 16, 777, 96), &t)
                .contains(&Config::Decode(DecodeConfig::mma(8, 7, 2)))
        );
        // CUDA-core points for 16 rows, and a tensor-core point of one stage, are refused.
        let cuda16 = Config::Decode(DecodeConfig {
            lanes: 32,
            keys: 2,
            splits: 1,
            stages: 2,
            mma: false,
            warps: 4,
        });
        assert!(DecodeSpace.check(&cuda16, &mq, &t).is_err());
        assert!(
            DecodeSpace
                .check(&Config::Decode(DecodeConfig::mma(4, 2, 1)), &mq, &t)
                .is_err()
        );
        // A few rows take the CUDA-core kernel only.
        let gqa = problem(32, 4, 8192, 128);
        let few = super::super::config::space(&gqa, &t);
        assert!(few.iter().all(|c| matches!(c, Config::Decode(c) if !c.mma)));
        let mma = Config::Decode(DecodeConfig::mma(4, 4, 4));
        assert!(DecodeSpace.check(&mma, &gqa, &t).is_err());
        assert!(DecodeSpace.parse("lanes=8,splits=2").is_err());
        // Four keys a step at 16 lanes: 128 values for 4 rows at head dim 128.
        let four = Config::Decode(DecodeConfig {
            lanes: 16,
            keys: 4,
            splits: 8,
            stages: 2,
            mma: false,
            warps: 4,
        });
        assert!(
            DecodeSpace
                .check(&four, &problem(32, 4, 8192, 128), &t)
                .is_ok()
        );
    }
}
