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

const TABLES: &[(&str, &str)] = &[
    ("core", include_str!("cute/core.tsv")),
    ("lit", include_str!("cute/lit.tsv")),
    ("pycute", include_str!("cute/pycute.tsv")),
    ("extra", include_str!("cute/extra.tsv")),
];

/// Intended differences from the C++ CuTe: (expression, our answer, why).
#[rustfmt::skip]
const DIVERGENCES: &[(&str, &str, &str)] = &[
    // C++ returns `(-1,4):(0,1)`, whose shape is negative: not a layout in irc (shapes are >= 1).
    ("left_inverse((4):(-1))", "error: left_inverse: layout: shape (-1,4)", "negative shape"),
    // C++ moves the swizzle of a composed right operand outward (`Sw<2,0,3> o (8,8):(1,8)`);
    // irc composes only plain layouts on the right of a layout.
    ("composition((8,8):(8,1),Sw<2,0,-3> o 0 o (8,8):(8,1))", "error: composition:", "swizzle on the right"),
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
        for line in table
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        {
            let mut cols = line.split('\t');
            let (expr, want) = (cols.next().unwrap_or(""), cols.next().unwrap_or(""));
            total += 1;
            let got = ours(expr);
            let same = if want.starts_with("error") {
                got.starts_with("error")
            } else {
                got == want
            };
            if same {
                equal += 1;
            } else if let Some((_, d, _)) = DIVERGENCES.iter().find(|d| d.0 == expr) {
                assert!(
                    got.starts_with(d),
                    "{expr}: divergence table says {d}, got {got}"
                );
                diverged += 1;
            } else {
                bad.push(format!(
                    "[{name}] {expr}\n    ours: {got}\n    cute: {want}"
                ));
            }
        }
    }
    eprintln!(
        "CuTe cases: {total}, equal {equal}, documented divergences {diverged}, failing {}",
        bad.len()
    );
    assert!(
        bad.is_empty(),
        "{} of {total} disagree:\n{}",
        bad.len(),
        bad.join("\n")
    );
    // The bar: at least 95% of CuTe's cases agree exactly (the divergences are errors
    // where the C++ returns a value, never a different value).
    assert!(
        equal * 100 >= total * 95,
        "only {equal} of {total} agree exactly"
    );
}
