//! The tensor-core matmul template without a GPU: each matmul graph lowers (for sm_80) to its
//! `mma.sync` kernel, which the kernel-IR emulator (`emulate.rs`) runs on seeded random inputs,
//! `cp.async` as asynchronous copies that land only at a `cp.async.wait` (a read of a stage
//! before its copies have landed, or a copy into a stage still being read, panics); the result
//! must match the interpreter within the dtype's tolerance. The shapes cover every copy width
//! (16-, 8- and 4-byte `cp.async`, element by element where a row start is only 2-byte
//! aligned), both majors of each operand (`ldmatrix` with and without `.trans`), M, N and K
//! tails (zero-filled copies), more k-tiles than stages (the ring wraps), a batch, bf16, an
//! epilogue chain, and 2, 3 and 4 stages; and f32 by 3xTF32 (`mma.m16n8k8.tf32`, the emulator
//! dropping each operand's low 13 mantissa bits as the hardware does) within 1e-5, where one
//! TF32 product alone is about 1e-3 off.

mod emulate;

use irc_interp::compare;
use irc_lower::{LowerOptions, MmaConfig};
use irc_tests::hopper_kernels;

/// Checks the graph's matmul kernel under `cfg` against the interpreter; returns the kernel
/// IR text.
fn check(src: &str, cfg: MmaConfig) -> String {
    let m = irc_frontend::parse_module(src).expect("parses");
    let g = &m.graphs[0];
    let options = LowerOptions {
        mma: Some(cfg),
        ..Default::default()
    };
    let k = irc_lower::plan_and_lower_with(g, Default::default(), &options)
        .expect("lowers")
        .kernels;
    let text = irc_kir::print_module(&k);
    assert!(
        text.contains("mma.m16n8k16") || text.contains("mma.m16n8k8.tf32"),
        "@{}: not the tensor-core template",
        g.name
    );
    let (got, reference) = emulate::against_interpreter(g, &k, 11);
    let c = compare::compare(&got, &reference).unwrap();
    assert!(c.passed(), "@{} {cfg}: {c:?}", g.name);
    if text.contains("mma.m16n8k8.tf32") {
        assert!(c.rel_err < 1e-5, "@{} {cfg}: 3xTF32 {c:?}", g.name);
    }
    eprintln!("@{} {cfg}: rel err {:.2e}", g.name, c.rel_err);
    text
}

fn cfg(text: &str) -> MmaConfig {
    text.parse().unwrap()
}

fn gemm(m: u64, k: u64, n: u64, dt: &str) -> String {
    format!(
        "graph @g(%a: tensor<{m}x{k}x{dt}>, %b: tensor<{k}x{n}x{dt}>) -> tensor<{m}x{n}x{dt}> {{\n  %c = matmul %a, %b\n  return %c\n}}\n"
    )
}

#[test]
fn sixteen_byte_copies_with_tails_and_a_wrapping_ring() {
    // K = 200: 7 k-tiles of 32 through 4 stages, the last one a tail; M and N tails.
    let text = check(&gemm(136, 200, 72, "f16"), MmaConfig::DEFAULT);
    assert!(text.contains("cp.async.16"), "{text}");
    assert!(text.contains("cp.async.wait 2"), "{text}");
    assert!(!text.contains("cp.async.8") && !text.contains("cp.async.4"));
}

#[test]
fn narrower_copies_where_rows_are_8_or_4_byte_aligned() {
    // K = 44: A's rows start 88 bytes apart (8-byte copies); N = 70: B's 140 (4-byte).
    let text = check(&gemm(64, 44, 70, "f16"), cfg("64x64x32/2x2/3"));
    assert!(
        text.contains("cp.async.8") && text.contains("cp.async.4"),
        "{text}"
    );
}

#[test]
fn element_loads_where_rows_are_only_2_byte_aligned() {
    // 100x103x77: every row start odd, so no cp.async can read either operand.
    let text = check(&gemm(100, 103, 77, "f16"), MmaConfig::DEFAULT);
    assert!(
        !text.contains("cp.async.16") && !text.contains("cp.async.4"),
        "{text}"
    );
}

#[test]
fn transposed_operands_read_with_ldmatrix_trans() {
    // A stored K-major (a transpose of 96x136) and B stored N x K: both `.trans` flips.
    let src = "graph @t(%at: tensor<96x136xbf16>, %bt: tensor<80x96xbf16>) -> tensor<136x80xbf16> {\n  %a = transpose %at {perm = [1, 0]}\n  %b = transpose %bt {perm = [1, 0]}\n  %c = matmul %a, %b\n  return %c\n}\n";
    let text = check(src, cfg("128x64x64/2x2/3"));
    assert!(text.contains("ldmatrix.x4.trans"), "{text}");
    assert!(text.contains("cp.async.16"), "{text}");
}

