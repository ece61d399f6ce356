//! The attention template without a GPU: each attention graph lowers to one kernel, which the
//! kernel-IR emulator (`emulate.rs`) runs on seeded random inputs; its result must match the
//! interpreter running the graph as written (unfused) within the dtype's tolerance. Sizes are
//! odd (tails in both the query and the key tiles), head dims 16 to 256 (multiples of 8, between
//! the tiles' steps too), f16 and bf16, causal,
//! an additive mask tensor, grouped-query broadcasting, K stored keys-contiguous. The decoding
//! template's tests are in `attention/decoding.rs`.

#[path = "attention/decoding.rs"]
mod decoding;
mod emulate;

use irc_interp::{compare, random::random_tensor, tensor::Data, tensor::Tensor};
use irc_tests::hopper_kernels;
use std::collections::HashMap;

/// Checks the graph's one attention kernel against the interpreter; returns the kernel IR text.
fn check(src: &str) -> String {
    check_at(src, None)
}

/// [`check`] with the attention kernel built at `point` (`template`, its configuration's text)
/// where given.
fn check_at(src: &str, point: Option<(&str, &str)>) -> String {
    let m = irc_frontend::parse_module(src).expect("parses");
    let g = &m.graphs[0];
    let mut options = irc_lower::LowerOptions::default();
    if let Some((template, text)) = point {
        let base = irc_lower::plan_and_lower(g, Default::default()).expect("lowers");
        let p = &base
            .choices
            .iter()
            .find(|c| c.problem.template == template)
            .expect("the template")
            .problem;
        let c = irc_lower::templates::Config::parse(template, text).expect("a point");
        options.configs.insert(p.key(), c);
    }
    let lowered = irc_lower::plan_and_lower_with(g, Default::default(), &options).expect("lowers");
    if let Some((template, _)) = point {
        let c = lowered
            .choices
            .iter()
            .find(|c| c.problem.template == template);
        let source = c.map(|c| &c.source);
        assert!(
            matches!(
                source,
                Some(irc_lower::templates::config::ConfigSource::Given)
            ),
            "the point is taken: {source:?}"
        );
    }
    let k = lowered.kernels;
    assert_eq!(k.kernels.len(), 1, "@{}: one attention kernel", g.name);
    assert!(
        k.kernels[0].name.ends_with("attention"),
        "{}",
        k.kernels[0].name
    );
    let inputs: Vec<Tensor> = g
        .params
        .iter()
        .enumerate()
        .map(|(i, &p)| random_tensor(g.ty(p), 7, i as u64))
        .collect();
    let mut by_name = HashMap::new();
    for (b, t) in k.buffers.iter().zip(&inputs) {
        by_name.insert(b.name.clone(), t.data.to_f64());
    }
    let out = emulate::run(&k, &by_name);
    let reference = irc_interp::run_graph(g, inputs).expect("interprets");
    let ty = g.ty(g.results[0]).clone();
    let got = &out[&k.results[0]];
    let got = Tensor::new(ty.clone(), Data::from_f64(ty.dtype, got.clone())).unwrap();
    let c = compare::compare(&got, &reference[0]).unwrap();
    // The kernel keeps the scores in f32 through the prologue (no 16-bit rounding between the
    // fused ops, as FlashAttention computes), so it may be closer to the exact result than the
    // unfused graph is: it also passes against the graph computed in f32 (the same rounded
    // inputs, every op in f32), rounded to the result's type.
    if !c.passed() {
        let wide = wide_reference(src, g, &ty);
        let cw = compare::compare(&got, &wide).unwrap();
        assert!(cw.passed(), "@{}: {c:?} / f32 graph {cw:?}", g.name);
        eprintln!("@{}: f32 graph rel err {:.2e}", g.name, cw.rel_err);
    }
    eprintln!("@{}: rel err {:.2e}", g.name, c.rel_err);
    irc_kir::print_module(&k)
}

