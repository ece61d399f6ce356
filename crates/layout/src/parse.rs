//! The text form: a lexer and recursive-descent parser for CuTe notation and the expression
//! language of `irc layout` (grammar in the module docs of [`super`]).
//!
//! The printer is the `Display` implementations of the values; `parse(print(x)) == x`.

use super::core::Coord;
use super::error::{LayoutError, MAX_DEPTH, Result};

/// One token and the byte offset where it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Int(i64),
    Ident(String),
    Punct(u8),
    End,
}

/// A parsed expression; `at` is the byte offset of its first token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ast {
    /// An integer literal.
    Int { value: i64, at: usize },
    /// A tuple literal `(..)` or `n`, with an optional `:stride` part.
    Lit {
        shape: Coord,
        stride: Option<Coord>,
        at: usize,
    },
    /// `name(args)` or a bare `name`.
    Call {
        name: String,
        args: Vec<Ast>,
        at: usize,
    },
    /// `target(args)`: evaluation or slicing.
    Apply {
        target: Box<Ast>,
        args: Vec<Ast>,
        at: usize,
    },
    /// `[t0, t1, ...]`.
    Tiler { items: Vec<Ast>, at: usize },
    /// `_`.
    All { at: usize },
    /// `outer o [offset o] inner` with a layout (or any non-swizzle expression) outside.
    Compose {
        outer: Box<Ast>,
        offset: i64,
        inner: Box<Ast>,
        at: usize,
    },
    /// `Sw<b,m,s>`, optionally composed: `Sw<b,m,s> o [offset o] inner`.
    Swizzle {
        bits: i64,
        base: i64,
        shift: i64,
        then: Option<(i64, Box<Ast>)>,
        at: usize,
    },
}

/// Parse one whole expression.
pub(crate) fn parse_expr(src: &str) -> Result<Ast> {
    let mut p = Parser {
        toks: lex(src)?,
        pos: 0,
        depth: 0,
    };
    let ast = p.expr()?;
    match p.peek() {
        Tok::End => Ok(ast),
        _ => Err(p.error("unexpected text after the expression")),
    }
}

