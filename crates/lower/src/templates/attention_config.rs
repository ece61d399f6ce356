//! The Hopper attention kernel's configuration space: the number of consumer warpgroups,
//! whether each pipelines its key tiles, whether they take turns issuing their products, and
//! how many blocks share an SM.
//!
//! A block has one producer warpgroup and `consumers` consumer warpgroups of 64 query rows
//! each (block rows `64 * consumers`), key tiles of 128 ([`keys_per_tile`]: 64 above head dim
//! 128). Two consumers may use 240 registers a
//! thread, three 160 ([`consumer_regs`]): three overlap one's softmax with two others'
//! products, two waste fewer rows where the sequence does not divide the block and mask fewer
//! scores on a causal diagonal. `pipelined` (two consumers, head dims up to 64: two score
//! buffers) issues a tile's `Q·Kᵀ` beside the last tile's `P·V` and runs the softmax while the
//! latter computes. `pingpong` makes the consumers take turns issuing `Q·Kᵀ` (pipelined: and
//! the last tile's `P·V` beside it) through named barriers, so that one's softmax runs while
//! the others' products hold the tensor cores. Measured on an H100 before the kernel staged its
//! output it won at most 2% and lost up to 14% elsewhere (`bench/gpu/NOTES.md`, run 80); on
//! the H200 since (runs 122-123) it wins 2-5% without a causal mask where a consumer pipelines
//! or the head dim is 128, and loses 3-4% elsewhere (and always with three consumers), which is
//! what the heuristic follows. `occupancy = 2` puts two blocks on an SM, each with half its
//! registers (two consumers: 104 a thread) and half its shared memory, on key tiles of 64: one
//! block's softmax, its units' first tile and its output then overlap the other block's
//! products. It fits the serial schedule at head dims up to 64 of a *plain* kernel (a scale and
//! a one-sided mask band, no epilogue: `ProblemShape::Attention::plain`); ptxas spills where
//! the prologue reads a tensor or does more per score.

use super::config::{Config, TemplateSpace};
use super::problem::{Problem, ProblemShape};
use irc_target::Target;
use std::fmt;

/// Registers a producer warpgroup keeps (`setmaxnreg.dec`).
pub(crate) const PRODUCER_REGS: u64 = 24;
/// Keys per tile up to head dim 128.
pub(crate) const BKV: u64 = 128;

/// Keys per tile for head dims `d` (Q·Kᵀ) and `dv` (V) with `occupancy` blocks an SM:
/// [`BKV`], or 64 above head dim 128 — K and V tiles of 128 keys by 256 would leave room for
/// one stage in shared memory, and 64 f32 scores a thread beside 128 O accumulators for no
/// more than 240 registers — or where two blocks share the SM (half its registers each).
pub(crate) fn keys_per_tile(d: u64, dv: u64, occupancy: u64) -> u64 {
    if d.max(dv) > 128 || occupancy > 1 {
        64
    } else {
        BKV
    }
}

/// A point of the Hopper attention kernel's space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttentionConfig {
    /// Consumer warpgroups per block: 2 or 3.
    pub consumers: u64,
    /// Whether each consumer pipelines its key tiles (S of one beside P·V of the last).
    pub pipelined: bool,
    /// Whether the consumers take turns issuing their products.
    pub pingpong: bool,
    /// Blocks resident on an SM: 1, or 2 (each with half the SM's registers and shared
    /// memory, key tiles of 64), so that one block's softmax and its units' first and last
    /// tiles overlap the other's products.
    pub occupancy: u64,
}

impl fmt::Display for AttentionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "consumers={}", self.consumers)?;
        if self.pipelined {
            write!(f, ",pipelined")?;
        }
        if self.pingpong {
            write!(f, ",pingpong")?;
        }
        if self.occupancy != 1 {
            write!(f, ",occupancy={}", self.occupancy)?;
        }
        Ok(())
    }
}

impl std::str::FromStr for AttentionConfig {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not `consumers=N[,pipelined][,pingpong][,occupancy=N]`");
        let mut parts = s.split(',');
        let consumers = parts
            .next()
            .and_then(|p| p.strip_prefix("consumers="))
            .and_then(|v| v.parse().ok())
            .ok_or_else(bad)?;
        let (mut pipelined, mut pingpong, mut occupancy) = (false, false, None);
        for p in parts {
            match p {
                _ if occupancy.is_some() => return Err(bad()),
                "pipelined" if !pipelined && !pingpong => pipelined = true,
                "pingpong" if !pingpong => pingpong = true,
                _ => match p.strip_prefix("occupancy=").and_then(|v| v.parse().ok()) {
                    Some(n) => occupancy = Some(n),
                    None => return Err(bad()),
                },
            }
        }
        Ok(AttentionConfig {
            consumers,
            pipelined,
            pingpong,
            occupancy: occupancy.unwrap_or(1),
        })
    }
}

