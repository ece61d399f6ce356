//! The atoms' thread-value layouts against the PTX ISA fragment figures, and bank conflicts of
//! the shared-memory layouts chosen for `ldmatrix` and `cp.async`.
//!
//! For every thread and value, the expected `(row, col)` is computed from the formulas the PTX
//! ISA gives under each figure (`groupID = lane >> 2`, `threadID_in_group = lane % 4`, ...), and
//! compared with what the layout says.

use irc_layout::{
    IntTuple, Layout, Major, TvLayout, bank_conflicts, gmma_smem_atom, ldmatrix,
    mma_m16n8k8_tf32_a, mma_m16n8k8_tf32_b, mma_m16n8k16_a, mma_m16n8k16_b, mma_m16n8k16_c,
    parse_layout, tiled_copy_tv, wgmma_m64nk16_d,
};

/// Check that `tv` maps every (thread, value) to `expected(t, v)` and covers its tile exactly once.
#[track_caller]
fn check_tv(tv: &TvLayout, threads: i64, values: i64, expected: impl Fn(i64, i64) -> (i64, i64)) {
    assert_eq!(
        (tv.threads().unwrap(), tv.values().unwrap()),
        (threads, values)
    );
    let (m, n) = tv.tile();
    let mut seen = vec![false; (m * n) as usize];
    for t in 0..threads {
        for v in 0..values {
            let (r, c) = tv.coord(t, v).unwrap();
            assert_eq!((r, c), expected(t, v), "thread {t} value {v} of {tv}");
            assert!(
                !std::mem::replace(&mut seen[(r + m * c) as usize], true),
                "({r},{c}) twice in {tv}"
            );
        }
    }
    assert!(seen.iter().all(|&s| s), "{tv} does not cover its tile");
}

fn group_id(lane: i64) -> i64 {
    lane >> 2
}

fn thread_in_group(lane: i64) -> i64 {
    lane % 4
}

/// PTX ISA, mma.m16n8k16 .f16/.bf16, fragment A (a0..a7):
/// row = groupID (+8 for a2,a3,a6,a7); col = threadID_in_group*2 + (i & 1) (+8 for i >= 4).
#[test]
fn mma_m16n8k16_a_matches_ptx() {
    check_tv(&mma_m16n8k16_a().unwrap(), 32, 8, |lane, i| {
        let row = group_id(lane) + if (i / 2) % 2 == 1 { 8 } else { 0 };
        let col = thread_in_group(lane) * 2 + (i & 1) + if i >= 4 { 8 } else { 0 };
        (row, col)
    });
}

/// Fragment B (b0..b3) of the K x N = 16x8 matrix: row(k) = threadID_in_group*2 + (i & 1)
/// (+8 for i >= 2); col(n) = groupID. Our tile is N x K, so (n, k).
#[test]
fn mma_m16n8k16_b_matches_ptx() {
    check_tv(&mma_m16n8k16_b().unwrap(), 32, 4, |lane, i| {
        let k = thread_in_group(lane) * 2 + (i & 1) + if i >= 2 { 8 } else { 0 };
        (group_id(lane), k)
    });
}

/// Fragment C/D (c0..c3, f32): row = groupID (+8 for i >= 2); col = threadID_in_group*2 + (i & 1).
#[test]
fn mma_m16n8k16_c_matches_ptx() {
    check_tv(&mma_m16n8k16_c().unwrap(), 32, 4, |lane, i| {
        (
            group_id(lane) + if i >= 2 { 8 } else { 0 },
            thread_in_group(lane) * 2 + (i & 1),
        )
    });
}

/// PTX ISA, mma.m16n8k8 .tf32, fragment A (a0..a3): row = groupID (+8 for a1, a3);
/// col = threadID_in_group (+4 for a2, a3).
#[test]
fn mma_m16n8k8_tf32_a_matches_ptx() {
    check_tv(&mma_m16n8k8_tf32_a().unwrap(), 32, 4, |lane, i| {
        (
            group_id(lane) + 8 * (i & 1),
            thread_in_group(lane) + 4 * (i >> 1),
        )
    });
}

