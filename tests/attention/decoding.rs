//! The decoding template (`attention/decode.rs`, `decode_mma.rs`) without a GPU: decoding steps
//! (a few query rows a head over a long key/value cache) lower to one kernel, which the
//! kernel-IR emulator runs against the interpreter as the parent file's `check` does — folded
//! query heads, split keys, each depth of the `cp.async` ring, the tensor-core kernel for
//! multi-query attention, masks, bands and epilogues.

use super::{check, check_at};

/// Whether the kernel is the decoding template's (`attention/decode.rs`): products on CUDA
/// cores (no `mma`), its loop over the steps of a block's keys (`for %st..`, or `for %it..`
/// through a `cp.async` ring).
pub(crate) fn decodes(kir: &str) -> bool {
    !kir.contains("mma")
        && kir.lines().any(|l| {
            let l = l.trim_start();
            l.starts_with("for %st") || l.starts_with("for %it")
        })
}

/// Whether the decoding kernel streams K and V through its `cp.async` ring.
fn rings(kir: &str) -> bool {
    kir.contains("cp.async")
}

/// The first kernel's blocks (`grid(N, 1, 1)`).
fn grid_blocks(kir: &str) -> u64 {
    let line = kir.lines().find(|l| l.contains("grid(")).expect("a kernel");
    line.split("grid(")
        .nth(1)
        .and_then(|g| g.split(',').next())
        .and_then(|n| n.parse().ok())
        .expect("a grid")
}

/// Grouped-query decoding steps (`fold` query heads a K/V head, one query each, or `sq`
/// queries), the keys split across blocks and merged by the last block (`splits` > 1 where
/// the units are few), keys not a multiple of a step, f16 and bf16.
#[test]
fn decoding_steps_fold_query_heads_and_split_keys() {
    // The last: one step of 128 keys (64 lane groups of two lanes) is too few to split.
    for (t, sq, sk, d, fold, split) in [
        ("bf16", 1, 300, 128, 4, true),
        ("f16", 1, 1000, 64, 8, true),
        ("bf16", 2, 333, 64, 2, true),
        ("f16", 3, 129, 32, 1, false),
    ] {
        let scale = 1.0 / (d as f64).sqrt();
        let kir = check(&format!(
            "graph @decode(%q: tensor<2x2x{fold}x{sq}x{d}x{t}>, %k: tensor<2x2x1x{sk}x{d}x{t}>, %v: tensor<2x2x1x{sk}x{d}x{t}>) -> tensor<2x2x{fold}x{sq}x{d}x{t}> {{
              %s = matmul %q, %k {{transpose_b = true}}
              %c = constant {{value = {scale:?}}} : tensor<{t}>
              %ss = mul %s, %c
              %p = softmax %ss {{axis = -1}}
              %o = matmul %p, %v
              return %o
            }}"
        ));
        assert!(decodes(&kir), "{t} sq={sq} sk={sk} d={d} fold={fold}");
        // One unit a K/V head: the grid is 4 units times the splits.
        assert_eq!(kir.contains("_arrivals"), split, "split keys: {kir}");
        assert_eq!(grid_blocks(&kir) % 4, 0, "{kir}");
    }
}

