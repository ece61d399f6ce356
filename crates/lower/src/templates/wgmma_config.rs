//! The Hopper matmul's configuration space: the tile width and the splits of K.
//!
//! The tile is `128 x bn x 64` (two consumer warpgroups of 64 rows); `split > 1` splits K into
//! a partials kernel and a kernel summing the splits and applying the epilogue. The stages of
//! the ring follow from the shared-memory budget, not from the point.

use super::config::{Config, TemplateSpace};
use super::problem::{Problem, ProblemShape};
use irc_target::Target;
use std::fmt;

/// Block rows and the K step of the Hopper template.
pub(crate) const BM: u64 = 128;
pub(crate) const BK: u64 = 64;
/// Tile widths the template builds (wgmma `m64nNk16` with N = bn).
pub const WIDTHS: [u64; 3] = [64, 128, 256];

/// A point of the Hopper matmul's space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WgmmaConfig {
    /// Tile width: 64, 128 or 256.
    pub bn: u64,
    /// Splits of K (1: none).
    pub split: u64,
}

impl fmt::Display for WgmmaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bn={},split={}", self.bn, self.split)
    }
}

impl std::str::FromStr for WgmmaConfig {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not `bn=N,split=S`");
        let (a, b) = s.split_once(',').ok_or_else(bad)?;
        let num = |t: &str, key: &str| -> Result<u64, String> {
            t.strip_prefix(key)
                .and_then(|v| v.parse().ok())
                .ok_or_else(bad)
        };
        Ok(WgmmaConfig {
            bn: num(a, "bn=")?,
            split: num(b, "split=")?,
        })
    }
}

impl WgmmaConfig {
    /// The heuristic: the widest of 256, 128 (no wider than N needs) whose tiles fill the SMs,
    /// 256 also where its tiles keep more than half of them busy (the persistent kernel's
    /// 128-wide tiles would then fill no more of the last wave, and the wider tile does more
    /// per load: 2048² bf16 on an H100, 128 tiles on 132 SMs, 0.028 ms against 0.033 for 256
    /// tiles of 128); else 256 where K will be split and the tiles are full in M and N (each
    /// operand slice is read by fewest tiles); else 64. K is split where the tiles leave more
    /// than half the SMs idle and K is long ([`split_k`]).
    pub fn heuristic(batch: u64, m: u64, n: u64, k: u64, sms: u64) -> WgmmaConfig {
        let tiles = |bn: u64| m.div_ceil(BM) * n.div_ceil(bn) * batch;
        let ktiles = k.div_ceil(BK);
        let fills = [256, 128]
            .into_iter()
            .find(|&bn| n > bn / 2 && (tiles(bn) >= sms || (bn == 256 && tiles(bn) * 2 > sms)));
        let wide_split = m >= BM && n > 128 && split_k(tiles(256), ktiles, sms).0 > 1;
        let bn = match fills {
            Some(bn) => bn,
            None if wide_split => 256,
            None => 64,
        };
        WgmmaConfig {
            bn,
            split: split_k(tiles(bn), ktiles, sms).0,
        }
    }

    /// Splits and k-tiles per split for `ktiles` k-tiles: `split` splits of equal length, the
    /// last possibly past K (TMA reads zeros there).
    pub fn splits(&self, ktiles: u64) -> (u64, u64) {
        let kps = ktiles.div_ceil(self.split.clamp(1, ktiles.max(1)));
        (ktiles.div_ceil(kps), kps)
    }
}

/// Splits of K (and k-tiles per split) for `tiles` output tiles of `ktiles` k-tiles: where the
/// tiles leave more than half the SMs idle and K is long (at least 64 k-tiles, at least 8 a
/// split), enough splits to give every SM a unit.
pub fn split_k(tiles: u64, ktiles: u64, sms: u64) -> (u64, u64) {
    if tiles * 2 > sms || ktiles < 64 {
        return (1, ktiles);
    }
    let want = (sms / tiles).min(ktiles / 8).max(1);
    let kps = ktiles.div_ceil(want);
    (ktiles.div_ceil(kps), kps)
}

pub struct WgmmaSpace;