/// The graph of `src` with every 16-bit float type made f32, run on the same input values
/// (the same seeded tensors, widened), its first result rounded to `ty`.
fn wide_reference(src: &str, g: &irc_ir::Graph, ty: &irc_ir::TensorType) -> Tensor {
    let wide_src = src
        .replace("xbf16>", "xf32>")
        .replace("xf16>", "xf32>")
        .replace("tensor<bf16>", "tensor<f32>")
        .replace("tensor<f16>", "tensor<f32>")
        .replace("dtype = bf16", "dtype = f32")
        .replace("dtype = f16", "dtype = f32");
    let m = irc_frontend::parse_module(&wide_src).expect("the f32 graph parses");
    let w = &m.graphs[0];
    let inputs: Vec<Tensor> = w
        .params
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let values = random_tensor(g.ty(g.params[i]), 7, i as u64).data.to_f64();
            Tensor::new(w.ty(p).clone(), Data::from_f64(w.ty(p).dtype, values)).unwrap()
        })
        .collect();
    let out = irc_interp::run_graph(w, inputs).expect("interprets the f32 graph");
    let values = out[0].data.to_f64();
    Tensor::new(ty.clone(), Data::from_f64(ty.dtype, values)).unwrap()
}

/// Whether the kernel walks only the key tiles of a mask band (`for %k0.. = (%kf.. * 64) to
/// ((%kf.. + %nk..) * 64)`).
fn skips_tiles(kir: &str) -> bool {
    kir.lines()
        .any(|l| l.trim().starts_with("for %k0") && l.contains("%nk"))
}

#[test]
fn odd_sizes_f16_d64() {
    let kir = check(
        "graph @odd(%q: tensor<1x2x100x64xf16>, %k: tensor<1x2x100x64xf16>, %v: tensor<1x2x100x64xf16>) -> tensor<1x2x100x64xf16> {
          %kt = transpose %k {perm = [0, 1, 3, 2]}
          %s = matmul %q, %kt
          %c = constant {value = 0.125} : tensor<f16>
          %ss = mul %s, %c
          %p = softmax %ss {axis = -1}
          %o = matmul %p, %v
          return %o
        }",
    );
    assert!(!skips_tiles(&kir));
}

#[test]
fn causal_bf16_d32() {
    let kir = check(&causal_bf16(100, 32));
    assert!(skips_tiles(&kir));
}

/// Causal bf16 attention over `n` queries and keys of head dim `d` (one batch entry, two
/// heads, scale `1/sqrt(d)`), the mask a comparison of two `iota`s.
fn causal_bf16(n: u64, d: u64) -> String {
    let t = format!("tensor<1x2x{n}x{d}xbf16>");
    let scale = 1.0 / (d as f64).sqrt();
    format!(
        "graph @causal(%q: {t}, %k: {t}, %v: {t}) -> {t} {{
          %s = matmul %q, %k {{transpose_b = true}}
          %c = constant {{value = {scale:?}}} : tensor<bf16>
          %ss = mul %s, %c
          %row = iota {{axis = 0}} : tensor<{n}x{n}xi32>
          %col = iota {{axis = 1}} : tensor<{n}x{n}xi32>
          %keep = ge %row, %col
          %ninf = constant {{value = -inf}} : tensor<bf16>
          %m = select %keep, %ss, %ninf
          %p = softmax %m {{axis = -1}}
          %o = matmul %p, %v
          return %o
        }}"
    )
}

/// Head dim 256 is the Hopper kernel's (64-key tiles, one Q buffer; the emulator does not run
/// `wgmma`, so this checks the kernel IR, and `tests/gpu/attention_d256.ir` the numbers): with
/// the Hopper templates the chain is one kernel whose `Q·Kᵀ` is `m64n64k16`; on sm_80 it is
/// planned again unfused, and those kernels compute what the interpreter does.
#[test]
fn head_dim_256_on_hopper_and_unfused_on_sm80() {
    let src = causal_bf16(70, 256);
    let m = irc_frontend::parse_module(&src).expect("parses");
    let g = &m.graphs[0];
    let k = hopper_kernels(&src);
    let text = irc_kir::print_module(&k);
    assert_eq!(k.kernels.len(), 1, "{text}");
    assert!(k.kernels[0].name.ends_with("attention"), "{text}");
    assert!(text.contains("wgmma.m64n64k16"), "{text}");
    assert!(text.contains("wgmma.rs.m64n256k16"), "{text}");
    let k80 = irc_lower::lower_graph(g, Default::default()).expect("lowers for sm_80");
    assert_eq!(k80.kernels.len(), 3);
    emulate::assert_agree(emulate::against_interpreter_all(g, &k80, 7), &g.name);
}

