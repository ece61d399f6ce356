//! CI's compile test: the CUDA irc emits for every benchmark graph (`examples/*.ir` and
//! `examples/small/*.ir`) and every held-in GPU test graph (`tests/gpu/*.ir`), as written and
//! after the `-O` pipeline (what `irc run` executes), compiles with NVRTC and assembles with
//! ptxas for sm_90a and sm_80,
//! with no register spills (beyond `irc_kir::spill_budget`: the 3xTF32 f32 matmul's). Prints the registers of every kernel and writes them to
//! `target/cuda-registers.md`.
//!
//! A graph `compile_to_cuda` cannot lower is a failure, not a skip. A missing toolchain is a
//! failure under `CI=true` and a printed SKIPPED elsewhere (scripts/test.sh installs it).

mod common;
use common::toolchain_or_skip;
use irc_runtime::{Arch, KernelResources, compile_and_assemble};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const ARCHS: [&str; 2] = ["sm_90a", "sm_80"];

fn workspace() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    p.canonicalize().unwrap_or(p)
}

fn example_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["examples", "examples/small", "tests/gpu"] {
        let mut here: Vec<PathBuf> = std::fs::read_dir(workspace().join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "ir"))
            .collect();
        here.sort();
        files.extend(here);
    }
    files
}

#[test]
fn emitted_cuda_compiles_without_spills() {
    if !toolchain_or_skip("emitted_cuda_compiles_without_spills") {
        return;
    }
    let mut failures: Vec<String> = Vec::new();
    let mut table = String::from(
        "# Registers of irc's emitted kernels\n\nWritten by `crates/runtime/tests/emitted_cuda.rs` \
         (NVRTC + ptxas -v).\n\n| graph | file | arch | kernel | registers | spill stores | spill loads | stack | smem |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for path in example_files() {
        let rel = path
            .strip_prefix(workspace())
            .unwrap_or(&path)
            .display()
            .to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let module = match irc_frontend::parse_module(&text) {
            Ok(m) => m,
            Err(d) => {
                failures.push(format!("{rel}: does not parse: {d:?}"));
                continue;
            }
        };
        let mut graphs: Vec<(String, irc_ir::Graph)> = Vec::new();
        for graph in &module.graphs {
            graphs.push((graph.name.clone(), graph.clone()));
            match irc_passes::manager::PassManager::default_pipeline().run(graph) {
                Ok(out) if out.graph != *graph => {
                    graphs.push((format!("{} (-O)", graph.name), out.graph));
                }
                Ok(_) => {}
                Err(e) => failures.push(format!("{rel} @{}: -O failed: {e}", graph.name)),
            }
        }
        for (label, graph) in &graphs {
            for arch in ARCHS {
                // What the pipeline lowers for the arch: the Hopper templates on sm_90a.
                let options = irc_lower::LowerOptions {
                    wgmma: arch == "sm_90a",
                    ..Default::default()
                };
                let (cuda, budgets) =
                    match irc_lower::plan_and_lower_with(graph, Default::default(), &options).map(
                        |p| {
                            let budgets: Vec<(String, u64)> = p
                                .kernels
                                .kernels
                                .iter()
                                .map(|k| (k.name.clone(), irc_kir::spill_budget(k)))
                                .collect();
                            (irc_emit_cuda::emit(&p.kernels), budgets)
                        },
                    ) {
                        Ok(c) => c,
                        Err(e) => {
                            failures.push(format!("{rel} @{}: compile_to_cuda failed: {e}", label));
                            continue;
                        }
                    };
                let arch = Arch::parse(arch).unwrap();
                let name = format!("{}.cu", graph.name);
                let kernels: Vec<KernelResources> =
                    match compile_and_assemble(&cuda.source, &name, &arch) {
                        Ok((_, k)) => k,
                        Err(e) => {
                            failures.push(format!("{rel} @{} for {arch}: {e}", label));
                            continue;
                        }
                    };
                for l in &cuda.manifest.launches {
                    if !kernels.iter().any(|k| k.name == l.kernel) {
                        failures.push(format!(
                            "{rel} @{} for {arch}: the manifest launches `{}`, which ptxas did not see",
                            label, l.kernel
                        ));
                    }
                }
                for k in &kernels {
                    println!(
                        "{rel:<40} {arch:<7} {:<40} {:>3} regs  spill {}/{}  stack {}  smem {}",
                        k.name, k.registers, k.spill_stores, k.spill_loads, k.stack_frame, k.shared
                    );
                    let _ = writeln!(
                        table,
                        "| @{} | {rel} | {arch} | `{}` | {} | {} | {} | {} | {} |",
                        label,
                        k.name,
                        k.registers,
                        k.spill_stores,
                        k.spill_loads,
                        k.stack_frame,
                        k.shared
                    );
                    let budget = budgets
                        .iter()
                        .find(|(n, _)| *n == k.name)
                        .map_or(0, |b| b.1);
                    if k.spills() && k.spill_stores.max(k.spill_loads) > budget {
                        failures.push(format!(
                            "{rel} @{} for {arch}: kernel `{}` spills ({} bytes stored, {} loaded)",
                            label, k.name, k.spill_stores, k.spill_loads
                        ));
                    }
                }
            }
        }
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"));
    let out = target.join("cuda-registers.md");
    if std::fs::create_dir_all(&target).is_ok() && std::fs::write(&out, &table).is_ok() {
        println!("register table written to {}", out.display());
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Every point of the tensor-core template's configuration space (`MmaConfig::space`) lowers to
/// verified kernel IR that NVRTC compiles and ptxas assembles for sm_90a and sm_80 without
/// spills, on an odd f16 problem with a transposed operand and an epilogue (16-byte `cp.async`
/// copies), a bf16 batched one, and one whose rows start at odd elements (element loads into
/// the ring) — what an autotuner may pick must build.
#[test]
fn every_mma_config_compiles_without_spills() {
    if !toolchain_or_skip("every_mma_config_compiles_without_spills") {
        return;
    }
    let text = "graph @odd(%a: tensor<200x72xf16>, %b: tensor<136x72xf16>, %c: tensor<136xf16>) -> tensor<200x136xf16> {\n  %bt = transpose %b {perm = [1, 0]}\n  %m = matmul %a, %bt\n  %r = add %m, %c\n  return %r\n}\n\ngraph @batched(%a: tensor<3x64x96xbf16>, %b: tensor<3x96x80xbf16>) -> tensor<3x64x80xbf16> {\n  %m = matmul %a, %b\n  return %m\n}\n\ngraph @odd_rows(%a: tensor<100x77xf16>, %b: tensor<77x103xf16>) -> tensor<100x103xf16> {\n  %m = matmul %a, %b\n  return %m\n}\n";
    let module = irc_frontend::parse_module(text).expect("parses");
    let space = irc_lower::MmaConfig::space(&irc_target::Target::default());
    assert!(space.len() >= 8, "only {} configurations", space.len());
    assert!(space.contains(&irc_lower::MmaConfig::DEFAULT));
    let mut failures = vec![];
    for cfg in &space {
        let options = irc_lower::LowerOptions {
            mma: Some(*cfg),
            ..Default::default()
        };
        for g in &module.graphs {
            let planned = match irc_lower::plan_and_lower_with(g, Default::default(), &options) {
                Ok(p) => p,
                Err(e) => {
                    failures.push(format!("{cfg} @{}: {e}", g.name));
                    continue;
                }
            };
            let cuda = irc_emit_cuda::emit(&planned.kernels);
            for arch in ARCHS {
                let arch = Arch::parse(arch).unwrap();
                match compile_and_assemble(&cuda.source, &format!("{}.cu", g.name), &arch) {
                    Ok((_, kernels)) => {
                        for k in kernels.iter().filter(|k| k.spills()) {
                            failures.push(format!("{cfg} @{} {arch}: `{}` spills", g.name, k.name));
                        }
                    }
                    Err(e) => failures.push(format!("{cfg} @{} {arch}: {e}", g.name)),
                }
            }
        }
    }
    println!(
        "{} configurations: {:?}",
        space.len(),
        space.iter().map(ToString::to_string).collect::<Vec<_>>()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every point of the pointwise, reduction, row, Hopper matmul and tensor-core matmul spaces
/// (`irc_lower::templates::space`) for a sample of problems — short, cached, long and few
/// rows, leading and innermost reductions, an elementwise chain, odd and split-K matmuls, a
/// matmul lowered as for sm_80 (the `cp.async` ring, with 8-byte copies of A's 152-byte rows),
/// attention at head dims 64 and 128 (causal), a grouped-query decoding step —
/// compiles with NVRTC and assembles with ptxas for sm_90a without
/// spills: what `irc tune` may measure must build.
#[test]
fn every_space_config_compiles_without_spills() {
    if !toolchain_or_skip("every_space_config_compiles_without_spills") {
        return;
    }
    let text = "graph @pw(%x: tensor<300x77xf16>, %y: tensor<77xf16>) -> tensor<300x77xf16> {\n  %a = mul %x, %y\n  %b = gelu %a\n  return %b\n}\n\n\
graph @sm_warp(%x: tensor<64x1000xf16>) -> tensor<64x1000xf16> {\n  %r = softmax %x {axis = -1}\n  return %r\n}\n\n\
graph @ln_block(%x: tensor<8x8192xbf16>, %w: tensor<8192xbf16>, %b: tensor<8192xbf16>) -> tensor<8x8192xbf16> {\n  %r = layernorm %x, %w, %b {axis = -1, eps = 1e-5}\n  return %r\n}\n\n\
graph @rms_long(%x: tensor<4x40000xf16>, %w: tensor<40000xf16>) -> tensor<4x40000xf16> {\n  %r = rmsnorm %x, %w {axis = -1, eps = 1e-6}\n  return %r\n}\n\n\
graph @red_inner(%x: tensor<33x5000xf32>) -> tensor<33xf32> {\n  %r = reduce_mean %x {axes = [1]}\n  return %r\n}\n\n\
graph @red_lead(%x: tensor<300x640xf16>) -> tensor<640xf16> {\n  %r = reduce_sum %x {axes = [0]}\n  return %r\n}\n\n\
graph @wg_odd(%a: tensor<200x72xf16>, %b: tensor<136x72xf16>, %c: tensor<136xf16>) -> tensor<200x136xf16> {\n  %bt = transpose %b {perm = [1, 0]}\n  %m = matmul %a, %bt\n  %r = add %m, %c\n  return %r\n}\n\n\
graph @mma_unaligned(%a: tensor<200x76xf16>, %b: tensor<76x136xf16>) -> tensor<200x136xf16> {\n  %m = matmul %a, %b\n  return %m\n}\n\n\
graph @wg_splitk(%a: tensor<100x4160xbf16>, %b: tensor<4160x136xbf16>) -> tensor<100x136xbf16> {\n  %m = matmul %a, %b\n  %r = relu %m\n  return %r\n}\n\n\
graph @att_d64(%q: tensor<2x2x300x64xf16>, %k: tensor<2x2x300x64xf16>, %v: tensor<2x2x300x64xf16>) -> tensor<2x2x300x64xf16> {\n  %s = matmul %q, %k {transpose_b = true}\n  %c = constant {value = 0.125} : tensor<f16>\n  %ss = mul %s, %c\n  %p = softmax %ss {axis = -1}\n  %o = matmul %p, %v\n  return %o\n}\n\n\
graph @att_d128(%q: tensor<1x3x400x128xbf16>, %k: tensor<1x3x400x128xbf16>, %v: tensor<1x3x400x128xbf16>) -> tensor<1x3x400x128xbf16> {\n  %s = matmul %q, %k {transpose_b = true}\n  %p = softmax %s {axis = -1}\n  %o = matmul %p, %v\n  return %o\n}\n\n\
graph @att_d128_causal(%q: tensor<1x2x260x128xbf16>, %k: tensor<1x2x260x128xbf16>, %v: tensor<1x2x260x128xbf16>) -> tensor<1x2x260x128xbf16> {\n  %s = matmul %q, %k {transpose_b = true}\n  %row = iota {axis = 0} : tensor<260x260xi32>\n  %col = iota {axis = 1} : tensor<260x260xi32>\n  %keep = ge %row, %col\n  %ninf = constant {value = -inf} : tensor<bf16>\n  %m = select %keep, %s, %ninf\n  %p = softmax %m {axis = -1}\n  %o = matmul %p, %v\n  return %o\n}\n\n\
graph @att_decode(%q: tensor<2x2x4x1x128xbf16>, %k: tensor<2x2x1x3000x128xbf16>, %v: tensor<2x2x1x3000x128xbf16>) -> tensor<2x2x4x1x128xbf16> {\n  %s = matmul %q, %k {transpose_b = true}\n  %p = softmax %s {axis = -1}\n  %o = matmul %p, %v\n  return %o\n}\n\n\
graph @att_decode_mqa(%q: tensor<2x1x16x1x128xbf16>, %k: tensor<2x1x1x3000x128xbf16>, %v: tensor<2x1x1x3000x128xbf16>) -> tensor<2x1x16x1x128xbf16> {\n  %s = matmul %q, %k {transpose_b = true}\n  %p = softmax %s {axis = -1}\n  %o = matmul %p, %v\n  return %o\n}\n";
    let module = irc_frontend::parse_module(text).expect("parses");
    let target = irc_target::Target::default();
    let arch = Arch::parse("sm_90a").unwrap();
    let mut failures = vec![];
    let mut count = std::collections::BTreeMap::<&str, usize>::new();
    // Lowered as for sm_90a (the Hopper matmul's space with it).
    let sm90 = irc_lower::LowerOptions {
        wgmma: true,
        ..Default::default()
    };
    for g in &module.graphs {
        // `@mma_*` as for sm_80 (the tensor-core template's space): on sm_90a a problem is
        // the Hopper template's, whose lowering falls back to mma.sync where TMA cannot read.
        let lowering = if g.name.starts_with("mma_") {
            irc_lower::LowerOptions::default()
        } else {
            sm90.clone()
        };
        let base =
            irc_lower::plan_and_lower_with(g, Default::default(), &lowering).expect("lowers");
        for choice in &base.choices {
            let p = &choice.problem;
            for cfg in irc_lower::templates::space(p, &target) {
                *count.entry(p.template).or_default() += 1;
                let options = irc_lower::LowerOptions {
                    configs: std::collections::BTreeMap::from([(p.key(), cfg)]),
                    ..lowering.clone()
                };
                let planned = match irc_lower::plan_and_lower_with(g, Default::default(), &options)
                {
                    Ok(p) => p,
                    Err(e) => {
                        failures.push(format!("@{} {cfg}: {e}", g.name));
                        continue;
                    }
                };
                let cuda = irc_emit_cuda::emit(&planned.kernels);
                match compile_and_assemble(&cuda.source, &format!("{}.cu", g.name), &arch) {
                    Ok((_, kernels)) => {
                        for k in kernels.iter().filter(|k| k.spills()) {
                            failures.push(format!(
                                "@{} {cfg}: `{}` spills ({} registers)",
                                g.name, k.name, k.registers
                            ));
                        }
                    }
                    Err(e) => failures.push(format!("@{} {cfg}: {e}", g.name)),
                }
            }
        }
    }
    println!("configurations compiled per template: {count:?}");
    for t in [
        "pointwise",
        "reduction",
        "row",
        "matmul_wgmma",
        "matmul_mma",
    ] {
        assert!(count.get(t).copied().unwrap_or(0) >= 6, "{t}: {count:?}");
    }
    for (t, least) in [("attention_wgmma", 4), ("attention_decode", 6)] {
        assert!(
            count.get(t).copied().unwrap_or(0) >= least,
            "{t}: {count:?}"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Integer negation reaches PTX as `not` then `add 1`, never `neg`: ptxas 13.0 drops one
/// negation when it folds three negated integers into sm_90's `VIMNMX3` (run 219:
/// `tests/gpu/reduce_min_i32_view.ir` gave `min(-x0, +x1, -x2, -x3)`; bench/gpu/NOTES.md,
/// session 29), and keeps inversions. An elementwise minimum of four negated i32 tensors and
/// that reduction, through NVRTC for sm_90a.
#[test]
fn integer_negation_is_not_neg_in_ptx() {
    if !toolchain_or_skip("integer_negation_is_not_neg_in_ptx") {
        return;
    }
    let elementwise = "graph @n(%x: tensor<1024xi32>, %y: tensor<1024xi32>, %z: tensor<1024xi32>, %w: tensor<1024xi32>) -> tensor<1024xi32> {\n  %a = neg %x\n  %b = neg %y\n  %c = neg %z\n  %d = neg %w\n  %m = min %a, %b\n  %n = min %m, %c\n  %o = min %n, %d\n  return %o\n}\n".to_string();
    let reduction =
        std::fs::read_to_string(workspace().join("tests/gpu/reduce_min_i32_view.ir")).unwrap();
    for text in [elementwise, reduction] {
        let g = irc_frontend::parse_module(&text).unwrap().graphs.remove(0);
        let options = irc_lower::LowerOptions {
            wgmma: true,
            ..Default::default()
        };
        let k = irc_lower::plan_and_lower_with(&g, Default::default(), &options)
            .unwrap()
            .kernels;
        let cuda = irc_emit_cuda::emit(&k);
        let arch = Arch::parse("sm_90a").unwrap();
        let (ptx, _) = compile_and_assemble(&cuda.source, "neg.cu", &arch).unwrap();
        assert!(
            !ptx.text.contains("neg.s"),
            "@{}: neg in\n{}",
            g.name,
            ptx.text
        );
        assert!(
            ptx.text.contains("not.b"),
            "@{}: no not in\n{}",
            g.name,
            ptx.text
        );
    }
}