#[test]
fn batched_with_an_epilogue_two_stages() {
    let src = "graph @b(%a: tensor<2x72x64xf16>, %b: tensor<2x64x48xf16>, %c: tensor<48xf16>) -> tensor<2x72x48xf16> {\n  %m = matmul %a, %b\n  %s = add %m, %c\n  %r = relu %s\n  return %r\n}\n";
    let text = check(src, cfg("64x64x32/2x2/2"));
    assert!(text.contains("cp.async.wait 0"), "{text}");
}

#[test]
fn f32_by_three_tf32_products_with_tails() {
    // K = 200: 7 k-tiles of 32 through 4 stages; M and N tails; A K-contiguous, B N-contiguous
    // (K read in pairs).
    let text = check(&gemm(136, 200, 72, "f32"), MmaConfig::DEFAULT);
    assert!(
        text.contains("mma.m16n8k8.tf32") && text.contains("tf32("),
        "{text}"
    );
    assert!(text.contains("cp.async.16"), "{text}");
}

#[test]
fn f32_with_4_and_8_byte_copies() {
    // K = 43: A's rows start 172 bytes apart (4-byte copies); N = 70: B's 280 (8-byte).
    let text = check(&gemm(64, 43, 70, "f32"), cfg("64x64x32/2x2/3"));
    assert!(
        text.contains("cp.async.4") && text.contains("cp.async.8"),
        "{text}"
    );
}

#[test]
fn f32_transposed_operands_and_a_batched_epilogue() {
    // A stored K-major, B stored N x K (both stages K-contiguous: K not relabelled).
    let src = "graph @t(%at: tensor<96x136xf32>, %b: tensor<80x96xf32>) -> tensor<136x80xf32> {\n  %a = transpose %at {perm = [1, 0]}\n  %c = matmul %a, %b {transpose_b = true}\n  return %c\n}\n";
    check(src, cfg("128x64x64/2x2/3"));
    let src = "graph @u(%a: tensor<72x64xf32>, %b: tensor<64x48xf32>) -> tensor<72x48xf32> {\n  %c = matmul %a, %b {transpose_b = false}\n  return %c\n}\n";
    check(src, cfg("64x64x32/2x2/2"));
    let src = "graph @b(%a: tensor<2x72x64xf32>, %b: tensor<2x48x64xf32>, %c: tensor<48xf32>) -> tensor<2x72x48xf32> {\n  %m = matmul %a, %b {transpose_b = true}\n  %s = add %m, %c\n  %r = relu %s\n  return %r\n}\n";
    check(src, cfg("64x64x32/2x2/2"));
}

/// `matmul(rmsnorm(x, g), W)` (bf16) with the norm as the matmul's A prologue: one kernel.
fn norm_gemm(m: u64, k: u64, n: u64, g: bool) -> String {
    let (gp, ga) = if g {
        (format!(", %g: tensor<{k}xbf16>"), ", %g")
    } else {
        (String::new(), "")
    };
    format!(
        "graph @p(%x: tensor<{m}x{k}xbf16>{gp}, %w: tensor<{k}x{n}xbf16>, %bias: tensor<{n}xbf16>) -> tensor<{m}x{n}xbf16> {{\n  %r = rmsnorm %x{ga} {{axis = -1, eps = 1e-5}}\n  %c = matmul %r, %w\n  %d = add %c, %bias\n  return %d\n}}\n"
    )
}

#[test]
fn rmsnorm_as_the_a_prologue_in_one_kernel() {
    for (m, k, n, g, c) in [
        // K tails: 200 is 6.25 k-tiles of 32 (whole 16-byte chunks); 203 leaves a partial
        // chunk (element loads, g read element by element, guarded).
        (136, 200, 72, true, "128x128x32/2x4/4"),
        (70, 203, 40, true, "64x64x32/2x2/3"),
        (64, 256, 64, false, "64x64x64/2x2/2"),
        (130, 512, 96, true, "128x128x64/2x4/3"),
        // Fewer threads (64) than rows (128): each thread holds whole rows' sums.
        (130, 200, 40, true, "128x32x32/2x1/3"),
    ] {
        let src = norm_gemm(m, k, n, g);
        let text = check(&src, cfg(c));
        assert_eq!(
            text.matches("kernel @").count(),
            1,
            "{m}x{k}x{n}: not one kernel\n{text}"
        );
        // A row's sum is split over lanes (a warp reduction) unless a thread holds whole rows.
        let lanes_share_rows = !c.contains("/2x1/");
        assert_eq!(
            text.contains("warp_reduce.sum."),
            lanes_share_rows,
            "{text}"
        );
        assert!(text.contains("sqrt"), "{text}");
    }
}

