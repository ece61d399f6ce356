//! The row and reduction templates without a GPU: every point of each graph's row or reduction
//! configuration space (warp, part-of-a-warp and block groups with 16-byte vectors, split and
//! streamed schedules) is lowered, run by the kernel-IR emulator (`emulate.rs`) on seeded
//! random inputs, and checked against the interpreter on the graph as written. The sizes are
//! odd on purpose: rows of 1, 6, 33, 1025 elements, a row count that leaves a warp's last lane
//! groups without a row, rows read through a transpose (no vectors), fused producers read as
//! vectors beside a weight read at stride 0 across rows.

mod emulate;

use irc_interp::compare;
use irc_kir::CacheHint;
use irc_lower::templates::{Config, ReductionConfig};

/// Runs the graph's kernels in the emulator and compares its result with the interpreter's.
fn emulate_matches(g: &irc_ir::Graph, k: &irc_kir::Module, what: &str) {
    for (i, (got, reference)) in emulate::against_interpreter_all(g, k, 11)
        .into_iter()
        .enumerate()
    {
        let c = compare::compare(&got, &reference).unwrap();
        assert!(c.passed(), "@{} {what}, result {i}: {c:?}", g.name);
    }
}

/// Checks every configuration of every row/reduction kernel of `src`'s graph; returns the
/// kernel IR of the default lowering and how many configurations ran.
fn check(src: &str) -> (String, usize) {
    let m = irc_frontend::parse_module(src).expect("parses");
    let g = &m.graphs[0];
    let target = irc_lower::LowerOptions::default().target;
    let base =
        irc_lower::plan_and_lower_with(g, Default::default(), &Default::default()).expect("lowers");
    emulate_matches(g, &base.kernels, "default");
    let mut ran = 1;
    for choice in &base.choices {
        let p = &choice.problem;
        if !matches!(p.template, "row" | "reduction") {
            continue;
        }
        let lower_at = |cfg: Config| {
            let options = irc_lower::LowerOptions {
                configs: std::collections::BTreeMap::from([(p.key(), cfg)]),
                ..Default::default()
            };
            irc_lower::plan_and_lower_with(g, Default::default(), &options)
                .unwrap_or_else(|e| panic!("@{} {cfg}: {e}", g.name))
                .kernels
        };
        for cfg in irc_lower::templates::space(p, &target) {
            let kernels = lower_at(cfg);
            // A cache hint changes only the copies' cache operator (where the schedule reads
            // vectors at all): the same kernels as the plain point, which the emulator runs,
            // but for `.evict_first`.
            if let Config::Reduction(c) = cfg
                && c.loads != CacheHint::Normal
            {
                let plain = lower_at(Config::Reduction(ReductionConfig {
                    loads: CacheHint::Normal,
                    ..c
                }));
                let text = irc_kir::print_module(&kernels);
                assert_eq!(
                    text.replace(".evict_first", ""),
                    irc_kir::print_module(&plain),
                    "@{} {cfg}",
                    g.name
                );
                continue;
            }
            emulate_matches(g, &kernels, &cfg.to_string());
            ran += 1;
        }
    }
    (irc_kir::print_module(&base.kernels), ran)
}

fn copies(kir: &str) -> usize {
    kir.lines()
        .filter(|l| l.trim().starts_with("copy."))
        .count()
}

#[test]
fn softmax_short_rows_share_a_warp() {
    // 128 f16 = 16 vectors of 8: 16 lanes per row, two rows per warp; 37 rows leave the last
    // warp's second lane group without a row.
    let (kir, ran) = check(
        "graph @s(%x: tensor<37x128xf16>) -> tensor<37x128xf16> {
          %y = softmax %x {axis = -1}
          return %y
        }",
    );
    assert!(kir.contains("warp_reduce.max.16"), "{kir}");
    assert_eq!(
        copies(&kir),
        2,
        "one vector load and one vector store:\n{kir}"
    );
    assert!(ran > 4);
}

