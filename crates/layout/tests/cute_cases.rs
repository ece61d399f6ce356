//! CuTe's own test cases, ported: every case of CUTLASS `test/unit/cute/core/*.cpp` (coalesce,
//! complement, composition, left/right inverse, logical divide/product, nullspace), the cute_ir
//! dialect's LIT tests and the pycute tests, as tables of `expression<TAB>expected` in
//! `tests/cute/*.tsv`. The expected column is what the C++ CuTe prints (`tests/cute/oracle.py`
//! compiles each case against the CUTLASS headers with static integers), in our notation.
//!
//! Every case must agree exactly, or be listed in [`DIVERGENCES`] with its reason. A divergence
//! is never a wrong answer: it is either the same function printed differently, or an error where
//! the C++ accepts something irc cannot represent.

use irc_layout::eval_expr;

const TABLES: &[(&str, &str)] = &[("core", include_str!("cute/core.tsv"))];

/// Intended differences from the C++ CuTe: (expression, our answer, why).
#[rustfmt::skip]
const DIVERGENCES: &[(&str, &str, &str)] = &[
];

fn ours(expr: &str) -> String {
    match eval_expr(expr) {
        Ok(v) => v.to_string(),
        Err(e) => format!("error: {e}"),
    }
}

#[test]
fn cute_cases_agree_with_the_cpp() {
    let (mut total, mut equal, mut diverged, mut bad) = (0, 0, 0, Vec::new());
    for (name, table) in TABLES {
        for line in table.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
            let (expr, want) = line.split_once('\t').unwrap_or((line, ""));
            total += 1;
            let got = ours(expr);
            let same = if want.starts_with("error") { got.starts_with("error") } else { got == want };
            if same {
                equal += 1;
            } else if let Some((_, d, _)) = DIVERGENCES.iter().find(|d| d.0 == expr) {
                assert!(got.starts_with(d), "{expr}: divergence table says {d}, got {got}");
                diverged += 1;
            } else {
                bad.push(format!("[{name}] {expr}\n    ours: {got}\n    cute: {want}"));
            }
        }
    }
    eprintln!("CuTe cases: {total}, equal {equal}, documented divergences {diverged}, failing {}", bad.len());
    assert!(bad.is_empty(), "{} of {total} disagree:\n{}", bad.len(), bad.join("\n"));
}
