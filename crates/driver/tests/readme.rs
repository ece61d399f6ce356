//! The README cannot go stale: every command in its code blocks runs, and where the README shows
//! the output, the output must match.
//!
//! - A ```` ```console ```` block is a session: `$ command` lines, each followed by the output it
//!   shows (stdout, then stderr). A line `...` in the shown output matches any lines; trailing
//!   spaces and trailing blank lines do not count. A command with no shown output only has to succeed.
//! - A ```` ```sh ```` block is commands only (`#` comments dropped): each has to succeed.
//! - An HTML comment on the line before a block says when it runs:
//!   `<!-- readme-test: skip REASON -->` (never: installs, long runs, ...),
//!   `<!-- readme-test: gpu -->` (only with `IRC_GPU_TESTS=1`),
//!   `<!-- readme-test: mlir -->` (only with the `mlir` feature),
//!   `<!-- readme-test: nvrtc -->` (only where NVRTC and the CUDA headers are found).
//!   Any other block (a graph IR listing, a table) is not a command block and is not run.
//!
//! Commands run under `bash` in a scratch directory that links to the repository's top-level
//! folders, with the `irc` under test first on `PATH`; `cargo run --release --` is read as `irc`.

mod common;
use common::{irc, root};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, PartialEq)]
enum When {
    Always,
    Skip,
    Gpu,
    Mlir,
    Nvrtc,
}

#[derive(Debug)]
struct Step {
    line: usize,
    command: String,
    /// `None`: only check the command succeeds.
    expected: Option<Vec<String>>,
}

#[derive(Debug)]
struct Block {
    line: usize,
    when: When,
    steps: Vec<Step>,
}

fn directive(prev: &str, line: usize) -> When {
    let Some(rest) = prev.trim().strip_prefix("<!-- readme-test:") else {
        return When::Always;
    };
    let word = rest.split_whitespace().next().unwrap_or_default();
    match word {
        "skip" => When::Skip,
        "gpu" => When::Gpu,
        "mlir" => When::Mlir,
        "nvrtc" => When::Nvrtc,
        other => panic!("README.md:{line}: unknown readme-test directive {other:?}"),
    }
}

/// The command blocks of a Markdown text.
fn blocks(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_start();
        let lang = fence.strip_prefix("```").map(str::trim);
        let Some(lang) = lang.filter(|l| *l == "console" || *l == "sh") else {
            i += 1;
            continue;
        };
        let start = i + 1;
        let when = directive(if i > 0 { lines[i - 1] } else { "" }, start);
        let mut body = Vec::new();
        i += 1;
        while i < lines.len() && !lines[i].trim_start().starts_with("```") {
            body.push((i + 1, lines[i]));
            i += 1;
        }
        i += 1;
        let mut steps: Vec<Step> = Vec::new();
        if lang == "console" {
            for (n, l) in body {
                if let Some(cmd) = l.strip_prefix("$ ") {
                    steps.push(Step {
                        line: n,
                        command: cmd.to_string(),
                        expected: Some(Vec::new()),
                    });
                } else if let Some(last) = steps.last_mut() {
                    last.expected.as_mut().expect("console").push(l.to_string());
                } else {
                    panic!("README.md:{n}: console output before any `$ ` command");
                }
            }
            for s in &mut steps {
                if s.expected.as_ref().is_some_and(Vec::is_empty) {
                    s.expected = None;
                }
            }
        } else {
            for (n, l) in body {
                let cmd = l.split(" #").next().unwrap_or_default().trim();
                if !cmd.is_empty() && !cmd.starts_with('#') {
                    steps.push(Step {
                        line: n,
                        command: cmd.to_string(),
                        expected: None,
                    });
                }
            }
        }
        out.push(Block {
            line: start,
            when,
            steps,
        });
    }
    out
}