/// Head dims between the tiles' steps: 40 (a 48-column tile), 80 and 112 (32-key tiles whose
/// 16-byte copies do not divide among the block's threads), 96; each causal over 70 keys.
#[test]
fn head_dims_between_the_tiles() {
    for d in [16, 40, 80, 96, 112] {
        let kir = check(&causal_bf16(70, d));
        assert!(skips_tiles(&kir), "head dim {d}");
    }
}

/// Attention over `[b, h, sq, d]` queries, K given as `[b, h, d, sk]` (keys contiguous) and V
/// as `[b, h, dv, sk]` read transposed.
fn keys_contiguous(t: &str, [b, h, sq, sk, d, dv]: [u64; 6]) -> String {
    format!(
        "graph @kt(%q: tensor<{b}x{h}x{sq}x{d}x{t}>, %k: tensor<{b}x{h}x{d}x{sk}x{t}>, %v: tensor<{b}x{h}x{dv}x{sk}x{t}>) -> tensor<{b}x{h}x{sq}x{dv}x{t}> {{
          %s = matmul %q, %k
          %vt = transpose %v {{perm = [0, 1, 3, 2]}}
          %p = softmax %s {{axis = -1}}
          %o = matmul %p, %vt
          return %o
        }}"
    )
}

/// Q·Kᵀ's head dim (72) differs from V's (40), K keys-contiguous, V transposed.
#[test]
fn different_head_dims_for_keys_and_values() {
    check(&keys_contiguous("f16", [1, 2, 50, 90, 72, 40]));
}

/// On Hopper a head dim of 160 is three 64-column tiles (the last TMA's zero fill past 160):
/// `Q·Kᵀ` takes its 10 real k-steps, `P·V` is `m64n192k16`.
#[test]
fn head_dim_160_on_hopper() {
    let k = hopper_kernels(&causal_bf16(70, 160));
    let text = irc_kir::print_module(&k);
    assert_eq!(k.kernels.len(), 1, "{text}");
    assert!(text.contains("wgmma.rs.m64n192k16"), "{text}");
    assert_eq!(text.matches("wgmma.m64n64k16").count(), 10, "{text}");
}

/// A sliding-window causal mask (Mistral's): keys at most 30 before the query. Both `iota`s
/// are read twice (the causal comparison and the distance), which policy rule 4 would store
/// as two kernels; computed from indices alone, they are recomputed in the attention kernel.
#[test]
fn sliding_window_mask_from_iotas_read_twice() {
    let kir = check(
        "graph @swa(%q: tensor<1x2x100x64xf16>, %k: tensor<1x2x100x64xf16>, %v: tensor<1x2x100x64xf16>) -> tensor<1x2x100x64xf16> {
          %s = matmul %q, %k {transpose_b = true}
          %c = constant {value = 0.125} : tensor<f16>
          %ss = mul %s, %c
          %row = iota {axis = 0} : tensor<100x100xi32>
          %col = iota {axis = 1} : tensor<100x100xi32>
          %keep = ge %row, %col
          %d = sub %row, %col
          %w = constant {value = 30} : tensor<i32>
          %near = lt %d, %w
          %both = select %keep, %near, %keep
          %ninf = constant {value = -inf} : tensor<f16>
          %m = select %both, %ss, %ninf
          %p = softmax %m {axis = -1}
          %o = matmul %p, %v
          return %o
        }",
    );
    assert!(skips_tiles(&kir));
}

