//! The tensor-core template's configuration space.

/// The tensor-core template's configuration: one point of its space ([`MmaConfig::space`]).
///
/// A block of `warps_m x warps_n` warps computes `bm x bn` outputs in `bk`-deep K steps; each
/// warp owns `mt x nt` `mma.m16n8k16` atoms (`mt = bm / warps_m / 16`, `nt = bn / warps_n / 8`).
/// The K steps stream through a ring of `stages` shared stages filled by `cp.async`, each
/// operand's stage a `(rows, bk)` tile under an XOR swizzle (`matmul_mma/stage.rs`), so that
/// `stages - 1` k-tiles are in flight while one is multiplied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MmaConfig {
    pub bm: u64,
    pub bn: u64,
    pub bk: u64,
    pub warps_m: u64,
    pub warps_n: u64,
    /// Shared stages of the `cp.async` ring (2 to 8; the space has 3 and 4).
    pub stages: u64,
}

/// The time of a wave of [`MmaConfig::F32_SMALL`]'s 64x64 tiles in waves of
/// [`MmaConfig::F32_MID`]'s 128x64 ones: 0.53-0.56 in run 264 (H200,
/// `bench/results/2026-12-01-f32-points-run264.txt`: the batched K = 64 scores, a
/// 16384x512→256 tall product, GPT-2's fc2 and qkv).
const F32_SMALL_WAVE: f64 = 0.55;

impl MmaConfig {
    /// The fallback where the heuristic's point does not fit the target or, for f16/bf16, where
    /// an operand or the output cannot take 16-byte copies (the lowering's refinement of
    /// [`MmaConfig::F16`]), and the stage count of a configuration written without one:
    /// 128 x 128 x 32, 8 warps (2 x 4), each warp 64 x 32 outputs in 4 x 4 atoms, 4 stages
    /// (64 KiB of shared memory).
    pub const DEFAULT: MmaConfig = MmaConfig {
        bm: 128,
        bn: 128,
        bk: 32,
        warps_m: 2,
        warps_n: 4,
        stages: 4,
    };

    /// The heuristic's choice for f16/bf16 operands: 128 x 128 x 32, 4 warps (2 x 2), each warp
    /// 64 x 64 outputs in 4 x 8 atoms (128 accumulators a thread: 222-226 registers, no
    /// spill), 3 stages (48 KiB: two blocks an SM). Per k-step a warp reads 8 `ldmatrix.x4` for
    /// 32 `mma`s, where 64 x 32 warps read 6 for 16: a third less shared-memory traffic per
    /// product. Measured on the H200 with `--arch sm_80` (run 126): 4096³ 0.348 ms, 395
    /// TFLOP/s ([`MmaConfig::DEFAULT`]: 0.511). Of six points on eleven shapes (square 1k-8k,
    /// tall, small and large K, transposed, batched, irregular and odd-sized) it is the
    /// fastest on five, within 11% on five more, 19% off on the large-K one, and 4-32% faster
    /// than [`MmaConfig::DEFAULT`] on each (`bench/results/2026-11-29-sm80-run126.md`).
    pub const F16: MmaConfig = MmaConfig {
        bm: 128,
        bn: 128,
        bk: 32,
        warps_m: 2,
        warps_n: 2,
        stages: 3,
    };

    /// The heuristic's f32 point for the smallest tiles: 64x64 tiles of 4 warps, four 32-deep
    /// stages (64 KiB, several blocks per SM, no spills), where the 128-row tiles would fill
    /// the SMs worse: GPT-2's 768→2304 layer over 1024 tokens 0.0895 ms on the H200 (0.0963 in
    /// 128x64 tiles), 3001x1000→500 0.0757 (0.0869), 512x1024→1024 0.0310 (0.0487).
    pub const F32_SMALL: MmaConfig = MmaConfig {
        bm: 64,
        bn: 64,
        bk: 32,
        warps_m: 2,
        warps_n: 2,
        stages: 4,
    };