#[test]
fn rows_of_one_vector_a_thread_ask_for_a_full_sm() {
    // 128 f16 a row on 16 lanes: a thread holds one vector, so the kernel asks for 16 blocks
    // of 128 threads an SM (32 registers a thread); the attribute prints and re-parses.
    let ln = |k: u64| {
        format!(
            "graph @ln(%x: tensor<64x{k}xf16>, %w: tensor<{k}xf16>, %b: tensor<{k}xf16>) -> tensor<64x{k}xf16> {{
              %y = layernorm %x, %w, %b {{axis = -1, eps = 1e-5}}
              return %y
            }}"
        )
    };
    let (kir, _) = check(&ln(128));
    assert!(
        kir.contains("block(128, 1, 1) index(i32) occupancy(16) {"),
        "{kir}"
    );
    let back = irc_kir::parse_module(&kir).expect("re-parses");
    assert_eq!(irc_kir::print_module(&back), kir);
    irc_kir::verify_module(&back).expect("verifies");
    // Rows of 1024 hold four vectors a thread: the assembler keeps its registers.
    let (kir, _) = check(&ln(1024));
    assert!(!kir.contains("occupancy("), "{kir}");
}

#[test]
fn rmsnorm_fused_residual_reads_vectors() {
    // The pre-norm pattern: x + r normalized; x, r and the weight are each one vector load.
    let (kir, _) = check(
        "graph @r(%x: tensor<9x1000xf16>, %r: tensor<9x1000xf16>, %w: tensor<1000xf16>) -> tensor<9x1000xf16> {
          %s = add %x, %r
          %y = rmsnorm %s, %w {axis = -1, eps = 1e-6}
          return %y
        }",
    );
    assert!(copies(&kir) >= 4, "{kir}");
}

#[test]
fn layernorm_rows_of_odd_and_tiny_lengths() {
    for (rows, k) in [(5, 1025), (40, 6), (3, 33), (1, 8)] {
        check(&format!(
            "graph @ln(%x: tensor<{rows}x{k}xbf16>, %w: tensor<{k}xbf16>, %b: tensor<{k}xbf16>) -> tensor<{rows}x{k}xbf16> {{
              %y = layernorm %x, %w, %b {{axis = -1, eps = 1e-5}}
              return %y
            }}"
        ));
    }
}

#[test]
fn softmax_f32_block_rows_and_leading_axis() {
    check(
        "graph @s(%x: tensor<3x3000xf32>) -> tensor<3x3000xf32> {
          %y = softmax %x {axis = -1}
          return %y
        }",
    );
    // Reduced along axis 0: the row's elements are 5 apart, so reads stay scalar.
    let (kir, _) = check(
        "graph @t(%x: tensor<64x5xf32>) -> tensor<64x5xf32> {
          %y = softmax %x {axis = 0}
          return %y
        }",
    );
    assert_eq!(copies(&kir), 0, "{kir}");
}

#[test]
fn long_rows_split_and_streamed() {
    check(
        "graph @l(%x: tensor<2x9000xf16>, %w: tensor<9000xf16>) -> tensor<2x9000xf16> {
          %y = rmsnorm %x, %w {axis = -1, eps = 1e-6}
          return %y
        }",
    );
}

