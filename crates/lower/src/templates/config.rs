//! Configuration spaces: each tunable template declares its space as data.
//!
//! A space ([`TemplateSpace`], one row of [`SPACES`]) says, for a kernel's [`Problem`]:
//! - `heuristic`: the point the template picks on its own (what every build uses without a
//!   tuning cache);
//! - `enumerate`: the candidate points, unchecked;
//! - `check`: whether the template can build a point for this problem on a `Target` (threads,
//!   shared memory, registers, grid limits, divisibility), with the reason when not;
//! - `estimate_us`: a roofline estimate from the point's tiles and grid, which ranks the
//!   candidates before any is measured (the tuner measures the best `k`);
//! - `parse`: the point from its stable text (`Display`), as the cache and `--explain` write it.
//!
//! A point is a [`Config`]; lowering takes one per kernel in
//! [`crate::LowerOptions::configs`], keyed by [`Problem::key`], so code generation stays free
//! of IO. A space's `version` is part of the key: bump it whenever the meaning of a point or
//! the template's code for it changes, and stale cache entries stop matching.
//!
//! Adding a template's space (the Hopper GEMM, attention): a variant of [`Config`] holding the
//! template's own typed point, a unit struct implementing [`TemplateSpace`], a row in
//! [`SPACES`], and the template reading its point with `Builder::config`.

use super::MmaConfig;
use super::problem::{Problem, ProblemShape};
pub use super::reduction_config::{ReductionConfig, ReductionSchedule, ReductionSpace};
use super::split::{RowSchedule, STEP};
use crate::lower::{MAX_BLOCKS, THREADS};
use irc_target::Target;
use std::fmt;

/// Where a kernel's configuration came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigSource {
    /// The template's heuristic (no configuration given for the kernel).
    Heuristic,
    /// [`crate::LowerOptions::configs`] (a tuning cache, a test).
    Given,
    /// [`crate::LowerOptions::mma`], for every tensor-core matmul.
    Flag,
    /// The configuration given for the kernel fails the space's check (a stale cache entry):
    /// the heuristic's point was used; the reason.
    Rejected(String),
}

/// The configuration one group's kernel(s) were built with.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    /// The group's name.
    pub group: String,
    /// The kernels built for it (a split row group has two).
    pub kernels: Vec<String>,
    pub problem: Problem,
    /// `None` for a template without a configuration space.
    pub config: Option<Config>,
    pub source: ConfigSource,
}

/// One point of one template's space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Config {
    Pointwise(PointwiseConfig),
    Reduction(ReductionConfig),
    Row(RowConfig),
    Mma(MmaConfig),
    Wgmma(super::wgmma_config::WgmmaConfig),
    Attention(super::attention_config::AttentionConfig),
    Decode(super::decode_config::DecodeConfig),
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Config::Pointwise(c) => c.fmt(f),
            Config::Reduction(c) => c.fmt(f),
            Config::Row(c) => c.fmt(f),
            Config::Mma(c) => c.fmt(f),
            Config::Wgmma(c) => c.fmt(f),
            Config::Attention(c) => c.fmt(f),
            Config::Decode(c) => c.fmt(f),
        }
    }
}

impl Config {
    /// A point of `template`'s space from its text.
    pub fn parse(template: &str, text: &str) -> Result<Config, String> {
        space_of(template)
            .ok_or_else(|| format!("template `{template}` has no configuration space"))?
            .parse(text)
    }
}

/// The pointwise template: `threads` per block, and the grid either one thread per element
/// (`blocks_per_sm: None`, at most 2^20 blocks) or `blocks_per_sm` blocks per SM looping over
/// the elements (grid-stride).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PointwiseConfig {
    pub threads: u64,
    pub blocks_per_sm: Option<u64>,
}

/// The row template's schedule (`split.rs` describes each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowConfig {
    /// `warps` warps per block, each row on a warp or (rows of fewer than 32 vectors) part of
    /// one, the row cached in registers. `lanes`: threads per row (a power of two up to 32),
    /// each then caching more of its row; `None` takes one lane per vector, up to 32.
    Warp { warps: u64, lanes: Option<u64> },
    /// A block of `threads` per row, the row cached in registers.
    Block { threads: u64 },
    /// Each row over `ceil(k / chunk)` blocks of 256 threads: one cooperative launch where
    /// they all fit on the GPU at once, else two.
    Split { chunk: u64 },
    /// A block of `threads` per row, `x` read twice (statistics, then output).
    Streamed { threads: u64 },
}