/// Fragment B (b0, b1) of the K x N = 8x8 matrix: row(k) = threadID_in_group (+4 for b1);
/// col(n) = groupID. Our tile is N x K, so (n, k).
#[test]
fn mma_m16n8k8_tf32_b_matches_ptx() {
    check_tv(&mma_m16n8k8_tf32_b().unwrap(), 32, 2, |lane, i| {
        (group_id(lane), thread_in_group(lane) + 4 * i)
    });
}

/// ldmatrix .m8n8 .b16: each 8x8 matrix j lands in register j; thread `lane` holds row lane/4,
/// elements 2*(lane%4) and +1 (with .trans: column lane/4 of rows 2*(lane%4) and +1).
#[test]
fn ldmatrix_matches_ptx() {
    for x in [1, 2, 4] {
        check_tv(&ldmatrix(x, false).unwrap(), 32, 2 * x, |lane, v| {
            (8 * (v / 2) + lane / 4, 2 * (lane % 4) + v % 2)
        });
        check_tv(&ldmatrix(x, true).unwrap(), 32, 2 * x, |lane, v| {
            (8 * (v / 2) + 2 * (lane % 4) + v % 2, lane / 4)
        });
    }
    assert!(ldmatrix(3, false).is_err());
}

/// wgmma .m64nNk16 f32 D fragment: warp w of the warpgroup owns rows 16w..16w+15; value i of
/// lane l: row = 16w + groupID + 8*((i/2)%2), col = (i%2) + 2*threadID_in_group + 8*(i/4).
#[test]
fn wgmma_accumulator_matches_ptx() {
    for n in [8, 16, 64, 128, 256] {
        check_tv(&wgmma_m64nk16_d(n).unwrap(), 128, n / 2, |t, i| {
            let (warp, lane) = (t / 32, t % 32);
            let row = 16 * warp + group_id(lane) + 8 * ((i / 2) % 2);
            let col = i % 2 + 2 * thread_in_group(lane) + 8 * (i / 4);
            (row, col)
        });
    }
    assert!(wgmma_m64nk16_d(12).is_err());
}

/// The PTX swizzle modes on byte addresses: 128B XORs address bits [4,7) with bits [7,10),
/// 64B bits [4,6) with [7,9), 32B bit 4 with bit 7; the atoms are 8 rows of that many bytes.
fn ptx_swizzle(bytes: i64, addr: i64) -> i64 {
    let bits = match bytes {
        128 => 3,
        64 => 2,
        32 => 1,
        _ => 0,
    };
    let mask = (1 << bits) - 1;
    addr ^ (((addr >> 7) & mask) << 4)
}

#[test]
fn gmma_smem_atoms_match_the_ptx_swizzle_modes() {
    for (bytes, elem_bits) in [(0, 16), (32, 16), (64, 16), (128, 16), (128, 8), (64, 32)] {
        let elem = elem_bits / 8;
        let width = bytes.max(16) / elem;
        for (major, name) in [(Major::K, "K"), (Major::Mn, "MN")] {
            let atom = gmma_smem_atom(major, bytes, elem_bits).unwrap();
            assert_eq!(atom.size().unwrap(), 8 * width);
            let mut seen = std::collections::BTreeSet::new();
            for row in 0..8 {
                for col in 0..width {
                    // K-major: rows of `width` contiguous elements; MN-major: the transpose.
                    let crd = if major == Major::K {
                        (row, col)
                    } else {
                        (col, row)
                    };
                    let got = atom.crd2idx(&IntTuple::ints(&[crd.0, crd.1])).unwrap();
                    let want = ptx_swizzle(bytes, (row * width + col) * elem) / elem;
                    assert_eq!(got, want, "{name}-major {bytes}B atom {atom} at {crd:?}");
                    seen.insert(got);
                }
            }
            assert_eq!(seen.len() as i64, 8 * width, "{atom} is a bijection");
        }
    }
}