#[test]
fn reductions_over_rows() {
    for src in [
        "graph @s(%x: tensor<33x512xf32>) -> tensor<33xf32> {
          %y = reduce_sum %x {axes = [1]}
          return %y
        }",
        "graph @m(%x: tensor<7x1000xf16>) -> tensor<7xf16> {
          %y = reduce_max %x {axes = [1]}
          return %y
        }",
        "graph @a(%x: tensor<3x5x6xf32>) -> tensor<5xf32> {
          %y = reduce_mean %x {axes = [0, 2]}
          return %y
        }",
        // Rows of 9 and 8 vectors: the warp schedule on 16, 8, 4 or 2 lanes a row, each lane
        // loading one to five vectors (the last lane group of a warp without a row).
        "graph @w(%x: tensor<37x72xf16>) -> tensor<37xf16> {
          %y = reduce_sum %x {axes = [1]}
          return %y
        }",
        "graph @v(%x: tensor<21x64xbf16>) -> tensor<21xbf16> {
          %y = reduce_max %x {axes = [1]}
          return %y
        }",
    ] {
        let (_, ran) = check(src);
        assert!(ran > 10, "{ran} points");
    }
    // The heuristic's lanes: two vectors a lane from rows of 8 vectors (and evict-first loads
    // of 64 and 128 MiB inputs).
    let lanes = |k: u64| {
        let text = format!(
            "graph @g(%x: tensor<1048576x{k}xf16>) -> tensor<1048576xf16> {{\n  %y = reduce_sum %x {{axes = [1]}}\n  return %y\n}}\n"
        );
        let g = irc_frontend::parse_module(&text).unwrap().graphs.remove(0);
        let planned = irc_lower::plan_and_lower(&g, Default::default()).unwrap();
        planned.choices[0].config.unwrap().to_string()
    };
    assert_eq!(lanes(64), "warp,warps=8,lanes=4,evict_first");
    assert_eq!(lanes(128), "warp,warps=8,lanes=8");
    assert_eq!(lanes(512), "warp,warps=8");
    assert_eq!(lanes(32), "warp,warps=8,evict_first");
}

/// Checks the graph's every kernel against the interpreter; returns the kernel IR.
fn check_all_kernels(src: &str) -> String {
    let m = irc_frontend::parse_module(src).expect("parses");
    let g = &m.graphs[0];
    let planned =
        irc_lower::plan_and_lower_with(g, Default::default(), &Default::default()).expect("lowers");
    for c in &planned.choices {
        assert_eq!(
            c.problem.template, "matmul_gemv",
            "@{}: {}",
            g.name, c.group
        );
    }
    emulate_matches(g, &planned.kernels, "default");
    irc_kir::print_module(&planned.kernels)
}

#[test]
fn matrix_vector_products_are_row_reductions() {
    // A·x with odd K (4-byte vectors) and a fused bias + relu.
    let kir = check_all_kernels(
        "graph @mv(%a: tensor<37x1001xf16>, %x: tensor<1001x1xf16>, %b: tensor<37x1xf16>) -> tensor<37x1xf16> {
          %y = matmul %a, %x
          %z = add %y, %b
          %r = relu %z
          return %r
        }",
    );
    assert!(kir.contains("warp_reduce"), "{kir}");
    // x·Wᵀ, W [N, K]: the linear layer at batch 1, 16-byte vectors of W's rows.
    let kir = check_all_kernels(
        "graph @lin(%v: tensor<1x520xbf16>, %w: tensor<33x520xbf16>) -> tensor<1x33xbf16> {
          %z = matmul %v, %w {transpose_b = true}
          return %z
        }",
    );
    assert!(kir.contains("copy.8"), "{kir}");
    // Batched with the vector broadcast; rows of fewer than 32 vectors (lane groups).
    check_all_kernels(
        "graph @bmv(%a: tensor<3x7x96xf16>, %x: tensor<96x1xf16>) -> tensor<3x7x1xf16> {
          %u = matmul %a, %x
          return %u
        }",
    );
    check_all_kernels(
        "graph @dot(%f: tensor<45x40xf32>, %g: tensor<40xf32>) -> tensor<45xf32> {
          %q = matmul %f, %g
          return %q
        }",
    );
}

#[test]
fn vector_matrix_products_are_split_column_reductions() {
    // x·B, B [K, N] N-contiguous: 8 lanes of 8-wide output vectors, K split across blocks
    // (a partials kernel and an in-order sum), a bias + relu epilogue.
    let kir = check_all_kernels(
        "graph @vm(%x: tensor<1x2000xf16>, %b: tensor<2000x264xf16>, %c: tensor<1x264xf16>) -> tensor<1x264xf16> {
          %y = matmul %x, %b
          %z = add %y, %c
          %g = relu %z
          return %g
        }",
    );
    assert!(kir.contains("_partial"), "{kir}");
    assert!(kir.contains("copy.8"), "{kir}");
    // Odd N (scalar reads), batched with the matrix broadcast, f32; a short K in one kernel.
    check_all_kernels(
        "graph @bvm(%x: tensor<3x1x100xf32>, %b: tensor<100x33xf32>) -> tensor<3x1x33xf32> {
          %y = matmul %x, %b
          return %y
        }",
    );
}

