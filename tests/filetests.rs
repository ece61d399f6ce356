//! Filetests in the MLIR lit / Cranelift style: `tests/filetests/<pass>/*.ir`.
//!
//! A file starts with a RUN line naming the pipeline (`// RUN: irc -O %s` or
//! `// RUN: irc --pass-pipeline='graph(fold-transpose)' %s`, none for the graph as written) and
//! the level printed (`--emit=fused [--explain]` or `--emit=layout`; the graph IR by default);
//! cases are split by `// -----`;
//! each case has a `/// Check that ...` line saying what it checks, and `// CHECK:`,
//! `// CHECK-NEXT:` and `// CHECK-NOT:` lines matched against the printed output of that case
//! (a small checker of our own, with FileCheck's meaning: CHECK finds the pattern on a later
//! line, CHECK-NEXT on the very next line, CHECK-NOT forbids it between the neighbouring
//! matches). `IRC_BLESS=1 cargo test -p irc-tests --test filetests` rewrites the CHECK and
//! CHECK-NEXT lines of every case from the actual output (CHECK-NOT lines are kept).

use std::path::{Path, PathBuf};

const SPLIT: &str = "// -----";

fn files() -> Vec<PathBuf> {
    let mut out = vec![];
    let root = irc_tests::root().join("tests/filetests");
    let mut dirs = vec![root];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("readable").flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "ir") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// What a RUN line asks for.
struct Run {
    /// The pass pipeline, if any.
    pipeline: Option<String>,
    /// `graph`, `fused` or `layout`.
    emit: String,
    explain: bool,
}

fn run_line(path: &Path, text: &str) -> Run {
    let run = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("// RUN:"))
        .unwrap_or_else(|| panic!("{}: no RUN line", path.display()));
    let run = run.trim();
    let words: Vec<&str> = run.split_whitespace().collect();
    let pipeline = if words.contains(&"-O") {
        Some(irc_passes::registry::DEFAULT_PIPELINE.to_string())
    } else {
        run.split("--pass-pipeline=").nth(1).map(|p| {
            let p = p.trim_start_matches('\'');
            p[..p.find('\'').unwrap_or(p.len())].to_string()
        })
    };
    let emit = words
        .iter()
        .find_map(|w| w.strip_prefix("--emit="))
        .unwrap_or("graph")
        .to_string();
    assert!(
        ["graph", "fused", "layout"].contains(&emit.as_str()),
        "{}: --emit={emit} is not a filetest level",
        path.display()
    );
    Run {
        pipeline,
        emit,
        explain: words.contains(&"--explain"),
    }
}

#[derive(Debug)]
enum Check {
    Plain(String),
    Next(String),
    Not(String),
}

fn checks(case: &str) -> Vec<Check> {
    case.lines()
        .filter_map(|l| {
            let l = l.trim();
            if let Some(p) = l.strip_prefix("// CHECK-NEXT:") {
                Some(Check::Next(p.trim().to_string()))
            } else if let Some(p) = l.strip_prefix("// CHECK-NOT:") {
                Some(Check::Not(p.trim().to_string()))
            } else {
                l.strip_prefix("// CHECK:")
                    .map(|p| Check::Plain(p.trim().to_string()))
            }
        })
        .collect()
}

/// FileCheck over lines; returns the first failure.
fn filecheck(output: &str, checks: &[Check]) -> Result<(), String> {
    let lines: Vec<&str> = output.lines().collect();
    let mut pos = 0usize; // the next line a positive check may match
    let mut last: Option<usize> = None;
    let mut nots: Vec<&str> = vec![];
    for c in checks {
        match c {
            Check::Not(p) => nots.push(p),
            Check::Plain(p) | Check::Next(p) => {
                let found = if let Check::Next(_) = c {
                    let want = last.map_or(0, |l| l + 1);
                    lines
                        .get(want)
                        .filter(|l| l.contains(p.as_str()))
                        .map(|_| want)
                } else {
                    (pos..lines.len()).find(|&i| lines[i].contains(p.as_str()))
                };
                let Some(i) = found else {
                    return Err(format!(
                        "{} not found: {p:?}",
                        if let Check::Next(_) = c {
                            "CHECK-NEXT"
                        } else {
                            "CHECK"
                        }
                    ));
                };
                for n in nots.drain(..) {
                    if let Some(bad) = lines[pos..i].iter().find(|l| l.contains(n)) {
                        return Err(format!("CHECK-NOT {n:?} matched: {bad}"));
                    }
                }
                last = Some(i);
                pos = i + 1;
            }
        }
    }
    for n in nots {
        if let Some(bad) = lines[pos.min(lines.len())..].iter().find(|l| l.contains(n)) {
            return Err(format!("CHECK-NOT {n:?} matched: {bad}"));
        }
    }
    Ok(())
}