/// A 16-byte cp.async tiled copy: 128 threads as 16 rows x 8, 8 f16 (16 bytes) each along K.
#[test]
fn cp_async_tiled_copy_gives_each_thread_16_contiguous_bytes() {
    let thr = parse_layout("(16,8):(8,1)").unwrap();
    let val = parse_layout("(1,8)").unwrap();
    let tv = tiled_copy_tv(&thr, &val).unwrap();
    assert_eq!(tv.tile(), (16, 64));
    check_tv(&tv, 128, 8, |t, v| (t / 8, 8 * (t % 8) + v));
}

/// Lane `l` of an ldmatrix.x4 over an 8 x 32 f16 slice of a K-major (rows, 64) tile addresses row
/// `l % 8` of matrix `l / 8` (columns `8*(l/8)..`): in the tile's column-major domain, `(8,4):(1,64)`.
fn ldmatrix_x4_lanes(rows: i64) -> Layout {
    Layout::flat(&[8, 4], &[1, 8 * rows]).unwrap()
}

#[test]
fn ldmatrix_on_row_major_smem_conflicts_and_swizzled_does_not() {
    let naive = parse_layout("(8,64):(64,1)").unwrap();
    let swizzled = gmma_smem_atom(Major::K, 128, 16).unwrap();
    let lanes = ldmatrix_x4_lanes(8);
    let n = bank_conflicts(&naive, &lanes, 2, 16).unwrap();
    let s = bank_conflicts(&swizzled, &lanes, 2, 16).unwrap();
    // Naive: all 8 rows of a matrix start in the same 4 banks (128-byte rows): 8-way, 4 phases.
    assert_eq!((n[0].wavefronts, n[0].ideal, n[0].conflicts()), (32, 4, 28));
    assert_eq!(s[0].conflicts(), 0);
}

#[test]
fn cp_async_writes_into_the_swizzled_atom_are_conflict_free() {
    // 128 threads x 16 bytes into a 16 x 64 f16 K-major tile: two 128B-swizzled atoms stacked.
    let tv = tiled_copy_tv(
        &parse_layout("(16,8):(8,1)").unwrap(),
        &parse_layout("(1,8)").unwrap(),
    )
    .unwrap();
    let lanes = tv.layout().mode(0).unwrap(); // thread -> tile index of its value 0
    let atom = gmma_smem_atom(Major::K, 128, 16).unwrap();
    let tile = atom.with_layout(parse_layout("((8,2),64):((64,512),1)").unwrap());
    for w in bank_conflicts(&tile, &lanes, 2, 16).unwrap() {
        assert_eq!(w.conflicts(), 0);
    }
    // The same threads arranged column-wise (thread t takes row t % 16) conflict on a naive tile.
    let column_wise = tiled_copy_tv(
        &parse_layout("(16,8):(1,16)").unwrap(),
        &parse_layout("(1,8)").unwrap(),
    )
    .unwrap();
    let naive = parse_layout("(16,64):(64,1)").unwrap();
    let conflicts: i64 = bank_conflicts(&naive, &column_wise.layout().mode(0).unwrap(), 2, 16)
        .unwrap()
        .iter()
        .map(|w| w.conflicts())
        .sum();
    assert!(conflicts > 0);
    let swz = atom.with_layout(parse_layout("((8,2),64):((64,512),1)").unwrap());
    let conflicts: i64 = bank_conflicts(&swz, &column_wise.layout().mode(0).unwrap(), 2, 16)
        .unwrap()
        .iter()
        .map(|w| w.conflicts())
        .sum();
    assert_eq!(conflicts, 0);
}

#[test]
fn broadcast_and_misalignment() {
    let l = parse_layout("64:1").unwrap();
    let same = parse_layout("32:0").unwrap();
    assert_eq!(bank_conflicts(&l, &same, 4, 4).unwrap()[0].conflicts(), 0);
    let stride32 = parse_layout("32:32").unwrap();
    let big = parse_layout("1024:1").unwrap();
    assert_eq!(
        bank_conflicts(&big, &stride32, 4, 4).unwrap()[0].conflicts(),
        31
    );
    assert!(bank_conflicts(&l, &parse_layout("32:1").unwrap(), 2, 16).is_err());
}