/// A local window both ways (`|row - col| < 70`, written as `col - row > -70` and
/// `row - col <= 69` through ONNX's `And` form `select(a, b, false)`) over 200 keys, and a
/// causal mask written as what it drops (`select(row < col, -inf, s)`): key tiles outside the
/// band are skipped.
#[test]
fn local_window_both_ways() {
    for (keep, m) in [
        ("%keep = select %a, %b, %f", "%m = select %keep, %ss, %ninf"),
        ("%keep = lt %row, %col", "%m = select %keep, %ninf, %ss"),
    ] {
        let kir = check(&format!(
            "graph @local(%q: tensor<1x2x200x32xf16>, %k: tensor<1x2x200x32xf16>, %v: tensor<1x2x200x32xf16>) -> tensor<1x2x200x32xf16> {{
              %s = matmul %q, %k {{transpose_b = true}}
              %c = constant {{value = 0.17677669529663687}} : tensor<f16>
              %ss = mul %s, %c
              %row = iota {{axis = 0}} : tensor<200x200xi32>
              %col = iota {{axis = 1}} : tensor<200x200xi32>
              %d = sub %col, %row
              %lo = constant {{value = -70}} : tensor<i32>
              %a = gt %d, %lo
              %e = sub %row, %col
              %hi = constant {{value = 69}} : tensor<i32>
              %b = le %e, %hi
              %f = constant {{value = false}} : tensor<i1>
              {keep}
              %ninf = constant {{value = -inf}} : tensor<f16>
              {m}
              %p = softmax %m {{axis = -1}}
              %o = matmul %p, %v
              return %o
            }}"
        ));
        assert!(skips_tiles(&kir));
    }
}

#[test]
fn masked_f16_d128_queries_differ_from_keys() {
    check(
        "graph @masked(%q: tensor<1x1x70x128xf16>, %k: tensor<1x1x130x128xf16>, %v: tensor<1x1x130x128xf16>, %mask: tensor<70x130xf16>) -> tensor<1x1x70x128xf16> {
          %s = matmul %q, %k {transpose_b = true}
          %c = constant {value = 0.08838834764831845} : tensor<f16>
          %ss = mul %s, %c
          %sm = add %ss, %mask
          %p = softmax %sm {axis = -1}
          %o = matmul %p, %v
          return %o
        }",
    );
}

#[test]
fn grouped_query_heads_and_transposed_queries() {
    check(
        "graph @gqa(%q: tensor<1x70x2x2x32xf16>, %k: tensor<1x2x1x90x32xf16>, %v: tensor<1x2x1x90x32xf16>) -> tensor<1x2x2x70x32xf16> {
          %qt = transpose %q {perm = [0, 2, 3, 1, 4]}
          %s = matmul %qt, %k {transpose_b = true}
          %p = softmax %s {axis = -1}
          %o = matmul %p, %v
          return %o
        }",
    );
}

#[test]
fn keys_contiguous_k_and_v() {
    // K given as [B, H, D, S] (keys contiguous) and V as [B, H, D, S] transposed: the K
    // fragments come by ldmatrix.trans, V's without it.
    check(&keys_contiguous("bf16", [1, 1, 80, 80, 64, 64]));
}

#[test]
fn heads_split_by_views_and_merged_back_in_the_store() {
    // Q, K, V are [B, S, H·D] split into heads by reshape + transpose; the output is transposed
    // and reshaped back to [B, S, H·D] and stored by the attention kernel through the inverse
    // of those views (no copy kernel).
    check(
        "graph @heads(%q: tensor<2x90x128xf16>, %k: tensor<2x90x128xf16>, %v: tensor<2x90x128xf16>) -> tensor<2x90x128xf16> {
          %q4 = reshape %q {shape = [2, 90, 2, 64]}
          %k4 = reshape %k {shape = [2, 90, 2, 64]}
          %v4 = reshape %v {shape = [2, 90, 2, 64]}
          %qh = transpose %q4 {perm = [0, 2, 1, 3]}
          %kh = transpose %k4 {perm = [0, 2, 3, 1]}
          %vh = transpose %v4 {perm = [0, 2, 1, 3]}
          %s = matmul %qh, %kh
          %c = constant {value = 0.125} : tensor<f16>
          %ss = mul %s, %c
          %p = softmax %ss {axis = -1}
          %o = matmul %p, %vh
          %ot = transpose %o {perm = [0, 2, 1, 3]}
          %r = reshape %ot {shape = [2, 90, 128]}
          return %r
        }",
    );
}

