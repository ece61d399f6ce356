//! The lexer (logos): source text to tokens with byte spans.

use irc_ir::{Diagnostic, Span};
use logos::Logos;
use std::fmt;

/// A token of the graph IR text form.
#[derive(Logos, Clone, Copy, Debug, PartialEq, Eq)]
#[logos(skip r"[ \t\r\n\f]+")]
#[logos(skip(r"//[^\n]*", allow_greedy = true))]
pub enum Token<'input> {
    #[token("graph")]
    Graph,
    #[token("return")]
    Return,
    #[token("loc")]
    Loc,
    #[token("true")]
    True,
    #[token("false")]
    False,
    /// `%name =`: the start of a statement that defines `%name`. Lexing the `=` with the name
    /// keeps the grammar LR(1): statements have no terminator, and an op's operand list is
    /// otherwise indistinguishable from the next statement's result.
    #[regex(r"%[A-Za-z0-9_.$\-]+[ \t\r\n]*=", |lex| def_name(lex.slice()))]
    Def(&'input str),
    /// `%name` (the slice without the `%`).
    #[regex(r"%[A-Za-z0-9_.$\-]+", |lex| &lex.slice()[1..])]
    Value(&'input str),
    /// `@name` (the slice without the `@`).
    #[regex(r"@[A-Za-z0-9_.$\-]+", |lex| &lex.slice()[1..])]
    Symbol(&'input str),
    #[regex(r"[A-Za-z_][A-Za-z0-9_]*")]
    Ident(&'input str),
    #[regex(r"-?[0-9]+")]
    Int(&'input str),
    #[regex(r"-?[0-9]+\.[0-9]*([eE][+-]?[0-9]+)?")]
    #[regex(r"-?[0-9]+[eE][+-]?[0-9]+")]
    #[token("-inf")]
    Float(&'input str),
    /// A string literal, with its quotes.
    #[regex(r#""([^"\\\n]|\\.)*""#)]
    Str(&'input str),
    /// `tensor<...>`: the whole type, parsed by [`crate::types::parse_tensor_type`].
    #[regex(r"tensor<[^>\n]*>")]
    TensorType(&'input str),
    #[token("(")]
    LParen,
    #[token(")")]
    RParen,
    #[token("{")]
    LBrace,
    #[token("}")]
    RBrace,
    #[token("[")]
    LBracket,
    #[token("]")]
    RBracket,
    #[token(",")]
    Comma,
    #[token(":")]
    Colon,
    #[token("=")]
    Equals,
    #[token("->")]
    Arrow,
}

fn def_name(slice: &str) -> &str {
    let body = &slice[1..];
    body.trim_end_matches('=').trim_end()
}

impl fmt::Display for Token<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Graph => f.write_str("`graph`"),
            Token::Return => f.write_str("`return`"),
            Token::Loc => f.write_str("`loc`"),
            Token::True => f.write_str("`true`"),
            Token::False => f.write_str("`false`"),
            Token::Def(n) => write!(f, "`%{n} =`"),
            Token::Value(n) => write!(f, "`%{n}`"),
            Token::Symbol(n) => write!(f, "`@{n}`"),
            Token::Ident(s)
            | Token::Int(s)
            | Token::Float(s)
            | Token::Str(s)
            | Token::TensorType(s) => {
                write!(f, "`{s}`")
            }
            Token::LParen => f.write_str("`(`"),
            Token::RParen => f.write_str("`)`"),
            Token::LBrace => f.write_str("`{`"),
            Token::RBrace => f.write_str("`}`"),
            Token::LBracket => f.write_str("`[`"),
            Token::RBracket => f.write_str("`]`"),
            Token::Comma => f.write_str("`,`"),
            Token::Colon => f.write_str("`:`"),
            Token::Equals => f.write_str("`=`"),
            Token::Arrow => f.write_str("`->`"),
        }
    }
}

/// A token and its byte range.
pub type Spanned<'input> = (usize, Token<'input>, usize);

/// Deepest nesting of brackets the parser accepts; deeper input is rejected up front so that
/// nothing downstream recurses without bound.
pub const MAX_NESTING: usize = 64;

/// Lexes `src`; spans are offset by `base`. Reports every unlexable character run, and input
/// nested deeper than [`MAX_NESTING`].
pub fn lex(src: &str, base: usize) -> Result<Vec<Spanned<'_>>, Vec<Diagnostic>> {
    let mut tokens = Vec::new();
    let mut diags: Vec<Diagnostic> = Vec::new();
    let mut depth = 0usize;
    for (tok, range) in Token::lexer(src).spanned() {
        let span = Span::new(base + range.start, base + range.end);
        match tok {
            Ok(tok) => {
                match tok {
                    Token::LParen | Token::LBrace | Token::LBracket => depth += 1,
                    Token::RParen | Token::RBrace | Token::RBracket => {
                        depth = depth.saturating_sub(1)
                    }
                    _ => {}
                }
                if depth > MAX_NESTING {
                    diags.push(Diagnostic::error(
                        Some(span),
                        format!("brackets nested deeper than {MAX_NESTING} levels"),
                    ));
                    return Err(diags);
                }
                tokens.push((base + range.start, tok, base + range.end));
            }
            Err(()) => {
                // Merge adjacent bad characters into one diagnostic.
                if let Some(last) = diags.last_mut()
                    && last
                        .span
                        .is_some_and(|s| s.end as usize == span.start as usize)
                {
                    last.span = last.span.map(|s| Span { end: span.end, ..s });
                    continue;
                }
                diags.push(Diagnostic::error(Some(span), describe_bad(&src[range])));
            }
        }
        if diags.len() >= crate::MAX_ERRORS {
            break;
        }
    }
    if diags.is_empty() {
        Ok(tokens)
    } else {
        Err(diags)
    }
}

fn describe_bad(text: &str) -> String {
    if text.starts_with("tensor<") {
        "unterminated tensor type: expected `>` on the same line".to_string()
    } else if text.starts_with('"') {
        "unterminated string literal".to_string()
    } else if text.starts_with('%') || text.starts_with('@') {
        format!("expected a name after `{}`", &text[..1])
    } else {
        match text.chars().next() {
            Some(c) if !c.is_control() && !c.is_whitespace() => {
                format!("unexpected character `{c}`")
            }
            Some(c) => format!("unexpected character U+{:04X}", c as u32),
            None => "unexpected input".to_string(),
        }
    }
}
