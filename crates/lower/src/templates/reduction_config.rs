//! The reduction template's configuration space ([`ReductionSpace`], a row of
//! [`super::config::SPACES`]): a schedule (`templates/reduction.rs`, `templates/column.rs`,
//! the split in `templates/split.rs`) and the cache policy of the input's loads.

use super::config::{
    Config, GRID_YZ, TemplateSpace, fields, lanes_suffix, memory_us, one_field, resident,
    warp_fields, wrong,
};
use super::problem::{Problem, ProblemShape};
use crate::lower::{MAX_BLOCKS, THREADS, row_threads};
use irc_kir::CacheHint;
use irc_target::Target;
use std::fmt;

/// The reduction template's point: its schedule, and how its loads of the reduced input are
/// cached (`loads`: `EvictFirst` marks the input read once, PTX's `ld.global.cs`; written
/// `,evict_first` after the schedule).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReductionConfig {
    pub schedule: ReductionSchedule,
    pub loads: CacheHint,
}

/// The reduction template's schedule: a block of `threads` per output row; `warps` warps per
/// block, each output row on a group of `lanes` lanes (a power of two up to 32; `None`: one
/// lane a vector of the row, up to 32), the lanes striding its vectors; or (a leading axis
/// reduced) a thread per output in blocks of `threads`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReductionSchedule {
    Row {
        threads: u64,
    },
    Warp {
        warps: u64,
        lanes: Option<u64>,
    },
    Column {
        threads: u64,
    },
    /// Few long rows: each row over `ceil(k / chunk)` blocks of 256 threads writing partials,
    /// added in order by the last block of the row to arrive (one launch).
    Split {
        chunk: u64,
    },
    /// A leading axis reduced into few outputs: the split column reduction
    /// (`templates/column.rs`; where the axis is split across blocks, the last block of a tile
    /// to arrive adds the partials).
    ColumnSplit,
}

/// A row's lanes on the warp schedule by default: one for each of its `vecs` vectors, up to 32.
pub(crate) fn natural_lanes(vecs: u64) -> u64 {
    vecs.next_power_of_two().min(32)
}

/// The vectors of a row of `k` elements of `dtype` (16 bytes where `k` allows).
fn row_vectors(k: u64, dtype: irc_ir::DType) -> u64 {
    k.div_ceil(super::vector::vector_width(dtype, k))
}

/// The heuristic's lanes a row on the warp schedule: two of the row's vectors a lane where the
/// row has at least 8 (a lane's loads are in flight together before it adds them); `None`,
/// one lane a vector, where that is what they come to. Measured on the H200 (run 256, every
/// point timed after an L2 flush), rows of 8, 12, 16 and 64 vectors: two vectors a lane
/// 0.0746, 0.0299, 0.0728 and 0.0720 ms against one (0.0750+, –, 0.0779, –) and four (0.0847,
/// 0.0320, 0.0740, 0.0724).
pub(crate) fn warp_lanes(k: u64, dtype: irc_ir::DType) -> Option<u64> {
    let vecs = row_vectors(k, dtype);
    let lanes = natural_lanes(vecs.div_ceil(2));
    (vecs >= 8 && lanes < natural_lanes(vecs)).then_some(lanes)
}

/// Outputs from which a reduction over leading axes runs a thread per output (the column
/// schedule): 32 per SM fill it with coalesced loads.
pub(crate) fn column_min_outputs(sms: u64) -> u64 {
    32 * sms
}

/// A split reduction's chunks are multiples of this many elements (256 threads × 4 vectors ×
/// 4 elements).
pub(crate) const SPLIT_STEP: u64 = 4096;

/// Long rows fewer than this are split across blocks; this many and more (up to 2 per SM) take a
/// block each. Measured on the H200 (run 254, each point of the space timed after an L2
/// flush): 64 rows of 512K f32 elements 0.0399 ms on 64 blocks of 1024 threads against the
/// split's best 0.0426 (1024 blocks of 256); 256 rows of 64K f32 0.0223 on blocks of 512
/// against 0.0244; 128 rows of 200K f16 0.0217 on blocks of 1024 against the split's 0.0223 at
/// its heuristic's chunk (0.0203 at a 4× longer one); 16 and 8 rows of 4M and 8M f32 need the
/// split (16 or 8 blocks would leave most SMs idle).
pub(crate) const SPLIT_BELOW_ROWS: u64 = 64;

/// The chunk of a split reduction of `rows` rows of `k`: about 8 blocks per SM in all.
pub(crate) fn split_chunk(rows: u64, k: u64, sms: u64) -> u64 {
    let splits = (8 * sms).div_ceil(rows.max(1));
    k.div_ceil(splits).div_ceil(SPLIT_STEP).max(1) * SPLIT_STEP
}

pub struct ReductionSpace;

