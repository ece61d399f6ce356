//! Differential test against pycute, the reference CuTe implementation (in the `nvidia-cutlass`
//! wheel): thousands of seeded random expressions are evaluated by us and, in one subprocess, by
//! `scripts/pycute_eval.py`; the answers must agree line by line, mode by mode (the printed
//! forms are equal) and therefore as functions. Both sides failing counts as agreement.
//!
//! Setup: `python3 -m venv .venv-pycute && .venv-pycute/bin/pip install --no-deps
//! nvidia-cutlass==4.2.0.0` and `export IRC_PYCUTE_PYTHON=$PWD/.venv-pycute/bin/python`.
//! Without `IRC_PYCUTE_PYTHON` the test is skipped, except under `CI`, where it fails.
//!
//! The generator stays inside the domain where pycute follows the C++ CuTe documentation; the
//! places where it does not (and where we follow the documentation) are pinned by the unit tests
//! in `pycute_divergence` below.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::{Gen, Rng, layout};
use irc_layout::{Layout, eval_expr, parse_layout};

const CASES: usize = 6000;
const SEED: u64 = 0x1c_2024;

/// The python that can `import pycute`, or `None` (after reporting) when the test must be skipped.
fn pycute_python() -> Option<PathBuf> {
    match std::env::var_os("IRC_PYCUTE_PYTHON") {
        Some(p) => Some(PathBuf::from(p)),
        None if std::env::var_os("CI").is_some() => panic!(
            "IRC_PYCUTE_PYTHON is not set. Create it with `python3 -m venv .venv-pycute && \
             .venv-pycute/bin/pip install --no-deps nvidia-cutlass==4.2.0.0` and export \
             IRC_PYCUTE_PYTHON=$PWD/.venv-pycute/bin/python"
        ),
        None => {
            // Written to the stderr handle itself so that the test harness does not capture it.
            let note = "SKIPPED: set IRC_PYCUTE_PYTHON to a python that can `import pycute` to run the pycute differential test\n";
            let _ = std::io::stderr().write_all(note.as_bytes());
            None
        }
    }
}

/// Run the pycute helper once over all expressions; one answer line per expression.
fn run_pycute(python: &PathBuf, exprs: &[String]) -> Vec<String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pycute_eval.py");
    let mut child = Command::new(python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = exprs.join("\n") + "\n";
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("pycute helper output");
    writer
        .join()
        .expect("writer thread")
        .expect("write to pycute helper");
    assert!(out.status.success(), "pycute helper failed: {}", out.status);
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_string)
        .collect()
}

fn ours(expr: &str) -> String {
    match eval_expr(expr) {
        Ok(v) => v.to_string(),
        Err(e) => format!("error: {e}"),
    }
}

/// Size and rank of a generated layout (generated layouts always parse).
fn info(text: &str) -> Layout {
    parse_layout(text).expect("generated layout parses")
}

/// A tiler with one layout (or `_`) per mode of a rank-`rank` layout, as text.
fn tiler(rng: &mut Rng, rank: usize, g: Gen) -> String {
    let n = 1 + rng.below(rank as u64) as usize;
    let items: Vec<String> = (0..n)
        .map(|_| {
            if rng.chance(20) {
                "_".into()
            } else {
                layout(rng, small(g))
            }
        })
        .collect();
    format!("[{}]", items.join(","))
}

fn small(g: Gen) -> Gen {
    Gen { leaves: 2, ..g }
}

/// A generated expression; for a top-level composition, its operands (the left one and one right
/// one per mode), so a disagreement can be settled by the post-condition `R(i) == A(B(i))`.
struct Case {
    expr: String,
    compose: Option<Compose>,
}

/// The operands of `composition(a, b)` or `composition(a, [b0,b1,...])`.
struct Compose {
    a: String,
    bs: Vec<String>,
    tiler: bool,
}

/// `composition(a, b)` with `b` a layout or a tiler `[b0,b1,...]`.
fn compose_case(a: String, bs: Vec<String>, tiler: bool) -> Case {
    let rhs = if tiler {
        format!("[{}]", bs.join(","))
    } else {
        bs[0].clone()
    };
    Case {
        expr: format!("composition({a},{rhs})"),
        compose: Some(Compose { a, bs, tiler }),
    }
}