impl AttentionConfig {
    /// The heuristic, for `batch` batch entries on `sms` SMs: three consumers for head dims
    /// of 128 without a causal mask over keys that fill their tiles (no guards: the
    /// registers fit), where the share of the GPU a 192-row block keeps busy — its rows
    /// inside the sequence times its last wave's fill — is at least 95% of a 128-row
    /// block's (run 122 on the H200: three consumers 8% faster on 8k keys, two 5% faster on
    /// grouped-query attention over 2k keys, where 704 units fill their sixth wave a third),
    /// else two; pipelined for head dims of 64 and below without a causal mask over at least
    /// 4 whole key tiles (measured faster there — run 176: 14% on 512 keys — slower on
    /// causal or head-dim-128 problems); ping-pong without a causal mask where a consumer
    /// pipelines over at least 8 key tiles or the head dim is over 128 (runs 122-123: 2-5%
    /// faster there, 3% slower on causal rows; run 176: 8% slower pipelined over 512 keys;
    /// run 177: 6-7% slower with two consumers at head dim 128 over 1k and 2k keys, even at
    /// 80; runs 173, 177 and 185: 1-12% slower with three consumers on every row measured,
    /// attention_long 0.826 against 0.798 ms); two blocks an SM where two consumers run the
    /// serial schedule at head dims up to 64 (run 182: causal d64 over 2k keys 6% faster,
    /// the serial schedule 5-11% faster on every non-causal d32-d64 row, equal over 77 keys;
    /// slower than one pipelined block, whose two score buffers do not fit half the
    /// registers) — under a causal mask only with two units or more a block (run 221: one
    /// block an SM 16% faster on 256 units).
    pub fn heuristic(
        sq: u64,
        sk: u64,
        (d, dv): (u64, u64),
        (causal, plain): (bool, bool),
        batch: u64,
        sms: u64,
    ) -> AttentionConfig {
        // A head dim between the tiles' 64-column steps is computed as the next one.
        let (d, dv) = (d.next_multiple_of(64), dv.next_multiple_of(64));
        let busy = |rows: u64| busy_share(sq, batch, rows, sms);
        let whole = sk.is_multiple_of(keys_per_tile(d, dv, 1));
        // Three only where their accumulators fit three consumers' registers (not at head
        // dim 256).
        let point = |consumers, occupancy| AttentionConfig {
            consumers,
            pipelined: false,
            pingpong: false,
            occupancy,
        };
        let fits = |c: AttentionConfig| {
            consumer_need(&c, (d, dv), causal, sq, sk) <= consumer_regs(c.consumers, c.occupancy)
        };
        let fits_three = fits(point(3, 1));
        let consumers =
            if dv > 64 && fits_three && !causal && whole && busy(192) >= 0.95 * busy(128) {
                3
            } else {
                2
            };
        let pipelined = consumers == 2 && dv <= 64 && !causal && whole && sk >= 4 * BKV;
        // Two blocks an SM where a consumer's serial schedule fits half the registers, at head
        // dims up to 64 (Q's tiles and the K/V ring fit half the shared memory) and with no
        // more of a prologue than a scale and a mask band. Under a causal mask, only where each
        // of the 2 · sms blocks gets two units or more: with fewer, the longest unit (the last
        // query tile's, every key tile) runs alone at half an SM's speed and sets the time
        // (run 221: 256 units of a batch-1 Llama layer, 0.0286 ms at two blocks an SM, 0.0243
        // at one; run 182: 2048 units, two blocks 6% faster).
        let balanced = !causal || units(sq, batch, point(2, 2).rows()) >= 4 * sms;
        let occupancy = if consumers == 2
            && !pipelined
            && plain
            && balanced
            && d.max(dv) <= 64
            && fits(point(2, 2))
        {
            2
        } else {
            1
        };
        AttentionConfig {
            consumers,
            pipelined,
            pingpong: occupancy == 1 && !causal && ((pipelined && sk >= 8 * BKV) || dv > 128),
            occupancy,
        }
    }

