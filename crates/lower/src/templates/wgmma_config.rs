//! The Hopper matmul's configuration space: the tile width, the splits of K and the tiles' walk.
//!
//! The tile is `128 x bn x 64` (two consumer warpgroups of 64 rows); `split > 1` splits K into
//! a partials kernel and a kernel summing the splits and applying the epilogue; `group` is how
//! many M tiles the persistent blocks walk together (M fastest within a group, then N), which decides
//! how many operand panels the tiles in flight share in L2. The stages of the ring follow from
//! the shared-memory budget, not from the point.

use super::config::{Config, TemplateSpace, fields};
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
    /// M tiles walked together, a divisor of the M tiles (`None`: [`raster_group`]'s).
    pub group: Option<u64>,
}

impl fmt::Display for WgmmaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bn={},split={}", self.bn, self.split)?;
        match self.group {
            Some(g) => write!(f, ",group={g}"),
            None => Ok(()),
        }
    }
}

impl std::str::FromStr for WgmmaConfig {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not `bn=N,split=S[,group=G]`");
        let (word, values) = fields(s);
        if word.is_some() {
            return Err(bad());
        }
        let (mut bn, mut split, mut group) = (None, None, None);
        for (key, value) in values {
            let slot = match key {
                "bn" => &mut bn,
                "split" => &mut split,
                "group" => &mut group,
                _ => return Err(bad()),
            };
            if slot.replace(value.map_err(|_| bad())?).is_some() {
                return Err(bad());
            }
        }
        Ok(WgmmaConfig {
            bn: bn.ok_or_else(bad)?,
            split: split.ok_or_else(bad)?,
            group,
        })
    }
}

/// The default walk: the largest group of at most 8 M tiles that divides them (65 M tiles:
/// groups of 5).
pub fn raster_group(tiles_m: u64) -> u64 {
    (1..=8u64).rev().find(|g| tiles_m % g == 0).unwrap_or(1)
}

/// The groups the space offers beside the default: the divisors of the M tiles from 2 to 32
/// (fewer than all of them).
fn group_choices(tiles_m: u64) -> impl Iterator<Item = u64> {
    (2..=32u64).filter(move |&g| g < tiles_m && tiles_m % g == 0 && g != raster_group(tiles_m))
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
            group: None,
        }
    }

    /// The M tiles walked together for `tiles_m` of them.
    pub fn group(&self, tiles_m: u64) -> u64 {
        self.group.unwrap_or_else(|| raster_group(tiles_m))
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
        2
    }
    fn heuristic(&self, p: &Problem, t: &Target) -> Config {
        let ProblemShape::Matmul { batch, m, n, k } = p.shape else {
            return Config::Wgmma(WgmmaConfig {
                bn: 128,
                split: 1,
                group: None,
            });
        };
        let sms = u64::from(t.sms);
        Config::Wgmma(WgmmaConfig::heuristic(batch, m, n, k, sms))
    }
    fn enumerate(&self, p: &Problem, _: &Target) -> Vec<Config> {
        let ProblemShape::Matmul { m, k, .. } = p.shape else {
            return vec![];
        };
        let ktiles = k.div_ceil(BK);
        let mut out = vec![];
        for bn in WIDTHS {
            for split in [1, 2, 4, 8, 16, 32, 64, 128] {
                if split == 1 || ktiles / split >= 8 {
                    out.push(Config::Wgmma(WgmmaConfig {
                        bn,
                        split,
                        group: None,
                    }));
                }
            }
            // Other walks of the unsplit tiles.
            for g in group_choices(m.div_ceil(BM)) {
                out.push(Config::Wgmma(WgmmaConfig {
                    bn,
                    split: 1,
                    group: Some(g),
                }));
            }
        }
        out
    }
    fn check(&self, c: &Config, p: &Problem, _: &Target) -> Result<(), String> {
        let (Config::Wgmma(c), ProblemShape::Matmul { m, k, .. }) = (c, &p.shape) else {
            return Err("not a point of matmul_wgmma's space".into());
        };
        if !WIDTHS.contains(&c.bn) {
            return Err(format!("tile width {} (64, 128 or 256)", c.bn));
        }
        let tiles_m = m.div_ceil(BM);
        match c.group {
            Some(0) => return Err("a group of no M tiles".into()),
            Some(g) if tiles_m % g != 0 => {
                return Err(format!("a group of {g} M tiles does not divide {tiles_m}"));
            }
            _ => {}
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

    /// A point's text reads back as the point, with or without a walk; anything else is an
    /// error naming the form.
    #[test]
    fn points_print_and_parse() {
        for text in [
            "bn=256,split=1",
            "bn=128,split=4",
            "bn=256,split=1,group=16",
        ] {
            let c: WgmmaConfig = text.parse().unwrap();
            assert_eq!(c.to_string(), text);
        }
        for bad in [
            "bn=256",
            "bn=256,split=1,group=",
            "bn=256,split=1,group=4,x=1",
            "bn=256,bn=128,split=1",
        ] {
            let e = bad.parse::<WgmmaConfig>().unwrap_err();
            assert!(e.contains("bn=N,split=S[,group=G]"), "{e}");
        }
        // Fields in any order, printed in the canonical one.
        let c: WgmmaConfig = "split=2,bn=128".parse().unwrap();
        assert_eq!(c.to_string(), "bn=128,split=2");
    }

    /// The space offers other walks of the unsplit tiles — divisors of the M tiles other than
    /// the default — and the check refuses a group that does not divide them.
    #[test]
    fn walks_divide_the_m_tiles() {
        let p = Problem {
            template: "matmul_wgmma",
            shape: ProblemShape::Matmul {
                batch: 1,
                m: 8192,
                n: 8192,
                k: 8192,
            },
            dtype: irc_ir::DType::F16,
            bytes: 0,
            flops: 0,
            signature: String::new(),
        };
        let t = Target::default();
        let groups: Vec<(u64, u64)> = WgmmaSpace
            .enumerate(&p, &t)
            .into_iter()
            .filter_map(|c| match c {
                Config::Wgmma(WgmmaConfig {
                    bn: 256,
                    split,
                    group: Some(g),
                }) => Some((split, g)),
                _ => None,
            })
            .collect();
        assert_eq!(groups, [(1, 2), (1, 4), (1, 16), (1, 32)]);
        assert_eq!(raster_group(64), 8);
        assert_eq!(raster_group(65), 5);
        assert_eq!(group_choices(65).collect::<Vec<_>>(), [13]);
        let point = |g| {
            Config::Wgmma(WgmmaConfig {
                bn: 256,
                split: 1,
                group: Some(g),
            })
        };
        assert!(WgmmaSpace.check(&point(16), &p, &t).is_ok());
        let e = WgmmaSpace.check(&point(3), &p, &t).unwrap_err();
        assert_eq!(e, "a group of 3 M tiles does not divide 64");
        assert_eq!(
            WgmmaSpace.check(&point(0), &p, &t).unwrap_err(),
            "a group of no M tiles"
        );
    }
}