#[test]
fn few_long_rows_and_few_columns_split() {
    // 3 rows of 40000: split into chunks over blocks, partials added in order.
    let (kir, _) = check(
        "graph @few(%x: tensor<3x40000xf32>) -> tensor<3xf32> {
          %y = reduce_sum %x {axes = [1]}
          return %y
        }",
    );
    assert!(kir.contains("_partial"), "{kir}");
    // A leading axis reduced into 24 outputs (a batch-norm statistic): the split column
    // reduction, K split across blocks.
    let (kir, _) = check(
        "graph @cols(%x: tensor<3000x24xf16>) -> tensor<24xf16> {
          %y = reduce_max %x {axes = [0]}
          return %y
        }",
    );
    assert!(kir.contains("_partial"), "{kir}");
    // A long axis: 521 blocks of 192 rows each, not a multiple of the 128 rows a block's
    // groups step (the unrolled steps stop at the block's own rows).
    check(
        "graph @long(%x: tensor<100000x8xf16>) -> tensor<8xf16> {
          %y = reduce_sum %x {axes = [0]}
          return %y
        }",
    );
    // Channel statistics of an NCHW tensor: mean over [0, 2, 3].
    check(
        "graph @chan(%x: tensor<4x6x10x12xf32>) -> tensor<6xf32> {
          %y = reduce_mean %x {axes = [0, 2, 3]}
          return %y
        }",
    );
}

#[test]
fn split_rows_wait_for_each_other_in_one_launch_where_they_fit() {
    // 2 rows of 9000: every block of the split is resident at once, so partials, barrier,
    // merge and normalization are one cooperative kernel.
    let (kir, _) = check(
        "graph @ln(%x: tensor<2x9000xf32>) -> tensor<2x9000xf32> {
          %y = layernorm %x {axis = -1, eps = 1e-5}
          return %y
        }",
    );
    assert_eq!(kernels(&kir), 1, "{kir}");
    assert!(kir.contains("counter.wait"), "{kir}");
    // Its registers are bounded so that 4 blocks fit on an SM, as its grid assumes.
    let m = irc_frontend::parse_module(
        "graph @ln(%x: tensor<2x9000xf32>) -> tensor<2x9000xf32> {
          %y = layernorm %x {axis = -1, eps = 1e-5}
          return %y
        }",
    )
    .expect("parses");
    let k = irc_lower::plan_and_lower_with(&m.graphs[0], Default::default(), &Default::default())
        .expect("lowers");
    let cu = irc_emit_cuda::emit(&k.kernels);
    assert!(
        cu.source.contains("__launch_bounds__(256, 4)"),
        "{}",
        cu.source
    );
    assert!(cu.manifest.launches[0].cooperative);
    // 70 rows of 9000 f16: 1024-element chunks make 630 blocks, more than may be resident
    // (4 per SM): that point of the space is a partials kernel and a second launch; longer
    // chunks fit in one (`check` runs both).
    let (kir, ran) = check(
        "graph @sm(%x: tensor<70x9000xf16>) -> tensor<70x9000xf16> {
          %y = softmax %x {axis = -1}
          return %y
        }",
    );
    assert!(ran > 4, "{kir}");
    let m = irc_frontend::parse_module(
        "graph @sm(%x: tensor<70x9000xf16>) -> tensor<70x9000xf16> {
          %y = softmax %x {axis = -1}
          return %y
        }",
    )
    .expect("parses");
    let g = &m.graphs[0];
    let target = irc_lower::LowerOptions::default().target;
    let base =
        irc_lower::plan_and_lower_with(g, Default::default(), &Default::default()).expect("lowers");
    let p = &base.choices[0].problem;
    let launches = |chunk: &str| {
        let cfg = irc_lower::templates::space(p, &target)
            .into_iter()
            .find(|c| c.to_string() == chunk)
            .expect("a point of the space");
        let options = irc_lower::LowerOptions {
            configs: std::collections::BTreeMap::from([(p.key(), cfg)]),
            ..Default::default()
        };
        let k = irc_lower::plan_and_lower_with(g, Default::default(), &options).expect("lowers");
        kernels(&irc_kir::print_module(&k.kernels))
    };
    assert_eq!(launches("split,chunk=1024"), 2);
    assert_eq!(launches("split,chunk=2048"), 1);
}