fn run_case(run: &Run, case: &str) -> Result<String, String> {
    let module = irc_frontend::parse_module(case).map_err(|d| format!("parse errors: {d:?}"))?;
    let mut out = irc_ir::Module::default();
    for g in &module.graphs {
        out.graphs.push(match &run.pipeline {
            Some(p) => {
                let pm = irc_passes::manager::PassManager::parse(p).map_err(|e| e.to_string())?;
                pm.run(g).map_err(|e| e.to_string())?.graph
            }
            None => g.clone(),
        });
    }
    if run.emit != "graph" {
        let mut printed = String::new();
        for g in &out.graphs {
            let p = irc_lower::plan_and_lower(g, irc_lower::SourceInfo::default())
                .map_err(|e| e.to_string())?;
            if run.emit == "layout" {
                printed.push_str(&irc_kir::print_module(&p.kernels));
                continue;
            }
            let remarks: &[irc_fused::Remark] = if run.explain { &p.remarks } else { &[] };
            let text = irc_fused::print_with_remarks(&p.fused, remarks);
            if irc_fused::parse_module(&text).as_ref() != Ok(&p.fused) {
                return Err("the Fused IR does not re-parse to itself".into());
            }
            printed.push_str(&text);
        }
        return Ok(printed);
    }
    let printed = irc_ir::print_module(&out);
    let again = irc_frontend::parse_module(&printed).map(|m| irc_ir::print_module(&m));
    if again.as_deref() != Ok(printed.as_str()) {
        return Err("output does not re-parse to itself".into());
    }
    Ok(printed)
}

fn bless(case: &str, output: &str) -> String {
    let mut kept: Vec<&str> = case
        .lines()
        .filter(|l| {
            !l.trim_start().starts_with("// CHECK:")
                && !l.trim_start().starts_with("// CHECK-NEXT:")
        })
        .collect();
    while kept.last().is_some_and(|l| l.trim().is_empty()) {
        kept.pop();
    }
    let mut s = kept.join("\n");
    s.push('\n');
    for (i, l) in output.lines().enumerate() {
        let kind = if i == 0 { "CHECK:" } else { "CHECK-NEXT:" };
        s.push_str(&format!("// {kind} {}\n", l.trim()));
    }
    s
}

#[test]
fn filetests() {
    let bless_mode = std::env::var_os("IRC_BLESS").is_some();
    let mut failures = vec![];
    let mut count = 0;
    for path in files() {
        let text = std::fs::read_to_string(&path).expect("readable");
        let run = run_line(&path, &text);
        let cases: Vec<&str> = text.split(&format!("{SPLIT}\n")).collect();
        let mut blessed = vec![];
        for (i, case) in cases.iter().enumerate() {
            count += 1;
            let at = format!("{} case {}", path.display(), i + 1);
            if !case.lines().any(|l| l.trim().starts_with("/// Check that")) {
                failures.push(format!("{at}: no `/// Check that ...` line"));
            }
            match run_case(&run, case) {
                Err(e) => failures.push(format!("{at}: {e}")),
                Ok(out) if bless_mode => blessed.push(bless(case, &out)),
                Ok(out) => {
                    if let Err(e) = filecheck(&out, &checks(case)) {
                        failures.push(format!("{at}: {e}\noutput:\n{out}"));
                    }
                }
            }
        }
        if bless_mode && blessed.len() == cases.len() {
            std::fs::write(&path, blessed.join(&format!("{SPLIT}\n"))).expect("writable");
        }
    }
    assert!(count > 0, "no filetests found");
    assert!(
        failures.is_empty(),
        "{} of {count} filetest cases failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn checker_semantics() {
    let out = "a\nb\nc\n";
    assert!(filecheck(out, &[Check::Plain("a".into()), Check::Next("b".into())]).is_ok());
    assert!(filecheck(out, &[Check::Plain("a".into()), Check::Next("c".into())]).is_err());
    assert!(
        filecheck(
            out,
            &[
                Check::Plain("a".into()),
                Check::Not("b".into()),
                Check::Plain("c".into())
            ]
        )
        .is_err()
    );
    assert!(filecheck(out, &[Check::Not("z".into())]).is_ok());
    assert!(filecheck(out, &[Check::Plain("c".into()), Check::Plain("a".into())]).is_err());
}