/// A Llama-style exported decoding step: K and V heads repeated for the query heads by views
/// (`reshape`, `broadcast`, `reshape`), a causal mask of the query at its cache position from
/// `iota`s, the output merged back to `[B, S, H·D]` by views: the repeat is proven shared
/// through the views (the query heads folded), the mask evaluated per score.
#[test]
fn decoding_through_repeat_kv_views_with_a_causal_mask() {
    let kir = check(
        "graph @llama_step(%q: tensor<1x8x1x64xbf16>, %k: tensor<1x2x200x64xbf16>, %v: tensor<1x2x200x64xbf16>) -> tensor<1x1x512xbf16> {
          %k5 = reshape %k {shape = [1, 2, 1, 200, 64]}
          %kb = broadcast %k5 {shape = [1, 2, 4, 200, 64]}
          %kr = reshape %kb {shape = [1, 8, 200, 64]}
          %v5 = reshape %v {shape = [1, 2, 1, 200, 64]}
          %vb = broadcast %v5 {shape = [1, 2, 4, 200, 64]}
          %vr = reshape %vb {shape = [1, 8, 200, 64]}
          %s = matmul %q, %kr {transpose_b = true}
          %c = constant {value = 0.125} : tensor<bf16>
          %ss = mul %s, %c
          %row = iota {axis = 0} : tensor<1x200xi32>
          %pos = constant {value = 150} : tensor<i32>
          %at = add %row, %pos
          %col = iota {axis = 1} : tensor<1x200xi32>
          %keep = ge %at, %col
          %ninf = constant {value = -inf} : tensor<bf16>
          %m = select %keep, %ss, %ninf
          %p = softmax %m {axis = -1}
          %o = matmul %p, %vr
          %ot = transpose %o {perm = [0, 2, 1, 3]}
          %om = reshape %ot {shape = [1, 1, 512]}
          return %om
        }",
    );
    assert!(decodes(&kir));
    // Two units (one a K/V head, each of 4 folded rows) over the band's 151 keys (up to the
    // query's position 150; the steps past them are skipped).
    assert_eq!(grid_blocks(&kir) % 2, 0, "{kir}");
    assert!(
        kir.lines()
            .any(|l| l.contains("if (%st") && l.contains("< 151)")),
        "{kir}"
    );
}

/// Head dims whose vectors do not divide among a key's lanes (40: five vectors; 72 beside a V
/// head dim of 40), an additive mask tensor and a residual add in the output's epilogue.
#[test]
fn decoding_with_odd_head_dims_a_mask_tensor_and_an_epilogue() {
    let kir = check(
        "graph @odd_decode(%q: tensor<3x2x1x72xf16>, %k: tensor<3x2x90x72xf16>, %v: tensor<3x2x90x40xf16>, %mask: tensor<3x1x1x90xf16>, %res: tensor<3x2x1x40xf16>) -> tensor<3x2x1x40xf16> {
          %s = matmul %q, %k {transpose_b = true}
          %sm = add %s, %mask
          %p = softmax %sm {axis = -1}
          %o = matmul %p, %v
          %y = add %o, %res
          return %y
        }",
    );
    assert!(decodes(&kir));
}

/// A unit's keys split in 11 — more than the eight partials a thread of the last block reads at
/// a time, and not a multiple of them (the guarded last turn) — given as the kernel's point.
#[test]
fn decoding_with_more_splits_than_partials_in_flight() {
    let kir = check_at(
        "graph @many_splits(%q: tensor<1x2x4x1x64xbf16>, %k: tensor<1x2x1x2000x64xbf16>, %v: tensor<1x2x1x2000x64xbf16>) -> tensor<1x2x4x1x64xbf16> {
          %s = matmul %q, %k {transpose_b = true}
          %p = softmax %s {axis = -1}
          %o = matmul %p, %v
          return %o
        }",
        Some(("attention_decode", "lanes=8,keys=4,splits=11,stages=3")),
    );
    assert!(decodes(&kir));
    // Two units of 11 splits of three 64-key steps.
    assert_eq!(grid_blocks(&kir), 22, "{kir}");
}

/// Each depth of the `cp.async` ring, and loads straight to registers (one stage), at points
/// whose splits hold fewer steps than the ring (the copies ahead past a split's last step are
/// not issued), keys not a multiple of a step (the wrapped last step), and odd head dims (72
/// for Q·Kᵀ, 40 for V: lanes past a row's vectors copy nothing).
#[test]
fn decoding_through_each_depth_of_the_copy_ring() {
    for (stages, splits, dims) in [
        (1, 3, (64, 64)),
        (2, 3, (64, 64)),
        (3, 5, (72, 40)),
        (4, 2, (64, 64)),
        (4, 20, (72, 40)),
    ] {
        let (d, dv) = dims;
        let kir = check_at(
            &format!(
                "graph @ring(%q: tensor<2x2x4x1x{d}xbf16>, %k: tensor<2x2x1x700x{d}xbf16>, %v: tensor<2x2x1x700x{dv}xbf16>) -> tensor<2x2x4x1x{dv}xbf16> {{
                  %s = matmul %q, %k {{transpose_b = true}}
                  %c = constant {{value = 0.125}} : tensor<bf16>
                  %ss = mul %s, %c
                  %p = softmax %ss {{axis = -1}}
                  %o = matmul %p, %v
                  return %o
                }}"
            ),
            Some((
                "attention_decode",
                &format!("lanes=8,keys=2,splits={splits},stages={stages}"),
            )),
        );
        assert!(decodes(&kir), "stages={stages}");
        assert_eq!(rings(&kir), stages > 1, "stages={stages}: {kir}");
    }
}

