//! Rendering located diagnostics with codespan-reporting.
//!
//! Each diagnostic prints as `file:line:col: error: message` (codespan's short style), then the
//! source line with a caret under the span (codespan's rich style, whose own header line is
//! dropped because the short line already says it).

use codespan_reporting::diagnostic::{Diagnostic as CsDiagnostic, Label, Severity};
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term::{self, Config, DisplayStyle};
use irc_ir::Diagnostic;

/// A named source text that diagnostics point into.
pub struct Source<'a> {
    pub name: &'a str,
    pub text: &'a str,
}

impl Source<'_> {
    /// Renders `d` as `file:line:col: severity: message` plus the source line and a caret.
    pub fn render(&self, d: &Diagnostic, severity: Severity) -> String {
        let file = SimpleFile::new(self.name, self.text);
        let clamp = |r: std::ops::Range<usize>| {
            let end = r.end.min(self.text.len());
            let start = r.start.min(end);
            // Never split a UTF-8 character.
            let start = (0..=start)
                .rev()
                .find(|&i| self.text.is_char_boundary(i))
                .unwrap_or(0);
            let end = (end..=self.text.len())
                .find(|&i| self.text.is_char_boundary(i))
                .unwrap_or(self.text.len());
            start..end
        };
        let mut labels: Vec<Label<()>> = Vec::new();
        if let Some(span) = d.span {
            labels.push(Label::primary((), clamp(span.range())));
        }
        for (span, note) in &d.notes {
            if let Some(span) = span {
                labels.push(Label::secondary((), clamp(span.range())).with_message(note));
            }
        }
        let notes: Vec<String> = d
            .notes
            .iter()
            .filter(|(s, _)| s.is_none())
            .map(|(_, n)| n.clone())
            .collect();
        let header = CsDiagnostic::new(severity)
            .with_message(&d.message)
            .with_labels(labels.iter().take(1).cloned().collect());
        let short = Config {
            display_style: DisplayStyle::Short,
            ..Config::default()
        };
        let mut out = term::emit_into_string(&short, &file, &header)
            .unwrap_or_else(|_| format!("{}: error: {}\n", self.name, d.message));
        if !labels.is_empty() {
            let body = CsDiagnostic::new(severity)
                .with_labels(labels)
                .with_notes(notes);
            if let Ok(rich) = term::emit_into_string(&Config::default(), &file, &body) {
                out.extend(rich.lines().skip(1).map(|l| format!("{l}\n")));
            }
        }
        out
    }
}

/// Renders all of `diags` as errors.
pub fn render_errors(src: &Source<'_>, diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(|d| src.render(d, Severity::Error))
        .collect()
}

/// The 1-based line of byte offset `pos`.
pub fn line_of(text: &str, pos: usize) -> usize {
    text.as_bytes()[..pos.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}