/// Registers a thread may cache of its row (the kernel IR's register-tensor limit is 256; 32
/// keeps the cached schedules free of spills).
const MAX_CACHED: u64 = 32;
/// Threads an SM holds at once (sm_80, sm_90).
const SM_THREADS: u64 = 2048;
/// Blocks an SM holds at once.
const SM_BLOCKS: u64 = 32;
/// Shared memory an SM holds, bytes (sm_90: 228 KiB).
const SM_SHARED: u64 = 228 * 1024;
/// Grid y and z limit.
pub(crate) const GRID_YZ: u64 = 65535;

/// A template's configuration space (module docs).
pub trait TemplateSpace: Sync {
    /// The template's name in [`super::TEMPLATES`].
    fn template(&self) -> &'static str;
    /// The space's version, part of every cache key.
    fn version(&self) -> u32;
    /// The template's own choice on `target`.
    fn heuristic(&self, p: &Problem, target: &Target) -> Config;
    /// Candidate points, before `check`.
    fn enumerate(&self, p: &Problem, target: &Target) -> Vec<Config>;
    /// Whether the template builds `c` for `p` on `target`.
    fn check(&self, c: &Config, p: &Problem, target: &Target) -> Result<(), String>;
    /// Estimated time of the kernel(s), µs, for ranking.
    fn estimate_us(&self, c: &Config, p: &Problem, target: &Target) -> f64;
    /// A point from its `Display` text.
    fn parse(&self, text: &str) -> Result<Config, String>;
}

/// Every declared space.
pub static SPACES: &[&dyn TemplateSpace] = &[
    &PointwiseSpace,
    &ReductionSpace,
    &RowSpace,
    &MmaSpace,
    &super::wgmma_config::WgmmaSpace,
    &super::attention_config::AttentionSpace,
    &super::decode_config::DecodeSpace,
];

/// The space of `template`, if it declares one.
pub fn space_of(template: &str) -> Option<&'static dyn TemplateSpace> {
    SPACES.iter().copied().find(|s| s.template() == template)
}

/// Every point of `p`'s space that passes `check` on `target`, without repeats, in
/// enumeration order (the heuristic's point included when it passes).
pub fn space(p: &Problem, target: &Target) -> Vec<Config> {
    let Some(s) = space_of(p.template) else {
        return vec![];
    };
    let mut out: Vec<Config> = vec![];
    for c in std::iter::once(s.heuristic(p, target)).chain(s.enumerate(p, target)) {
        if !out.contains(&c) && s.check(&c, p, target).is_ok() {
            out.push(c);
        }
    }
    out
}

/// `space(p)` ordered by the estimate, fastest first (ties in enumeration order).
pub fn ranked(p: &Problem, target: &Target) -> Vec<(Config, f64)> {
    let Some(s) = space_of(p.template) else {
        return vec![];
    };
    let mut out: Vec<(Config, f64)> = space(p, target)
        .into_iter()
        .map(|c| (c, s.estimate_us(&c, p, target)))
        .collect();
    out.sort_by(|a, b| a.1.total_cmp(&b.1));
    out
}

pub(crate) fn wrong(template: &str) -> String {
    format!("not a point of the {template} space")
}

/// `key=value` pairs, the value parsed.
pub(crate) type Fields<'a> = Vec<(&'a str, Result<u64, String>)>;

/// Key=value fields of a point's text (`threads=256,blocks_per_sm=8`), after an optional
/// leading word (`row,threads=256`).
pub(crate) fn fields(text: &str) -> (Option<&str>, Fields<'_>) {
    let mut word = None;
    let mut out = vec![];
    for part in text.split(',').map(str::trim) {
        match part.split_once('=') {
            Some((k, v)) => out.push((
                k.trim(),
                v.trim()
                    .parse::<u64>()
                    .map_err(|_| format!("`{v}` is not a number")),
            )),
            None if word.is_none() && out.is_empty() => word = Some(part),
            None => out.push((part, Err(format!("`{part}` is not key=value")))),
        }
    }
    (word, out)
}