/// One random expression of the kinds pycute supports.
fn case(rng: &mut Rng) -> Case {
    let pow2 = Gen::POW2;
    let a = layout(rng, pow2);
    let rank = info(&a).rank();
    match rng.below(8) {
        0 => compose_case(a, vec![layout(rng, small(pow2))], false),
        1 => compose_case(
            a,
            (0..rank).map(|_| layout(rng, small(pow2))).collect(),
            true,
        ),
        2 => {
            let any = Gen {
                leaves: 4,
                odd: true,
                zero: true,
                gaps: true,
            };
            compose_case(layout(rng, any), vec![layout(rng, small(pow2))], false)
        }
        3 => {
            let b = layout(
                rng,
                Gen {
                    zero: false,
                    ..small(pow2)
                },
            );
            let lhs = format!(
                "{}({})",
                rng.pick(&["right_inverse", "left_inverse"]),
                layout(
                    rng,
                    Gen {
                        zero: false,
                        odd: true,
                        ..pow2
                    }
                )
            );
            compose_case(lhs, vec![format!("coalesce({b})")], false)
        }
        _ => Case {
            expr: expr(rng),
            compose: None,
        },
    }
}

/// One random expression of the kinds pycute supports (other than top-level composition).
fn expr(rng: &mut Rng) -> String {
    let pow2 = Gen::POW2;
    let any = Gen {
        leaves: 4,
        odd: true,
        zero: true,
        gaps: true,
    };
    let g = if rng.chance(50) { pow2 } else { any };
    let a = layout(rng, g);
    let la = info(&a);
    let (size, rank) = (la.size().unwrap_or(1), la.rank());
    match rng.below(20) {
        0 => a,
        1 => format!(
            "{}({a})",
            rng.pick(&["size", "cosize", "rank", "depth", "shape", "stride"])
        ),
        2 => format!("coalesce({a})"),
        3 => format!(
            "coalesce({a},({}))",
            vec!["1"; 1 + rng.below(rank as u64) as usize].join(",")
        ),
        4 => format!("filter({a})"),
        5 | 6 => format!(
            "size(composition({},{}))",
            layout(rng, pow2),
            layout(rng, small(pow2))
        ),
        7 => {
            let b = layout(rng, Gen { zero: false, ..any });
            let cosize = info(&b).cosize().unwrap_or(1);
            format!("complement({b},{})", cosize * rng.pick(&[1, 2, 3, 4]))
        }
        8 => format!(
            "{}({})",
            rng.pick(&["right_inverse", "left_inverse"]),
            layout(rng, Gen { zero: false, ..any })
        ),
        9 | 10 => {
            let op = rng.pick(&["logical_divide", "zipped_divide", "tiled_divide"]);
            let b = if rng.chance(50) {
                layout(rng, small(pow2))
            } else {
                tiler(rng, rank, pow2)
            };
            format!("{op}({},{b})", layout(rng, pow2))
        }
        11 | 12 => {
            let op = rng.pick(&["logical_product", "zipped_product", "tiled_product"]);
            let b = if rng.chance(50) {
                layout(rng, small(pow2))
            } else {
                tiler(rng, rank, pow2)
            };
            format!(
                "{op}({},{b})",
                layout(
                    rng,
                    Gen {
                        zero: false,
                        ..pow2
                    }
                )
            )
        }
        13 => match (rank, rng.below(3)) {
            (2, 0) => format!(
                "{a}({},{})",
                rng.below(la.mode(0).and_then(|m| m.size()).unwrap_or(1) as u64),
                rng.below(la.mode(1).and_then(|m| m.size()).unwrap_or(1) as u64)
            ),
            (2, 1) => format!(
                "{a}(_,{})",
                rng.below(la.mode(1).and_then(|m| m.size()).unwrap_or(1) as u64)
            ),
            _ => format!("{a}({})", rng.below(size as u64)),
        },
        14 => match rng.below(3) {
            0 => format!("idx2crd({},{a})", rng.below(size as u64)),
            1 => format!("crd2idx({},{a})", rng.below(size as u64)),
            _ => format!("slice_and_offset({},{a})", slice_coord(rng, &la)),
        },
        15 => {
            let b = layout(rng, small(any));
            format!(
                "{}({a},{b})",
                rng.pick(&["make_layout", "append", "prepend"])
            )
        }
        16 => {
            // Shift 0 sends pycute's shiftr/shiftl into endless recursion (see pycute_divergence).
            let (bits, base) = (rng.below(4), rng.below(4));
            let shift = bits.max(1) + rng.below(4);
            format!(
                "Sw<{bits},{base},{shift}> o {a}({})",
                rng.below(size as u64)
            )
        }
        17 => format!("get({a},{})", rng.below(rank as u64)),
        18 => {
            let b = layout(rng, small(pow2));
            let inner = format!(
                "{}({},{b})",
                rng.pick(&["logical_divide", "zipped_divide", "logical_product"]),
                layout(rng, pow2)
            );
            format!(
                "{}({inner})",
                rng.pick(&["coalesce", "filter", "size", "cosize", "right_inverse"])
            )
        }
        _ => format!(
            "{}({})",
            rng.pick(&["right_inverse", "left_inverse"]),
            layout(rng, Gen { zero: false, ..any })
        ),
    }
}

