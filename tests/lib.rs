//! Workspace-level test support: every test goes through these few helpers, so a change of API
//! edits this file, not hundreds of tests.

use std::path::{Path, PathBuf};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Parses `input`, prints it, and checks the print against `expected`; also checks that the
/// print re-parses to the same print (the round-trip property).
#[track_caller]
pub fn check(input: &str, expected: &str) {
    let printed = match irc_frontend::parse_module(input) {
        Ok(m) => irc_ir::print_module(&m),
        Err(d) => panic!("unexpected errors: {d:#?}"),
    };
    assert_eq!(
        printed.trim_end(),
        expected.trim_end(),
        "canonical print differs"
    );
    let again = irc_frontend::parse_module(&printed).map(|m| irc_ir::print_module(&m));
    assert_eq!(
        again.as_deref(),
        Ok(printed.as_str()),
        "print does not re-parse to itself"
    );
}

/// Checks that `input` is rejected with a diagnostic whose message contains `expected` and
/// whose span starts on the 1-based line `line`.
#[track_caller]
pub fn check_error(input: &str, line: usize, expected: &str) {
    let diags = match irc_frontend::parse_module(input) {
        Ok(m) => panic!("expected an error, got:\n{}", irc_ir::print_module(&m)),
        Err(d) => d,
    };
    let found = diags.iter().any(|d| {
        let at = d.span.map(|s| {
            input[..(s.start as usize).min(input.len())]
                .matches('\n')
                .count()
                + 1
        });
        d.message.contains(expected) && at == Some(line)
    });
    assert!(
        found,
        "no error containing {expected:?} on line {line}; got {diags:#?}"
    );
}

/// Every example graph: the benchmark workloads and their small versions.
pub fn examples() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in [root().join("examples"), root().join("examples/small")] {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            files.extend(
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|e| e == "ir")),
            );
        }
    }
    files.sort();
    files
}