impl TemplateSpace for ReductionSpace {
    fn template(&self) -> &'static str {
        "reduction"
    }
    fn version(&self) -> u32 {
        4
    }
    fn heuristic(&self, p: &Problem, t: &Target) -> Config {
        let threads = u64::from(THREADS);
        let schedule = match p.shape {
            ProblemShape::Reduction {
                rows,
                innermost_kept: true,
                ..
            } if rows >= column_min_outputs(u64::from(t.sms)) => {
                ReductionSchedule::Column { threads }
            }
            ProblemShape::Reduction {
                innermost_kept: true,
                ..
            } => ReductionSchedule::ColumnSplit,
            // Fewer long rows than 2 per SM: under `SPLIT_BELOW_ROWS` of them, each split over
            // about 8 blocks per SM; else a block of 1024 threads a row (512 past one row an
            // SM).
            ProblemShape::Reduction { k, rows, .. }
                if rows < 2 * u64::from(t.sms) && k >= 4 * SPLIT_STEP =>
            {
                if rows < SPLIT_BELOW_ROWS {
                    ReductionSchedule::Split {
                        chunk: split_chunk(rows, k, u64::from(t.sms)),
                    }
                } else {
                    ReductionSchedule::Row {
                        threads: if rows <= u64::from(t.sms) { 1024 } else { 512 },
                    }
                }
            }
            // Rows of at most 4096 elements, enough of them for a warp each to fill the GPU:
            // warps (or lane groups) per row, no block barrier.
            ProblemShape::Reduction { k, rows, .. }
                if k <= 4096 && rows >= 8 * u64::from(t.sms) =>
            {
                ReductionSchedule::Warp {
                    warps: threads / 32,
                    lanes: warp_lanes(k, p.dtype),
                }
            }
            ProblemShape::Reduction { k, .. } => ReductionSchedule::Row {
                threads: u64::from(row_threads(k)),
            },
            _ => ReductionSchedule::Row { threads },
        };
        Config::Reduction(ReductionConfig {
            schedule,
            loads: reduction_loads(p, t),
        })
    }
    fn enumerate(&self, p: &Problem, t: &Target) -> Vec<Config> {
        // The heuristic's schedule (its split chunk need not be a power-of-two multiple of
        // the step) with either hint, then the grid of schedules.
        let Config::Reduction(h) = self.heuristic(p, t) else {
            return vec![];
        };
        let mut schedules = vec![h.schedule];
        for threads in [32, 64, 128, 256, 512, 1024] {
            schedules.push(ReductionSchedule::Row { threads });
            schedules.push(ReductionSchedule::Column { threads });
        }
        // Rows also on a half, a quarter or an eighth of their natural lanes, each lane then
        // loading more vectors.
        let natural = match p.shape {
            ProblemShape::Reduction { k, .. } => natural_lanes(row_vectors(k, p.dtype)),
            _ => 32,
        };
        for warps in [1, 2, 4, 8, 16] {
            schedules.push(ReductionSchedule::Warp { warps, lanes: None });
            for lanes in [natural / 2, natural / 4, natural / 8] {
                if lanes >= 1 {
                    schedules.push(ReductionSchedule::Warp {
                        warps,
                        lanes: Some(lanes),
                    });
                }
            }
        }
        schedules.push(ReductionSchedule::ColumnSplit);
        if let ProblemShape::Reduction { k, .. } = p.shape {
            let mut chunk = SPLIT_STEP;
            while chunk < k {
                schedules.push(ReductionSchedule::Split { chunk });
                chunk *= 2;
            }
        }
        let mut out = vec![];
        for schedule in schedules {
            for loads in [CacheHint::Normal, CacheHint::EvictFirst] {
                out.push(Config::Reduction(ReductionConfig { schedule, loads }));
            }
        }
        out
    }
    fn check(&self, c: &Config, p: &Problem, _: &Target) -> Result<(), String> {
        let Config::Reduction(c) = c else {
            return Err(wrong("reduction"));
        };
        let threads = match c.schedule {
            ReductionSchedule::Row { threads } | ReductionSchedule::Column { threads } => threads,
            ReductionSchedule::Warp { lanes: Some(l), .. }
                if l == 0 || l > 32 || !l.is_power_of_two() =>
            {
                return Err(format!("{c}: lanes must be a power of two in 1..=32"));
            }
            ReductionSchedule::Warp { warps, .. } => 32 * warps,
            ReductionSchedule::Split { chunk } => {
                let ProblemShape::Reduction { k, rows, .. } = p.shape else {
                    return Err(wrong("reduction"));
                };
                if chunk == 0 || chunk % SPLIT_STEP != 0 || k.div_ceil(chunk) < 2 {
                    return Err(format!(
                        "{c}: the chunk is a multiple of {SPLIT_STEP} shorter than the row"
                    ));
                }
                if rows > GRID_YZ {
                    return Err(format!("{c}: {rows} rows exceed the grid's y limit"));
                }
                256
            }
            ReductionSchedule::ColumnSplit => 256,
        };
        if !(32..=1024).contains(&threads) || !threads.is_power_of_two() {
            return Err(format!("{c}: threads must be a power of two in 32..=1024"));
        }
        let column_ok = matches!(
            p.shape,
            ProblemShape::Reduction {
                innermost_kept: true,
                ..
            }
        );
        if matches!(
            c.schedule,
            ReductionSchedule::Column { .. } | ReductionSchedule::ColumnSplit
        ) && !column_ok
        {
            return Err(format!(
                "{c}: the column schedule needs the innermost dimension kept"
            ));
        }
        Ok(())
    }
    fn estimate_us(&self, c: &Config, p: &Problem, t: &Target) -> f64 {
        let (Config::Reduction(c), ProblemShape::Reduction { rows, k, .. }) = (c, &p.shape) else {
            return f64::INFINITY;
        };
        let (rows, k) = (*rows as f64, *k as f64);
        match c.schedule {
            ReductionSchedule::Row { threads } => {
                let th = threads as f64;
                // Idle lanes on short rows, and a block reduction per row (log2 steps).
                let used = k / ((k / th).ceil() * th);
                let blocks = (rows as u64).clamp(1, MAX_BLOCKS);
                let tree = rows * th.log2() * 2e-6 / f64::from(t.sms);
                memory_us(p.bytes as f64, resident(blocks, threads, t) * used, 1.0, t) + tree
            }
            ReductionSchedule::Warp { warps, lanes } => {
                // A row per lane group; idle lanes where a row is short of the group; each
                // lane's vectors (up to 4) in flight.
                let vecs = (k / 4.0).ceil().max(1.0);
                let lanes = lanes.map_or(vecs.log2().ceil().exp2().min(32.0), |l| l as f64);
                let per_lane = (vecs / lanes).ceil();
                let used = (vecs / (per_lane * lanes)).min(1.0);
                let per_block = (warps as f64) * (32.0 / lanes).max(1.0);
                let blocks = ((rows / per_block).ceil() as u64).clamp(1, MAX_BLOCKS);
                memory_us(
                    p.bytes as f64,
                    resident(blocks, 32 * warps, t) * used * per_lane.min(4.0),
                    1.0,
                    t,
                )
            }
            ReductionSchedule::Column { threads } => {
                let blocks = (rows as u64).div_ceil(threads).clamp(1, MAX_BLOCKS);
                memory_us(p.bytes as f64, resident(blocks, threads, t), 1.0, t)
            }
            ReductionSchedule::Split { chunk } => {
                let blocks = (k as u64).div_ceil(chunk) * rows as u64;
                memory_us(p.bytes as f64, resident(blocks, 256, t) * 4.0, 2.0, t)
            }
            ReductionSchedule::ColumnSplit => {
                let blocks = 4 * u64::from(t.sms);
                memory_us(p.bytes as f64, resident(blocks, 256, t) * 4.0, 2.0, t)
            }
        }
    }
    fn parse(&self, text: &str) -> Result<Config, String> {
        let hinted = text
            .trim()
            .rsplit_once(',')
            .and_then(|(rest, h)| Some((rest, CacheHint::from_name(h)?)));
        let (text, loads) = hinted.unwrap_or((text, CacheHint::Normal));
        let schedule = match fields(text).0 {
            Some("row") => ReductionSchedule::Row {
                threads: one_field(text, "row", "threads")?,
            },
            Some("column") => ReductionSchedule::Column {
                threads: one_field(text, "column", "threads")?,
            },
            Some("warp") => {
                let (warps, lanes) = warp_fields(text)?;
                ReductionSchedule::Warp { warps, lanes }
            }
            Some("split") => ReductionSchedule::Split {
                chunk: one_field(text, "split", "chunk")?,
            },
            Some("column_split") if text == "column_split" => ReductionSchedule::ColumnSplit,
            _ => {
                return Err(format!(
                    "`{text}` is not `row,threads=N`, `warp,warps=N[,lanes=N]`, `column,threads=N`, `split,chunk=N` or `column_split` (then optionally `,evict_first`)"
                ));
            }
        };
        Ok(Config::Reduction(ReductionConfig { schedule, loads }))
    }
}