/// The heads merged back and read by the output projection (`tests/gpu/attention_projection.ir`):
/// the attention kernel stores the merged heads, the projection reads them as a plain matrix
/// (a TMA operand on sm_90a), and both kernels (emulated, sm_80) match the interpreter.
#[test]
fn heads_merged_for_the_output_projection() {
    let path = irc_tests::root().join("tests/gpu/attention_projection.ir");
    let src = std::fs::read_to_string(&path).expect("reads");
    let g = &irc_frontend::parse_module(&src).expect("parses").graphs[0];
    let lower = |wgmma: bool| {
        let options = irc_lower::LowerOptions {
            wgmma,
            ..Default::default()
        };
        let p = irc_lower::plan_and_lower_with(g, Default::default(), &options).expect("lowers");
        irc_kir::verify_module(&p.kernels).expect("verifies");
        p
    };
    let p = lower(false);
    let fused = irc_fused::print_module(&p.fused);
    assert!(fused.contains("store %o3 -> @o3"), "{fused}");
    assert!(!fused.contains("buffer @o ="), "{fused}");
    emulate::assert_agree(emulate::against_interpreter_all(g, &p.kernels, 3), &g.name);
    // On sm_90a the projection is the wgmma template (a TMA producer warpgroup: 384 threads).
    let hopper = lower(true).kernels;
    let proj = hopper
        .kernels
        .iter()
        .find(|k| k.name.ends_with("matmul"))
        .expect("a matmul");
    assert_eq!(proj.block[0], 384, "{}", irc_kir::print_module(&hopper));
}

/// An importer's guard of query rows that keep no key (ONNX `Attention`: such rows are zero;
/// `tests/gpu/attention_guard_projection.ir`, the first two rows masked whole): the guard is the
/// attention kernel's epilogue, which still stores the merged heads for the projection, and
/// the kernels (emulated, sm_80) match the interpreter — the guarded rows zero.
#[test]
fn a_guard_of_rows_without_keys_stays_in_the_attention_kernel() {
    let path = irc_tests::root().join("tests/gpu/attention_guard_projection.ir");
    let src = std::fs::read_to_string(&path).expect("reads");
    let g = &irc_frontend::parse_module(&src).expect("parses").graphs[0];
    for wgmma in [false, true] {
        let options = irc_lower::LowerOptions {
            wgmma,
            ..Default::default()
        };
        let p = irc_lower::plan_and_lower_with(g, Default::default(), &options).expect("lowers");
        irc_kir::verify_module(&p.kernels).expect("verifies");
        let fused = irc_fused::print_module(&p.fused);
        assert!(fused.contains("store %o3 -> @o3"), "{fused}");
        for v in ["@o =", "@g =", "@ot ="] {
            assert!(!fused.contains(&format!("buffer {v}")), "{v}: {fused}");
        }
        if !wgmma {
            emulate::assert_agree(emulate::against_interpreter_all(g, &p.kernels, 2), &g.name);
        }
    }
}

/// PyTorch's dynamo exporter folds a causal mask into a boolean initializer and writes the
/// attention as ONNX's `Attention` op with the mask `causal and padding`
/// (`tests/onnx_models/hf/llama_tiny_f16_sdpa_dyn23.onnx`): the importer writes the band as
/// `iota` comparisons (no boolean weight) and applies it as the last select, so the one
/// attention kernel skips the key tiles past the diagonal.
#[test]
fn an_exported_causal_mask_is_a_band_the_kernel_skips() {
    let path = irc_tests::root().join("tests/onnx_models/hf/llama_tiny_f16_sdpa_dyn23.onnx");
    let bytes = std::fs::read(&path).expect("reads");
    let imported = irc_onnx::import_model(&bytes, &Default::default()).expect("imports");
    let bools: Vec<&String> = imported
        .weights
        .iter()
        .filter(|(_, t)| t.ty.dtype == irc_ir::DType::I1)
        .map(|(n, _)| n)
        .collect();
    assert!(bools.is_empty(), "boolean weights {bools:?}");
    let g = irc_passes::manager::PassManager::default_pipeline()
        .run(&imported.graph)
        .expect("-O runs")
        .graph;
    let p = irc_lower::plan_and_lower(&g, Default::default()).expect("lowers");
    let attention: Vec<_> = p
        .kernels
        .kernels
        .iter()
        .filter(|k| k.name.ends_with("attention"))
        .collect();
    assert_eq!(attention.len(), 1);
    let m = irc_kir::Module {
        kernels: attention.into_iter().cloned().collect(),
        ..p.kernels.clone()
    };
    // Its 8 tokens are the decoding template's (at most 16 rows a unit: two query heads of a
    // K/V head on tensor cores), which walks only the band's keys: with 8 queries, all 8
    // (`decoding_through_repeat_kv_views_with_a_causal_mask` checks a band that drops keys);
    // the tensor-core attention kernels skip the tiles past the diagonal.
    let text = irc_kir::print_module(&m);
    let decoding = decoding::decodes(&text) || decoding::decodes_on_tensor_cores(&text);
    assert!(skips_tiles(&text) || decoding, "no tile skipping");
}

