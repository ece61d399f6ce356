//! The kernel IR: every graph of the repository lowers to a module that verifies, prints, and
//! re-parses to an equal module; offsets computed from layouts match the layout algebra; bad
//! text and bad modules get located errors.

use irc_kir::{self as kir, Expr, IdxOp, offset_expr};
use irc_layout::{IntTuple, Layout};
use irc_lower::{SourceInfo, lower_graph};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

fn graph_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![];
    for dir in ["examples", "examples/small", "tests/gpu"] {
        for e in std::fs::read_dir(root.join(dir)).expect("examples folder") {
            let p = e.expect("dir entry").path();
            if p.extension().is_some_and(|x| x == "ir") {
                files.push(p);
            }
        }
    }
    files.sort();
    assert!(
        files.len() >= 20,
        "expected the examples and tests/gpu graphs"
    );
    files
}

fn lower_all() -> Vec<(String, kir::Module)> {
    let mut out = vec![];
    for f in graph_files() {
        let text = std::fs::read_to_string(&f).expect("readable");
        let module =
            irc_frontend::parse_module(&text).unwrap_or_else(|e| panic!("{}: {e:?}", f.display()));
        let name = f.display().to_string();
        for g in &module.graphs {
            let m = lower_graph(
                g,
                SourceInfo {
                    name: &name,
                    text: &text,
                },
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            out.push((name.clone(), m));
        }
    }
    out
}

#[test]
fn every_graph_lowers_verifies_and_round_trips() {
    for (name, m) in lower_all() {
        kir::verify_module(&m).unwrap_or_else(|e| panic!("{name}: {e}"));
        let text = kir::print_module(&m);
        let back = kir::parse_module(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
        assert_eq!(back, m, "{name}: parse(print(m)) != m");
        assert_eq!(
            kir::print_module(&back),
            text,
            "{name}: print is not a fixed point"
        );
        kir::verify_module(&back).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn kernels_name_their_graph_ops_and_locations() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/small/gemm_bias_relu.ir"),
    )
    .unwrap();
    let g = &irc_frontend::parse_module(&text).unwrap().graphs[0];
    let cu = irc_emit_cuda::emit(
        &lower_graph(
            g,
            SourceInfo {
                name: "gemm_bias_relu.ir",
                text: &text,
            },
        )
        .unwrap(),
    );
    assert!(
        cu.source
            .contains("//   from: %c = matmul %a, %b  (gemm_bias_relu.ir:4:3)"),
        "{}",
        cu.source
    );
    // The bias add and the relu are one fused kernel, which names both.
    assert!(
        cu.source.contains("from: %d = add %c, %bias"),
        "{}",
        cu.source
    );
    assert!(cu.source.contains("from: %r = relu %d"));
    assert_eq!(
        cu.manifest.launches.len(),
        1,
        "bias add and relu are the matmul epilogue"
    );
    assert_eq!(
        cu.manifest.buffers.len(),
        4,
        "no buffer for the matmul result"
    );
    let embedded: String = cu
        .source
        .lines()
        .skip_while(|l| !l.contains("BEGIN IRC MANIFEST"))
        .skip(1)
        .take_while(|l| !l.contains("END IRC MANIFEST"))
        .map(|l| l.trim_start_matches("// "))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        irc_kir::Manifest::from_json(&embedded).unwrap(),
        cu.manifest
    );
}

#[test]
fn views_are_layouts_not_kernels() {
    // Every transpose feeding a matmul or an elementwise op is read through a layout: the only
    // kernels are the matmuls, the softmax and fused elementwise work.
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/attention.ir"),
    )
    .unwrap();
    let g = &irc_frontend::parse_module(&text).unwrap().graphs[0];
    let m = lower_graph(g, SourceInfo::default()).unwrap();
    let names: Vec<&str> = m.kernels.iter().map(|k| k.name.as_str()).collect();
    assert!(names.iter().all(|n| !n.contains("transpose")), "{names:?}");
}

