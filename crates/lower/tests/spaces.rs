//! The configuration spaces: every point of every declared space that passes `check` lowers to
//! kernel IR that verifies (the lowering verifies what it returns), is the point the kernel
//! was built with, and prints and re-parses; the heuristic's point is in the space and lowers
//! to exactly what lowering without any configuration gives; keys and texts are stable.

use irc_lower::templates::{self, Config, ProblemShape, SPACES, space, space_of};
use irc_lower::{ConfigSource, LowerOptions, plan_and_lower, plan_and_lower_with};
use irc_target::Target;
use std::collections::BTreeMap;

/// Small problems that exercise each schedule's edges: short, odd, long and few rows;
/// reductions over the innermost and a leading axis; odd and batched matmuls; attention with
/// odd sequences and with a causal mask; a grouped-query decoding step.
const GRAPHS: &str = r#"
graph @pw(%x: tensor<37x19xf16>, %y: tensor<19xf16>) -> tensor<37x19xf16> {
  %a = add %x, %y
  %r = relu %a
  return %r
}
graph @pw1(%x: tensor<1xf32>) -> tensor<1xf32> {
  %r = exp %x
  return %r
}
graph @sm_short(%x: tensor<5x100xf16>) -> tensor<5x100xf16> {
  %r = softmax %x {axis = -1}
  return %r
}
graph @sm_mid(%x: tensor<3x3000xf32>) -> tensor<3x3000xf32> {
  %r = softmax %x {axis = -1}
  return %r
}
graph @ln_long(%x: tensor<2x20000xf16>, %w: tensor<20000xf16>, %b: tensor<20000xf16>) -> tensor<2x20000xf16> {
  %r = layernorm %x, %w, %b {axis = -1, eps = 1e-5}
  return %r
}
graph @rms_axis0(%x: tensor<1500x6xbf16>) -> tensor<1500x6xbf16> {
  %r = rmsnorm %x {axis = 0, eps = 1e-6}
  return %r
}
graph @red_inner(%x: tensor<7x333xf32>) -> tensor<7xf32> {
  %r = reduce_sum %x {axes = [1]}
  return %r
}
graph @red_lead(%x: tensor<50x70xf16>) -> tensor<70xf16> {
  %r = reduce_max %x {axes = [0]}
  return %r
}
graph @mm_odd(%a: tensor<200x72xf16>, %b: tensor<136x72xf16>, %c: tensor<136xf16>) -> tensor<200x136xf16> {
  %bt = transpose %b {perm = [1, 0]}
  %m = matmul %a, %bt
  %r = add %m, %c
  return %r
}
graph @mm_bt_unaligned(%a: tensor<40x131xf16>, %b: tensor<24x131xf16>) -> tensor<40x24xf16> {
  %m = matmul %a, %b {transpose_b = true}
  return %m
}
graph @mm_batched(%a: tensor<3x64x96xbf16>, %b: tensor<3x96x80xbf16>) -> tensor<3x64x80xbf16> {
  %m = matmul %a, %b
  return %m
}
graph @mm_f32_odd(%a: tensor<129x43xf32>, %b: tensor<70x43xf32>, %c: tensor<70xf32>) -> tensor<129x70xf32> {
  %m = matmul %a, %b {transpose_b = true}
  %r = add %m, %c
  return %r
}
graph @mm_f32_big(%a: tensor<4096x1024xf32>, %b: tensor<1024x4096xf32>) -> tensor<4096x4096xf32> {
  %m = matmul %a, %b
  return %m
}
graph @att_odd(%q: tensor<2x3x200x64xf16>, %k: tensor<2x3x77x64xf16>, %v: tensor<2x3x77x64xf16>) -> tensor<2x3x200x64xf16> {
  %s = matmul %q, %k {transpose_b = true}
  %c = constant {value = 0.125} : tensor<f16>
  %ss = mul %s, %c
  %p = softmax %ss {axis = -1}
  %o = matmul %p, %v
  return %o
}
graph @att_causal(%q: tensor<1x2x300x64xbf16>, %k: tensor<1x2x300x64xbf16>, %v: tensor<1x2x300x64xbf16>) -> tensor<1x2x300x64xbf16> {
  %s = matmul %q, %k {transpose_b = true}
  %c = constant {value = 0.088} : tensor<bf16>
  %ss = mul %s, %c
  %row = iota {axis = 0} : tensor<300x300xi32>
  %col = iota {axis = 1} : tensor<300x300xi32>
  %keep = ge %row, %col
  %ninf = constant {value = -inf} : tensor<bf16>
  %m = select %keep, %ss, %ninf
  %p = softmax %m {axis = -1}
  %o = matmul %p, %v
  return %o
}
graph @att_decode(%q: tensor<1x2x2x1x64xbf16>, %k: tensor<1x2x1x700x64xbf16>, %v: tensor<1x2x1x700x64xbf16>) -> tensor<1x2x2x1x64xbf16> {
  %s = matmul %q, %k {transpose_b = true}
  %p = softmax %s {axis = -1}
  %o = matmul %p, %v
  return %o
}
graph @att_decode_mqa(%q: tensor<1x1x16x1x72xbf16>, %k: tensor<1x1x1x700x72xbf16>, %v: tensor<1x1x1x700x40xbf16>) -> tensor<1x1x16x1x40xbf16> {
  %s = matmul %q, %k {transpose_b = true}
  %p = softmax %s {axis = -1}
  %o = matmul %p, %v
  return %o
}
"#;