#[test]
fn soft_capping_and_clamps_in_the_prologue() {
    // Gemma-style soft-capping (tanh(s / c) * c) and a clamp from below, per score.
    check(
        "graph @capped(%q: tensor<1x2x77x64xf16>, %k: tensor<1x2x77x64xf16>, %v: tensor<1x2x77x64xf16>) -> tensor<1x2x77x64xf16> {
          %s = matmul %q, %k {transpose_b = true}
          %c = constant {value = 0.125} : tensor<f16>
          %ss = mul %s, %c
          %cap = constant {value = 2.0} : tensor<f16>
          %d = div %ss, %cap
          %t = tanh %d
          %sc = mul %t, %cap
          %lo = constant {value = -1.0} : tensor<f16>
          %cl = max %sc, %lo
          %p = softmax %cl {axis = -1}
          %o = matmul %p, %v
          return %o
        }",
    );
}

#[test]
fn causal_f16_whole_tiles() {
    let kir =
    // 128 queries and keys: no tile passes the end (no guards), the causal mask skips the
    // second key tile of the first query tile; the mask is written the other way round
    // (`select(col > row, -inf, s)`).
    check(
        "graph @causal128(%q: tensor<1x2x128x64xf16>, %k: tensor<1x2x128x64xf16>, %v: tensor<1x2x128x64xf16>) -> tensor<1x2x128x64xf16> {
          %s = matmul %q, %k {transpose_b = true}
          %row = iota {axis = 2} : tensor<1x2x128x128xi64>
          %col = iota {axis = -1} : tensor<1x2x128x128xi64>
          %masked = gt %col, %row
          %ninf = constant {value = -inf} : tensor<f16>
          %m = select %masked, %ninf, %s
          %c = constant {value = 0.125} : tensor<f16>
          %ms = mul %m, %c
          %p = softmax %ms {axis = -1}
          %o = matmul %p, %v
          return %o
        }",
    );
    assert!(skips_tiles(&kir));
}

#[test]
fn mixed_precision_softmax_in_f32() {
    // As models written for mixed precision do: the scores cast to f32, scaled and masked by an
    // f32 tensor, the softmax in f32, cast back to f16 for P·V.
    check(
        "graph @mixed(%q: tensor<2x1x70x64xf16>, %k: tensor<2x1x70x64xf16>, %v: tensor<2x1x70x64xf16>, %mask: tensor<2x1x1x70xf32>) -> tensor<2x1x70x64xf16> {
          %s = matmul %q, %k {transpose_b = true}
          %sf = cast %s {dtype = f32}
          %c = constant {value = 0.125} : tensor<f32>
          %ss = mul %sf, %c
          %sm = add %ss, %mask
          %p = softmax %sm {axis = -1}
          %ph = cast %p {dtype = f16}
          %o = matmul %ph, %v
          return %o
        }",
    );
}

#[test]
fn residual_add_in_the_output_epilogue() {
    // O + residual as the graph's result: the addition joins the output matmul's epilogue
    // (policy rule 6) and the attention kernel stores the sum.
    check(
        "graph @residual(%q: tensor<1x2x70x32xf16>, %k: tensor<1x2x70x32xf16>, %v: tensor<1x2x70x32xf16>, %r: tensor<1x2x70x32xf16>) -> tensor<1x2x70x32xf16> {
          %s = matmul %q, %k {transpose_b = true}
          %p = softmax %s {axis = -1}
          %o = matmul %p, %v
          %y = add %o, %r
          return %y
        }",
    );
}