/// Evaluates index expressions over variable bindings.
fn eval(e: &Expr, vars: &[(String, i64)]) -> i64 {
    match e {
        Expr::Int(i) => *i,
        Expr::Var(v) => vars.iter().find(|(n, _)| n == v).unwrap().1,
        Expr::Idx(op, a, b) => {
            let (a, b) = (eval(a, vars), eval(b, vars));
            match op {
                IdxOp::Add => a + b,
                IdxOp::Sub => a - b,
                IdxOp::Mul => a * b,
                IdxOp::Div => a / b,
                IdxOp::Rem => a % b,
                IdxOp::Xor => a ^ b,
                _ => unreachable!(),
            }
        }
        other => panic!("not an index expression: {other:?}"),
    }
}

fn small_layout() -> impl Strategy<Value = Layout> {
    let mode = (1i64..6, 0i64..40);
    (prop::collection::vec(prop::collection::vec(mode, 1..3), 1..4)).prop_map(|modes| {
        let shape = IntTuple::Tuple(
            modes
                .iter()
                .map(|m| IntTuple::Tuple(m.iter().map(|&(s, _)| IntTuple::Int(s)).collect()))
                .collect(),
        );
        let stride = IntTuple::Tuple(
            modes
                .iter()
                .map(|m| IntTuple::Tuple(m.iter().map(|&(_, d)| IntTuple::Int(d)).collect()))
                .collect(),
        );
        Layout::new(shape, stride).unwrap()
    })
}

proptest! {
    /// The offset an emitter writes is the layout's value, for 1-D and per-mode coordinates.
    #[test]
    fn offsets_match_the_layout_algebra(l in small_layout(), seed in 0i64..10_000) {
        let size = l.size().unwrap();
        let i = seed % size;
        let one = offset_expr(&l, &[Expr::var("i")]).unwrap();
        prop_assert_eq!(eval(&one, &[("i".into(), i)]), l.eval(i).unwrap());
        // Per-mode: split i into one coordinate per top-level mode (colexicographic).
        let mut rest = i;
        let mut vars = vec![];
        let mut coord = vec![];
        for (k, m) in l.modes().iter().enumerate() {
            let s = m.size().unwrap();
            vars.push((format!("c{k}"), rest % s));
            coord.push(Expr::var(&format!("c{k}")));
            rest /= s;
        }
        let per_mode = offset_expr(&l, &coord).unwrap();
        prop_assert_eq!(eval(&per_mode, &vars), l.eval(i).unwrap());
    }

    /// The swizzle an emitter writes is the layout algebra's `Sw<B,M,S>`, for either sign of
    /// the shift.
    #[test]
    fn swizzle_exprs_match_the_layout_algebra(
        b in 0i64..4, m in 0i64..5, s in 0i64..5, neg in any::<bool>(), x in 0i64..100_000
    ) {
        let shift = if neg { -(s.max(b)) } else { s.max(b) };
        let sw = irc_layout::Swizzle::new(b, m, shift).unwrap();
        let e = irc_kir::swizzle_expr(&sw, Expr::var("x"));
        prop_assert_eq!(eval(&e, &[("x".into(), x)]), sw.apply(x));
    }

    /// A swizzled layout's offset, with the period-multiple modes added outside the swizzle,
    /// is the composed layout's value.
    #[test]
    fn swizzled_offsets_match_the_composed_layout(
        l in small_layout(), seed in 0i64..10_000, b in 1i64..4, m in 0i64..4
    ) {
        let sw = irc_layout::Swizzle::new(b, m, 3).unwrap();
        let composed = irc_layout::ComposedLayout::swizzled(sw, 0, l.clone());
        let i = seed % l.size().unwrap();
        let e = irc_kir::swizzled_offset_expr(&sw, &l, &[Expr::var("i")]).unwrap();
        prop_assert_eq!(eval(&e, &[("i".into(), i)]), composed.eval(i).unwrap());
    }
}

#[test]
fn parse_errors_are_located() {
    let (_, m) = lower_all().into_iter().next().unwrap();
    let text = kir::print_module(&m);
    let broken = text.replacen("step", "stpe", 1);
    let e = kir::parse_module(&broken).unwrap_err();
    assert!(e.line > 1 && e.message.contains("step"), "{e}");
    for bad in [
        "",
        "module",
        "module @m flops=1 min_bytes=2 {\n",
        "module @m flops=x",
        "\u{0}\u{1}garbage(((",
    ] {
        assert!(kir::parse_module(bad).is_err(), "{bad:?} parsed");
    }
}