/// `warp,warps=N[,lanes=L]` (the row and reduction templates' warp schedules).
pub(crate) fn warp_fields(text: &str) -> Result<(u64, Option<u64>), String> {
    let bad = || format!("`{text}` is not `warp,warps=N[,lanes=N]`");
    let (mut warps, mut lanes) = (None, None);
    for (k, v) in fields(text).1 {
        match k {
            "warps" if warps.is_none() => warps = Some(v?),
            "lanes" if lanes.is_none() => lanes = Some(v?),
            _ => return Err(bad()),
        }
    }
    Ok((warps.ok_or_else(bad)?, lanes))
}

/// `,lanes=L` when a warp schedule names its lanes a row.
pub(crate) fn lanes_suffix(lanes: Option<u64>) -> String {
    lanes.map(|l| format!(",lanes={l}")).unwrap_or_default()
}

/// The one field `name` of `text`, for a point with exactly that field.
pub(crate) fn one_field(text: &str, word: &str, name: &str) -> Result<u64, String> {
    let (w, f) = fields(text);
    match (w, f.as_slice()) {
        (Some(w), [(k, v)]) if w == word && *k == name => v.clone(),
        _ => Err(format!("`{text}` is not `{word},{name}=N`")),
    }
}

/// Memory-bound time: `bytes` at the target's bandwidth, slowed when fewer elements are in
/// flight than the memory system needs to stay busy (about one per thread slot: 2048 per SM,
/// Little's law at H100 latency and bandwidth), plus the launches. `in_flight` is the resident
/// threads times the loads each issues before it waits (its cached values, its unrolled
/// loads).
pub(crate) fn memory_us(bytes: f64, in_flight: f64, launches: f64, t: &Target) -> f64 {
    let need = f64::from(t.sms) * SM_THREADS as f64;
    let fill = (in_flight / need).clamp(0.02, 1.0);
    bytes / (t.peak_gbps * 1e3) / fill + launches * t.launch_us
}

/// Threads resident at once for `blocks` blocks of `threads`.
pub(crate) fn resident(blocks: u64, threads: u64, t: &Target) -> f64 {
    let per_sm = (SM_THREADS / threads.max(1)).min(SM_BLOCKS);
    (blocks.min(per_sm * u64::from(t.sms)) * threads) as f64
}

pub struct PointwiseSpace;

impl TemplateSpace for PointwiseSpace {
    fn template(&self) -> &'static str {
        "pointwise"
    }
    fn version(&self) -> u32 {
        1
    }
    fn heuristic(&self, _: &Problem, _: &Target) -> Config {
        Config::Pointwise(PointwiseConfig {
            threads: u64::from(THREADS),
            blocks_per_sm: None,
        })
    }
    fn enumerate(&self, _: &Problem, _: &Target) -> Vec<Config> {
        let mut out = vec![];
        for threads in [64, 128, 256, 512, 1024] {
            for blocks_per_sm in [None, Some(2), Some(4), Some(8), Some(16)] {
                out.push(Config::Pointwise(PointwiseConfig {
                    threads,
                    blocks_per_sm,
                }));
            }
        }
        out
    }
    fn check(&self, c: &Config, _: &Problem, _: &Target) -> Result<(), String> {
        let Config::Pointwise(c) = c else {
            return Err(wrong("pointwise"));
        };
        if !(32..=1024).contains(&c.threads) || c.threads % 32 != 0 {
            return Err(format!(
                "{c}: threads must be a multiple of 32 in 32..=1024"
            ));
        }
        if c.blocks_per_sm
            .is_some_and(|b| b == 0 || b * c.threads > SM_THREADS)
        {
            return Err(format!("{c}: more threads per SM than an SM holds"));
        }
        Ok(())
    }
    fn estimate_us(&self, c: &Config, p: &Problem, t: &Target) -> f64 {
        let (Config::Pointwise(c), ProblemShape::Pointwise { n }) = (c, &p.shape) else {
            return f64::INFINITY;
        };
        let blocks = pointwise_grid(*c, *n, u64::from(t.sms));
        memory_us(p.bytes as f64, resident(blocks, c.threads, t), 1.0, t)
    }
    fn parse(&self, text: &str) -> Result<Config, String> {
        let (word, f) = fields(text);
        let bad = || format!("`{text}` is not `threads=N[,blocks_per_sm=N]`");
        let mut c = PointwiseConfig {
            threads: 0,
            blocks_per_sm: None,
        };
        if word.is_some() || f.is_empty() {
            return Err(bad());
        }
        for (k, v) in f {
            match k {
                "threads" => c.threads = v?,
                "blocks_per_sm" => c.blocks_per_sm = Some(v?),
                _ => return Err(bad()),
            }
        }
        Ok(Config::Pointwise(c))
    }
}