#[test]
fn softmax_of_a_row_masked_with_the_lowest_f32_is_uniform() {
    // PyTorch masks with finfo.min: row 0 (r > c never holds) is fully masked, its max is
    // -3.4e38 and every exp(x - max) is 1 (a uniform row), as the interpreter gives. (On the
    // GPU, f32 max·log2e overflows, so the kernel takes x - max first; the emulator computes
    // in f64 and cannot see that, `bench/gpu/models.sh` does.)
    let (kir, _) = check(
        "graph @m(%x: tensor<6x32xf32>) -> tensor<6x32xf32> {
          %r = iota {axis = 0} : tensor<6x32xi32>
          %c = iota {axis = 1} : tensor<6x32xi32>
          %keep = gt %r, %c
          %lo = constant {value = -3.4028234663852886e38} : tensor<f32>
          %s = select %keep, %x, %lo
          %y = softmax %s {axis = -1}
          return %y
        }",
    );
    assert!(kir.contains("exp2"), "{kir}");
}

/// The number of kernels of the default lowering.
fn kernels(kir: &str) -> usize {
    kir.lines()
        .filter(|l| l.trim_start().starts_with("kernel @"))
        .count()
}

#[test]
fn pre_norm_residual_is_stored_by_the_norm_kernel() {
    // Rule 9: h = x + r is a result and the norm's input: one kernel computes it, stores it
    // and normalizes it, in every schedule (warp, block, streamed, split over 9000 elements).
    for (rows, k) in [(9, 1000), (2, 9000), (3, 33)] {
        let (kir, ran) = check(&format!(
            "graph @p(%x: tensor<{rows}x{k}xf16>, %r: tensor<{rows}x{k}xf16>, %w: tensor<{k}xf16>) -> (tensor<{rows}x{k}xf16>, tensor<{rows}x{k}xf16>) {{
              %h = add %x, %r
              %y = rmsnorm %h, %w {{axis = -1, eps = 1e-6}}
              return %h, %y
            }}"
        ));
        let names: Vec<&str> = kir
            .lines()
            .filter(|l| l.trim_start().starts_with("kernel @"))
            .collect();
        // The split schedule (2 x 9000) is one cooperative launch too.
        assert!(names.iter().all(|l| l.contains("rmsnorm")), "{kir}");
        assert_eq!(names.len(), 1, "{kir}");
        assert!(ran > 2);
    }
    // A layernorm and a softmax whose input is also read by a later statement.
    check(
        "graph @q(%x: tensor<5x300xf32>, %r: tensor<5x300xf32>) -> (tensor<5x300xf32>, tensor<5x300xf32>) {
          %h = add %x, %r
          %n = layernorm %h {axis = -1, eps = 1e-5}
          %s = softmax %h {axis = -1}
          %y = add %n, %h
          return %y, %s
        }",
    );
}

