//! The frontend: text to a verified [`irc_ir::Module`].
//!
//! [`lexer`] (logos) turns text into tokens, the lalrpop grammar (`grammar.lalrpop`) into a
//! syntax tree ([`ast`]) with a span on every token, statement and attribute, and [`lower`]
//! resolves names and types each statement. The result is verified before it is returned.
//!
//! The parser never panics. Errors are [`Diagnostic`]s with byte spans; several independent
//! errors in one file are reported together (the grammar recovers at statement boundaries).
//!
//! ```
//! let m = irc_frontend::parse_module("graph @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %y = exp %x\n  return %y\n}\n").unwrap();
//! assert_eq!(irc_ir::print_module(&m), "graph @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %y = exp %x : tensor<4xf32>\n  return %y\n}\n");
//! ```

pub mod ast;
pub mod lexer;
mod literal;
pub mod lower;
pub mod types;

lalrpop_util::lalrpop_mod!(
    #[allow(clippy::all, unused_parens)]
    grammar
);

use irc_ir::{Diagnostic, Module, Span};
use lalrpop_util::ParseError;
use lexer::Token;

/// The most diagnostics reported for one input.
pub const MAX_ERRORS: usize = 50;

/// The grammar's source text, for documentation.
pub const GRAMMAR: &str = include_str!("grammar.lalrpop");

/// Parses, types and verifies a module.
pub fn parse_module(src: &str) -> Result<Module, Vec<Diagnostic>> {
    parse_module_at(src, 0)
}

/// [`parse_module`] for a piece of a larger text that starts at byte `base` of it; every span
/// is relative to the larger text (as `--split-input-file` needs).
pub fn parse_module_at(src: &str, base: usize) -> Result<Module, Vec<Diagnostic>> {
    let tokens = lexer::lex(src, base)?;
    let end = base + src.len();
    let mut diags = Vec::new();
    let mut recovered = Vec::new();
    let parsed =
        grammar::ModuleParser::new().parse(&mut diags, &mut recovered, tokens.into_iter().map(Ok));
    let mut syntax: Vec<Diagnostic> = recovered
        .into_iter()
        .map(|r| parse_error(r.error, end))
        .collect();
    let graphs = match parsed {
        Ok(graphs) => graphs,
        Err(e) => {
            syntax.push(parse_error(e, end));
            Vec::new()
        }
    };
    syntax.extend(diags);
    let mut diags = syntax;
    let module = lower::lower_module(graphs, &mut diags);
    if diags.is_empty()
        && let Err(v) = irc_ir::verify_module(&module)
    {
        diags = v;
    }
    if diags.is_empty() {
        Ok(module)
    } else {
        diags.sort_by_key(|d| d.span.map(|s| s.start));
        diags.truncate(MAX_ERRORS);
        Err(diags)
    }
}

fn parse_error(e: ParseError<usize, Token<'_>, ()>, end: usize) -> Diagnostic {
    match e {
        ParseError::UnrecognizedToken {
            token: (l, tok, r),
            expected,
        } => Diagnostic::error(
            Some(Span::new(l, r)),
            format!("expected {}, found {tok}", expected_list(&expected)),
        ),
        ParseError::UnrecognizedEof { expected, .. } => Diagnostic::error(
            Some(Span::new(end, end)),
            format!(
                "unexpected end of input; expected {}",
                expected_list(&expected)
            ),
        ),
        ParseError::ExtraToken { token: (l, tok, r) } => {
            Diagnostic::error(Some(Span::new(l, r)), format!("unexpected {tok}"))
        }
        ParseError::InvalidToken { location } => {
            Diagnostic::error(Some(Span::new(location, location + 1)), "invalid token")
        }
        ParseError::User { .. } => Diagnostic::error(None, "parse error"),
    }
}

/// `"(", "%name"` as written in the grammar to "`(` or `%name`".
fn expected_list(expected: &[String]) -> String {
    let names: Vec<String> = expected
        .iter()
        .map(|e| {
            let bare = e.trim_matches('"');
            if bare.chars().all(|c| c.is_ascii_alphabetic() || c == ' ') && bare.contains(' ')
                || bare == "identifier"
                || bare == "integer"
                || bare == "float"
                || bare == "string"
            {
                bare.to_string()
            } else {
                format!("`{bare}`")
            }
        })
        .collect();
    match names.as_slice() {
        [] => "nothing more".to_string(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}