/// K stored keys-contiguous (`[.., d, keys]`, transposed by a view): no copy reads a K row, so
/// a ring point loads straight to registers.
#[test]
fn decoding_with_keys_contiguous_k_loads_to_registers() {
    let kir = check_at(
        "graph @kt(%q: tensor<2x4x1x64xf16>, %kt: tensor<2x1x64x300xf16>, %v: tensor<2x1x300x64xf16>) -> tensor<2x4x1x64xf16> {
          %k = transpose %kt {perm = [0, 1, 3, 2]}
          %s = matmul %q, %k {transpose_b = true}
          %p = softmax %s {axis = -1}
          %o = matmul %p, %v
          return %o
        }",
        Some(("attention_decode", "lanes=8,keys=2,splits=2,stages=3")),
    );
    assert!(decodes(&kir));
    assert!(!rings(&kir), "{kir}");
}

/// Whether the kernel is the decoding template's on tensor cores (`attention/decode_mma.rs`):
/// `mma`s inside the loop over the ring's steps (`for %it..`), partials merged by the last
/// block where split.
pub(crate) fn decodes_on_tensor_cores(kir: &str) -> bool {
    kir.contains("mma") && kir.lines().any(|l| l.trim_start().starts_with("for %it"))
}

/// Whether the tensor-core decoding kernel reads Q's A fragments by `ldmatrix` from a shared
/// tile (before its loop over the steps), not element by element from memory.
fn q_by_ldmatrix(kir: &str) -> bool {
    kir.lines()
        .take_while(|l| !l.trim_start().starts_with("for %it"))
        .any(|l| l.contains("ldmatrix"))
}

/// Multi-query decoding steps (16 or 12 query heads over one K/V head, or 8 heads of 2
/// queries): more rows than the CUDA-core kernel holds, so tensor cores take them, one unit of
/// up to 16 rows a K/V head (Q's shared tile zero past them); odd head dims (72 for Q·Kᵀ, 40
/// for V: a k-step and an atom padded), keys not a multiple of a step, f16 and bf16, split and
/// not. Q's rows are copied into shared memory and read by `ldmatrix`.
#[test]
fn multi_query_decoding_runs_on_tensor_cores() {
    for (t, g, sq, sk, d, dv) in [
        ("bf16", 16, 1, 300, 64, 64),
        ("f16", 8, 2, 1000, 72, 40),
        ("bf16", 16, 1, 64, 128, 128),
        ("f16", 12, 1, 500, 72, 64),
    ] {
        let kir = check(&format!(
            "graph @mqa(%q: tensor<2x1x{g}x{sq}x{d}x{t}>, %k: tensor<2x1x1x{sk}x{d}x{t}>, %v: tensor<2x1x1x{sk}x{dv}x{t}>) -> tensor<2x1x{g}x{sq}x{dv}x{t}> {{
              %s = matmul %q, %k {{transpose_b = true}}
              %c = constant {{value = 0.125}} : tensor<{t}>
              %ss = mul %s, %c
              %p = softmax %ss {{axis = -1}}
              %o = matmul %p, %v
              return %o
            }}"
        ));
        assert!(decodes_on_tensor_cores(&kir), "{t} g={g} sq={sq}: {kir}");
        assert!(q_by_ldmatrix(&kir), "{t} g={g} sq={sq}: {kir}");
        assert_eq!(grid_blocks(&kir) % 2, 0, "two units: {kir}");
    }
}