#[test]
fn the_verifier_rejects_broken_modules() {
    let (_, m) = lower_all()
        .into_iter()
        .find(|(n, _)| n.ends_with("gpu/views.ir"))
        .unwrap();
    let text = kir::print_module(&m);
    let cases = [
        // A use of an undefined variable.
        (
            text.replacen("store %t3[%v1], %v5", "store %t3[%v1], %v99", 1),
            "not defined",
        ),
        // A type error: f16 math without converting to f32.
        (
            text.replacen(
                "f16(exp2(mul(%x4, f32(1.4426950408889634))))",
                "exp(%v3)",
                1,
            ),
            "not defined on f16",
        ),
        // A layout reaching past the end of the bound buffer.
        (text.replacen("= 240:1", "= 241:1", 1), "reaches offset"),
        // A launch with a buffer of the wrong dtype: declare %e as f32.
        (
            text.replacen(
                "buffer %e : tensor<4x60xf16>",
                "buffer %e : tensor<4x60xf32>",
                1,
            ),
            "is f32",
        ),
        // Too many threads.
        (
            text.replacen("block(256, 1, 1)", "block(2048, 1, 1)", 1),
            "1024 threads",
        ),
        // More blocks of 256 threads than an SM holds.
        (
            text.replacen(
                "block(256, 1, 1) index(i32)",
                "block(256, 1, 1) index(i32) occupancy(9)",
                1,
            ),
            "an SM holds 1 to 2048 threads in at most 32 blocks",
        ),
    ];
    for (bad, want) in cases {
        assert_ne!(bad, text, "the mutation for {want:?} did not apply");
        let parsed = kir::parse_module(&bad).expect("still parses");
        let e = kir::verify_module(&parsed).expect_err(want);
        assert!(e.to_string().contains(want), "expected {want:?}, got: {e}");
    }
}

#[test]
fn the_verifier_checks_async_copies() {
    let (_, m) = lower_all()
        .into_iter()
        .find(|(n, _)| n.ends_with("small/gemm.ir"))
        .unwrap();
    let text = kir::print_module(&m);
    assert!(text.contains("cp.async.16"), "{text}");
    kir::verify_module(&m).unwrap();
    let cases = [
        // A's 16-byte vectors 8 bytes apart: misaligned copies.
        (
            text.replacen("= (128,12,1):(96,8,0)", "= (128,12,1):(96,4,0)", 1),
            "16-byte aligned",
        ),
        // The wait count is an immediate.
        (
            text.replacen("cp.async.wait 1", "cp.async.wait %lane0", 1),
            "integer literal",
        ),
        // The source of a copy is global memory.
        (
            text.replacen(
                "%t12[%gr10, (%gk11 / 8), bid.z], 16",
                "%t4[%so12, 0], 16",
                1,
            ),
            "global tensor",
        ),
    ];
    for (bad, want) in cases {
        assert_ne!(bad, text, "the mutation for {want:?} did not apply");
        let parsed = kir::parse_module(&bad).expect("still parses");
        let e = kir::verify_module(&parsed).expect_err(want);
        assert!(e.to_string().contains(want), "expected {want:?}, got: {e}");
    }
}

/// `g` lowered with the Hopper templates (sm_90a).
fn lower_for_hopper(g: &irc_ir::Graph) -> kir::Module {
    let options = irc_lower::LowerOptions {
        wgmma: true,
        ..Default::default()
    };
    irc_lower::plan_and_lower_with(g, SourceInfo::default(), &options)
        .unwrap()
        .kernels
}