/// Rank-2 operands (one head, no batch) and a softmax with its default axis: the Fused IR's
/// attention group takes the omitted axis as the last (it once failed the Fused IR verifier,
/// "3 anchors in one group", where the planner had recognized the chain).
#[test]
fn one_head_and_the_default_softmax_axis() {
    let src = "graph @g(%q: tensor<16x32xf16>, %k: tensor<16x32xf16>, %v: tensor<16x32xf16>) -> tensor<16x32xf16> {\n  %s = matmul %q, %k {transpose_b = true}\n  %p = softmax %s\n  %o = matmul %p, %v\n  return %o\n}\n";
    check(src);
}

/// Two blocks an SM (`AttentionConfig::occupancy`) only for a plain kernel: causal head dim 64
/// over whole tiles takes them (with enough units — 1024 here — for two a block); the same graph with an additive mask tensor, with the mask
/// written as what it drops (`keep` not known on whole tiles), or with a residual after the
/// output keeps one block (ptxas spilled those at 104 registers a thread).
#[test]
fn two_blocks_an_sm_only_for_plain_kernels() {
    let graph = |mask: &str, extra_param: &str, epilogue: &str| {
        format!(
            "graph @g(%q: tensor<16x32x256x64xf16>, %k: tensor<16x32x256x64xf16>, %v: tensor<16x32x256x64xf16>{extra_param}) -> tensor<16x32x256x64xf16> {{
              %s = matmul %q, %k {{transpose_b = true}}
              %c = constant {{value = 0.125}} : tensor<f16>
              %ss = mul %s, %c
              %row = iota {{axis = 0}} : tensor<256x256xi32>
              %col = iota {{axis = 1}} : tensor<256x256xi32>
              %ninf = constant {{value = -inf}} : tensor<f16>
              {mask}
              %p = softmax %m {{axis = -1}}
              %o = matmul %p, %v
              {epilogue}
            }}"
        )
    };
    let occupancy = |src: &str| {
        let k = hopper_kernels(src);
        let att = k.kernels.iter().find(|k| k.name.ends_with("attention"));
        att.expect("an attention kernel").occupancy
    };
    let causal = "%keep = ge %row, %col\n%m = select %keep, %ss, %ninf";
    assert_eq!(occupancy(&graph(causal, "", "return %o")), 2);
    let mask = "%keep = ge %row, %col\n%mc = select %keep, %ss, %ninf\n%m = add %mc, %am";
    let with_mask = graph(mask, ", %am: tensor<256x256xf16>", "return %o");
    assert_eq!(occupancy(&with_mask), 1);
    let negated = "%drop = gt %col, %row\n%m = select %drop, %ninf, %ss";
    assert_eq!(occupancy(&graph(negated, "", "return %o")), 1);
    let residual = graph(
        causal,
        ", %r: tensor<16x32x256x64xf16>",
        "%y = add %o, %r\nreturn %y",
    );
    assert_eq!(occupancy(&residual), 1);
}