/// The heuristic's cache policy for a reduction's input loads: evict-first where the kernel
/// streams more than a quarter of the L2 and at most four times the L2. Measured on the H200
/// (run 251, 18 reductions, each timed both ways after an L2 flush): evict-first 4-12% faster
/// from 49 to 128 MiB (the split, split column and column schedules alike), mixed at 256 MiB
/// (-5% to +3%), 4% slower at 512 MiB; no faster at 8 MiB, where the input's lines may
/// instead serve the next kernel from the L2.
fn reduction_loads(p: &Problem, t: &Target) -> CacheHint {
    if p.bytes > t.l2_bytes / 4 && p.bytes <= 4 * t.l2_bytes {
        CacheHint::EvictFirst
    } else {
        CacheHint::Normal
    }
}

impl fmt::Display for ReductionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.schedule, self.loads.suffix(','))
    }
}

impl fmt::Display for ReductionSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReductionSchedule::Row { threads } => write!(f, "row,threads={threads}"),
            ReductionSchedule::Column { threads } => write!(f, "column,threads={threads}"),
            ReductionSchedule::Warp { warps, lanes } => {
                write!(f, "warp,warps={warps}{}", lanes_suffix(*lanes))
            }
            ReductionSchedule::Split { chunk } => write!(f, "split,chunk={chunk}"),
            ReductionSchedule::ColumnSplit => write!(f, "column_split"),
        }
    }
}