/// The Hopper template's norm prologue (sm_90a: the emulator does not run `wgmma`, so this
/// checks the kernel IR and what the CUDA emitter makes of it; the GPU graph
/// `tests/gpu/norm_prologue.ir` checks the numbers): with `g`, each fragment register is
/// scaled by a register of `g` with one `mul.x2` (an odd number of k-tiles included); without
/// `g`, `wgmma` reads the fragments as `ldmatrix` loaded them, and nothing is multiplied.
#[test]
fn the_hopper_norm_prologue_scales_register_pairs() {
    for (k, g) in [(320, true), (256, true), (320, false)] {
        let kernels = hopper_kernels(&norm_gemm(130, k, 96, g));
        let text = irc_kir::print_module(&kernels);
        assert_eq!(irc_kir::parse_module(&text).expect("re-parses"), kernels);
        assert_eq!(text.matches("kernel @").count(), 1, "{text}");
        assert!(text.contains("wgmma.rs.m64n"), "{text}");
        assert_eq!(text.contains("mul.x2"), g, "{text}");
        let cuda = irc_emit_cuda::emit(&kernels).source;
        assert_eq!(cuda.contains("fma.rn.bf16x2"), g);
    }
}

/// The verifier names a `wgmma` shape the intrinsic table lacks instead of checking it as
/// another intrinsic's row (it reported `ldmatrix.x4 takes 2 operands` for an N of 80).
#[test]
fn a_wgmma_shape_outside_the_table_is_reported_as_such() {
    let mut kernels = hopper_kernels(&norm_gemm(130, 256, 96, false));
    fn retarget(body: &mut [irc_kir::Stmt]) -> bool {
        body.iter_mut().any(|s| match s {
            irc_kir::Stmt::Intrinsic { op, .. } if matches!(op, irc_kir::Intrinsic::WgmmaRs(_)) => {
                *op = irc_kir::Intrinsic::WgmmaRs(80);
                true
            }
            irc_kir::Stmt::For { body, .. } => retarget(body),
            irc_kir::Stmt::If { body, orelse, .. } => retarget(body) || retarget(orelse),
            _ => false,
        })
    }
    let body = std::sync::Arc::make_mut(&mut kernels.kernels[0].body);
    assert!(retarget(body), "a register-operand wgmma to retarget");
    let err = irc_kir::verify_module(&kernels).expect_err("N = 80 is not in the table");
    assert!(
        err.to_string().contains("WgmmaRs(80) is not an intrinsic"),
        "{err}"
    );
}

/// A reduction of the matmul's epilogue (the policy's rule 6): `reduce(relu(A @ B))` over the
/// last axis (`rows`) or the one before it, with the matmul itself stored too.
fn reduce_gemm(batch: &str, (m, k, n): (u64, u64, u64), dt: &str, red: &str, rows: bool) -> String {
    let (a, b, c) = (
        format!("tensor<{batch}{m}x{k}x{dt}>"),
        format!("tensor<{batch}{k}x{n}x{dt}>"),
        format!("tensor<{batch}{m}x{n}x{dt}>"),
    );
    let rank = batch.matches('x').count() + 2;
    let (s, axis) = match rows {
        true => (format!("tensor<{batch}{m}x{dt}>"), rank - 1),
        false => (format!("tensor<{batch}{n}x{dt}>"), rank - 2),
    };
    format!(
        "graph @g(%a: {a}, %b: {b}) -> ({s}, {c}) {{\n  %c = matmul %a, %b\n  %r = relu %c\n  %s = {red} %r {{axes = [{axis}]}}\n  return %s, %c\n}}\n"
    )
}

/// Lowers `src` under `c` (one kernel with an arrival counter) and checks every result.
fn check_reductions(src: &str, c: &str) {
    let m = irc_frontend::parse_module(src).expect("parses");
    let g = &m.graphs[0];
    let options = LowerOptions {
        mma: Some(cfg(c)),
        ..Default::default()
    };
    let k = irc_lower::plan_and_lower_with(g, Default::default(), &options)
        .expect("lowers")
        .kernels;
    let text = irc_kir::print_module(&k);
    assert_eq!(
        text.matches("kernel @").count(),
        1,
        "{src}: not one kernel\n{text}"
    );
    assert!(
        text.contains("atom.arrive") && text.contains("zeroed"),
        "{text}"
    );
    emulate::assert_agree(
        emulate::against_interpreter_all(g, &k, 5),
        &format!("{src} {c}:"),
    );
}