    /// Query rows per block.
    pub fn rows(&self) -> u64 {
        64 * self.consumers
    }
}

/// The registers each consumer thread may use with `occupancy` blocks an SM: a block starts
/// with its share of the 64K-register file evenly over its threads (a multiple of 8, what
/// `__launch_bounds__(threads, occupancy)` lets the assembler take), the producer gives all
/// but [`PRODUCER_REGS`] back and the consumers share them, a multiple of 8, at most 240:
/// one block with two consumers 240, with three 160; two blocks with two consumers 104.
pub(crate) fn consumer_regs(consumers: u64, occupancy: u64) -> u64 {
    let threads = 128 * (consumers + 1);
    let entry = 65536 / occupancy.max(1) / threads / 8 * 8;
    ((entry * threads).saturating_sub(128 * PRODUCER_REGS) / (128 * consumers.max(1)) / 8 * 8)
        .min(240)
}

/// The registers a consumer thread of `c` needs over `sq` queries and `sk` keys: the S
/// accumulators (two buffers when pipelined) and O's, keys/2 + dv/2, beside about 24 more
/// (addresses, row state) — ptxas fits head dim 128 in 160 without spilling — about 16 more
/// for a causal mask's two prologue paths (masked and whole tiles), 16 for the guards of keys
/// that do not fill the last tile and 8 for queries that do not fill the last block. O's
/// columns are whole tiles of 64. Measured by ptxas at two blocks an SM (104 registers, head
/// dims 32-64): causal, or keys or queries in tails, fit; causal with either tail, or both
/// tails, spill 4-84 bytes.
fn consumer_need(c: &AttentionConfig, (d, dv): (u64, u64), causal: bool, sq: u64, sk: u64) -> u64 {
    let dv = dv.next_multiple_of(64);
    let bkv = keys_per_tile(d.next_multiple_of(64), dv, c.occupancy);
    let extra = 16 * u64::from(causal)
        + 16 * u64::from(!sk.is_multiple_of(bkv))
        + 8 * u64::from(!sq.is_multiple_of(c.rows()));
    let buffers = if c.pipelined { 2 } else { 1 };
    buffers * bkv / 2 + dv / 2 + 24 + extra
}

/// The Q buffers and K/V stages a block holds in its share of the SM's shared memory
/// (`max_dynamic_shared` a block alone, `occupancy` blocks an SM, each reserving 1 KiB; 1 KiB
/// for the barriers): two Q tiles (the next unit's loads while this one's run) where two
/// stages still fit beside them, else one; then up to 4 stages. `q_elems` and `stage_elems`
/// count 16-bit elements (a Q tile; a K tile and a V tile).
pub(crate) fn ring(
    max_dynamic_shared: u64,
    occupancy: u64,
    q_elems: u64,
    stage_elems: u64,
) -> (u64, u64) {
    let shared = ((max_dynamic_shared + 1024) / occupancy.max(1) - 1024).min(max_dynamic_shared);
    let beside = |q_tiles: u64| {
        let budget = shared.saturating_sub(q_tiles * q_elems * 2 + 1024);
        (budget / (stage_elems * 2).max(1)).min(4)
    };
    let q_tiles = if beside(2) >= 2 { 2 } else { 1 };
    (q_tiles, beside(q_tiles))
}

/// The kernel's work units: query tiles of `rows` rows over `batch` batch entries of `sq` rows.
fn units(sq: u64, batch: u64, rows: u64) -> u64 {
    batch.max(1) * sq.div_ceil(rows.max(1))
}

/// The share of the GPU that blocks of `rows` query rows keep busy over `batch` batch entries
/// of `sq` rows on `sms` SMs: the rows inside the sequence (the tail block's padding is
/// wasted) times the last wave's fill.
fn busy_share(sq: u64, batch: u64, rows: u64, sms: u64) -> f64 {
    let tiles = sq.div_ceil(rows.max(1));
    let units = units(sq, batch, rows);
    let waves = units.div_ceil(sms.max(1));
    (sq as f64 / (tiles * rows.max(1)) as f64) * (units as f64 / (waves * sms.max(1)) as f64)
}

pub struct AttentionSpace;