fn lex(src: &str) -> Result<Vec<(Tok, usize)>> {
    let bytes = src.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        } else if c.is_ascii_digit() {
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let value = src[start..i]
                .parse::<i64>()
                .map_err(|_| LayoutError::Parse {
                    offset: start,
                    message: format!("integer {} does not fit in 64 bits", &src[start..i]),
                })?;
            toks.push((Tok::Int(value), start));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            toks.push((Tok::Ident(src[start..i].to_string()), start));
        } else if b"()[],:<>-@".contains(&c) {
            i += 1;
            toks.push((Tok::Punct(c), start));
        } else {
            let ch = src[start..].chars().next().unwrap_or('?');
            return Err(LayoutError::Parse {
                offset: start,
                message: format!("unexpected character `{ch}`"),
            });
        }
    }
    toks.push((Tok::End, src.len()));
    Ok(toks)
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)].0
    }

    fn offset(&self) -> usize {
        self.toks[self.pos.min(self.toks.len() - 1)].1
    }

    fn bump(&mut self) -> Tok {
        let t = self.peek().clone();
        self.pos = (self.pos + 1).min(self.toks.len() - 1);
        t
    }

    fn error(&self, message: &str) -> LayoutError {
        let found = match self.peek() {
            Tok::Int(v) => format!("`{v}`"),
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Punct(c) => format!("`{}`", *c as char),
            Tok::End => "the end of the expression".to_string(),
        };
        LayoutError::Parse {
            offset: self.offset(),
            message: format!("{message}, found {found}"),
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if *self.peek() == Tok::Punct(c) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> Result<()> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.error(&format!("expected `{}`", c as char)))
        }
    }

    /// Enter one nesting level, failing past [`MAX_DEPTH`].
    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(LayoutError::Parse {
                offset: self.offset(),
                message: format!("nesting deeper than {MAX_DEPTH} levels"),
            });
        }
        Ok(())
    }

    /// expr := primary ( '(' args ')' | 'o' [INT 'o'] primary )*
    ///
    /// `A o [offset o] B` composes (a swizzle's own `o` is parsed by [`Parser::swizzle`]); a
    /// postfix application after it applies to the composed layout, as for swizzles.
    fn expr(&mut self) -> Result<Ast> {
        self.enter()?;
        let mut ast = self.primary()?;
        loop {
            let at = self.offset();
            if *self.peek() == Tok::Punct(b'(') {
                self.bump();
                let args = self.list(b')')?;
                ast = Ast::Apply {
                    target: Box::new(ast),
                    args,
                    at,
                };
            } else if *self.peek() == Tok::Ident("o".into()) && !matches!(ast, Ast::Swizzle { .. })
            {
                self.bump();
                let offset = self.composed_offset();
                let inner = self.primary()?;
                ast = Ast::Compose {
                    outer: Box::new(ast),
                    offset,
                    inner: Box::new(inner),
                    at,
                };
            } else {
                break;
            }
        }
        self.depth -= 1;
        Ok(ast)
    }

    /// The `INT o` of `A o INT o B`, or 0 when there is none.
    fn composed_offset(&mut self) -> i64 {
        if let (Tok::Int(v), Some((Tok::Ident(o), _))) =
            (self.peek().clone(), self.toks.get(self.pos + 1))
        {
            if o == "o" {
                self.pos += 2;
                return v;
            }
        }
        0
    }

    fn primary(&mut self) -> Result<Ast> {
        let at = self.offset();
        match self.peek().clone() {
            Tok::Int(_) | Tok::Punct(b'-') => {
                let shape = self.leaf()?;
                if self.eat(b':') {
                    let stride = self.lit()?;
                    return Ok(Ast::Lit {
                        shape,
                        stride: Some(stride),
                        at,
                    });
                }
                match shape {
                    Coord::Int(value) => Ok(Ast::Int { value, at }),
                    shape => Ok(Ast::Lit {
                        shape,
                        stride: None,
                        at,
                    }),
                }
            }
            Tok::Punct(b'(') => {
                let shape = self.lit()?;
                let stride = if self.eat(b':') {
                    Some(self.lit()?)
                } else {
                    None
                };
                Ok(Ast::Lit { shape, stride, at })
            }
            Tok::Punct(b'[') => {
                self.bump();
                Ok(Ast::Tiler {
                    items: self.list(b']')?,
                    at,
                })
            }
            Tok::Ident(name) if name == "_" => {
                self.bump();
                Ok(Ast::All { at })
            }
            Tok::Ident(name) if name == "Sw" => self.swizzle(),
            Tok::Ident(name) => {
                self.bump();
                let args = if self.eat(b'(') {
                    self.list(b')')?
                } else {
                    Vec::new()
                };
                Ok(Ast::Call { name, args, at })
            }
            _ => Err(self.error("expected a layout, an integer, `_`, `[` or a function call")),
        }
    }

    /// Comma-separated expressions up to `close` (the opener is already consumed).
    fn list(&mut self, close: u8) -> Result<Vec<Ast>> {
        let mut items = Vec::new();
        if self.eat(close) {
            return Ok(items);
        }
        loop {
            items.push(self.expr()?);
            if self.eat(close) {
                return Ok(items);
            }
            self.expect(b',')
                .map_err(|_| self.error(&format!("expected `,` or `{}`", close as char)))?;
        }
    }

    /// An optionally negative integer.
    fn int(&mut self) -> Result<i64> {
        let negative = self.eat(b'-');
        let Tok::Int(v) = *self.peek() else {
            return Err(self.error("expected an integer"));
        };
        self.bump();
        Ok(if negative { -v } else { v })
    }

    /// lit := int | '_' | '(' [lit (',' lit)*] ')'
    fn lit(&mut self) -> Result<Coord> {
        match self.peek() {
            Tok::Ident(n) if n == "_" => {
                self.bump();
                Ok(Coord::All)
            }
            Tok::Punct(b'(') => {
                self.enter()?;
                self.bump();
                let mut items = Vec::new();
                if !self.eat(b')') {
                    loop {
                        items.push(self.lit()?);
                        if self.eat(b')') {
                            break;
                        }
                        self.expect(b',')
                            .map_err(|_| self.error("expected `,` or `)` in a tuple"))?;
                    }
                }
                self.depth -= 1;
                Ok(Coord::Tuple(items))
            }
            _ => self.leaf(),
        }
    }

    /// leaf := int ('@' int)*: an integer, or a scaled basis element `v@i@j` (= `v * E<j,i>`).
    fn leaf(&mut self) -> Result<Coord> {
        let v = self.int()?;
        let mut modes = Vec::new();
        while self.eat(b'@') {
            let m = self.int()?;
            let m =
                usize::try_from(m).map_err(|_| self.error("a basis mode must be non-negative"))?;
            modes.push(m);
        }
        if modes.is_empty() {
            return Ok(Coord::Int(v));
        }
        modes.reverse();
        Ok(Coord::Basis(v, modes))
    }

    /// `Sw<b,m,s>` [`o` [offset `o`] primary]
    fn swizzle(&mut self) -> Result<Ast> {
        let at = self.offset();
        self.bump();
        self.expect(b'<')?;
        let bits = self.int()?;
        self.expect(b',')?;
        let base = self.int()?;
        self.expect(b',')?;
        let shift = self.int()?;
        self.expect(b'>')?;
        if *self.peek() != Tok::Ident("o".into()) {
            return Ok(Ast::Swizzle {
                bits,
                base,
                shift,
                then: None,
                at,
            });
        }
        self.bump();
        self.enter()?;
        let offset = self.composed_offset();
        let inner = self.primary()?;
        self.depth -= 1;
        Ok(Ast::Swizzle {
            bits,
            base,
            shift,
            then: Some((offset, Box::new(inner))),
            at,
        })
    }
}