/// Whether `actual` shows `expected`, where a `...` line matches any run of lines.
fn matches(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((e, rest)) if e.trim() == "..." => {
            (0..=actual.len()).any(|k| matches(rest, &actual[k..]))
        }
        Some((e, rest)) => actual
            .split_first()
            .is_some_and(|(a, more)| a.trim_end() == e.trim_end() && matches(rest, more)),
    }
}

fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("irc-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let repo = root().canonicalize().unwrap();
    for e in std::fs::read_dir(&repo).unwrap().flatten() {
        let name = e.file_name();
        if name.to_string_lossy().starts_with('.') && name != ".venv-cuda" {
            continue;
        }
        #[cfg(unix)]
        let _ = std::os::unix::fs::symlink(e.path(), d.join(&name));
    }
    d
}

fn nvrtc_found() -> bool {
    irc(&["--emit=ptx", "--arch=sm_80", "examples/small/gemm.ir"])
        .status
        .success()
}

#[test]
fn readme_commands_run_and_show_their_output() {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let all = blocks(&text);
    assert!(
        all.iter().filter(|b| b.when == When::Always).count() >= 5,
        "the README has command blocks: {all:#?}"
    );
    let dir = scratch();
    let bin = Path::new(env!("CARGO_BIN_EXE_irc")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let gpu = std::env::var("IRC_GPU_TESTS").is_ok_and(|v| v == "1");
    let nvrtc = nvrtc_found();
    let mut failures = Vec::new();
    let mut ran = 0;
    for b in &all {
        let run = match b.when {
            When::Always => true,
            When::Skip => false,
            When::Gpu => gpu,
            When::Mlir => cfg!(feature = "mlir"),
            When::Nvrtc => nvrtc,
        };
        if !run {
            eprintln!("README.md:{}: block skipped ({:?})", b.line, b.when);
            continue;
        }
        for s in &b.steps {
            let cmd = s.command.replace("cargo run --release --", "irc");
            let o = Command::new("bash")
                .args(["-c", &cmd])
                .current_dir(&dir)
                .env("PATH", &path)
                .output()
                .expect("bash runs");
            ran += 1;
            let stdout = String::from_utf8_lossy(&o.stdout);
            let stderr = String::from_utf8_lossy(&o.stderr);
            let both = format!("{stdout}{stderr}");
            let mut actual: Vec<&str> = both.lines().collect();
            while actual.last().is_some_and(|l| l.trim().is_empty()) {
                actual.pop();
            }
            match &s.expected {
                Some(e) if !matches(e, &actual) => failures.push(format!(
                    "README.md:{}: `{}` shows\n{}\nbut printed\n{}",
                    s.line,
                    s.command,
                    e.join("\n"),
                    both
                )),
                None if !o.status.success() => failures.push(format!(
                    "README.md:{}: `{}` failed ({}):\n{}",
                    s.line, s.command, o.status, both
                )),
                _ => {}
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "{} README command(s) out of date:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(ran > 0);
}

/// The extraction itself, on a small Markdown text.
#[test]
fn blocks_and_directives_are_read() {
    let md = "x\n```console\n$ irc a.ir\nout\n...\n$ irc b.ir\n```\n<!-- readme-test: skip installs -->\n```sh\napt-get install x  # comment\n# only a comment\n```\n```\ngraph @g\n```\n";
    let b = blocks(md);
    assert_eq!(b.len(), 2);
    assert_eq!(b[0].when, When::Always);
    assert_eq!(b[0].steps.len(), 2);
    assert_eq!(
        b[0].steps[0].expected.as_deref(),
        Some(&["out".to_string(), "...".to_string()][..])
    );
    assert!(b[0].steps[1].expected.is_none());
    assert_eq!(b[1].when, When::Skip);
    assert_eq!(b[1].steps.len(), 1);
    assert_eq!(b[1].steps[0].command, "apt-get install x");
    assert!(matches(
        &["a".into(), "...".into(), "z".into()],
        &["a", "b", "c", "z"]
    ));
    assert!(!matches(&["a".into()], &["a", "b"]));
}
