//! The decoding attention kernel's configuration space (`attention/decode.rs`): how many lanes
//! share a key, and how many blocks share a unit's keys.
//!
//! A key's `lanes` threads each hold `ceil(vectors / lanes)` 16-byte vectors of its K and V
//! rows and the same slices of the unit's Q and O rows in f32: fewer lanes a key mean fewer
//! butterfly steps a score and more keys in flight, more lanes fewer registers. The heuristic
//! takes the fewest whose values fit [`VALUES`] a thread at 2 keys a step (the kernel then
//! builds without spills on either backend), and 4 keys a step where those still fit. `splits` blocks share a
//! unit's keys (its partials merged by the last to arrive): the heuristic splits until about
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
}

impl fmt::Display for DecodeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lanes={},keys={},splits={}",
            self.lanes, self.keys, self.splits
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

/// Shared memory a block takes (f32): its lane groups' `(m, l)` and O rows, each row's weights
/// and `(M, L)`, and the last block's weights of the splits and its rows' `L`.
pub(crate) fn shared_bytes(rows: u64, dv: u64, lanes: u64, splits: u64) -> u64 {
    let groups = THREADS / lanes;
    4 * (groups * rows * (dv + 3) + 2 * rows + if splits > 1 { (splits + 2) * rows } else { 0 })
}

/// Keys a block takes per step at `lanes` a key and `keys` a lane group.
pub(crate) fn step_keys(lanes: u64, keys: u64) -> u64 {
    THREADS / lanes * keys
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

pub struct DecodeSpace;

impl TemplateSpace for DecodeSpace {
    fn template(&self) -> &'static str {
        "attention_decode"
    }
    fn version(&self) -> u32 {
        1
    }
    fn heuristic(&self, p: &Problem, t: &Target) -> Config {
        let (units, rows, keys, dims) = shape(p).unwrap_or((1, 1, 1, (64, 64)));
        let lanes = fewest_lanes(rows, dims).unwrap_or(32);
        // Four keys a step where they fit beside those lanes' slices (run 226 on the H200:
        // 0.057 ms against two keys' 0.075 on the grouped-query row, even on the multi-head).
        let step = if values(rows, dims, lanes, 4) <= VALUES {
            4
        } else {
            STEP_KEYS
        };
        let steps = keys.div_ceil(step_keys(lanes, step));
        // About four blocks an SM, each at least four steps of keys.
        let splits = (4 * u64::from(t.sms).max(1))
            .div_ceil(units.max(1))
            .min(steps.div_ceil(4))
            .clamp(1, MAX_SPLITS);
        // As many as whole chunks of steps make.
        let splits = steps.div_ceil(steps.div_ceil(splits));
        Config::Decode(DecodeConfig {
            lanes,
            keys: step,
            splits,
        })
    }
    fn enumerate(&self, p: &Problem, t: &Target) -> Vec<Config> {
        let Config::Decode(h) = self.heuristic(p, t) else {
            return vec![];
        };
        let mut out = vec![];
        for lanes in [h.lanes, 2 * h.lanes, 4 * h.lanes] {
            for (keys, splits) in [2, 4].into_iter().flat_map(|keys| {
                [
                    1,
                    h.splits / 4,
                    h.splits / 2,
                    h.splits,
                    2 * h.splits,
                    4 * h.splits,
                ]
                .map(|s| (keys, s))
            }) {
                out.push(Config::Decode(DecodeConfig {
                    lanes,
                    keys,
                    splits: splits.max(1),
                }));
            }
        }
        out
    }
    fn check(&self, c: &Config, p: &Problem, t: &Target) -> Result<(), String> {
        let (Config::Decode(c), Some((_, rows, keys, dims))) = (c, shape(p)) else {
            return Err(wrong("attention_decode"));
        };
        if !c.lanes.is_power_of_two() || c.lanes > 32 {
            return Err(format!("{c}: lanes a key must be a power of two up to 32"));
        }
        if !matches!(c.keys, 2 | 4) {
            return Err(format!("{c}: keys a step must be 2 or 4"));
        }
        let v = values(rows, dims, c.lanes, c.keys);
        if v > VALUES {
            return Err(format!(
                "{c}: {v} values a thread for {rows} rows of head dims {} and {} (at most {VALUES})",
                dims.0, dims.1
            ));
        }
        let bytes = shared_bytes(rows, dims.1, c.lanes, c.splits);
        if bytes > t.max_shared_bytes {
            return Err(format!(
                "{c}: {bytes} bytes of shared memory a block (at most {})",
                t.max_shared_bytes
            ));
        }
        let steps = keys.div_ceil(step_keys(c.lanes, c.keys));
        if c.splits == 0 || c.splits > MAX_SPLITS.min(steps) {
            return Err(format!(
                "{c}: splits must be 1..={} ({steps} steps of {} keys)",
                MAX_SPLITS.min(steps),
                step_keys(c.lanes, c.keys)
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
        let vectors = values(rows, (d, dv), c.lanes, c.keys) / (rows + c.keys) * c.keys / WIDTH;
        let in_flight = resident(units * c.splits, THREADS, t) * vectors as f64;
        memory_us(bytes, in_flight, 1.0, t)
    }
    fn parse(&self, text: &str) -> Result<Config, String> {
        let bad = || format!("`{text}` is not `lanes=N,keys=N,splits=N`");
        let (word, f) = fields(text);
        match (word, f.as_slice()) {
            (
                None,
                [
                    ("lanes", Ok(lanes)),
                    ("keys", Ok(keys)),
                    ("splits", Ok(splits)),
                ],
            ) => Ok(Config::Decode(DecodeConfig {
                lanes: *lanes,
                keys: *keys,
                splits: *splits,
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
                splits: 16
            }
        );
        assert_eq!(h(&problem(256, 1, 4096, 128)).lanes, 8);
        assert_eq!(h(&problem(256, 8, 4096, 128)).lanes, 16);
        assert_eq!(h(&problem(256, 8, 4096, 128)).keys, 2);
        // Few keys: no more splits than steps of keys (four each).
        assert_eq!(h(&problem(4, 4, 300, 128)).splits, 3);
        for p in [problem(32, 4, 8192, 128), problem(1, 8, 100, 256)] {
            let all = super::super::config::space(&p, &t);
            assert!(all.contains(&DecodeSpace.heuristic(&p, &t)));
            for c in all {
                assert_eq!(DecodeSpace.parse(&c.to_string()), Ok(c));
            }
        }
        // 16 rows of head dim 256 fit no lane count.
        assert!(fewest_lanes(16, (256, 256)).is_none());
        assert!(DecodeSpace.parse("lanes=8,splits=2").is_err());
        // Four keys a step at 16 lanes: 128 values for 4 rows at head dim 128.
        let four = Config::Decode(DecodeConfig {
            lanes: 16,
            keys: 4,
            splits: 8,
        });
        assert!(
            DecodeSpace
                .check(&four, &problem(32, 4, 8192, 128), &t)
                .is_ok()
        );
    }
}
