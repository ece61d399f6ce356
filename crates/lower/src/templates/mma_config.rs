//! The tensor-core template's configuration space.

/// The tensor-core template's configuration: one point of its space ([`MmaConfig::space`]).
///
/// A block of `warps_m x warps_n` warps computes `bm x bn` outputs in `bk`-deep K steps; each
/// warp owns `mt x nt` `mma.m16n8k16` atoms (`mt = bm / warps_m / 16`, `nt = bn / warps_n / 8`).
/// Shared tiles are `(rows, bk)` with row pitch `bk + 8` (K-contiguous) or `(rows + 8)`
/// (M/N-contiguous), which spreads fragment reads over the banks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MmaConfig {
    pub bm: u64,
    pub bn: u64,
    pub bk: u64,
    pub warps_m: u64,
    pub warps_n: u64,
}

impl MmaConfig {
    /// The heuristic's choice for every problem today: 128 x 128 x 64, 8 warps (2 x 4), each
    /// warp 64 x 32 outputs in 4 x 4 atoms.
    pub const DEFAULT: MmaConfig = MmaConfig {
        bm: 128,
        bn: 128,
        bk: 64,
        warps_m: 2,
        warps_n: 4,
    };

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

    /// Row pitch of a K-contiguous shared tile, in elements.
    pub fn pitch(self) -> i64 {
        self.bk as i64 + 8
    }

    /// Whether the template can build this point, and fits `target`'s limits (16-bit operands).
    pub fn check(self, target: &irc_target::Target) -> Result<(), String> {
        let (bm, bn, bk, t) = (self.bm, self.bn, self.bk, self.threads());
        let vec_rows = |rows: u64| (rows * bk / 8) % t == 0 && (rows * bk) % t == 0;
        // The epilogue stages accumulators in two halves in A's tile, 8 columns per thread.
        let stage = (bm / 2) * (bn + 8);
        let a_tile = (bm * (bk + 8)).min(bk * (bm + 8));
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
            (self.nt() % 2 != 0, "ldmatrix fills B atoms in pairs"),
            // 64 accumulator values per thread, with the A/B fragments, stay within 255
            // registers; 128 spill (measured with ptxas on sm_80 and sm_90a).
            (
                4 * self.mt() * self.nt() > 64.min(target.max_register_elems),
                "accumulators exceed the register budget (64 per thread)",
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
                stage > a_tile,
                "the epilogue's staging tile does not fit in A's shared tile",
            ),
            (
                (bm + bn) * (bk + 8) * 2 > target.max_shared_bytes,
                "shared tiles exceed the block's shared memory",
            ),
            (t > 1024, "more than 1024 threads"),
        ];
        match problems.iter().find(|(bad, _)| *bad) {
            Some((_, why)) => Err(format!("{self}: {why}")),
            None => Ok(()),
        }
    }

    /// Every point the template can build on `target`.
    pub fn space(target: &irc_target::Target) -> Vec<MmaConfig> {
        let mut out = vec![];
        for bm in [64, 128] {
            for bn in [64, 128] {
                for bk in [32, 64] {
                    for (warps_m, warps_n) in [(1, 2), (2, 2), (2, 4), (4, 2), (4, 4)] {
                        let c = MmaConfig {
                            bm,
                            bn,
                            bk,
                            warps_m,
                            warps_n,
                        };
                        if c.check(target).is_ok() {
                            out.push(c);
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

    /// `BMxBNxBK/WMxWN`, as `Display` writes it (`128x128x64/2x4`).
    fn from_str(text: &str) -> Result<MmaConfig, String> {
        let bad = || {
            format!(
                "`{text}` is not a tensor-core configuration BMxBNxBK/WMxWN (e.g. 128x128x64/2x4)"
            )
        };
        let (tile, warps) = text.split_once('/').ok_or_else(bad)?;
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
            }),
            _ => Err(bad()),
        }
    }
}

impl std::fmt::Display for MmaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}x{}x{}/{}x{}",
            self.bm, self.bn, self.bk, self.warps_m, self.warps_n
        )
    }
}