/// A multi-query step whose Q arrives head-dim-major (a transpose view: no 16-byte rows for
/// `cp.async`): the tensor-core kernel loads Q's fragments element by element.
#[test]
fn multi_query_decoding_with_q_by_element_loads() {
    let kir = check(
        "graph @mqa_qt(%qt: tensor<2x1x64x16xbf16>, %k: tensor<2x1x300x64xbf16>, %v: tensor<2x1x300x64xbf16>) -> tensor<2x1x16x64xbf16> {
          %q = transpose %qt {perm = [0, 1, 3, 2]}
          %s = matmul %q, %k {transpose_b = true}
          %c = constant {value = 0.125} : tensor<bf16>
          %ss = mul %s, %c
          %p = softmax %ss {axis = -1}
          %o = matmul %p, %v
          return %o
        }",
    );
    assert!(decodes_on_tensor_cores(&kir), "{kir}");
    assert!(!q_by_ldmatrix(&kir), "{kir}");
}

/// The tensor-core kernel at given points over a multi-query step (16 query heads over one
/// K/V head), 4 and 8 warps a block, each depth of its ring, splits holding fewer steps than
/// the ring (three splits of 333 keys at 8 warps are a step each), with an
/// additive mask tensor, a causal band at a cache position and a residual epilogue.
#[test]
fn decoding_on_tensor_cores_at_each_point() {
    for (warps, splits, stages) in [(4, 1, 2), (4, 3, 3), (8, 3, 2), (4, 2, 4), (8, 2, 3)] {
        let kir = check_at(
            "graph @mqa_points(%q: tensor<2x1x16x1x64xbf16>, %k: tensor<2x1x1x333x64xbf16>, %v: tensor<2x1x1x333x64xbf16>, %mask: tensor<2x1x1x1x333xbf16>, %res: tensor<2x1x16x1x64xbf16>) -> tensor<2x1x16x1x64xbf16> {
              %s = matmul %q, %k {transpose_b = true}
              %c = constant {value = 0.125} : tensor<bf16>
              %ss = mul %s, %c
              %sm = add %ss, %mask
              %row = iota {axis = 0} : tensor<1x333xi32>
              %pos = constant {value = 300} : tensor<i32>
              %at = add %row, %pos
              %col = iota {axis = 1} : tensor<1x333xi32>
              %keep = ge %at, %col
              %ninf = constant {value = -inf} : tensor<bf16>
              %m = select %keep, %sm, %ninf
              %p = softmax %m {axis = -1}
              %o = matmul %p, %v
              %y = add %o, %res
              return %y
            }",
            Some((
                "attention_decode",
                &format!("mma,warps={warps},splits={splits},stages={stages}"),
            )),
        );
        assert!(
            decodes_on_tensor_cores(&kir),
            "warps={warps} splits={splits} stages={stages}: {kir}"
        );
    }
}

/// The tensor-core kernel's copies over head dims whose rows take 1, 3, 6 and 15 vectors (a
/// warp's 32 lanes a whole number of rows only at 1: the others address each copy apart), at 4
/// and 8 warps, 12 query heads a unit (Q's tile zero past them), keys not a multiple of a step.
#[test]
fn decoding_on_tensor_cores_over_head_dims() {
    for d in [8, 24, 48, 120] {
        for warps in [4, 8] {
            let kir = check_at(
                &format!(
                    "graph @mqa_dims(%q: tensor<2x1x12x1x{d}xf16>, %k: tensor<2x1x1x150x{d}xf16>, %v: tensor<2x1x1x150x{d}xf16>) -> tensor<2x1x12x1x{d}xf16> {{
                      %s = matmul %q, %k {{transpose_b = true}}
                      %p = softmax %s {{axis = -1}}
                      %o = matmul %p, %v
                      return %o
                    }}"
                ),
                Some((
                    "attention_decode",
                    &format!("mma,warps={warps},splits=2,stages=2"),
                )),
            );
            assert!(decodes_on_tensor_cores(&kir), "d={d} warps={warps}: {kir}");
            assert!(q_by_ldmatrix(&kir), "d={d} warps={warps}: {kir}");
        }
    }
}