#[test]
fn row_reductions_in_the_epilogue_in_one_kernel() {
    for (src, c) in [
        // Three column tiles (N tail), the M tail, the matmul stored beside its row sums.
        (
            reduce_gemm("", (136, 64, 300), "f16", "reduce_sum", true),
            "128x128x32/2x4/3",
        ),
        // A batch, bf16, the max; two column tiles.
        (
            reduce_gemm("2x", (70, 64, 72), "bf16", "reduce_max", true),
            "64x64x32/2x2/3",
        ),
        // f32 (3xTF32) and the mean.
        (
            reduce_gemm("", (70, 40, 200), "f32", "reduce_mean", true),
            "64x64x32/2x2/3",
        ),
        // One column tile; fewer threads (64) than staged rows (64 of 128): a lane per row.
        (
            reduce_gemm("", (40, 32, 24), "f16", "reduce_min", true),
            "128x32x32/2x1/3",
        ),
    ] {
        check_reductions(&src, c);
    }
}

#[test]
fn column_reductions_in_the_epilogue_in_one_kernel() {
    for (src, c) in [
        // Two row tiles of two staged halves each, the last half past M; three column tiles.
        (
            reduce_gemm("", (136, 64, 300), "f16", "reduce_sum", false),
            "128x128x32/2x4/3",
        ),
        // A batch, bf16, the max.
        (
            reduce_gemm("2x", (70, 64, 72), "bf16", "reduce_max", false),
            "64x64x32/2x2/3",
        ),
        // f32 and the mean; then 64 threads for 32 columns: two lanes per column.
        (
            reduce_gemm("", (70, 40, 200), "f32", "reduce_mean", false),
            "64x64x32/2x2/3",
        ),
        (
            reduce_gemm("", (200, 32, 24), "f16", "reduce_min", false),
            "128x32x32/2x1/3",
        ),
    ] {
        check_reductions(&src, c);
    }
    // A row and a column reduction of one matmul, in one kernel.
    let both = "graph @g(%a: tensor<100x48xf16>, %b: tensor<48x136xf16>) -> (tensor<100xf32>, tensor<136xf32>) {\n  %c = matmul %a, %b\n  %f = cast %c {dtype = f32}\n  %r = reduce_sum %f {axes = [1]}\n  %s = reduce_max %f {axes = [0]}\n  return %r, %s\n}\n";
    check_reductions(both, "64x64x32/2x2/3");
}

/// A matmul stored beside two functions of it: three roots of one kernel, each stored by 16-byte
/// copies from registers, where one 16-byte copy took the staged matmul values.
#[test]
fn several_outputs_of_one_kernel_by_16_byte_copies() {
    let src = "graph @g(%a: tensor<136x64xf16>, %b: tensor<64x200xf16>) -> (tensor<136x200xf16>, tensor<136x200xf16>, tensor<136x200xf16>) {\n  %c = matmul %a, %b\n  %r = relu %c\n  %e = mul %c, %c\n  return %c, %r, %e\n}\n";
    for c in ["128x128x32/2x4/3", "64x64x32/2x2/3"] {
        let m = irc_frontend::parse_module(src).expect("parses");
        let g = &m.graphs[0];
        let options = LowerOptions {
            mma: Some(cfg(c)),
            ..Default::default()
        };
        let k = irc_lower::plan_and_lower_with(g, Default::default(), &options)
            .expect("lowers")
            .kernels;
        let text = irc_kir::print_module(&k);
        assert_eq!(text.matches("kernel @").count(), 1, "{text}");
        assert_eq!(text.matches("copy.8 %").count(), 4, "{text}");
        emulate::assert_agree(emulate::against_interpreter_all(g, &k, 3), &format!("{c}:"));
    }
}

