//! The MLIR backend on every example: snapshots of the emitted module, `mlir-opt-22`'s
//! verification and round trip, PTX that `ptxas` assembles without spills for sm_90a and sm_80,
//! with the launch manifest's entry points.

mod common;

use common::*;
use irc_emit_mlir::{MlirError, compile_to_ptx, emit_mlir, find_cuda_toolkit};
use std::process::Command;

/// One insta snapshot of the MLIR of each graph file.
#[test]
fn mlir_snapshots() {
    for rel in graph_files() {
        let text = emit_mlir(&lower(&rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        insta::assert_snapshot!(snapshot_name(&rel), text);
    }
}

/// `mlir-opt-22` verifies every emitted module, and printing what it parsed gives our text back.
#[test]
fn mlir_opt_verifies_and_round_trips() {
    let Some(opt) = tool(
        "IRC_MLIR_OPT",
        &["mlir-opt-22", "/usr/lib/llvm-22/bin/mlir-opt"],
    ) else {
        return skip_or_fail("mlir-opt-22 (Debian package mlir-22-tools)");
    };
    let dir = scratch("roundtrip");
    for rel in graph_files() {
        let text = emit_mlir(&lower(&rel)).unwrap();
        let f = dir.join(format!("{}.mlir", snapshot_name(&rel)));
        std::fs::write(&f, &text).unwrap();
        let o = Command::new(&opt)
            .arg("--mlir-print-debuginfo")
            .arg(&f)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{rel}: mlir-opt rejects the module:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let back = String::from_utf8_lossy(&o.stdout);
        assert!(
            back.trim_end() == text.trim_end(),
            "{rel}: mlir-opt's round trip differs from the emitted text (see {})",
            f.display()
        );
    }
}

/// Kernels allowed to spill, with the bytes stored (none today: since the tensor-core epilogue
/// goes through shared memory no kernel does). The test fails when a listed kernel spills more
/// or less than listed, or when any other kernel spills.
const KNOWN_SPILLS: &[(&str, &str, &str, u32)] = &[];

/// Every example's PTX (lowered as the pipeline does for each arch: the Hopper templates on
/// sm_90a) assembles with ptxas for sm_90a and sm_80, without register spills
/// (except `KNOWN_SPILLS` and within `irc_kir::spill_budget`) and without local memory, and its entry points are the manifest's
/// kernels with one 64-bit pointer per parameter.
#[test]
fn ptx_assembles_without_spills() {
    let Some(ptxas) = tool("IRC_PTXAS", &["ptxas"]) else {
        return skip_or_fail("ptxas (the nvidia-cuda-nvcc==13.0.* wheel; set IRC_PTXAS)");
    };
    if find_cuda_toolkit().is_none() {
        return skip_or_fail(
            "libdevice (set IRC_CUDA_TOOLKIT to the nvidia-cuda-nvcc wheel's nvidia/cu13)",
        );
    }
    let dir = scratch("ptx");
    let mut problems = Vec::new();
    let mut seen_known = 0;
    for rel in graph_files() {
        for arch in ["sm_90a", "sm_80"] {
            // What the pipeline lowers for the arch: the Hopper templates on sm_90a.
            let options = irc_lower::LowerOptions {
                wgmma: arch == "sm_90a",
                ..Default::default()
            };
            let m = lower_with(&rel, &options);
            let manifest = irc_kir::manifest_of(&m);
            let ptx = compile_to_ptx(&m, arch).unwrap_or_else(|e| panic!("{rel} {arch}: {e}"));
            assert!(ptx.contains(".version 8.0"), "{rel}: PTX ISA is not 8.0");
            for l in &manifest.launches {
                let k = m.kernels.iter().find(|k| k.name == l.kernel).unwrap();
                let head = format!(".entry {}(", l.kernel);
                let at = ptx
                    .find(&head)
                    .unwrap_or_else(|| panic!("{rel}: no entry {}", l.kernel));
                let sig = &ptx[at..at + ptx[at..].find(')').unwrap()];
                assert_eq!(
                    sig.matches(".param .u64").count(),
                    k.params.len(),
                    "{rel}: entry {} takes one pointer per parameter: {sig}",
                    l.kernel
                );
            }
            let f = dir.join(format!("{}_{arch}.ptx", snapshot_name(&rel)));
            std::fs::write(&f, &ptx).unwrap();
            let o = Command::new(&ptxas)
                .args(["-v", &format!("-arch={arch}"), "-o", "/dev/null"])
                .arg(&f)
                .output()
                .unwrap();
            let log = String::from_utf8_lossy(&o.stderr);
            if !o.status.success() {
                problems.push(format!("{rel} {arch}: ptxas fails:\n{log}"));
            }
            let mut kernel = "";
            for line in log.lines() {
                if let Some(k) = line.split("Compiling entry function '").nth(1) {
                    kernel = k.split('\'').next().unwrap_or("");
                }
                let Some(frame) = line.trim().strip_suffix(" bytes spill loads") else {
                    continue;
                };
                // "F bytes stack frame, S bytes spill stores, L"
                let nums: Vec<u32> = frame
                    .split(|c: char| !c.is_ascii_digit())
                    .filter_map(|n| n.parse().ok())
                    .collect();
                let (stack, stores) = (nums[0], nums[1]);
                let known = KNOWN_SPILLS
                    .iter()
                    .find(|(f, a, k, _)| *f == rel && *a == arch && *k == kernel);
                let budget = m
                    .kernels
                    .iter()
                    .find(|k| k.name == kernel)
                    .map_or(0, irc_kir::spill_budget);
                match known {
                    None if stores > 0 && u64::from(stores) <= budget => {}
                    Some(&(_, _, _, bytes)) if stores == bytes => seen_known += 1,
                    Some(&(_, _, _, bytes)) => problems.push(format!(
                        "{rel} {arch} {kernel}: spills {stores} bytes, KNOWN_SPILLS says {bytes}"
                    )),
                    None if stores > 0 => {
                        problems.push(format!("{rel} {arch} {kernel}: {}", line.trim()))
                    }
                    // No spill, and no local memory: register tensors stay in registers.
                    None if stack > 0 => problems.push(format!(
                        "{rel} {arch} {kernel}: {stack} bytes of stack frame (a register tensor in local memory)"
                    )),
                    None => {}
                }
            }
        }
    }
    if seen_known != KNOWN_SPILLS.len() {
        problems.push(format!(
            "{} of the {} KNOWN_SPILLS no longer spill as listed: update the table",
            KNOWN_SPILLS.len() - seen_known,
            KNOWN_SPILLS.len()
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A kernel IR module that does not verify is an internal error, not a panic.
#[test]
fn bad_kernel_ir_is_an_error() {
    let mut m = lower("examples/small/softmax.ir");
    m.launches[0].kernel = "nowhere".into();
    match emit_mlir(&m) {
        Err(MlirError::KernelIr(msg)) => assert!(msg.contains("nowhere"), "{msg}"),
        other => panic!("expected a kernel IR error, got {other:?}"),
    }
}

/// Kernel locations name the graph ops and their source lines.
#[test]
fn kernels_carry_graph_locations() {
    let text = emit_mlir(&lower("examples/small/softmax.ir")).unwrap();
    assert!(text.contains("softmax"), "{text}");
    assert!(text.contains("\"examples/small/softmax.ir\":"), "{text}");
}

/// The warpgroup-aligned Hopper instructions are LLVM's convergent intrinsics, not inline
/// assembly (which LLVM may duplicate into divergent code).
#[test]
fn warpgroup_instructions_are_convergent_intrinsics() {
    let options = irc_lower::LowerOptions {
        wgmma: true,
        ..Default::default()
    };
    let text = emit_mlir(&lower_with("examples/attention.ir", &options)).unwrap();
    for name in [
        "llvm.nvvm.wgmma.fence.sync.aligned",
        "llvm.nvvm.wgmma.commit_group.sync.aligned",
        "llvm.nvvm.wgmma.wait_group.sync.aligned",
        "llvm.nvvm.setmaxnreg.inc.sync.aligned.u32",
        "llvm.nvvm.setmaxnreg.dec.sync.aligned.u32",
    ] {
        assert!(
            text.contains(&format!("llvm.call_intrinsic \"{name}\"")),
            "{name}"
        );
    }
    for asm in [
        "wgmma.fence.sync.aligned;",
        "wgmma.commit_group",
        "setmaxnreg",
    ] {
        assert!(
            !text
                .lines()
                .any(|l| l.contains("llvm.inline_asm") && l.contains(asm)),
            "{asm} as inline asm"
        );
    }
}

/// Integer negation reaches PTX as `not` then `add 1`, never `neg` (ptxas 13.0 drops one
/// negation when it folds three negated integers into sm_90's `VIMNMX3`: run 219,
/// bench/gpu/NOTES.md, session 29).
#[test]
fn integer_negation_is_not_neg_in_ptx() {
    if find_cuda_toolkit().is_none() {
        return skip_or_fail(
            "libdevice (set IRC_CUDA_TOOLKIT to the nvidia-cuda-nvcc wheel's nvidia/cu13)",
        );
    }
    let rel = "tests/gpu/reduce_min_i32_view.ir";
    let options = irc_lower::LowerOptions {
        wgmma: true,
        ..Default::default()
    };
    let ptx = compile_to_ptx(&lower_with(rel, &options), "sm_90a").unwrap();
    assert!(!ptx.contains("neg.s"), "neg in\n{ptx}");
    assert!(ptx.contains("not.b"), "no not in\n{ptx}");
}

/// Hinted copies (`copy.N.evict_first`) of 8 and 4 bytes are `ld.global.cs` loads of two and
/// one registers, gathered into the copy's vector, in MLIR and in PTX.
#[test]
fn hinted_copies_of_each_width_are_streaming_loads() {
    let text = "graph @g(%x: tensor<300x100xf16>, %y: tensor<300x66xbf16>) -> (tensor<300xf16>, tensor<300xbf16>) {\n  %a = reduce_sum %x {axes = [1]}\n  %b = reduce_max %y {axes = [1]}\n  return %a, %b\n}\n";
    let g = irc_frontend::parse_module(text).unwrap().graphs.remove(0);
    let base = irc_lower::plan_and_lower_with(&g, Default::default(), &Default::default()).unwrap();
    let point =
        irc_lower::templates::Config::parse("reduction", "row,threads=128,evict_first").unwrap();
    let options = irc_lower::LowerOptions {
        configs: base
            .choices
            .iter()
            .map(|c| (c.problem.key(), point))
            .collect(),
        ..Default::default()
    };
    let m = irc_lower::plan_and_lower_with(&g, Default::default(), &options)
        .unwrap()
        .kernels;
    let kir = irc_kir::print_module(&m);
    assert!(
        kir.contains("copy.4.evict_first") && kir.contains("copy.2.evict_first"),
        "{kir}"
    );
    let mlir = emit_mlir(&m).unwrap();
    for asm in [
        "ld.global.cs.v2.u32 {$0, $1}, [$2];",
        "ld.global.cs.u32 $0, [$1];",
    ] {
        assert!(mlir.contains(asm), "{asm} not in\n{mlir}");
    }
    assert!(mlir.contains("vector.bitcast"), "{mlir}");
    if find_cuda_toolkit().is_none() {
        return skip_or_fail(
            "libdevice (set IRC_CUDA_TOOLKIT to the nvidia-cuda-nvcc wheel's nvidia/cu13)",
        );
    }
    let ptx = compile_to_ptx(&m, "sm_90a").unwrap();
    assert!(
        ptx.contains("ld.global.cs.v2.u32") && ptx.contains("ld.global.cs.u32"),
        "{ptx}"
    );
}
