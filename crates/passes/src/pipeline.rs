//! The textual pipeline syntax, as MLIR's `--pass-pipeline`:
//!
//! ```text
//! pipeline := 'graph' '(' pass (',' pass)* ')'  |  pass (',' pass)*
//! pass     := NAME ('{' option (' ' | ',')* ... '}')?
//! option   := NAME '=' VALUE
//! ```
//!
//! The printed form (always anchored on `graph(...)`, options in the order written) parses
//! back to the same pipeline.

use crate::registry::{self, OptionKind};
use std::fmt;

/// A pipeline: passes in order, each with the options written for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pipeline {
    pub passes: Vec<PassSpec>,
}

/// One pass of a pipeline and its written options (validated against the registry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassSpec {
    pub name: String,
    pub options: Vec<(String, String)>,
}

/// A pipeline string that does not parse; `column` is 1-based.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("pass pipeline:{column}: {message}")]
pub struct PipelineError {
    pub column: usize,
    pub message: String,
}

impl fmt::Display for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("graph(")?;
        for (i, p) in self.passes.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&p.name)?;
            if !p.options.is_empty() {
                let opts: Vec<String> = p.options.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "{{{}}}", opts.join(" "))?;
            }
        }
        f.write_str(")")
    }
}

struct Cursor<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn err<T>(&self, at: usize, message: impl Into<String>) -> Result<T, PipelineError> {
        Err(PipelineError {
            column: at + 1,
            message: message.into(),
        })
    }
    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }
    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }
    fn word(&mut self, extra: &[u8]) -> (usize, String) {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || extra.contains(&c) {
                self.pos += 1;
            } else {
                break;
            }
        }
        (
            start,
            String::from_utf8_lossy(&self.s[start..self.pos]).into_owned(),
        )
    }
    fn expect(&mut self, c: u8) -> Result<(), PipelineError> {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            let found = self
                .peek()
                .map_or("the end".to_string(), |f| format!("'{}'", f as char));
            self.err(self.pos, format!("expected '{}', found {found}", c as char))
        }
    }
}

/// Parses a pipeline string, checking pass and option names and option values.
pub fn parse_pipeline(text: &str) -> Result<Pipeline, PipelineError> {
    let mut c = Cursor {
        s: text.as_bytes(),
        pos: 0,
    };
    c.skip_ws();
    let save = c.pos;
    let (_, w) = c.word(&[]);
    c.skip_ws();
    let anchored = w == "graph" && c.peek() == Some(b'(');
    if anchored {
        c.pos += 1;
    } else {
        c.pos = save;
    }
    let mut passes = Vec::new();
    loop {
        c.skip_ws();
        if anchored && c.peek() == Some(b')') && passes.is_empty() {
            break;
        }
        passes.push(parse_pass(&mut c)?);
        c.skip_ws();
        if c.peek() == Some(b',') {
            c.pos += 1;
            continue;
        }
        break;
    }
    if anchored {
        c.expect(b')')?;
    }
    c.skip_ws();
    if c.pos < c.s.len() {
        return c.err(c.pos, "unexpected text after the pipeline");
    }
    Ok(Pipeline { passes })
}

fn parse_pass(c: &mut Cursor) -> Result<PassSpec, PipelineError> {
    let (at, name) = c.word(&[]);
    if name.is_empty() {
        return c.err(at, "expected a pass name");
    }
    let Some(info) = registry::lookup(&name) else {
        let known: Vec<&str> = registry::all().iter().map(|p| p.info().name).collect();
        return c.err(
            at,
            format!("unknown pass '{name}'; known passes: {}", known.join(", ")),
        );
    };
    let info = info.info();
    let mut options: Vec<(String, String)> = Vec::new();
    c.skip_ws();
    if c.peek() == Some(b'{') {
        c.pos += 1;
        loop {
            while matches!(c.peek(), Some(b' ' | b',' | b'\t')) {
                c.pos += 1;
            }
            if c.peek() == Some(b'}') {
                c.pos += 1;
                break;
            }
            let (kat, key) = c.word(&[]);
            if key.is_empty() {
                return c.err(kat, "expected an option name or '}'");
            }
            let Some(spec) = info.options.iter().find(|o| o.name == key) else {
                let known: Vec<&str> = info.options.iter().map(|o| o.name).collect();
                let known = if known.is_empty() {
                    "it has no options".to_string()
                } else {
                    format!("it accepts {}", known.join(", "))
                };
                return c.err(
                    kat,
                    format!("unknown option '{key}' for pass '{name}'; {known}"),
                );
            };
            c.expect(b'=')?;
            c.skip_ws();
            let (vat, value) = c.word(b".");
            let ok = match spec.kind {
                OptionKind::Int => value.parse::<u64>().is_ok(),
                OptionKind::Bool => value == "true" || value == "false",
            };
            if !ok {
                return c.err(
                    vat,
                    format!(
                        "option '{key}' of pass '{name}' takes {}, got '{value}'",
                        spec.kind.describe()
                    ),
                );
            }
            if options.iter().any(|(k, _)| *k == key) {
                return c.err(kat, format!("option '{key}' given twice"));
            }
            options.push((key, value));
        }
    }
    Ok(PassSpec { name, options })
}

impl PassSpec {
    /// An option's value: the written one, else the registry's default.
    pub fn int(&self, name: &str) -> u64 {
        let written = self
            .options
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.parse().ok());
        written.unwrap_or_else(|| {
            registry::lookup(&self.name)
                .and_then(|p| p.info().options.iter().find(|o| o.name == name))
                .and_then(|o| o.default.parse().ok())
                .unwrap_or(0)
        })
    }
}
