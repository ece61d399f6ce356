//! `irc tune` and the tuning cache through the binary: `--list` without a GPU, a clear error
//! where there is no GPU, the cache used by `--emit` with `--explain` saying so (flag,
//! environment, project file), `--no-tune-cache`, corrupt files, `--show` and `--clear`.

mod common;
use common::{irc, root};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("irc-tune-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `irc` with the user cache pointed at `user` (so no real cache is read or written).
fn irc_with(user: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_irc"))
        .args(args)
        .current_dir(root())
        .env("IRC_TUNE_CACHE", user)
        .output()
        .expect("irc runs")
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const GRAPH: &str = "graph @sm(%x: tensor<64x3000xf16>) -> tensor<64x3000xf16> {\n  %r = softmax %x {axis = -1}\n  return %r\n}\n";

/// Writes the graph to `dir/g.ir` and an entry for its softmax kernel, configured `config`, to
/// `cache`; returns the graph's path.
fn graph_and_entry(dir: &Path, cache: &Path, config: &str) -> PathBuf {
    let g = dir.join("g.ir");
    std::fs::write(&g, GRAPH).unwrap();
    let m = irc_frontend::parse_module(GRAPH).unwrap();
    let p = irc_lower::plan_and_lower(&m.graphs[0], Default::default())
        .unwrap()
        .choices[0]
        .problem
        .clone();
    let e = irc_tune::Entry {
        template: p.template.into(),
        space_version: irc_lower::templates::space_of(p.template)
            .unwrap()
            .version(),
        problem: p.signature.clone(),
        arch: "sm_90a".into(),
        irc_version: irc_tune::IRC_VERSION.into(),
        config: config.into(),
        ms: 0.01,
        default_config: "block,threads=256".into(),
        default_ms: 0.02,
        device: "test".into(),
        candidates: 2,
        tuned_at: 0,
    };
    irc_tune::cache::update(cache, |c| c.insert(e)).unwrap();
    g
}

#[test]
fn list_ranks_candidates_without_a_gpu() {
    let d = scratch("list");
    let o = irc_with(
        &d.join("none.json"),
        // The mma.sync template's space (on sm_90a the Hopper template, without a space yet,
        // builds this matmul).
        &[
            "tune",
            "--list",
            "examples/gemm.ir",
            "--top-k",
            "4",
            "--arch",
            "sm_80",
        ],
    );
    assert!(o.status.success(), "{}", err(&o));
    let s = out(&o);
    assert!(
        s.contains("kernel 1/1: @gemm_k0_matmul (matmul_mma; matmul f16 b1 m4096 n4096 k4096"),
        "{s}"
    );
    assert!(
        s.contains("128x128x32/2x2/3") && s.contains("(default)"),
        "{s}"
    );
    assert_eq!(s.matches(" estimate ").count(), 5, "{s}");
}

/// Check that `irc tune` takes an ONNX model as `irc run` does: each kernel of the imported
/// graph ranked, a dynamic dim sized by `--dim`.
#[test]
fn list_ranks_an_onnx_models_kernels() {
    let d = scratch("list-onnx");
    let o = irc_with(
        &d.join("none.json"),
        &[
            "tune",
            "--list",
            "tests/onnx_models/dynamic_dim.onnx",
            "--dim",
            "batch=4096",
        ],
    );
    assert!(o.status.success(), "{}", err(&o));
    let s = out(&o);
    assert!(s.contains("kernel 1/") && s.contains("(default)"), "{s}");
    let o = irc_with(
        &d.join("none.json"),
        &["tune", "--list", "tests/onnx_models/dynamic_dim.onnx"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("--dim batch=N"), "{}", err(&o));
}

#[test]
fn tune_without_a_gpu_is_a_clear_error() {
    if std::env::var("IRC_GPU_TESTS").is_ok_and(|v| v == "1") {
        return; // this machine has a GPU: the GPU tests tune for real
    }
    let d = scratch("nogpu");
    let cache = d.join("c.json");
    let o = irc_with(&cache, &["tune", "examples/small/softmax.ir"]);
    assert_eq!(o.status.code(), Some(1));
    let e = err(&o);
    assert!(e.contains("irc tune measures kernels on a GPU"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    assert!(!cache.exists());
    // Without a graph: a usage error, not a panic.
    let o = irc_with(&cache, &["tune"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        err(&o).contains("irc tune needs a graph file"),
        "{}",
        err(&o)
    );
}

#[test]
fn emit_uses_the_cache_and_explain_says_where_from() {
    let d = scratch("emit");
    let cache = d.join("tune.json");
    let g = graph_and_entry(&d, &cache, "block,threads=512");
    let g = g.to_str().unwrap();
    let none = d.join("none.json");
    let c = cache.to_str().unwrap();
    // --tune-cache PATH: hit.
    let hit = irc_with(&none, &["--emit=layout", "--explain", "--tune-cache", c, g]);
    assert!(hit.status.success(), "{}", err(&hit));
    let e = err(&hit);
    assert!(e.contains("block,threads=512 [tuning cache: "), "{e}");
    assert!(out(&hit).contains("block(512, 1, 1)"), "{}", out(&hit));
    // --no-tune-cache: the heuristic, and different kernel IR.
    let off = irc_with(
        &cache,
        &["--emit=layout", "--explain", "--no-tune-cache", g],
    );
    assert!(off.status.success(), "{}", err(&off));
    assert!(
        err(&off).contains("block,threads=256 [heuristic: not in the tuning cache]"),
        "{}",
        err(&off)
    );
    assert_ne!(out(&hit), out(&off));
    // The environment variable names the user cache.
    let env = irc_with(&cache, &["--emit=layout", "--explain", g]);
    assert_eq!(out(&env), out(&hit));
    assert!(err(&env).contains("[tuning cache: "), "{}", err(&env));
    // Another arch misses.
    let other = irc_with(
        &cache,
        &["--emit=layout", "--explain", "--arch", "sm_80", g],
    );
    assert!(
        err(&other).contains("[heuristic: not in the tuning cache]"),
        "{}",
        err(&other)
    );
    // Without --explain nothing is said.
    let quiet = irc_with(&cache, &["--emit=layout", g]);
    assert_eq!(err(&quiet), "");
    // --tune-cache and --no-tune-cache contradict each other.
    let both = irc_with(
        &none,
        &["--emit=layout", "--no-tune-cache", "--tune-cache", c, g],
    );
    assert_eq!(both.status.code(), Some(2));
}

#[test]
fn a_project_file_beside_the_graph_is_used() {
    let d = scratch("project");
    let g = d.join("g.ir");
    let project = PathBuf::from(format!("{}.tune.json", g.display()));
    graph_and_entry(&d, &project, "streamed,threads=128");
    let o = irc_with(
        &d.join("none.json"),
        &["--emit=cuda", "--explain", g.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        err(&o).contains("streamed,threads=128 [tuning cache: "),
        "{}",
        err(&o)
    );
    assert!(err(&o).contains("g.ir.tune.json"), "{}", err(&o));
}

#[test]
fn a_corrupt_cache_is_a_warning() {
    let d = scratch("corrupt");
    let cache = d.join("tune.json");
    let g = graph_and_entry(&d, &cache, "block,threads=512");
    let text = std::fs::read_to_string(&cache).unwrap();
    std::fs::write(&cache, &text[..text.len() / 3]).unwrap();
    let o = irc_with(&cache, &["--emit=layout", "--explain", g.to_str().unwrap()]);
    assert!(o.status.success(), "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains("warning: tuning cache") && e.contains("ignored (corrupt or truncated?)"),
        "{e}"
    );
    assert!(e.contains("[heuristic: not in the tuning cache]"), "{e}");
    let o = irc_with(&cache, &["tune", "--show"]);
    assert!(o.status.success());
    assert!(out(&o).contains(": 0 entries"), "{}", out(&o));
}

#[test]
fn show_and_clear() {
    let d = scratch("show");
    let cache = d.join("tune.json");
    graph_and_entry(&d, &cache, "block,threads=512");
    let c = cache.to_str().unwrap();
    let none = d.join("none.json");
    let o = irc_with(&none, &["tune", "--show", "--tune-cache", c]);
    assert!(o.status.success(), "{}", err(&o));
    let s = out(&o);
    assert!(s.contains(": 1 entries"), "{s}");
    assert!(
        s.contains("row (v3) softmax f16 rows64 k3000") && s.contains("block,threads=512"),
        "{s}"
    );
    let o = irc_with(&none, &["tune", "--clear", "--tune-cache", c]);
    assert!(o.status.success() && out(&o).contains("removed the tuning cache"));
    assert!(!cache.exists());
    let o = irc_with(&none, &["tune", "--clear", "--tune-cache", c]);
    assert!(o.status.success() && out(&o).contains("no tuning cache at"));
    // The default path comes from IRC_TUNE_CACHE.
    graph_and_entry(&d, &cache, "block,threads=512");
    let o = irc_with(&cache, &["tune", "--show"]);
    assert!(out(&o).contains(": 1 entries"), "{}", out(&o));
}

#[test]
fn tune_help_names_its_flags() {
    let o = irc(&["tune", "--help"]);
    assert!(o.status.success());
    let s = out(&o);
    for flag in [
        "--top-k",
        "--tune-cache",
        "--no-tune-cache",
        "--show",
        "--clear",
        "--list",
    ] {
        assert!(s.contains(flag), "{flag}: {s}");
    }
    for cmd in [
        &["bench", "--help"][..],
        &["run", "--help"][..],
        &["--help"][..],
    ] {
        let s = out(&irc(cmd));
        assert!(
            s.contains("--tune-cache") && s.contains("--no-tune-cache"),
            "{cmd:?}: {s}"
        );
    }
}