fn graphs() -> Vec<irc_ir::Graph> {
    irc_frontend::parse_module(GRAPHS).expect("parses").graphs
}

#[test]
fn every_checked_point_of_every_space_lowers_to_verified_kernel_ir() {
    let target = Target::default();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut failures = vec![];
    let mut refined = 0;
    let mut wide_refined = 0;
    // Lowered for sm_80 and for sm_90a (the Hopper matmul's space).
    let archs = [
        LowerOptions::default(),
        LowerOptions {
            wgmma: true,
            ..Default::default()
        },
    ];
    for (g, arch) in graphs()
        .into_iter()
        .flat_map(|g| archs.iter().map(move |a| (g.clone(), a)))
    {
        let base = plan_and_lower_with(&g, Default::default(), arch).expect("lowers");
        for choice in &base.choices {
            let p = &choice.problem;
            assert_eq!(choice.source, ConfigSource::Heuristic);
            let points = space(p, &target);
            let Some(s) = space_of(p.template) else {
                assert!(choice.config.is_none() && points.is_empty());
                continue;
            };
            let heuristic = s.heuristic(p, &target);
            // The heuristic's point, or that point refined by the template from what only
            // lowering sees (mma.sync: the 64x32 warps of `MmaConfig::DEFAULT` for f16/bf16
            // where an operand or the output cannot take 16-byte copies; fewer stages where
            // both operands are K-major and read element by element, `@mm_bt_unaligned`).
            let built = choice.config.expect("a point");
            let heuristic_built = match (built, heuristic) {
                (Config::Mma(b), Config::Mma(h))
                    if h == irc_lower::MmaConfig::F16 && b.warps_n != h.warps_n =>
                {
                    assert_eq!(
                        irc_lower::MmaConfig {
                            stages: irc_lower::MmaConfig::DEFAULT.stages,
                            ..b
                        },
                        irc_lower::MmaConfig::DEFAULT,
                        "@{}: {b}",
                        g.name
                    );
                    wide_refined += 1;
                    Config::Mma(irc_lower::MmaConfig::DEFAULT)
                }
                _ => heuristic,
            };
            match (built, heuristic_built) {
                (Config::Mma(b), Config::Mma(h)) if b != h => {
                    assert_eq!(
                        irc_lower::MmaConfig {
                            stages: h.stages,
                            ..b
                        },
                        h
                    );
                    assert!(b.stages < h.stages, "@{}: {b}", g.name);
                    refined += 1;
                }
                _ => assert_eq!(built, heuristic, "@{}", g.name),
            }
            assert!(points.contains(&heuristic), "@{}: {heuristic}", g.name);
            for c in points {
                *seen.entry(p.template).or_default() += 1;
                // The text form round-trips.
                let text = c.to_string();
                assert_eq!(Config::parse(p.template, &text), Ok(c), "{text}");
                let options = LowerOptions {
                    configs: BTreeMap::from([(p.key(), c)]),
                    ..arch.clone()
                };
                match plan_and_lower_with(&g, Default::default(), &options) {
                    Ok(planned) => {
                        let got = planned
                            .choices
                            .iter()
                            .find(|x| x.problem.key() == p.key())
                            .expect("the same problem");
                        // Given the heuristic's point, the same refinement and kernels.
                        let want = if c == heuristic { built } else { c };
                        assert_eq!(got.config, Some(want));
                        assert_eq!(got.source, ConfigSource::Given);
                        let text = irc_kir::print_module(&planned.kernels);
                        let back = irc_kir::parse_module(&text)
                            .unwrap_or_else(|e| panic!("@{} {c}: {e}", g.name));
                        assert_eq!(irc_kir::print_module(&back), text);
                        if c == heuristic {
                            assert_eq!(planned.kernels, base.kernels, "@{} {c}", g.name);
                        }
                    }
                    Err(e) => failures.push(format!("@{} {} {c}: {e}", g.name, p.template)),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(refined > 0, "no refined heuristic point was exercised");
    assert!(wide_refined > 0, "no f16 point gave way to the 64x32 warps");
    // Every declared space was exercised, with more than one point.
    for s in SPACES {
        let n = seen.get(s.template()).copied().unwrap_or(0);
        assert!(n >= 4, "{}: {n} points", s.template());
    }
}

#[test]
fn a_rejected_point_falls_back_to_the_heuristic_with_the_reason() {
    let g = &graphs()[2]; // @sm_short: rows of 100
    let base = plan_and_lower(g, Default::default()).unwrap();
    let p = &base.choices[0].problem;
    assert_eq!(p.template, "row");
    // A split of a 100-element row is a single chunk: check refuses it.
    let bad = Config::parse("row", "split,chunk=1024").unwrap();
    let options = LowerOptions {
        configs: BTreeMap::from([(p.key(), bad)]),
        ..Default::default()
    };
    let planned = plan_and_lower_with(g, Default::default(), &options).unwrap();
    let c = &planned.choices[0];
    assert!(
        matches!(&c.source, ConfigSource::Rejected(why) if why.contains("single chunk")),
        "{:?}",
        c.source
    );
    assert_eq!(planned.kernels, base.kernels);
}

#[test]
fn short_rows_offer_fewer_lanes_a_row() {
    let g = &graphs()[2]; // @sm_short: rows of 100
    let p = plan_and_lower(g, Default::default()).unwrap().choices[0]
        .problem
        .clone();
    let texts: Vec<String> = space(&p, &Target::default())
        .iter()
        .map(ToString::to_string)
        .collect();
    // 100 f16 are 13 vectors of 8: 16 lanes a row by default, 8 or 4 lanes with two or four
    // vectors each.
    for t in ["warp,warps=4,lanes=8", "warp,warps=8,lanes=4"] {
        assert!(texts.contains(&t.to_string()), "{t}: {texts:?}");
    }
    // A group that is not a power of two is refused; a point without warps does not parse.
    let odd = Config::parse("row", "warp,warps=4,lanes=3").unwrap();
    let why = space_of("row")
        .unwrap()
        .check(&odd, &p, &Target::default())
        .unwrap_err();
    assert!(why.contains("power of two"), "{why}");
    assert!(Config::parse("row", "warp,lanes=4").is_err());
    assert!(Config::parse("row", "warp,warps=4,lanes=4,lanes=8").is_err());
}

#[test]
fn spaces_prune_what_the_target_cannot_run() {
    let g = &graphs()[3]; // @sm_mid: rows of 3000
    let p = plan_and_lower(g, Default::default()).unwrap().choices[0]
        .problem
        .clone();
    let points = space(&p, &Target::default());
    let texts: Vec<String> = points.iter().map(ToString::to_string).collect();
    // 3000 values do not fit a warp's registers (32 per lane), nor 128 threads' (24 each
    // fit): warp schedules are pruned, block ones of 128+ threads kept.
    assert!(!texts.iter().any(|t| t.starts_with("warp")), "{texts:?}");
    assert!(
        texts.contains(&"block,threads=128".to_string()),
        "{texts:?}"
    );
    assert!(texts.contains(&"split,chunk=1024".to_string()), "{texts:?}");
    assert!(
        !texts.contains(&"split,chunk=4096".to_string()),
        "{texts:?}"
    );
    // The tensor-core space shrinks with the target's shared memory.
    let mm = plan_and_lower(&graphs()[8], Default::default()).unwrap();
    let p = &mm.choices[0].problem;
    let small = Target {
        max_dynamic_shared_bytes: 32 * 1024,
        ..Target::default()
    };
    let (all, fewer) = (space(p, &Target::default()), space(p, &small));
    assert!(!fewer.is_empty() && fewer.len() < all.len());
}

#[test]
fn ranking_puts_the_estimate_in_order_and_sees_the_shape() {
    let target = Target::default();
    let mut g = graphs();
    let mm = plan_and_lower(&g.remove(8), Default::default()).unwrap();
    let p = &mm.choices[0].problem;
    let ranked = templates::ranked(p, &target);
    assert_eq!(ranked.len(), space(p, &target).len());
    assert!(ranked.windows(2).all(|w| w[0].1 <= w[1].1));
    assert!(ranked.iter().all(|(_, t)| t.is_finite() && *t > 0.0));
    // A 4096^3 GEMM: the big default tile ranks above the smallest one.
    let big = irc_frontend::parse_module(
        "graph @g(%a: tensor<4096x4096xf16>, %b: tensor<4096x4096xf16>) -> tensor<4096x4096xf16> {\n  %c = matmul %a, %b\n  return %c\n}\n",
    )
    .unwrap();
    let p = plan_and_lower(&big.graphs[0], Default::default())
        .unwrap()
        .choices[0]
        .problem
        .clone();
    assert!(matches!(p.shape, ProblemShape::Matmul { m: 4096, .. }));
    let ranked = templates::ranked(&p, &target);
    let pos = |t: &str| ranked.iter().position(|(c, _)| c.to_string() == t).unwrap();
    assert!(
        pos("128x128x32/2x4/4") < pos("64x64x32/2x2/3"),
        "{ranked:?}"
    );
}

#[test]
fn the_reduction_heuristic_follows_rows_and_input_size() {
    let target = Target::default();
    let point = |shape: &str, dtype: &str, axes: &str| {
        let dims: Vec<&str> = shape.split('x').collect();
        let reduced: Vec<usize> = axes.split(", ").map(|a| a.parse().unwrap()).collect();
        let kept: Vec<&str> = (0..dims.len())
            .filter(|d| !reduced.contains(d))
            .map(|d| dims[d])
            .collect();
        let text = format!(
            "graph @g(%x: tensor<{shape}x{dtype}>) -> tensor<{}x{dtype}> {{\n  %y = reduce_sum %x {{axes = [{axes}]}}\n  return %y\n}}\n",
            kept.join("x")
        );
        let g = irc_frontend::parse_module(&text).unwrap().graphs.remove(0);
        let p = plan_and_lower(&g, Default::default()).unwrap().choices[0]
            .problem
            .clone();
        space_of("reduction")
            .unwrap()
            .heuristic(&p, &target)
            .to_string()
    };
    // Few long rows split; 64 to 2 x SMs of them a block each (1024 threads up to one an SM);
    // evict-first loads from a quarter of the L2 (12.5 MiB) to four times it (200 MiB).
    assert_eq!(
        point("16x2097152", "f32", "1"),
        "split,chunk=32768,evict_first"
    );
    assert_eq!(point("16x4194304", "f32", "1"), "split,chunk=65536");
    assert_eq!(point("8x8388608", "f32", "1"), "split,chunk=65536");
    assert_eq!(
        point("64x524288", "f32", "1"),
        "row,threads=1024,evict_first"
    );
    assert_eq!(
        point("256x65536", "f32", "1"),
        "row,threads=512,evict_first"
    );
    assert_eq!(point("64x32768", "f32", "1"), "row,threads=1024");
    assert_eq!(
        point("32x64x128x128", "f32", "0, 2, 3"),
        "row,threads=1024,evict_first"
    );
    assert_eq!(point("1048576x64", "f16", "0"), "column_split,evict_first");
    assert_eq!(point("64x1024x1024", "f32", "0"), "column,threads=256");
}

#[test]
fn signatures_are_stable_and_change_with_the_problem() {
    let sig = |text: &str| {
        let m = irc_frontend::parse_module(text).unwrap();
        plan_and_lower(&m.graphs[0], Default::default())
            .unwrap()
            .choices[0]
            .problem
            .key()
    };
    let a = sig(
        "graph @a(%x: tensor<8x16xf16>) -> tensor<8x16xf16> {\n  %r = softmax %x {axis = -1}\n  return %r\n}\n",
    );
    // Names of the graph and values do not matter.
    let renamed = sig(
        "graph @other(%y: tensor<8x16xf16>) -> tensor<8x16xf16> {\n  %out = softmax %y {axis = -1}\n  return %out\n}\n",
    );
    assert_eq!(a, renamed);
    assert!(a.starts_with("row@v3:softmax f16 rows8 k16"), "{a}");
    for changed in [
        "graph @a(%x: tensor<8x32xf16>) -> tensor<8x32xf16> {\n  %r = softmax %x {axis = -1}\n  return %r\n}\n",
        "graph @a(%x: tensor<8x16xbf16>) -> tensor<8x16xbf16> {\n  %r = softmax %x {axis = -1}\n  return %r\n}\n",
        "graph @a(%x: tensor<8x16xf16>) -> tensor<8x16xf16> {\n  %r = rmsnorm %x {axis = -1, eps = 1e-6}\n  return %r\n}\n",
        "graph @a(%x: tensor<16x8xf16>) -> tensor<8x16xf16> {\n  %t = transpose %x {perm = [1, 0]}\n  %r = softmax %t {axis = -1}\n  return %r\n}\n",
    ] {
        assert_ne!(sig(changed), a, "{changed}");
    }
    // An epilogue op changes a matmul's signature.
    let mm = "graph @m(%a: tensor<64x64xf16>, %b: tensor<64x64xf16>) -> tensor<64x64xf16> {\n  %c = matmul %a, %b\n  return %c\n}\n";
    let mm_relu = "graph @m(%a: tensor<64x64xf16>, %b: tensor<64x64xf16>) -> tensor<64x64xf16> {\n  %c = matmul %a, %b\n  %r = relu %c\n  return %r\n}\n";
    assert_ne!(sig(mm), sig(mm_relu));
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config { cases: 24, ..Default::default() })]

    /// On random shapes of each template's problem, every checked point lowers to verified
    /// kernel IR (the lowering verifies it) with the point it was given.
    #[test]
    fn random_shapes_lower_at_every_checked_point(
        rows in 1u64..300,
        k in 1u64..20_000,
        op in 0usize..5,
        dtype in proptest::sample::select(vec!["f16", "bf16", "f32"]),
    ) {
        let ty = format!("tensor<{rows}x{k}x{dtype}>");
        let text = match op {
            0 => format!("graph @g(%x: {ty}) -> {ty} {{\n  %r = softmax %x {{axis = -1}}\n  return %r\n}}\n"),
            1 => format!("graph @g(%x: {ty}) -> {ty} {{\n  %r = rmsnorm %x {{axis = -1, eps = 1e-6}}\n  return %r\n}}\n"),
            2 => format!("graph @g(%x: {ty}) -> tensor<{rows}x{dtype}> {{\n  %r = reduce_sum %x {{axes = [1]}}\n  return %r\n}}\n"),
            3 => format!("graph @g(%x: {ty}) -> tensor<{k}x{dtype}> {{\n  %r = reduce_max %x {{axes = [0]}}\n  return %r\n}}\n"),
            _ => format!("graph @g(%x: {ty}) -> {ty} {{\n  %r = silu %x\n  return %r\n}}\n"),
        };
        let g = irc_frontend::parse_module(&text).unwrap().graphs.remove(0);
        let base = plan_and_lower(&g, Default::default()).unwrap();
        let target = Target::default();
        for choice in &base.choices {
            let p = &choice.problem;
            for c in space(p, &target) {
                let options = LowerOptions {
                    configs: BTreeMap::from([(p.key(), c)]),
                    ..Default::default()
                };
                let planned = plan_and_lower_with(&g, Default::default(), &options)
                    .map_err(|e| proptest::test_runner::TestCaseError::fail(format!("{c}: {e}")))?;
                proptest::prop_assert_eq!(planned.choices[0].config, Some(c));
            }
        }
    }
}