/// A coordinate for `slice_and_offset`: `_` or an index per top-level mode.
fn slice_coord(rng: &mut Rng, l: &Layout) -> String {
    let parts: Vec<String> = l
        .modes()
        .iter()
        .map(|m| {
            if rng.chance(50) {
                "_".into()
            } else {
                rng.below(m.size().unwrap_or(1) as u64).to_string()
            }
        })
        .collect();
    if parts.len() == 1 && !l.shape().is_tuple() {
        parts[0].clone()
    } else {
        format!("({})", parts.join(","))
    }
}

/// Whether `r(i) == a(b(i))` for every `i` of `b`, with `size(r) == size(b)`.
fn composes(a: &Layout, b: &str, r: &Layout) -> bool {
    let Ok(b) = parse_layout(&ours(b)) else {
        return false;
    };
    let n = b.size().unwrap_or(-1);
    let at = |i| b.eval(i).and_then(|j| a.eval(j));
    r.size().ok() == Some(n)
        && (0..n).all(|i| matches!((r.eval(i), at(i)), (Ok(x), Ok(y)) if x == y))
}

/// Whether the printed layout `r` is the composition `c` as the post-condition demands (for a
/// tiler, mode by mode).
fn composition_holds(c: &Compose, r: &str) -> bool {
    let (Ok(a), Ok(r)) = (parse_layout(&ours(&c.a)), parse_layout(r)) else {
        return false;
    };
    if !c.tiler {
        return composes(&a, &c.bs[0], &r);
    }
    c.bs.iter()
        .enumerate()
        .all(|(k, b)| matches!((a.mode(k), r.mode(k)), (Ok(ak), Ok(rk)) if composes(&ak, b, &rk)))
}

/// Whether a disagreement is one where pycute departs from the documented CuTe: it rejects a
/// composition whose result we produce and verify, or returns one that breaks `R(i) == A(B(i))`
/// (it skips the shape divisibility check) where we report the divisibility failure.
fn documented_divergence(case: &Case, ours: &str, theirs: &str) -> bool {
    let Some(c) = &case.compose else { return false };
    match (ours.starts_with("error:"), theirs.starts_with("error:")) {
        (false, true) => composition_holds(c, ours),
        (true, false) => ours.contains("does not divide") && !composition_holds(c, theirs),
        _ => false,
    }
}

/// The C++ CuTe's answers for the generated expressions where pycute and C++ CuTe disagree
/// (mostly the strides of size-1 modes, which C++ keeps and pycute zeroes or vice versa; also
/// complements of non-tiling layouts, left inverses of non-injective ones, and `_` in zipped
/// tilers): `expression -> C++ answer`.
fn cpp_answers() -> std::collections::HashMap<&'static str, &'static str> {
    include_str!("cute/pycute_vs_cpp.tsv")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('\t'))
        .collect()
}