    /// The heuristic's usual f32 point: 128x64 tiles of 4 warps, four 32-deep stages (96 KiB:
    /// two blocks an SM). A wave of them takes 0.47-0.50 of a wave of 128x128x64/2x4/3's tiles
    /// (4096³ 2.47 ms against 2.46 on the H200, run 264; 8192x768→3072 0.698 against 0.734): on
    /// that run's shapes the larger tiles were never more than 0.7% faster, so they are left to
    /// `irc tune`; the best of
    /// eight points, or within 1%, on 10 of 13 shapes (GPT-2's fc2 0.1322 ms against 0.1436 in
    /// 64x64 tiles).
    pub const F32_MID: MmaConfig = MmaConfig {
        bm: 128,
        bn: 64,
        bk: 32,
        warps_m: 2,
        warps_n: 2,
        stages: 4,
    };

    /// The heuristic's point for an `m x n x k` problem of `batch` matrices with operands of
    /// `elem_bytes` bytes on `target`. For f32: of [`MmaConfig::F32_MID`] (128x64 tiles) and
    /// [`MmaConfig::F32_SMALL`] (64x64), the one whose busiest SM finishes first —
    /// `ceil(tiles / SMs)` waves of its tiles, a 64x64 wave [`F32_SMALL_WAVE`] of a 128x64
    /// one; ties to the larger tile.
    /// On run 264's 13 shapes this is the best point or within 0.7% on each; the data are in
    /// `bench/results/2026-12-01-f32-points-run264.txt` (three-stage points on the H100:
    /// `bench/results/2026-11-25-f32-points.md`). A point that does not fit the target's
    /// shared memory falls back to its three-stage form, then to 64x64 tiles through two
    /// stages; f16/bf16 take [`MmaConfig::F16`].
    pub fn heuristic_for(
        target: &irc_target::Target,
        elem_bytes: u64,
        (m, n, _k, batch): (u64, u64, u64, u64),
    ) -> MmaConfig {
        if elem_bytes != 4 {
            return match MmaConfig::F16.check_for(target, elem_bytes) {
                Ok(()) => MmaConfig::F16,
                Err(_) => MmaConfig::DEFAULT,
            };
        }
        let sms = u64::from(target.sms).max(1);
        let waves =
            |c: MmaConfig| (m.div_ceil(c.bm) * n.div_ceil(c.bn) * batch.max(1)).div_ceil(sms);
        let small = waves(MmaConfig::F32_SMALL) as f64 * F32_SMALL_WAVE;
        let pick = if small < waves(MmaConfig::F32_MID) as f64 {
            MmaConfig::F32_SMALL
        } else {
            MmaConfig::F32_MID
        };
        // Smaller rings where the shared memory is smaller: three stages, then 64x64 tiles
        // through two (32 KiB).
        let three = MmaConfig { stages: 3, ..pick };
        let least = MmaConfig {
            stages: 2,
            ..MmaConfig::F32_SMALL
        };
        [pick, three, least]
            .into_iter()
            .find(|c| c.check_for(target, 4).is_ok())
            .unwrap_or(MmaConfig::DEFAULT)
    }

    /// Accumulator values a thread may hold with operands of `elem_bytes` bytes.
    fn max_accumulators(self, elem_bytes: u64) -> u64 {
        if elem_bytes == 2 { 128 } else { 64 }
    }

    pub fn threads(self) -> u64 {
        32 * self.warps_m * self.warps_n
    }

    /// Atoms per warp along M.
    pub fn mt(self) -> u64 {
        self.bm / self.warps_m / 16
    }

    /// Atoms per warp along N.
    pub fn nt(self) -> u64 {
        self.bn / self.warps_n / 8
    }

    /// Bytes of shared memory the ring takes (16-bit operands).
    pub fn shared_bytes(self) -> u64 {
        self.shared_bytes_for(2)
    }

    /// Bytes of shared memory the ring takes, for operands of `elem_bytes` bytes.
    pub fn shared_bytes_for(self, elem_bytes: u64) -> u64 {
        (self.bm + self.bn) * self.bk * elem_bytes * self.stages
    }