#[test]
fn misaligned_operands_of_large_products_are_realigned_for_tma() {
    // tests/gpu/matmul_realign.ir: 16-bit operands whose rows are not 16-byte aligned. The four
    // large products copy each such operand into an aligned temp before their Hopper kernel
    // (both of the first two, the batched product's A alone: its B rows are 400 bytes; the
    // split-K product's A alone); the small product reads its operands in place with mma.sync.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/gpu/matmul_realign.ir");
    let text = std::fs::read_to_string(&path).unwrap();
    let g = &irc_frontend::parse_module(&text).unwrap().graphs[0];
    let m = lower_for_hopper(g);
    let names: Vec<&str> = m.kernels.iter().map(|k| k.name.as_str()).collect();
    let copies: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| n.ends_with("_realign_a") || n.ends_with("_realign_b"))
        .collect();
    assert_eq!(copies.len(), 6, "{names:?}");
    assert!(
        names.iter().any(|n| n.ends_with("_partial")),
        "no split K: {names:?}"
    );
    // Each copy runs before the kernel whose operand it realigns, and that kernel reads the temp
    // through a tensor map.
    for c in &copies {
        let (owner, _) = c.rsplit_once("_realign_").unwrap();
        let at = |n: &str| names.iter().position(|k| *k == n);
        assert!(at(c) < at(owner), "{c} after {owner}: {names:?}");
        let temp = m.buffers.iter().find(|b| b.name == *c).unwrap();
        assert_eq!(temp.shape.last().unwrap() % 64, 0, "{temp:?}");
        assert!(
            m.buffers
                .iter()
                .any(|b| b.tensor_map.as_ref().is_some_and(|t| t.of == *c)),
            "no tensor map reads {c}"
        );
    }
    let text = kir::print_module(&m);
    assert!(text.contains("wgmma"), "no Hopper kernel");
    assert!(
        text.contains("mma.m16n8k16"),
        "the small product is not mma.sync's"
    );
}

#[test]
fn rows_off_32_byte_sectors_are_realigned_only_under_products_much_larger_than_them() {
    // B's rows of 2952 f16 (5904 bytes: 16-byte aligned, so TMA reads them in place, but each
    // 128-byte box row then touches five 32-byte sectors). Under 8200 rows of A the product has
    // 8200 multiply-adds per element of B, and B is copied into 128-byte rows; under 2048 rows
    // the copy would cost too large a share and B is read in place; A's rows (5920 f16, 11840
    // bytes) are 32-byte aligned and stay.
    let kernels = |m: u64| {
        let src = format!(
            "graph @g(%a: tensor<{m}x5920xf16>, %b: tensor<5920x2952xf16>) -> tensor<{m}x2952xf16> {{\n  %c = matmul %a, %b\n  return %c\n}}\n"
        );
        let g = &irc_frontend::parse_module(&src).unwrap().graphs[0];
        let m = lower_for_hopper(g);
        m.kernels.iter().map(|k| k.name.clone()).collect::<Vec<_>>()
    };
    assert_eq!(kernels(8200), ["g_k0_matmul_realign_b", "g_k0_matmul"]);
    assert_eq!(kernels(2048), ["g_k0_matmul"]);
}

#[test]
fn a_realigned_temp_past_32_bit_indices_gets_a_64_bit_copy() {
    // Rows of 9 padded to 64: the temp (2.56e9 elements) is seven times A, past the 32-bit
    // index range the module's own buffers stay within.
    let text = "graph @m(%a: tensor<40000000x9xf16>, %b: tensor<9x16xf16>) -> tensor<40000000x16xf16> {\n  %c = matmul %a, %b\n  return %c\n}\n";
    let g = &irc_frontend::parse_module(text).unwrap().graphs[0];
    let m = lower_for_hopper(g);
    let copy = m
        .kernels
        .iter()
        .find(|k| k.name.ends_with("_realign_a"))
        .expect("A is realigned");
    assert_eq!(copy.index, kir::IndexWidth::I64);
    let mm = m
        .kernels
        .iter()
        .find(|k| k.name.ends_with("_matmul"))
        .unwrap();
    assert_eq!(mm.index, kir::IndexWidth::I32);
    kir::verify_module(&m).unwrap();
}