/// The pointwise grid for `n` elements on `sms` SMs.
pub(crate) fn pointwise_grid(c: PointwiseConfig, n: u64, sms: u64) -> u64 {
    let full = n.div_ceil(c.threads).clamp(1, MAX_BLOCKS);
    match c.blocks_per_sm {
        Some(b) => full.min(b * sms).max(1),
        None => full,
    }
}

impl fmt::Display for PointwiseConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "threads={}", self.threads)?;
        if let Some(b) = self.blocks_per_sm {
            write!(f, ",blocks_per_sm={b}")?;
        }
        Ok(())
    }
}

/// The row template's heuristic ([`RowSchedule::choose`]) on `sms` SMs as a point of its
/// space.
pub(crate) fn row_heuristic(rows: u64, k: u64, passes: u64, sms: u64) -> RowConfig {
    match RowSchedule::choose(rows, k, passes, sms) {
        // Rows longer than 512: two warps a block, so a block's slot frees as soon as its two
        // rows are done (262144 rows of 1024 f16, softmax on an H200, `irc tune`: 8 warps
        // 0.2604 ms, 4 0.2608, 2 0.2563, 1 0.2558; one warp a block caps an SM at 32 warps).
        // Shorter rows, several to a warp, take four (rows of 128: two warps 1.08-1.24x
        // torch.compile, eight 1.00-1.04x, run 105; four against eight on rows of 128 to 512,
        // run 139: layernorm 2.5-3% faster, softmax and rmsnorm equal or up to 2.5% faster;
        // `bench/gpu/NOTES.md`).
        RowSchedule::WarpCached => RowConfig::Warp {
            warps: if k > 512 { 2 } else { 4 },
            lanes: None,
        },
        RowSchedule::BlockCached { threads } => RowConfig::Block { threads },
        RowSchedule::Split { chunk, .. } => RowConfig::Split { chunk },
        // Streamed rows are longer than 8192 elements: 512 or 1024 threads keep more of each
        // row's loads in flight.
        RowSchedule::Streamed { threads } => RowConfig::Streamed { threads },
    }
}

pub struct RowSpace;