impl TemplateSpace for WgmmaSpace {
    fn template(&self) -> &'static str {
        "matmul_wgmma"
    }
    fn version(&self) -> u32 {
        1
    }
    fn heuristic(&self, p: &Problem, t: &Target) -> Config {
        let ProblemShape::Matmul { batch, m, n, k } = p.shape else {
            return Config::Wgmma(WgmmaConfig { bn: 128, split: 1 });
        };
        let sms = u64::from(t.sms);
        Config::Wgmma(WgmmaConfig::heuristic(batch, m, n, k, sms))
    }
    fn enumerate(&self, p: &Problem, _: &Target) -> Vec<Config> {
        let ProblemShape::Matmul { k, .. } = p.shape else {
            return vec![];
        };
        let ktiles = k.div_ceil(BK);
        let mut out = vec![];
        for bn in WIDTHS {
            for split in [1, 2, 4, 8, 16, 32, 64, 128] {
                if split == 1 || ktiles / split >= 8 {
                    out.push(Config::Wgmma(WgmmaConfig { bn, split }));
                }
            }
        }
        out
    }
    fn check(&self, c: &Config, p: &Problem, _: &Target) -> Result<(), String> {
        let (Config::Wgmma(c), ProblemShape::Matmul { k, .. }) = (c, &p.shape) else {
            return Err("not a point of matmul_wgmma's space".into());
        };
        if !WIDTHS.contains(&c.bn) {
            return Err(format!("tile width {} (64, 128 or 256)", c.bn));
        }
        let ktiles = k.div_ceil(BK);
        if c.split == 0 || (c.split > 1 && ktiles / c.split < 8) {
            return Err(format!(
                "{} splits of {ktiles} k-tiles (at least 8 a split)",
                c.split
            ));
        }
        Ok(())
    }
    fn estimate_us(&self, c: &Config, p: &Problem, t: &Target) -> f64 {
        let (Config::Wgmma(c), ProblemShape::Matmul { batch, m, n, k }) = (c, &p.shape) else {
            return f64::INFINITY;
        };
        let (tm, tn) = (m.div_ceil(BM), n.div_ceil(c.bn));
        let ktiles = k.div_ceil(BK);
        let (split, kps) = c.splits(ktiles);
        let units = tm * tn * batch * split;
        let sms = u64::from(t.sms);
        let waves = units.div_ceil(sms);
        // A unit's MMA time at the SM's share of the peak; narrow tiles issue less per stage.
        let unit_flops = 2.0 * (BM * c.bn * kps * BK) as f64;
        let width = match c.bn {
            256 => 1.0,
            128 => 0.9,
            _ => 0.75,
        };
        let compute = waves as f64 * unit_flops / (t.peak_tflops * 1e6 / sms as f64) / width;
        // Operands re-read per tile column/row (from L2, about 3x DRAM bandwidth), the
        // partials written and read back.
        let reread = ((m * k * tn + n * k * tm) * batch * 2) as f64;
        let partials = if split > 1 {
            (2 * split * batch * m * n * 4) as f64
        } else {
            0.0
        };
        let traffic =
            reread / (3.0 * t.peak_gbps * 1e3) + (p.bytes as f64 + partials) / (t.peak_gbps * 1e3);
        let launches = if split > 1 { 2.0 } else { 1.0 };
        compute.max(traffic) + launches * t.launch_us
    }
    fn parse(&self, text: &str) -> Result<Config, String> {
        text.parse().map(Config::Wgmma)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(batch: u64, m: u64, n: u64, k: u64) -> (u64, u64) {
        let c = WgmmaConfig::heuristic(batch, m, n, k, 132);
        (c.bn, c.split)
    }

    #[test]
    fn the_heuristic_fills_the_sms_with_the_widest_tiles() {
        // 512 tiles of 256: they fill the SMs.
        assert_eq!(h(1, 4096, 4096, 4096), (256, 1));
        // 128 tiles of 256 on 132 SMs: more than half busy, the 128-wide tiles would fill no
        // more of the last wave.
        assert_eq!(h(1, 2048, 2048, 2048), (256, 1));
        assert_eq!(h(4, 1024, 1024, 1024), (256, 1));
        // 32 tiles of 256, 64 of 128: neither fills half; K too short to split: narrow tiles.
        assert_eq!(h(1, 1024, 1024, 1024), (64, 1));
        // A large K over 4 tiles: split K, wide tiles.
        let (bn, split) = h(1, 256, 256, 524288);
        assert_eq!(bn, 256);
        assert!(split > 1, "{split}");
        // Never wider than N needs.
        assert_eq!(h(1, 16384, 64, 4096).0, 64);
        assert!(h(1, 16384, 128, 4096).0 <= 128);
        assert_eq!(h(1, 32768, 128, 4096).0, 128);
    }
}