#[test]
fn row_epilogues_run_in_the_row_kernel() {
    // A group norm: the norm of [N, G, C/G·H·W] rows, reshaped back, scaled and shifted per
    // channel: one kernel (rule 6 for rows, through the reshape).
    let (kir, _) = check(
        "graph @g(%x: tensor<2x8x3x5xf16>, %w: tensor<8x1x1xf16>, %b: tensor<8x1x1xf16>) -> tensor<2x8x3x5xf16> {
          %v = reshape %x {shape = [2, 4, 30]}
          %n = layernorm %v {axis = -1, eps = 1e-5}
          %u = reshape %n {shape = [2, 8, 3, 5]}
          %s = mul %u, %w
          %y = add %s, %b
          return %y
        }",
    );
    assert_eq!(kernels(&kir), 1, "{kir}");
    // A softmax scaled and stored twice (the softmax itself and its scaled copy), over long
    // rows (streamed and split schedules) and short ones.
    for k in [7, 200, 9000] {
        let (kir, _) = check(&format!(
            "graph @s(%x: tensor<3x{k}xf32>) -> (tensor<3x{k}xf32>, tensor<3x{k}xf32>) {{
              %p = softmax %x {{axis = -1}}
              %c = constant {{value = 3.0}} : tensor<3x{k}xf32>
              %y = mul %p, %c
              return %p, %y
            }}"
        ));
        assert!(kernels(&kir) <= 2, "{kir}");
    }
}

#[test]
fn log_softmax_in_every_schedule() {
    // Short rows on lane groups, block rows, split rows (every configuration of each), and a
    // transposed row (no vectors).
    for (rows, k) in [(37, 6), (5, 1025), (2, 9000)] {
        check(&format!(
            "graph @l(%x: tensor<{rows}x{k}xf16>) -> tensor<{rows}x{k}xf16> {{
              %y = log_softmax %x {{axis = -1}}
              return %y
            }}"
        ));
    }
    check(
        "graph @l(%x: tensor<7x300xf32>) -> tensor<300x7xf32> {
          %t = transpose %x {perm = [1, 0]}
          %y = log_softmax %t {axis = 0}
          return %y
        }",
    );
}

#[test]
fn wider_operands_of_a_narrow_row_are_read_by_element() {
    // A bf16 row's vectors are 8 wide; its f32 operand would need 32-byte copies (a copy is at
    // most 16 bytes), so it is read element by element while the store stays a vector.
    let (kir, _) = check(
        "graph @c(%x: tensor<3x64xf32>) -> tensor<3x64xbf16> {
          %c = cast %x {dtype = bf16}
          %y = softmax %c {axis = -1}
          return %y
        }",
    );
    assert_eq!(
        copies(&kir),
        1,
        "only the bf16 store is a vector copy:\n{kir}"
    );
}

#[test]
fn many_partials_of_few_outputs_are_merged_by_the_last_block() {
    // 8 outputs of a 70000-long leading axis: the column split writes hundreds of partials
    // per output, which the last block to arrive reads as a column reduction of its own (16-byte
    // vectors of partials, the same order whichever block is last) — one launch.
    let (kir, _) = check(
        "graph @c(%x: tensor<70000x8xf32>) -> tensor<8xf32> {
          %y = reduce_max %x {axes = [0]}
          return %y
        }",
    );
    assert_eq!(kir.matches("kernel @").count(), 1, "{kir}");
    assert!(kir.contains("_arrivals"), "{kir}");
    assert!(
        copies(&kir) >= 2,
        "x and the partials read as vectors:\n{kir}"
    );
    // 5 outputs: scalar reads of x and of the partials.
    check(
        "graph @c(%x: tensor<70000x5xf32>) -> tensor<5xf32> {
          %y = reduce_max %x {axes = [0]}
          return %y
        }",
    );
}