    /// Whether the template can build this point, and fits `target`'s limits (16-bit operands).
    pub fn check(self, target: &irc_target::Target) -> Result<(), String> {
        self.check_for(target, 2)
    }

    /// As [`MmaConfig::check`], for operands of `elem_bytes` bytes (2, or 4: f32 by 3xTF32).
    pub fn check_for(self, target: &irc_target::Target, elem_bytes: u64) -> Result<(), String> {
        let (bm, bn, bk, t) = (self.bm, self.bn, self.bk, self.threads());
        let vec_rows = |rows: u64| (rows * bk / 8) % t == 0 && (rows * bk) % t == 0;
        // The epilogue stages accumulators in two halves in A's ring, 8 columns per thread.
        let stage = (bm / 2) * (bn + 8);
        let a_ring = bm * bk * self.stages;
        let problems = [
            (self.warps_m == 0 || self.warps_n == 0, "no warps"),
            // Measured on the H100 (bench/gpu/mma_space.sh): with 1 or 4 warp rows some odd
            // shapes come out wrong; 2 warp rows pass every check.
            (
                self.warps_m != 2,
                "only 2 warp rows are verified on the GPU",
            ),
            (
                bm % (self.warps_m * 16) != 0,
                "bm is not a multiple of 16 per warp row",
            ),
            (
                bn % (self.warps_n * 16) != 0,
                "bn is not a multiple of 16 per warp column",
            ),
            (bk % 16 != 0 || bk == 0, "bk is not a multiple of 16"),
            (
                !(2..=8).contains(&self.stages),
                "the cp.async ring has 2 to 8 stages",
            ),
            (self.nt() % 2 != 0, "ldmatrix fills B atoms in pairs"),
            // 16-bit operands: 128 accumulator values per thread (a warp's 64x64 outputs), with
            // the A/B fragments, stay within 255 registers (ptxas, sm_80: 222-246 for the
            // 128x128 tiles of 2x2 warps); f32's split fragments (3xTF32) leave room for 64.
            (
                4 * self.mt() * self.nt()
                    > self
                        .max_accumulators(elem_bytes)
                        .min(target.max_register_elems),
                "accumulators exceed the register budget (128 per thread for 16-bit operands, 64 for f32)",
            ),
            (
                !vec_rows(bm) || !vec_rows(bn),
                "tile loads do not divide among the threads",
            ),
            (
                ((bm / 2) * bn / 8) % t != 0,
                "epilogue chunks do not divide among the threads",
            ),
            (
                stage > a_ring,
                "the epilogue's staging tile does not fit in A's shared ring",
            ),
            (
                self.shared_bytes_for(elem_bytes) > target.max_dynamic_shared_bytes,
                "the shared ring exceeds the block's shared memory",
            ),
            (t > 1024, "more than 1024 threads"),
        ];
        match problems.iter().find(|(bad, _)| *bad) {
            Some((_, why)) => Err(format!("{self}: {why}")),
            None => Ok(()),
        }
    }

    /// Every point the template can build on `target` (16-bit operands).
    pub fn space(target: &irc_target::Target) -> Vec<MmaConfig> {
        Self::space_for(target, 2)
    }

    /// Every point the template can build on `target` for operands of `elem_bytes` bytes.
    pub fn space_for(target: &irc_target::Target, elem_bytes: u64) -> Vec<MmaConfig> {
        let mut out = vec![];
        for bm in [64, 128] {
            for bn in [64, 128, 256] {
                for bk in [32, 64] {
                    for (warps_m, warps_n) in [(1, 2), (2, 2), (2, 4), (4, 2), (4, 4)] {
                        for stages in [3, 4] {
                            let c = MmaConfig {
                                bm,
                                bn,
                                bk,
                                warps_m,
                                warps_n,
                                stages,
                            };
                            if c.check_for(target, elem_bytes).is_ok() {
                                out.push(c);
                            }
                        }
                    }
                }
            }
        }
        out
    }
}