impl TemplateSpace for RowSpace {
    fn template(&self) -> &'static str {
        "row"
    }
    /// 3: `warp,warps=N,lanes=N`.
    fn version(&self) -> u32 {
        3
    }
    fn heuristic(&self, p: &Problem, t: &Target) -> Config {
        let ProblemShape::Row { rows, k, passes } = p.shape else {
            return Config::Row(RowConfig::Streamed { threads: 256 });
        };
        Config::Row(row_heuristic(rows, k, passes, u64::from(t.sms)))
    }
    fn enumerate(&self, p: &Problem, _: &Target) -> Vec<Config> {
        let mut out = vec![];
        for warps in [1, 2, 4, 8, 16] {
            out.push(RowConfig::Warp { warps, lanes: None });
        }
        // Rows of fewer than 32 vectors also on half or a quarter of their lanes, each lane
        // caching two or four vectors: more loads in flight a thread, shorter reductions.
        if let ProblemShape::Row { k, .. } = p.shape {
            let natural = k.div_ceil(8).next_power_of_two().min(32);
            for lanes in [natural / 2, natural / 4] {
                if lanes >= 1 && natural < 32 {
                    for warps in [4, 8] {
                        out.push(RowConfig::Warp {
                            warps,
                            lanes: Some(lanes),
                        });
                    }
                }
            }
        }
        for threads in [128, 256, 512, 1024] {
            out.push(RowConfig::Block { threads });
            out.push(RowConfig::Streamed { threads });
        }
        if let ProblemShape::Row { k, .. } = p.shape {
            let mut chunk = STEP;
            while chunk < k {
                out.push(RowConfig::Split { chunk });
                chunk *= 2;
            }
        }
        out.into_iter().map(Config::Row).collect()
    }
    fn check(&self, c: &Config, p: &Problem, _: &Target) -> Result<(), String> {
        let (Config::Row(c), ProblemShape::Row { rows, k, .. }) = (c, &p.shape) else {
            return Err(wrong("row"));
        };
        let (rows, k) = (*rows, *k);
        let threads_ok = |t: u64| (32..=1024).contains(&t) && t.is_power_of_two();
        match *c {
            RowConfig::Warp { warps, .. } if warps == 0 || 32 * warps > 1024 => {
                Err(format!("{c}: 1..=32 warps per block"))
            }
            RowConfig::Warp {
                lanes: Some(lanes), ..
            } if lanes == 0 || lanes > 32 || !lanes.is_power_of_two() => {
                Err(format!("{c}: lanes must be a power of two in 1..=32"))
            }
            RowConfig::Warp { lanes, .. } if k.div_ceil(lanes.unwrap_or(32)) > MAX_CACHED => Err(
                format!("{c}: a row of {k} is more than {MAX_CACHED} values per lane"),
            ),
            RowConfig::Block { threads } | RowConfig::Streamed { threads }
                if !threads_ok(threads) =>
            {
                Err(format!("{c}: threads must be a power of two in 32..=1024"))
            }
            RowConfig::Block { threads } if k.div_ceil(threads) > MAX_CACHED => Err(format!(
                "{c}: a row of {k} is more than {MAX_CACHED} values per thread"
            )),
            RowConfig::Split { chunk } if chunk == 0 || chunk % STEP != 0 => {
                Err(format!("{c}: the chunk is not a multiple of {STEP}"))
            }
            RowConfig::Split { chunk } if k.div_ceil(chunk) < 2 => {
                Err(format!("{c}: a row of {k} is a single chunk"))
            }
            RowConfig::Split { .. } if rows > GRID_YZ => {
                Err(format!("{c}: {rows} rows exceed the grid's y limit"))
            }
            _ => Ok(()),
        }
    }
    fn estimate_us(&self, c: &Config, p: &Problem, t: &Target) -> f64 {
        let (Config::Row(c), ProblemShape::Row { rows, k, .. }) = (c, &p.shape) else {
            return f64::INFINITY;
        };
        let (rows, k) = (*rows, *k);
        // Bytes of one read of the row data (of the group's bytes, about half is x).
        let read = p.bytes as f64 / 2.0;
        match *c {
            RowConfig::Warp { warps, lanes } => {
                // A row on `lanes` lanes of 8-element vectors, idle lanes past the row's end.
                let lanes = lanes.unwrap_or(k.div_ceil(8).next_power_of_two().min(32));
                let blocks = rows.div_ceil(warps * (32 / lanes)).clamp(1, MAX_BLOCKS);
                let per_lane = k.div_ceil(lanes);
                let used = k as f64 / (per_lane * lanes) as f64;
                let flight = resident(blocks, 32 * warps, t) * used * per_lane as f64;
                memory_us(p.bytes as f64, flight, 1.0, t)
            }
            RowConfig::Block { threads } => {
                let per_thread = k.div_ceil(threads);
                let used = k as f64 / (per_thread * threads) as f64;
                let blocks = rows.clamp(1, MAX_BLOCKS);
                let flight = resident(blocks, threads, t) * used * per_thread as f64;
                // A block reduction per row: more threads, more steps.
                let tree = (rows as f64) * (threads as f64).log2() * 1e-3 / f64::from(t.sms);
                memory_us(p.bytes as f64, flight, 1.0, t) + tree
            }
            RowConfig::Split { chunk } => {
                let blocks = k.div_ceil(chunk) * rows;
                let used = k as f64 / (k.div_ceil(chunk) * chunk) as f64;
                // Four unrolled loads per thread; one cooperative launch where every block is
                // resident at once (`split.rs`), else two.
                let flight = resident(blocks, 256, t) * used * 4.0;
                let coop = super::split::COOPERATIVE_PER_SM * u64::from(t.sms);
                let launches = if blocks <= coop { 1.0 } else { 2.0 };
                memory_us(p.bytes as f64 + read, flight, launches, t)
            }
            RowConfig::Streamed { threads } => {
                let blocks = rows.clamp(1, MAX_BLOCKS);
                // Two passes over x, whatever the composite (`composite_passes`).
                let bytes = p.bytes as f64 + read;
                memory_us(bytes, resident(blocks, threads, t), 1.0, t)
            }
        }
    }
    fn parse(&self, text: &str) -> Result<Config, String> {
        let c = match fields(text).0 {
            Some("warp") => {
                let (warps, lanes) = warp_fields(text)?;
                RowConfig::Warp { warps, lanes }
            }
            Some("block") => RowConfig::Block {
                threads: one_field(text, "block", "threads")?,
            },
            Some("split") => RowConfig::Split {
                chunk: one_field(text, "split", "chunk")?,
            },
            Some("streamed") => RowConfig::Streamed {
                threads: one_field(text, "streamed", "threads")?,
            },
            _ => {
                return Err(format!(
                    "`{text}` is not `warp,warps=N[,lanes=N]`, `block,threads=N`, `split,chunk=N` or \
                     `streamed,threads=N`"
                ));
            }
        };
        Ok(Config::Row(c))
    }
}