#[test]
fn random_expressions_agree_with_pycute() {
    let Some(python) = pycute_python() else {
        return;
    };
    let mut rng = Rng::new(SEED);
    let cases: Vec<Case> = (0..CASES).map(|_| case(&mut rng)).collect();
    let exprs: Vec<String> = cases.iter().map(|c| c.expr.clone()).collect();
    let theirs = run_pycute(&python, &exprs);
    assert_eq!(
        theirs.len(),
        exprs.len(),
        "pycute helper answered {} of {} lines",
        theirs.len(),
        exprs.len()
    );
    let (mut mismatches, mut values, mut errors, mut divergences) = (Vec::new(), 0, 0, 0);
    let (cpp, mut cpp_verified) = (cpp_answers(), 0);
    for (c, t) in cases.iter().zip(&theirs) {
        let o = ours(&c.expr);
        let agree = if t.starts_with("error:") {
            o.starts_with("error:")
        } else {
            o == *t
        };
        if agree {
            if o.starts_with("error:") {
                errors += 1
            } else {
                values += 1
            }
        } else if documented_divergence(c, &o, t) {
            divergences += 1;
        } else if cpp.get(c.expr.as_str()).is_some_and(|want| {
            *want == o || (want.starts_with("error") && o.starts_with("error:"))
        }) {
            cpp_verified += 1;
        } else {
            mismatches.push(format!("{}\n    ours:   {o}\n    pycute: {t}", c.expr));
        }
    }
    if let Some(path) = std::env::var_os("IRC_PYCUTE_DUMP") {
        // Development aid: the disagreeing expressions, one per line (e.g. for tests/cute/oracle.py).
        let lines: Vec<&str> = mismatches.iter().filter_map(|m| m.lines().next()).collect();
        std::fs::write(path, lines.join("\n") + "\n").expect("write IRC_PYCUTE_DUMP");
    }
    eprintln!(
        "pycute differential: {CASES} expressions: {values} equal values, {errors} errors on both sides, {divergences} documented divergences (pycute breaks the composition post-condition), {cpp_verified} where pycute differs from C++ CuTe and irc equals C++"
    );
    assert!(
        mismatches.is_empty(),
        "{} of {CASES} disagree:\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        values * 10 >= CASES * 8,
        "only {values} of {CASES} expressions produced values; the generator is too error-prone"
    );
}

/// Where pycute departs from the C++ CuTe documentation, we follow the documentation. Each row:
/// an expression, our answer, pycute's answer, and why. The pycute column is checked when the
/// helper can run, so this table stays true as pycute changes.
#[rustfmt::skip]
const DIVERGENCES: &[(&str, &str, &str)] = &[
    // C++ right_inverse skips stride-0 modes; pycute stops at the first one.
    ("right_inverse((2,4):(0,1))",             "4:2",         "1:0"),
    // C++ checks the shape divisibility condition; pycute returns a layout of the wrong size.
    ("composition((6,4,2):(64,16,2),8:1)",     "error:",      "6:64"),
    // Size-1 modes of the right operand impose no condition in C++; pycute asserts on them.
    ("composition((4,3):(3,0),(1,2):(3,1))",   "(1,2):(0,3)", "error:"),
    // C++ composition with a tiler drops the modes the tiler does not reach; pycute keeps them.
    ("composition((4,8,2):(1,4,32),[2:2])",    "(2):(2)",     "(2,8,2):(2,4,32)"),
    // Sw<B,M,0> is a valid (identity-free) swizzle; pycute's shiftr/shiftl recurse forever.
    ("Sw<0,1,0> o 8:1(3)",                     "3",           "error:"),
];

#[test]
fn pycute_divergences_are_as_documented() {
    for (expr, want, _) in DIVERGENCES {
        assert!(
            ours(expr).starts_with(want),
            "ours for `{expr}`: {}",
            ours(expr)
        );
    }
    let Some(python) = pycute_python() else {
        return;
    };
    let exprs: Vec<String> = DIVERGENCES.iter().map(|d| d.0.to_string()).collect();
    for ((expr, _, want), got) in DIVERGENCES.iter().zip(run_pycute(&python, &exprs)) {
        assert!(got.starts_with(want), "pycute for `{expr}`: {got}");
    }
}