impl std::str::FromStr for MmaConfig {
    type Err = String;

    /// `BMxBNxBK/WMxWN/S`, as `Display` writes it (`128x128x32/2x4/4`); without `/S`, the
    /// default's stage count.
    fn from_str(text: &str) -> Result<MmaConfig, String> {
        let bad = || {
            format!(
                "`{text}` is not a tensor-core configuration BMxBNxBK/WMxWN[/STAGES] (e.g. 128x128x32/2x4/4)"
            )
        };
        let (tile, rest) = text.split_once('/').ok_or_else(bad)?;
        let (warps, stages) = match rest.split_once('/') {
            Some((w, s)) => (w, s.trim().parse().map_err(|_| bad())?),
            None => (rest, MmaConfig::DEFAULT.stages),
        };
        let nums = |s: &str| -> Result<Vec<u64>, String> {
            s.split('x')
                .map(|n| n.trim().parse().map_err(|_| bad()))
                .collect()
        };
        match (nums(tile)?.as_slice(), nums(warps)?.as_slice()) {
            (&[bm, bn, bk], &[warps_m, warps_n]) => Ok(MmaConfig {
                bm,
                bn,
                bk,
                warps_m,
                warps_n,
                stages,
            }),
            _ => Err(bad()),
        }
    }
}

impl std::fmt::Display for MmaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}x{}x{}/{}x{}/{}",
            self.bm, self.bn, self.bk, self.warps_m, self.warps_n, self.stages
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the f32 heuristic against run 264 (H200, eight points timed on each of 13 shapes,
    /// `bench/results/2026-12-01-f32-points-run264.txt`): on each it takes the fastest point or
    /// one within 0.7% of it (4096³: 128x64 2.4712 ms against 128x128's 2.4552).
    #[test]
    fn the_f32_heuristic_takes_the_measured_best() {
        let t = irc_target::Target::default();
        assert_eq!(t.sms, 132);
        let pick = |m, n, k, batch| MmaConfig::heuristic_for(&t, 4, (m, n, k, batch)).to_string();
        let mid = "128x64x32/2x2/4";
        let small = "64x64x32/2x2/4";
        for (name, shape, want) in [
            ("bmm_scores", (1024, 1024, 64, 48), mid),
            ("mm_fc2", (1024, 768, 3072, 1), mid),
            ("mm_linear_bt", (8192, 1024, 1024, 1), mid),
            ("mm_mlp", (2048, 3072, 768, 1), mid),
            ("mm_proj", (1024, 768, 768, 1), mid),
            ("mm_qkv", (1024, 2304, 768, 1), small),
            ("mm_sq4k", (4096, 4096, 4096, 1), mid),
            ("mm_vit_fc1", (1576, 3072, 768, 1), mid),
            ("mm_vit_qkv", (1576, 2304, 768, 1), small),
            ("mm_b8_fc1", (8192, 3072, 768, 1), mid),
            ("mm_odd", (3001, 500, 1000, 1), small),
            ("mm_small", (512, 1024, 1024, 1), small),
            ("mm_tall", (16384, 256, 512, 1), mid),
        ] {
            let (m, n, k, batch) = shape;
            assert_eq!(pick(m, n, k, batch), want, "{name}");
        }
        // One wave of 132 128x64 tiles against two of 264 64x64 ones (1.1 of a 128x64 wave).
        assert_eq!(pick(128 * 66, 128, 4096, 1), mid);
        // Smaller rings where the shared memory is smaller: the three-stage form where four
        // stages do not fit, then 64x64 tiles through two where even three do not.
        for (kib, want) in [(80, "128x64x32/2x2/3"), (40, "64x64x32/2x2/2")] {
            let target = irc_target::Target {
                max_dynamic_shared_bytes: kib * 1024,
                ..irc_target::Target::default()
            };
            let got = MmaConfig::heuristic_for(&target, 4, (1024, 768, 3072, 1));
            assert_eq!(got.to_string(), want, "{kib} KiB");
        }
    }
}