impl fmt::Display for RowConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RowConfig::Warp { warps, lanes } => {
                write!(f, "warp,warps={warps}{}", lanes_suffix(*lanes))
            }
            RowConfig::Block { threads } => write!(f, "block,threads={threads}"),
            RowConfig::Split { chunk } => write!(f, "split,chunk={chunk}"),
            RowConfig::Streamed { threads } => write!(f, "streamed,threads={threads}"),
        }
    }
}

pub struct MmaSpace;

impl TemplateSpace for MmaSpace {
    fn template(&self) -> &'static str {
        "matmul_mma"
    }
    /// 2: the `cp.async` ring (a stage count; swizzled stages instead of padded tiles).
    fn version(&self) -> u32 {
        2
    }
    fn heuristic(&self, p: &Problem, target: &Target) -> Config {
        let shape = match p.shape {
            ProblemShape::Matmul { batch, m, n, k } => (m, n, k, batch),
            _ => (0, 0, 0, 0),
        };
        Config::Mma(MmaConfig::heuristic_for(
            target,
            p.dtype.size_bytes(),
            shape,
        ))
    }
    fn enumerate(&self, p: &Problem, target: &Target) -> Vec<Config> {
        MmaConfig::space_for(target, p.dtype.size_bytes())
            .into_iter()
            .map(Config::Mma)
            .collect()
    }
    fn check(&self, c: &Config, p: &Problem, target: &Target) -> Result<(), String> {
        match c {
            Config::Mma(c) => c.check_for(target, p.dtype.size_bytes()),
            _ => Err(wrong("matmul_mma")),
        }
    }
    fn estimate_us(&self, c: &Config, p: &Problem, t: &Target) -> f64 {
        let (Config::Mma(c), ProblemShape::Matmul { batch, m, n, k }) = (c, &p.shape) else {
            return f64::INFINITY;
        };
        let (tm, tn) = (m.div_ceil(c.bm), n.div_ceil(c.bn));
        let tiles = tm * tn * batch;
        // Blocks per SM: threads, and the shared tiles (the kernel IR's static limit per
        // block, 228 KiB per SM).
        let smem = (c.bm + c.bn) * (c.bk + 8) * p.dtype.size_bytes();
        let per_sm = (SM_THREADS / c.threads())
            .min(SM_SHARED / smem.max(1))
            .clamp(1, SM_BLOCKS);
        let slots = per_sm * u64::from(t.sms);
        let waves = tiles.div_ceil(slots);
        let wave_eff = tiles as f64 / (waves * slots) as f64;
        // Padding of edge tiles.
        let pad = (m * n) as f64 / (tm * c.bm * tn * c.bn) as f64;
        // Shared-memory fragment traffic per mma: a warp tile of mt x nt atoms loads mt + nt
        // fragments for mt * nt mma; small warp tiles stall on ldmatrix.
        let (mt, nt) = (c.mt() as f64, c.nt() as f64);
        let reuse = (2.0 * mt * nt / (mt + nt) / 4.0).min(1.0);
        let issue = (0.35 + 0.65 * reuse) * (c.warps_m * c.warps_n).min(8) as f64 / 8.0;
        // f32 runs as 3xTF32: three mma of half the 16-bit rate per product.
        let rate = if p.dtype == irc_ir::DType::F32 {
            6.0
        } else {
            1.0
        };
        let compute =
            rate * p.flops as f64 / (t.peak_tflops * 1e6) / (wave_eff * pad * issue.max(0.05));
        // Operands re-read per tile row/column (from L2, about 3x DRAM bandwidth).
        let reread = ((m * k * tn + n * k * tm) * batch * p.dtype.size_bytes()) as f64;
        let traffic = reread / (3.0 * t.peak_gbps * 1e3) + p.bytes as f64 / (t.peak_gbps * 1e3);
        compute.max(traffic) + t.launch_us
    }
    fn parse(&self, text: &str) -> Result<Config, String> {
        text.parse().map(Config::Mma)
    }
}
