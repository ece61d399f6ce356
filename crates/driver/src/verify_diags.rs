//! `--verify-diagnostics`: checks the diagnostics a file produces against the expectations
//! written in its comments, as `mlir-opt` does.
//!
//! An expectation is a comment `// expected-error {{text}}` (also `expected-note`), optionally
//! with a line designator: `@+N` / `@-N` (N lines below / above the comment), `@above`,
//! `@below`; without one it refers to the comment's own line. A diagnostic matches an
//! expectation on its line whose text is a substring of its message. Every error must be
//! expected and every expectation met. Notes are only checked where `expected-note` is written.

use crate::diag::line_of;
use irc_ir::{Diagnostic, Span};

#[derive(Clone, Debug, PartialEq)]
pub struct Expectation {
    pub kind: Kind,
    /// 1-based line the diagnostic is expected on.
    pub line: usize,
    pub text: String,
    /// Where the expectation is written.
    pub span: Span,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Error,
    Note,
}

/// Reads the expectations in `text[range]`; malformed ones are reported as errors.
pub fn parse_expectations(
    text: &str,
    base: usize,
    chunk: &str,
) -> Result<Vec<Expectation>, Vec<Diagnostic>> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    let mut offset = base;
    for line in chunk.split_inclusive('\n') {
        let line_start = offset;
        offset += line.len();
        let Some(comment) = line.find("//") else {
            continue;
        };
        let rest = &line[comment..];
        for (kind, key) in [
            (Kind::Error, "expected-error"),
            (Kind::Note, "expected-note"),
        ] {
            let Some(at) = rest.find(key) else { continue };
            let start = line_start + comment + at;
            let here = line_of(text, start);
            let after = rest[at + key.len()..].trim_start();
            let span = Span::new(start, start + key.len());
            match parse_directive(after, here) {
                Some((line, msg)) => out.push(Expectation {
                    kind,
                    line,
                    text: msg,
                    span,
                }),
                None => errors.push(Diagnostic::error(
                    Some(span),
                    format!(
                        "malformed {key}: expected `{key} [@+N|@-N|@above|@below] {{{{message}}}}`"
                    ),
                )),
            }
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

fn parse_directive(s: &str, here: usize) -> Option<(usize, String)> {
    let (line, rest) = match s.strip_prefix('@') {
        Some(d) => {
            let end = d
                .find(|c: char| c.is_whitespace() || c == '{')
                .unwrap_or(d.len());
            let line = match &d[..end] {
                "above" => here.checked_sub(1)?,
                "below" => here + 1,
                n if n.starts_with('+') => here.checked_add(n[1..].parse().ok()?)?,
                n if n.starts_with('-') => here.checked_sub(n[1..].parse().ok()?)?,
                _ => return None,
            };
            (line, d[end..].trim_start())
        }
        None => (here, s),
    };
    let body = rest.strip_prefix("{{")?;
    let close = body.find("}}")?;
    Some((line, body[..close].to_string()))
}

/// Matches `produced` against `expected`; returns the problems (empty when all is as
/// expected), each located at the diagnostic or the expectation.
pub fn check(text: &str, produced: &[Diagnostic], expected: &[Expectation]) -> Vec<Diagnostic> {
    let mut met = vec![false; expected.len()];
    let mut problems = Vec::new();
    let mut matches = |kind: Kind, span: Option<Span>, message: &str| -> bool {
        let line = span.map(|s| line_of(text, s.start as usize));
        let found = expected.iter().enumerate().find(|(i, e)| {
            !met[*i] && e.kind == kind && Some(e.line) == line && message.contains(&e.text)
        });
        if let Some((i, _)) = found {
            met[i] = true;
        }
        found.is_some()
    };
    for d in produced {
        if !matches(Kind::Error, d.span, &d.message) {
            problems.push(Diagnostic::error(
                d.span,
                format!("unexpected error: {}", d.message),
            ));
        }
        for (span, note) in &d.notes {
            matches(Kind::Note, *span, note);
        }
    }
    for (e, met) in expected.iter().zip(met) {
        if !met {
            let kind = if e.kind == Kind::Error {
                "error"
            } else {
                "note"
            };
            problems.push(Diagnostic::error(
                Some(e.span),
                format!(
                    "expected {kind} \"{}\" on line {} was not produced",
                    e.text, e.line
                ),
            ));
        }
    }
    problems
}