/// `graph` lowered with each reduction kernel at `point` (a reduction space's text), printed.
fn reduction_at(graph: &str, point: &str) -> String {
    use irc_lower::templates::Config;
    let g = irc_frontend::parse_module(graph).unwrap().graphs.remove(0);
    let base = irc_lower::plan_and_lower_with(&g, Default::default(), &Default::default()).unwrap();
    let configs = base
        .choices
        .iter()
        .filter(|c| c.problem.template == "reduction")
        .map(|c| (c.problem.key(), Config::parse("reduction", point).unwrap()))
        .collect();
    let options = irc_lower::LowerOptions {
        configs,
        ..Default::default()
    };
    let planned = irc_lower::plan_and_lower_with(&g, Default::default(), &options).unwrap();
    kir::print_module(&planned.kernels)
}

#[test]
fn evict_first_points_hint_the_input_loads_and_nothing_the_kernel_writes() {
    // A leading axis reduced into few outputs (the split column schedule, whose last block
    // reads the partials back with vector copies), and few long rows (the split schedule).
    let column = "graph @g(%x: tensor<4096x64xf16>) -> tensor<64xf16> {\n  %y = reduce_max %x {axes = [0]}\n  return %y\n}";
    let rows = "graph @g(%x: tensor<4x65536xf32>) -> tensor<4xf32> {\n  %y = reduce_sum %x {axes = [1]}\n  return %y\n}";
    for (graph, point) in [(column, "column_split"), (rows, "split,chunk=16384")] {
        let plain = reduction_at(graph, point);
        let hinted = reduction_at(graph, &format!("{point},evict_first"));
        let copies = |t: &str, hint: &str| {
            t.lines()
                .filter(|l| l.trim_start().starts_with("copy.") && l.contains(hint))
                .count()
        };
        assert_eq!(copies(&plain, ".evict_first"), 0, "{plain}");
        let n = copies(&hinted, ".evict_first");
        assert!(n > 0, "{hinted}");
        // The hint is all that changes: the same kernels, the same copies.
        assert_eq!(hinted.replace(".evict_first", ""), plain);
        // Every hinted copy reads the graph's input (parameter `%x`'s tensor), never the
        // partials the kernel writes.
        let m = kir::parse_module(&hinted).unwrap();
        kir::verify_module(&m).unwrap();
        let k = &m.kernels[0];
        let x_param = &k.params[m.launches[0].args.iter().position(|a| a == "x").unwrap()].name;
        kir::walk(&k.body, &mut |s| {
            if let kir::Stmt::Copy { src, hint, .. } = s
                && *hint == kir::CacheHint::EvictFirst
            {
                let decl = k.tensors.iter().find(|t| t.name == src.tensor).unwrap();
                assert_eq!(decl.space, kir::Space::Global(x_param.clone()));
            }
        });
    }
    // The split column schedule also copies partials with vectors: those stay plain.
    let hinted = reduction_at(column, "column_split,evict_first");
    let plain_copies = hinted
        .lines()
        .filter(|l| l.trim_start().starts_with("copy.") && !l.contains(".evict_first"))
        .count();
    assert!(plain_copies > 0, "{hinted}");
}

#[test]
fn the_verifier_checks_hinted_copies() {
    let column = "graph @g(%x: tensor<4096x64xf16>) -> tensor<64xf16> {\n  %y = reduce_max %x {axes = [0]}\n  return %y\n}";
    let text = reduction_at(column, "column_split,evict_first");
    // A hint on the merge's copy of the partials (a buffer the kernel writes).
    let merge = text
        .lines()
        .find(|l| l.trim_start().starts_with("copy.") && !l.contains(".evict_first"))
        .unwrap();
    let (op, rest) = merge.trim_start().split_once(' ').unwrap();
    let bad = text.replacen(
        merge,
        &merge.replacen(op, &format!("{op}.evict_first"), 1),
        1,
    );
    assert!(rest.contains('%'));
    let e = kir::verify_module(&kir::parse_module(&bad).unwrap()).unwrap_err();
    assert!(e.to_string().contains("which the kernel writes"), "{e}");
    // An unknown hint is a located parse error.
    let e = kir::parse_module(&text.replacen(".evict_first", ".evict_last", 1)).unwrap_err();
    assert!(
        e.message.contains("unknown cache hint `.evict_last`"),
        "{e}"
    );
}