impl TemplateSpace for AttentionSpace {
    fn template(&self) -> &'static str {
        "attention_wgmma"
    }
    fn version(&self) -> u32 {
        5
    }
    fn heuristic(&self, p: &Problem, t: &Target) -> Config {
        let (sq, sk, d, dv, causal, plain, batch) = match p.shape {
            ProblemShape::Attention {
                sq,
                sk,
                d,
                dv,
                causal,
                plain,
                batch,
            } => (sq, sk, d, dv, causal, plain, batch),
            _ => (0, 0, 64, 64, false, true, 1),
        };
        Config::Attention(AttentionConfig::heuristic(
            sq,
            sk,
            (d, dv),
            (causal, plain),
            batch,
            u64::from(t.sms),
        ))
    }
    fn enumerate(&self, _: &Problem, _: &Target) -> Vec<Config> {
        [(2, false, 1), (3, false, 1), (2, true, 1), (2, false, 2)]
            .into_iter()
            .flat_map(|(consumers, pipelined, occupancy)| {
                [false, true].map(|pingpong| {
                    Config::Attention(AttentionConfig {
                        consumers,
                        pipelined,
                        pingpong,
                        occupancy,
                    })
                })
            })
            .collect()
    }
    fn check(&self, c: &Config, p: &Problem, t: &Target) -> Result<(), String> {
        let (
            Config::Attention(c),
            ProblemShape::Attention {
                sq,
                sk,
                d,
                dv,
                causal,
                plain,
                ..
            },
        ) = (c, &p.shape)
        else {
            return Err("not a point of attention_wgmma's space".into());
        };
        if !matches!(c.consumers, 2 | 3) {
            return Err(format!("{} consumer warpgroups (2 or 3)", c.consumers));
        }
        if c.pipelined && (c.consumers != 2 || dv.next_multiple_of(64) > 64) {
            return Err(format!(
                "a pipelined kernel has two consumers and head dim at most 64 (two score buffers); {} consumers, head dim {dv}",
                c.consumers
            ));
        }
        if !matches!(c.occupancy, 1 | 2) {
            return Err(format!("{} blocks an SM (1 or 2)", c.occupancy));
        }
        if c.occupancy == 2 && !plain {
            return Err(
                "two blocks an SM take no more of a prologue than a scale and a mask band (a tensor read or more arithmetic per score spills half the registers)"
                    .into(),
            );
        }
        // Q's tiles and at least two K/V stages in the block's share of shared memory.
        let (dk, dvp) = (d.next_multiple_of(64), dv.next_multiple_of(64));
        let bkv = keys_per_tile(dk, dvp, c.occupancy);
        let (_, stages) = ring(
            t.max_dynamic_shared_bytes,
            c.occupancy,
            c.rows() * dk,
            bkv * (dk + dvp),
        );
        if stages < 2 {
            return Err(format!(
                "{stages} K/V stage(s) of {bkv} keys beside Q's tile (head dims {d} and {dv}) in {} block(s) an SM's shared memory",
                c.occupancy
            ));
        }
        let need = consumer_need(c, (*d, *dv), *causal, *sq, *sk);
        let regs = consumer_regs(c.consumers, c.occupancy);
        if need > regs {
            return Err(format!(
                "{need} registers a consumer thread; {} consumers in {} block(s) an SM have {regs}",
                c.consumers, c.occupancy
            ));
        }
        Ok(())
    }
    fn estimate_us(&self, c: &Config, p: &Problem, t: &Target) -> f64 {
        let (
            Config::Attention(c),
            ProblemShape::Attention {
                batch, sq, sk, dv, ..
            },
        ) = (c, &p.shape)
        else {
            return f64::INFINITY;
        };
        // The products of the sequence's rows at the peak, over the share of the GPU the
        // blocks keep busy (the tail block's padding, the last wave's fill).
        let flops = 4.0 * (batch * sq * sk * dv) as f64;
        let slots = u64::from(t.sms) * c.occupancy;
        flops / (t.peak_tflops * 1e6) / busy_share(*sq, *batch, c.rows(), slots) + t.launch_us
    }
    fn parse(&self, text: &str) -> Result<Config, String> {
        text.parse().map(Config::Attention)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An f16 attention problem of 1024 queries over 1024 keys, values of head dim 64.
    fn problem(batch: u64, d: u64, causal: bool, plain: bool) -> Problem {
        Problem {
            template: "attention_wgmma",
            shape: ProblemShape::Attention {
                batch,
                sq: 1024,
                sk: 1024,
                d,
                dv: 64,
                causal,
                plain,
            },
            dtype: irc_ir::DType::F16,
            bytes: 0,
            flops: 0,
            signature: String::new(),
        }
    }

    #[test]
    fn points_print_and_parse_back() {
        let problem = problem(1, 64, false, true);
        for p in AttentionSpace.enumerate(&problem, &Target::h100()) {
            let Config::Attention(c) = p else {
                panic!("{p:?}")
            };
            assert_eq!(c.to_string().parse::<AttentionConfig>(), Ok(c));
        }
        assert!(
            "consumers=2,pingpong,pipelined"
                .parse::<AttentionConfig>()
                .is_err()
        );
        assert!(
            "consumers=2,pipelined,pipelined"
                .parse::<AttentionConfig>()
                .is_err()
        );
    }

    /// The heuristic's choices on the H200's 132 SMs for the attention set's shapes (runs
    /// 122-123): three consumers only where their last wave is about as full as two's.
    #[test]
    fn the_heuristic_follows_the_measurements() {
        let h = |sq, dv, causal, batch| {
            AttentionConfig::heuristic(sq, sq, (dv, dv), (causal, true), batch, 132)
        };
        // Grouped-query attention over 2k keys: 704 units of 192 rows fill their sixth wave a
        // third; 1024 of 128 rows fill their eighth three quarters.
        assert_eq!(h(2048, 128, false, 64).to_string(), "consumers=2");
        assert_eq!(h(8192, 128, false, 32).to_string(), "consumers=3");
        assert_eq!(h(4096, 128, false, 64).to_string(), "consumers=3");
        assert_eq!(h(1024, 128, false, 256).to_string(), "consumers=2");
        assert_eq!(
            h(4096, 64, false, 64).to_string(),
            "consumers=2,pipelined,pingpong"
        );
        assert_eq!(h(512, 64, false, 512).to_string(), "consumers=2,pipelined");
        // The serial schedule at head dims up to 64: two blocks an SM (run 182).
        assert_eq!(
            h(256, 64, false, 512).to_string(),
            "consumers=2,occupancy=2"
        );
        assert_eq!(
            h(2048, 64, true, 128).to_string(),
            "consumers=2,occupancy=2"
        );
        assert_eq!(
            h(1024, 32, true, 128).to_string(),
            "consumers=2,occupancy=2"
        );
        // Not under a causal mask with fewer units than two a block (run 221).
        assert_eq!(h(1024, 64, true, 32).to_string(), "consumers=2");
        assert_eq!(h(1024, 32, true, 64).to_string(), "consumers=2");
        // Not where Q·Kᵀ's head dim is larger: at 256 a 64 KB Q tile leaves half the shared
        // memory one K/V stage (the kernel could not be built, and the chain ran unfused).
        let c = AttentionConfig::heuristic(1024, 1024, (256, 64), (true, true), 32, 132);
        assert_eq!(c.to_string(), "consumers=2");
        let two = AttentionConfig { occupancy: 2, ..c };
        let check = |p: &Problem| AttentionSpace.check(&Config::Attention(two), p, &Target::h100());
        let deep = problem(32, 256, true, true);
        assert!(
            check(&deep).is_err_and(|e| e.contains("1 K/V stage")),
            "{:?}",
            check(&deep)
        );
        assert_eq!(check(&problem(32, 64, true, true)), Ok(()));
        // Not with more of a prologue than a scale and a mask band (an additive mask tensor,
        // soft-capping: a crash hunt's 411 graphs, ptxas spilling 12-88 bytes at 104 registers).
        assert_eq!(
            AttentionConfig::heuristic(256, 256, (64, 64), (false, false), 64, 132).to_string(),
            "consumers=2"
        );
        let rejected = check(&problem(32, 64, true, false));
        assert!(rejected.is_err_and(|e| e.contains("prologue")));
        // Not where its registers would spill (ptxas): tails of both queries and keys.
        assert_eq!(h(1000, 32, false, 64).to_string(), "consumers=2");
        assert_eq!(
            AttentionConfig::heuristic(4096, 77, (40, 40), (false, true), 16, 132).to_string(),
            "consumers=2,occupancy=2"
        );
        assert_eq!(h(4096, 128, true, 64).to_string(), "consumers=2");
        // Head dim 256: two consumers (three would need 184 registers a thread of 160).
        assert_eq!(h(8192, 256, false, 32).to_string(), "consumers=2,pingpong");
        assert_eq!(h(1024, 256, true, 128).to_string(), "consumers=2");
    }
}