/// A padded batch's causal mask as Hugging Face writes it: `select(keep, 0, finfo.min)` added to
/// the scores, the first two keys padding, so the first two query rows are masked whole. In
/// bf16 (and f32) the lowest finite value overflows to -inf once multiplied by `log2(e)`, and the
/// kernel's rows masked whole were NaN (0 · NaN then spreads through the next layer's `P·V`);
/// the graph's softmax of equal scores is uniform, and so is the kernel's now. In f16 the
/// graph's rounding of `s + finfo.min` absorbs the score (and BERT's -10000 in bf16 too, and
/// the mask written `(1 - keep) · min`): the kernel rounds that sum as the graph does, so the
/// rows agree with the unfused graph itself.
/// Also a bf16 mask given as an input tensor, with -inf in one row (which stays NaN, as the
/// graph has it).
#[test]
fn rows_masked_whole_by_the_lowest_finite_value_are_uniform() {
    let (s, heads) = (24usize, 2usize);
    let keep: Vec<bool> = (0..s * s).map(|e| e % s <= e / s && e % s >= 2).collect();
    let bools: Vec<&str> = keep
        .iter()
        .map(|&k| if k { "true" } else { "false" })
        .collect();
    // The kernel's result and the unfused graph's, the mask (if an input) given.
    let run = |src: &str, mask: Option<Vec<f64>>| {
        let m = irc_frontend::parse_module(src).unwrap();
        let g = &m.graphs[0];
        let k = irc_lower::lower_graph(g, Default::default()).unwrap();
        assert_eq!(k.kernels.len(), 1, "{src}");
        let mut inputs: Vec<Tensor> = (0..3)
            .map(|i| random_tensor(g.ty(g.params[i]), 7, i as u64))
            .collect();
        if let Some(mask) = mask {
            let ty = g.ty(g.params[3]).clone();
            inputs.push(Tensor::new(ty.clone(), Data::from_f64(ty.dtype, mask)).unwrap());
        }
        let (got, want) = emulate::against_interpreter_on(g, &k, inputs).swap_remove(0);
        let c = compare::compare(&got, &want).unwrap();
        (got, c)
    };
    let graph = |dt: &str, lowest: &str| {
        format!(
            "graph @m(%q: tensor<1x{heads}x{s}x64x{dt}>, %k: tensor<1x{heads}x{s}x64x{dt}>, %v: tensor<1x{heads}x{s}x64x{dt}>) -> tensor<1x{heads}x{s}x64x{dt}> {{\n  %kt = transpose %k {{perm = [0, 1, 3, 2]}}\n  %s = matmul %q, %kt\n  %c = constant {{value = 0.125}} : tensor<{dt}>\n  %ss = mul %s, %c\n  %keep = constant {{value = [{}]}} : tensor<1x1x{s}x{s}xi1>\n  %z = constant {{value = 0.0}} : tensor<{dt}>\n  %lo = constant {{value = {lowest}}} : tensor<{dt}>\n  %mask = select %keep, %z, %lo\n  %sm = add %ss, %mask\n  %p = softmax %sm {{axis = -1}}\n  %o = matmul %p, %v\n  return %o\n}}\n",
            bools.join(", ")
        )
    };
    for (dt, lowest) in [
        ("bf16", "-3.3895313892515355e38"),
        ("f16", "-65504.0"),
        ("bf16", "-10000.0"),
    ] {
        let (_, c) = run(&graph(dt, lowest), None);
        assert!(c.passed(), "{dt} {lowest}: {c:?}");
        // As BERT writes it: `(1 - keep) · lowest`.
        let scaled = graph(dt, lowest).replace(
            "  %mask = select %keep, %z, %lo\n",
            &format!("  %kf = cast %keep {{dtype = {dt}}}\n  %one = constant {{value = 1.0}} : tensor<{dt}>\n  %inv = sub %one, %kf\n  %mask = mul %inv, %lo\n"),
        );
        let (_, c) = run(&scaled, None);
        assert!(c.passed(), "{dt} (1 - keep) · {lowest}: {c:?}");
    }
    // The mask as an input: finfo.min where masked, one row of -inf.
    let src = format!(
        "graph @m(%q: tensor<1x{heads}x{s}x64xbf16>, %k: tensor<1x{heads}x{s}x64xbf16>, %v: tensor<1x{heads}x{s}x64xbf16>, %mask: tensor<1x1x{s}x{s}xbf16>) -> tensor<1x{heads}x{s}x64xbf16> {{\n  %kt = transpose %k {{perm = [0, 1, 3, 2]}}\n  %s = matmul %q, %kt\n  %c = constant {{value = 0.125}} : tensor<bf16>\n  %ss = mul %s, %c\n  %sm = add %ss, %mask\n  %p = softmax %sm {{axis = -1}}\n  %o = matmul %p, %v\n  return %o\n}}\n"
    );
    let mask: Vec<f64> = (0..s * s)
        .map(|e| match (e / s, keep[e]) {
            (5, _) => f64::NEG_INFINITY,
            (_, true) => 0.0,
            (_, false) => -3.3895313892515355e38,
        })
        .collect();
    let (got, c) = run(&src, Some(mask));
    assert!(c.passed(), "{c:?}");
    let nan = got.data.to_f64().iter().filter(|x| x.is_nan()).count();
    assert_eq!(nan, heads * 64, "only the -inf row is NaN");
}
