//! The `irc` binary end to end: exit codes, located errors, verify-diagnostics files, `run`.

mod common;
use common::{irc, root};
use npyz::WriterBuilder;
use std::path::PathBuf;
use std::process::Output;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn files(dir: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("irc-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Every negative test file passes `--split-input-file --verify-diagnostics`.
#[test]
fn diagnostics_files_verify() {
    let all = files("tests/diagnostics");
    assert!(!all.is_empty());
    for f in all {
        let o = irc(&[
            "--split-input-file",
            "--verify-diagnostics",
            f.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}:\n{}", f.display(), stderr(&o));
    }
}

/// `--verify-diagnostics` fails when an expectation is not met, and when an error is unexpected.
#[test]
fn verify_diagnostics_catches_mismatches() {
    let d = scratch("vd");
    let f = d.join("t.ir");
    std::fs::write(&f, "graph @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  // expected-error @+1 {{something else}}\n  %y = exq %x\n  return %x\n}\n").unwrap();
    let o = irc(&["--verify-diagnostics", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("unexpected error: unknown op 'exq'"), "{e}");
    assert!(
        e.contains("expected error \"something else\" on line 3 was not produced"),
        "{e}"
    );
}

/// Each kind of user mistake gets `file:line:col: error:` with the source line and a caret, and
/// exit code 1 — never a panic.
#[test]
fn user_mistakes_are_located_errors() {
    for f in files("tests/errors") {
        let o = irc(&[f.to_str().unwrap()]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{}: {e}", f.display());
        let name = f.to_str().unwrap();
        let first = e.lines().next().unwrap_or_default();
        let located = first.starts_with(name)
            && first
                .split(':')
                .nth(1)
                .is_some_and(|l| l.parse::<u32>().is_ok());
        assert!(
            located && first.contains(": error: "),
            "{}: {e}",
            f.display()
        );
        if !name.contains("invalid_utf8") {
            assert!(e.contains('^'), "{}: no caret: {e}", f.display());
        }
    }
}

/// Every example parses, and its print is a fixed point of `irc`.
#[test]
fn examples_print_to_fixed_points() {
    for f in files("examples")
        .into_iter()
        .chain(files("examples/small"))
        .filter(|p| p.extension().is_some_and(|e| e == "ir"))
    {
        let d = scratch("fix");
        let once = d.join("once.ir");
        let o = irc(&[f.to_str().unwrap(), "-o", once.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let twice = irc(&[once.to_str().unwrap()]);
        assert_eq!(
            String::from_utf8_lossy(&twice.stdout),
            std::fs::read_to_string(&once).unwrap()
        );
    }
}

#[test]
fn split_input_file_prints_each_case() {
    let d = scratch("split");
    let f = d.join("s.ir");
    std::fs::write(&f, "graph @a(%x: tensor<2xf32>) -> tensor<2xf32> {\n  return %x\n}\n// -----\ngraph @a(%x: tensor<3xf32>) -> tensor<3xf32> {\n  return %x\n}\n").unwrap();
    let o = irc(&["--split-input-file", f.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.matches("graph @a").count(), 2);
    assert!(out.contains("// -----"));
}

#[test]
fn run_random_and_save_outputs() {
    let d = scratch("run");
    let o = irc(&[
        "run",
        "examples/small/rmsnorm_gemm.ir",
        "--random",
        "--seed",
        "3",
        "--save-outputs",
        d.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("out0: tensor<128x192xbf16> min="), "{out}");
    // bf16 results travel as float32.
    let bytes = std::fs::read(d.join("out0.npy")).unwrap();
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
    assert_eq!(npy.dtype(), npyz::DType::Plain("<f4".parse().unwrap()));
    assert_eq!(npy.shape(), &[128, 192]);
    // The same seed gives the same result.
    let again = irc(&[
        "run",
        "examples/small/rmsnorm_gemm.ir",
        "--random",
        "--seed",
        "3",
    ]);
    assert_eq!(again.stdout, o.stdout);
}

#[test]
fn run_with_npy_inputs() {
    let d = scratch("npy");
    let x = d.join("x.npy");
    {
        let file = std::fs::File::create(&x).unwrap();
        let mut w = npyz::WriteOptions::<f32>::new()
            .default_dtype()
            .shape(&[3])
            .writer(file)
            .begin_nd()
            .unwrap();
        w.extend([-1.0f32, 0.5, 2.0]).unwrap();
        w.finish().unwrap();
    }
    let g = d.join("g.ir");
    std::fs::write(
        &g,
        "graph @g(%x: tensor<3xf32>) -> tensor<3xf32> {\n  %y = relu %x\n  return %y\n}\n",
    )
    .unwrap();
    let out = d.join("out");
    let o = irc(&[
        "run",
        g.to_str().unwrap(),
        "--input",
        &format!("x={}", x.display()),
        "--save-outputs",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(out.join("out0.npy")).unwrap();
    let v: Vec<f32> = npyz::NpyFile::new(&bytes[..]).unwrap().into_vec().unwrap();
    assert_eq!(v, vec![0.0, 0.5, 2.0]);

    // A wrong shape is a clear error.
    std::fs::write(
        &g,
        "graph @g(%x: tensor<4xf32>) -> tensor<4xf32> {\n  return %x\n}\n",
    )
    .unwrap();
    let o = irc(&[
        "run",
        g.to_str().unwrap(),
        "--input",
        &format!("x={}", x.display()),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("shape [3] does not match tensor<4xf32>"),
        "{}",
        stderr(&o)
    );
    // A missing input says how to give it.
    let o = irc(&["run", g.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("pass --input x=PATH.npy or --random"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn run_refuses_graphs_too_large_for_the_interpreter() {
    let d = scratch("big");
    let g = d.join("big.ir");
    std::fs::write(
        &g,
        "graph @g(%x: tensor<65536x65536xf32>) -> tensor<65536x65536xf32> {\n  return %x\n}\n",
    )
    .unwrap();
    let o = irc(&["run", g.to_str().unwrap(), "--random"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("interpreter"), "{}", stderr(&o));
}

/// `-O` folds the transpose; `--list-passes` lists the registry; a bad pipeline is a located
/// error with exit code 1; `--print-ir-after-all` and `--pass-statistics` report to stderr.
#[test]
fn passes_flags() {
    let o = irc(&["-O", "examples/small/gemm_bt.ir"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("matmul %a, %b {transpose_b = true}") && !out.contains("transpose %"),
        "{out}"
    );

    let o = irc(&["--list-passes"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("fold-transpose") && out.contains("max-iters=16"),
        "{out}"
    );

    let o = irc(&[
        "--pass-pipeline=graph(canonicalize,nope)",
        "examples/small/gemm.ir",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("pass pipeline:20: unknown pass 'nope'"),
        "{}",
        stderr(&o)
    );

    let o = irc(&[
        "--pass-pipeline=graph(fold-transpose{max-iters=4})",
        "--print-ir-after-all",
        "--pass-statistics",
        "--timing",
        "examples/small/gemm_bt.ir",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("IR Dump After fold-transpose"), "{err}");
    assert!(
        err.contains("rule.fold-transpose-into-matmul = 1")
            && err.contains("stop-reason = saturated"),
        "{err}"
    );
    assert!(err.contains("pass execution timing report"), "{err}");
}

/// `irc run` runs the -O output by default and the input as written with --no-passes; the
/// two agree to rounding on rmsnorm_gemm (where -O changes the computation).
#[test]
fn run_uses_the_pipeline() {
    let o = irc(&[
        "run",
        "examples/small/gemm_bt.ir",
        "--random",
        "--print-ir-after-change",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("transpose_b = true"), "{}", stderr(&o));
    let o = irc(&[
        "run",
        "examples/small/gemm_bt.ir",
        "--random",
        "--no-passes",
        "--print-ir-after-change",
    ]);
    assert!(
        o.status.success() && stderr(&o).is_empty(),
        "{}",
        stderr(&o)
    );
}

/// A file with no graph (empty, or comments only) is an empty module: `irc` prints nothing and
/// exits 0, as `mlir-opt` does; `irc run` and `irc bench` need a graph and say so.
#[test]
fn empty_module_is_accepted_and_run_says_no_graph() {
    let d = scratch("empty");
    for (name, text) in [("empty.ir", ""), ("comments.ir", "// only a comment\n\n")] {
        let f = d.join(name);
        std::fs::write(&f, text).unwrap();
        let f = f.to_str().unwrap();
        let o = irc(&[f]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        assert!(o.stdout.trim_ascii().is_empty(), "{name}");
        for sub in ["run", "bench"] {
            let o = irc(&[sub, f]);
            assert_eq!(o.status.code(), Some(1), "{sub} {name}");
            assert!(
                stderr(&o).contains("holds no graph"),
                "{sub} {name}: {}",
                stderr(&o)
            );
        }
    }
}

/// `return (%a, %b)` is a located parse error, as the spec says (`return %a, %b` is the form).
#[test]
fn return_in_parentheses_is_an_error() {
    let o = irc(&["tests/errors/return_in_parentheses.ir"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains(":5:10: error:"), "{}", stderr(&o));
}

/// A misspelt subcommand is named as such, not read as an input file.
#[test]
fn misspelt_subcommand_gets_a_hint() {
    let o = irc(&["rnu", "examples/small/gemm.ir"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("did you mean `irc run`?"),
        "{}",
        stderr(&o)
    );
}

/// `--arch sm_80` sizes tiles for the A100 (163 KiB of shared memory a block), not for the
/// H100 (227 KiB): the heuristic's f32 point fits it, and the large f32 point (192 KiB) builds
/// for sm_90a but is refused for sm_80 with the reason.
#[test]
fn arch_sm_80_tiles_fit_an_a100() {
    let d = scratch("arch80");
    let f = d.join("f32mm.ir");
    std::fs::write(
        &f,
        "graph @f(%a: tensor<4096x4096xf32>, %b: tensor<4096x4096xf32>) -> tensor<4096x4096xf32> {\n  %c = matmul %a, %b\n  return %c\n}\n",
    )
    .unwrap();
    let emit = |arch: &str, config: Option<&str>| {
        let mut args = vec!["--emit=cuda", "--arch", arch, f.to_str().unwrap()];
        if let Some(c) = config {
            args.extend(["--mma-config", c]);
        }
        irc(&args)
    };
    let smem = |o: &std::process::Output| -> u64 {
        assert!(o.status.success(), "{}", stderr(o));
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        text.lines()
            .filter_map(|l| l.split("unsigned char irc_smem[]; // ").nth(1))
            .filter_map(|r| r.trim_end_matches(" bytes").parse::<u64>().ok())
            .max()
            .unwrap_or(0)
    };
    let a100 = smem(&emit("sm_80", None));
    assert!(
        a100 > 0 && a100 <= 163 * 1024,
        "sm_80 kernel takes {a100} bytes"
    );
    let large = "128x128x64/2x4/3";
    assert_eq!(smem(&emit("sm_90a", Some(large))), 192 * 1024);
    let o = emit("sm_80", Some(large));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("the shared ring exceeds the block's shared memory"),
        "{}",
        stderr(&o)
    );
}
