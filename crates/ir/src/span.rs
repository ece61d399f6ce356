//! Source positions and diagnostics.
//!
//! The IR knows byte ranges into the text it was parsed from, nothing about files: rendering a
//! diagnostic against a file is the driver's job.

use std::fmt;

/// A half-open byte range `[start, end)` into the source text a graph was parsed from.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        let clamp = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
        Span {
            start: clamp(start),
            end: clamp(end.max(start)),
        }
    }

    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// Upstream provenance written `loc("file.py":41:9)`: where the op came from in the program
/// that produced the graph. Kept through every pass and printed into generated kernels.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Provenance {
    pub file: String,
    pub line: u32,
    pub col: u32,
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "loc({}:{}:{})", quote(&self.file), self.line, self.col)
    }
}

/// Writes `s` as a double-quoted string literal of the text form.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A located error (or note) about a graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Where the problem is; `None` for graphs built without source text.
    pub span: Option<Span>,
    pub message: String,
    /// Secondary locations with a message each (`previous definition is here`).
    pub notes: Vec<(Option<Span>, String)>,
}

impl Diagnostic {
    pub fn error(span: Option<Span>, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            span,
            message: message.into(),
            notes: Vec::new(),
        }
    }

    pub fn with_note(mut self, span: Option<Span>, message: impl Into<String>) -> Diagnostic {
        self.notes.push((span, message.into()));
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
