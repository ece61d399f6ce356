//! The Hopper attention kernel's configuration space: the number of consumer warpgroups,
//! whether each pipelines its key tiles, and whether they take turns issuing their products.
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
//! or the head dim is 128, and loses 3-4% elsewhere, which is what the heuristic follows.

use super::config::{Config, TemplateSpace};
use super::problem::{Problem, ProblemShape};
use irc_target::Target;
use std::fmt;

/// Registers a producer warpgroup keeps (`setmaxnreg.dec`).
pub(crate) const PRODUCER_REGS: u64 = 24;
/// Keys per tile up to head dim 128.
pub(crate) const BKV: u64 = 128;

/// Keys per tile for head dims `d` (Q·Kᵀ) and `dv` (V): [`BKV`], or 64 above head dim 128 —
/// K and V tiles of 128 keys by 256 would leave room for one stage in shared memory, and 64
/// f32 scores a thread beside 128 O accumulators for no more than 240 registers.
pub(crate) fn keys_per_tile(d: u64, dv: u64) -> u64 {
    if d.max(dv) > 128 { 64 } else { BKV }
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
        Ok(())
    }
}

impl std::str::FromStr for AttentionConfig {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not `consumers=N[,pipelined][,pingpong]`");
        let mut parts = s.split(',');
        let consumers = parts
            .next()
            .and_then(|p| p.strip_prefix("consumers="))
            .and_then(|v| v.parse().ok())
            .ok_or_else(bad)?;
        let (mut pipelined, mut pingpong) = (false, false);
        for p in parts {
            match p {
                "pipelined" if !pipelined && !pingpong => pipelined = true,
                "pingpong" if !pingpong => pingpong = true,
                _ => return Err(bad()),
            }
        }
        Ok(AttentionConfig {
            consumers,
            pipelined,
            pingpong,
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
    /// pipelines over at least 8 key tiles, three consumers share the SM or the head dim is
    /// over 128 (runs 122-123: 2-5% faster there, 3% slower on causal rows; run 176: 8%
    /// slower pipelined over 512 keys; run 177: 6-7% slower with two consumers at head dim
    /// 128 over 1k and 2k keys, even at 80).
    pub fn heuristic(
        sq: u64,
        sk: u64,
        dv: u64,
        causal: bool,
        batch: u64,
        sms: u64,
    ) -> AttentionConfig {
        // A head dim between the tiles' 64-column steps is computed as the next one.
        let dv = dv.next_multiple_of(64);
        let busy = |rows: u64| busy_share(sq, batch, rows, sms);
        let whole = sk % keys_per_tile(dv, dv) == 0;
        // Three only where their accumulators fit three consumers' registers (not at head
        // dim 256).
        let fits_three = consumer_need(false, dv, causal, sk) <= consumer_regs(3);
        let consumers =
            if dv > 64 && fits_three && !causal && whole && busy(192) >= 0.95 * busy(128) {
                3
            } else {
                2
            };
        let pipelined = consumers == 2 && dv <= 64 && !causal && whole && sk >= 4 * BKV;
        AttentionConfig {
            consumers,
            pipelined,
            pingpong: !causal
                && ((pipelined && sk >= 8 * BKV) || (dv > 64 && consumers == 3) || dv > 128),
        }
    }

    /// Query rows per block.
    pub fn rows(&self) -> u64 {
        64 * self.consumers
    }
}

/// The registers each consumer thread may use: the 64K-register file less the producer's,
/// shared by the consumers, a multiple of 8, at most 240 (240 with two consumers, 160 with
/// three).
pub(crate) fn consumer_regs(consumers: u64) -> u64 {
    ((65536 - 128 * PRODUCER_REGS) / (128 * consumers.max(1)) / 8 * 8).min(240)
}

/// The registers a consumer thread needs: the S accumulators (two buffers when `pipelined`)
/// and O's, keys/2 + dv/2, beside about 24 more (addresses, row state) — ptxas fits head dim
/// 128 in 160 without spilling — and, with a causal mask's two prologue paths (masked and
/// whole tiles) or the guards of keys that do not fill the last tile, about 16 more. O's
/// columns are whole tiles of 64.
fn consumer_need(pipelined: bool, dv: u64, causal: bool, sk: u64) -> u64 {
    let dv = dv.next_multiple_of(64);
    let bkv = keys_per_tile(dv, dv);
    let extra = if causal || sk % bkv != 0 { 16 } else { 0 };
    let buffers = if pipelined { 2 } else { 1 };
    buffers * bkv / 2 + dv / 2 + 24 + extra
}

/// The share of the GPU that blocks of `rows` query rows keep busy over `batch` batch entries
/// of `sq` rows on `sms` SMs: the rows inside the sequence (the tail block's padding is
/// wasted) times the last wave's fill.
fn busy_share(sq: u64, batch: u64, rows: u64, sms: u64) -> f64 {
    let tiles = sq.div_ceil(rows.max(1));
    let units = batch.max(1) * tiles;
    let waves = units.div_ceil(sms.max(1));
    (sq as f64 / (tiles * rows.max(1)) as f64) * (units as f64 / (waves * sms.max(1)) as f64)
}

pub struct AttentionSpace;

impl TemplateSpace for AttentionSpace {
    fn template(&self) -> &'static str {
        "attention_wgmma"
    }
    fn version(&self) -> u32 {
        4
    }
    fn heuristic(&self, p: &Problem, t: &Target) -> Config {
        let (sq, sk, dv, causal, batch) = match p.shape {
            ProblemShape::Attention {
                sq,
                sk,
                dv,
                causal,
                batch,
            } => (sq, sk, dv, causal, batch),
            _ => (0, 0, 64, false, 1),
        };
        Config::Attention(AttentionConfig::heuristic(
            sq,
            sk,
            dv,
            causal,
            batch,
            u64::from(t.sms),
        ))
    }
    fn enumerate(&self, _: &Problem, _: &Target) -> Vec<Config> {
        [(2, false), (3, false), (2, true)]
            .into_iter()
            .flat_map(|(consumers, pipelined)| {
                [false, true].map(|pingpong| {
                    Config::Attention(AttentionConfig {
                        consumers,
                        pipelined,
                        pingpong,
                    })
                })
            })
            .collect()
    }
    fn check(&self, c: &Config, p: &Problem, _: &Target) -> Result<(), String> {
        let (Config::Attention(c), ProblemShape::Attention { sk, dv, causal, .. }) = (c, &p.shape)
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
        let need = consumer_need(c.pipelined, *dv, *causal, *sk);
        if need > consumer_regs(c.consumers) {
            return Err(format!(
                "{need} registers a consumer thread; {} consumers have {}",
                c.consumers,
                consumer_regs(c.consumers)
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
        flops / (t.peak_tflops * 1e6) / busy_share(*sq, *batch, c.rows(), u64::from(t.sms))
            + t.launch_us
    }
    fn parse(&self, text: &str) -> Result<Config, String> {
        text.parse().map(Config::Attention)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_print_and_parse_back() {
        let problem = Problem {
            template: "attention_wgmma",
            shape: ProblemShape::Attention {
                batch: 1,
                sq: 1024,
                sk: 1024,
                dv: 64,
                causal: false,
            },
            dtype: irc_ir::DType::F16,
            bytes: 0,
            flops: 0,
            signature: String::new(),
        };
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
        let h = |sq, dv, causal, batch| AttentionConfig::heuristic(sq, sq, dv, causal, batch, 132);
        // Grouped-query attention over 2k keys: 704 units of 192 rows fill their sixth wave a
        // third; 1024 of 128 rows fill their eighth three quarters.
        assert_eq!(h(2048, 128, false, 64).to_string(), "consumers=2");
        assert_eq!(h(8192, 128, false, 32).to_string(), "consumers=3,pingpong");
        assert_eq!(h(4096, 128, false, 64).to_string(), "consumers=3,pingpong");
        assert_eq!(h(1024, 128, false, 256).to_string(), "consumers=2");
        assert_eq!(
            h(4096, 64, false, 64).to_string(),
            "consumers=2,pipelined,pingpong"
        );
        assert_eq!(h(512, 64, false, 512).to_string(), "consumers=2,pipelined");
        assert_eq!(h(256, 64, false, 512).to_string(), "consumers=2");
        assert_eq!(h(2048, 64, true, 128).to_string(), "consumers=2");
        assert_eq!(h(4096, 128, true, 64).to_string(), "consumers=2");
        // Head dim 256: two consumers (three would need 184 registers a thread of 160).
        assert_eq!(h(8192, 256, false, 32).to_string(), "consumers=2,pingpong");
        assert_eq!(h(1024, 256, true, 128).to_string(), "consumers=2");
    }
}
