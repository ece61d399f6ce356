//! Shared helpers: the example graphs, lowered to kernel IR, and the external tools.

#![allow(dead_code)]

use irc_kir as kir;
use irc_lower::SourceInfo;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every graph file the MLIR backend is tested on: the benchmark examples (real and small
/// sizes) and the odd-shape GPU test graphs, as paths relative to the repository root.
pub fn graph_files() -> Vec<String> {
    let mut out = Vec::new();
    for dir in ["examples", "examples/small", "tests/gpu"] {
        let mut v: Vec<String> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".ir"))
            .map(|n| format!("{dir}/{n}"))
            .collect();
        v.sort();
        out.extend(v);
    }
    out
}

/// A graph file lowered to kernel IR, its locations naming the file as `rel`.
pub fn lower(rel: &str) -> kir::Module {
    lower_with(rel, &irc_lower::LowerOptions::default())
}

/// [`lower`] with the templates' options (`wgmma: true` is what `--arch sm_90a` lowers).
pub fn lower_with(rel: &str, options: &irc_lower::LowerOptions) -> kir::Module {
    let text = std::fs::read_to_string(root().join(rel)).unwrap();
    let module = irc_frontend::parse_module(&text).unwrap_or_else(|d| panic!("{rel}: {d:?}"));
    let g = &module.graphs[0];
    let src = SourceInfo {
        name: rel,
        text: &text,
    };
    irc_lower::plan_and_lower_with(g, src, options)
        .map(|p| p.kernels)
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// A snapshot name for a graph file: `examples/small/gemm.ir` -> `examples_small_gemm`.
pub fn snapshot_name(rel: &str) -> String {
    rel.trim_end_matches(".ir").replace('/', "_")
}

/// An external tool from an environment variable or a list of candidates. `None` means the
/// test is skipped, which CI (`CI=true`) does not allow.
pub fn tool(env: &str, candidates: &[&str]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    candidates.iter().map(PathBuf::from).find(|p| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

pub fn skip_or_fail(what: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what} is missing, and CI=true requires it (scripts/test.sh installs it)");
    }
    eprintln!("SKIPPED: {what} is missing");
}

pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("irc-mlir-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