/// A row input stored for another kernel (the policy's rule 9) is read back by the row's last
/// pass: in a split row after the blocks' row barrier, in a block's row after the block's
/// barrier (the differential test's graph, whose check flagged the read as unordered).
#[test]
fn a_stored_row_input_is_read_back_after_a_barrier() {
    for (x, k) in [("16384", 16384), ("64x4000", 4000)] {
        let src = format!(
            "graph @f(%p0: tensor<{x}xf32>, %p1: tensor<{k}xf32>, %p2: tensor<{k}xf32>) -> (tensor<{x}xf32>, tensor<f32>) {{
  %v0 = abs %p0
  %v1 = constant {{value = 0.5}} : tensor<f32>
  %v2 = add %v0, %v1
  %v3 = log %v2
  %v9 = reduce_min %v3
  %v10 = layernorm %v2, %p1, %p2 {{axis = -1, eps = 0.001}}
  return %v10, %v9
}}"
        );
        let m = irc_frontend::parse_module(&src).unwrap();
        let g = &m.graphs[0];
        let k = irc_lower::plan_and_lower_with(g, Default::default(), &Default::default())
            .unwrap()
            .kernels;
        emulate_matches(g, &k, "default");
        irc_tests::check_kernels(g, &k).unwrap();
    }
}

/// A row epilogue reading a view of its composite that the kernel also stores (rule 2) takes
/// the value in hand through the view, not the memory just written (the random graphs' case: a
/// one-element row, which has no staged vector store to read from), on both targets.
#[test]
fn a_row_epilogue_reads_a_stored_view_from_registers() {
    for (x, flat, wide) in [("1", "1", "2x1"), ("4x8", "32", "2x32")] {
        let src = format!(
            "graph @g(%x: tensor<{x}xf16>) -> (tensor<{wide}xf16>, tensor<{flat}xf16>) {{
  %1 = softmax %x {{axis = -1}} : tensor<{x}xf16>
  %2 = reshape %1 {{shape = [-1]}} : tensor<{flat}xf16>
  %5 = cast %2 {{dtype = f32}} : tensor<{flat}xf32>
  %6 = cast %5 {{dtype = f16}} : tensor<{flat}xf16>
  %9 = broadcast %6 {{shape = [2, {flat}]}} : tensor<{wide}xf16>
  %10 = softmax %2 {{axis = -1}} : tensor<{flat}xf16>
  %11 = add %9, %10 : tensor<{wide}xf16>
  return %11, %6
}}"
        );
        let m = irc_frontend::parse_module(&src).unwrap_or_else(|e| panic!("{e:?}\n{src}"));
        let g = &m.graphs[0];
        for wgmma in [false, true] {
            let options = irc_lower::LowerOptions {
                wgmma,
                ..Default::default()
            };
            let k = irc_lower::plan_and_lower_with(g, Default::default(), &options)
                .unwrap()
                .kernels;
            irc_tests::check_kernels(g, &k).unwrap();
            emulate_matches(g, &k, "default");
        }
    }
}

/// The order check flags a kernel that reads its own output before writing it, or right after
/// with no barrier between, and passes one whose read follows a `sync`.
#[test]
fn reads_of_own_writes_need_a_barrier_between() {
    let module = |body: &str| {
        let text = format!(
            "module @f flops=64 min_bytes=512 {{
  buffer %x : tensor<64xf32> input
  buffer %y : tensor<64xf32> output
  kernel @f_k0 grid(1, 1, 1) block(64, 1, 1) index(i32) {{
    param %p0 : f32
    param %p1 : f32
    tensor %t0 : f32 global(%p0) = 64:1
    tensor %t1 : f32 global(%p1) = 64:1
    {body}
  }}
  launch @f_k0(%y, %x)
  return %y
}}"
        );
        irc_kir::parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    };
    let write = "store %t0[tid.x], load %t1[tid.x]";
    let read = "store %t0[tid.x], neg(load %t0[tid.x])";
    let before = irc_tests::reads_of_own_writes(&module(&format!("{read}\n    {write}")));
    assert_eq!(before, ["@f_k0 reads y before writing it"]);
    let after = irc_tests::reads_of_own_writes(&module(&format!("{write}\n    {read}")));
    assert_eq!(after, ["@f_k0 reads y right after writing it"]);
    let synced = module(&format!("{write}\n    sync\n    {read}"));
    assert_eq!(
        irc_tests::reads_of_own_writes(&synced),
        Vec::<String>::new()
    );
}