/// The Hopper template's realigning copies (`templates/realign.rs`), run alone: operands whose
/// 16-bit rows are not 16-byte aligned (odd K, odd N, a transposed B, a batch) land in temps
/// whose rows are padded to 64 elements, each element at its row and column, the padding
/// untouched. (The emulator has no TMA or wgmma; the product itself runs in
/// `tests/gpu/matmul_realign.ir` on the GPU.)
#[test]
fn realigning_copies_put_every_element_in_its_padded_row() {
    let src = "graph @g(%a: tensor<2049x9xf16>, %b: tensor<9x7283xf16>,\n               %a2: tensor<3x260x1031xbf16>, %b2: tensor<200x1031xbf16>)\n    -> (tensor<2049x7283xf16>, tensor<3x260x200xbf16>) {\n  %c = matmul %a, %b\n  %c2 = matmul %a2, %b2 {transpose_b = true}\n  return %c, %c2\n}\n";
    let m = irc_frontend::parse_module(src).expect("parses");
    let g = &m.graphs[0];
    let mut k = hopper_kernels(src);
    let copies = |n: &str| n.ends_with("_realign_a") || n.ends_with("_realign_b");
    k.launches.retain(|l| copies(&l.kernel));
    assert_eq!(k.launches.len(), 4, "{:?}", k.launches);
    let inputs: std::collections::HashMap<String, Vec<f64>> = g
        .params
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let t = irc_interp::random::random_tensor(g.ty(p), 5, i as u64);
            (k.buffers[i].name.clone(), t.data.to_f64())
        })
        .collect();
    let mem = emulate::run(&k, &inputs);
    for l in &k.launches {
        let (from, temp) = (&l.args[0], &l.args[1]);
        let shape = &k.buffers.iter().find(|b| &b.name == from).unwrap().shape;
        let pad = *k
            .buffers
            .iter()
            .find(|b| &b.name == temp)
            .unwrap()
            .shape
            .last()
            .unwrap();
        let cols = *shape.last().unwrap() as usize;
        assert_eq!(pad % 64, 0);
        let (x, y) = (&mem[from], &mem[temp]);
        for row in 0..x.len() / cols {
            for c in 0..pad as usize {
                let got = y[row * pad as usize + c];
                let want = if c < cols { x[row * cols + c] } else { 0.0 };
                assert_eq!(got, want, "{temp} row {row} col {c}");
            }
        }
    }
}

/// The pre-norm residual of a transformer block: `h = x + attn @ W` is stored (the residual
/// stream) and `mean(h²)` reduced in the same kernel's epilogue. The reduction pass runs before
/// the stores, so it computes `h` (it read `h`'s buffer, not yet written: every Llama-style
/// model's output was NaN or garbage on the GPU). The attention output comes in through the
/// heads-merging views, as an imported model has it; three column tiles add their partials.
#[test]
fn a_stored_chain_value_is_computed_by_the_reduction_pass() {
    let src = "graph @g(%x: tensor<1x40x136xf32>, %a: tensor<1x4x40x16xf32>, %w: tensor<64x136xf32>) -> (tensor<1x40x1xf32>, tensor<1x40x136xf32>) {\n  %t = transpose %a {perm = [0, 2, 1, 3]}\n  %r = reshape %t {shape = [1, 40, -1]}\n  %m = matmul %r, %w\n  %h = add %x, %m\n  %two = constant {value = 2.0} : tensor<f32>\n  %p = pow %h, %two\n  %s = reduce_mean %p {axes = [-1], keepdims = true}\n  return %s, %h\n}\n";
    check_reductions(src, "64x64x32/2x2/3");
    check_reductions(&src.replace("f32>", "f16>"), "64x64x32/2x2/3");
}

/// A bias made of two pieces added in the epilogue: split inside a 16-byte vector (60 | 68) the
/// operand is chosen and read element by element, and the epilogue's chunk loop stays rolled
/// (unrolled, its loads held 1.2 KB of registers beside the accumulators: spills on sm_80);
/// split on a vector (64 | 64) each piece's vector is loaded before the choice, and the loop
/// stays unrolled. Both compute what the interpreter does.
#[test]
fn a_bias_chosen_element_by_element_keeps_the_epilogue_loop_rolled() {
    let rolled = |b1: u64| {
        let src = format!(
            "graph @g(%a: tensor<256x64xf16>, %b: tensor<64x128xf16>, %b1: tensor<{b1}xf16>, %b2: tensor<{}xf16>) -> tensor<256x128xf16> {{\n  %m = matmul %a, %b\n  %c = concat %b1, %b2 {{axis = 0}}\n  %y = add %m, %c\n  return %y\n}}\n",
            128 - b1
        );
        let m = irc_frontend::parse_module(&src).unwrap();
        let g = &m.graphs[0];
        let k = irc_lower::plan_and_lower_with(g, Default::default(), &LowerOptions::default())
            .unwrap()
            .kernels;
        emulate::assert_agree(emulate::against_interpreter_all(g, &k, 5), &src);
        let mut n = 0;
        irc_kir::walk(&k.kernels[0].body, &mut |s| {
            n += usize::from(matches!(s, irc_kir::Stmt::For { unroll: false, .. }));
        });
        n
    };
    assert_eq!(rolled(60), rolled(64) + 1);
}
