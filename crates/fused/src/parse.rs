//! Reads the text [`print_module`](crate::print_module) writes. Line-oriented: one statement per
//! line, `//` comments and blank lines skipped. Errors carry the line and column. The result is
//! not verified; [`verify_module`](crate::verify_module) does that.

use crate::{Buffer, BufferKind, Group, Module, OpStmt, Stmt};
use irc_ir::{Attr, Attrs, DType, OpKind, TensorType};
use std::fmt;

/// A syntax error at `line:col` (1-based).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub struct ParseError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.message)
    }
}

type R<T> = Result<T, ParseError>;

/// A cursor over one line.
struct Cur<'a> {
    s: &'a str,
    pos: usize,
    line: usize,
}

impl<'a> Cur<'a> {
    fn err<T>(&self, message: impl Into<String>) -> R<T> {
        Err(ParseError {
            line: self.line,
            col: self.s[..self.pos].chars().count() + 1,
            message: message.into(),
        })
    }

    fn rest(&self) -> &'a str {
        &self.s[self.pos..]
    }

    fn ws(&mut self) {
        let r = self.rest();
        self.pos += r.len() - r.trim_start().len();
    }

    fn eat(&mut self, lit: &str) -> bool {
        self.ws();
        if self.rest().starts_with(lit) {
            self.pos += lit.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, lit: &str) -> R<()> {
        if self.eat(lit) {
            Ok(())
        } else {
            self.err(format!("expected `{lit}`"))
        }
    }

    fn at_end(&mut self) -> bool {
        self.ws();
        self.rest().is_empty()
    }

    fn end(&mut self) -> R<()> {
        if self.at_end() {
            Ok(())
        } else {
            self.err(format!("unexpected `{}`", self.rest()))
        }
    }

    /// A run of name characters.
    fn word(&mut self) -> &'a str {
        self.ws();
        let r = self.rest();
        let n = r
            .find(|c: char| !(c.is_ascii_alphanumeric() || "_.$-+".contains(c)))
            .unwrap_or(r.len());
        self.pos += n;
        &r[..n]
    }

    fn name(&mut self, sigil: &str, what: &str) -> R<String> {
        self.expect(sigil)?;
        let w = self.word();
        if w.is_empty() {
            return self.err(format!("expected {what} name after `{sigil}`"));
        }
        Ok(w.to_string())
    }

    fn int(&mut self, what: &str) -> R<u64> {
        let w = self.word();
        match w.parse() {
            Ok(n) => Ok(n),
            Err(_) => self.err(format!("expected {what}, found `{w}`")),
        }
    }

    fn ty(&mut self) -> R<TensorType> {
        self.expect("tensor<")?;
        let r = self.rest();
        let Some(n) = r.find('>') else {
            return self.err("unclosed `tensor<`");
        };
        let parts: Vec<&str> = r[..n].split('x').collect();
        let (dt, dims) = parts.split_last().unwrap_or((&"", &[]));
        let Ok(dtype) = dt.parse::<DType>() else {
            return self.err(format!("unknown dtype `{dt}`"));
        };
        let mut shape = vec![];
        for d in dims {
            match d.parse() {
                Ok(x) => shape.push(x),
                Err(_) => return self.err(format!("bad dimension `{d}`")),
            }
        }
        self.pos += n + 1;
        Ok(TensorType::new(shape, dtype))
    }

    fn string(&mut self) -> R<String> {
        self.expect("\"")?;
        let mut out = String::new();
        let mut chars = self.rest().char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, 't')) => out.push('\t'),
                    Some((_, 'u')) => {
                        let hex: String = chars
                            .by_ref()
                            .map(|(_, c)| c)
                            .skip(1)
                            .take_while(|&c| c != '}')
                            .collect();
                        match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                            Some(c) => out.push(c),
                            None => return self.err("bad `\\u{..}` escape"),
                        }
                    }
                    Some((_, c)) => out.push(c),
                    None => break,
                },
                c => out.push(c),
            }
        }
        self.err("unclosed string")
    }

    fn attr(&mut self, depth: usize) -> R<Attr> {
        if depth > 64 {
            return self.err("attribute nested too deeply");
        }
        self.ws();
        if self.eat("[") {
            let mut items = vec![];
            if !self.eat("]") {
                loop {
                    items.push(self.attr(depth + 1)?);
                    if self.eat("]") {
                        break;
                    }
                    self.expect(",")?;
                }
            }
            return Ok(Attr::Array(items));
        }
        if self.rest().starts_with('"') {
            return self.string().map(Attr::Str);
        }
        let w = self.word();
        if let Ok(i) = w.parse::<i64>() {
            Ok(Attr::Int(i))
        } else if let Ok(x) = w.parse::<f64>() {
            Ok(Attr::Float(x))
        } else if w == "true" || w == "false" {
            Ok(Attr::Bool(w == "true"))
        } else if let Ok(d) = w.parse::<DType>() {
            Ok(Attr::DType(d))
        } else {
            self.err(format!("expected an attribute value, found `{w}`"))
        }
    }

    fn attrs(&mut self) -> R<Attrs> {
        let mut attrs = Attrs::new();
        if !self.eat("{") {
            return Ok(attrs);
        }
        if self.eat("}") {
            return Ok(attrs);
        }
        loop {
            let k = self.word();
            if k.is_empty() {
                return self.err("expected an attribute name");
            }
            self.expect("=")?;
            let v = self.attr(0)?;
            if attrs.insert(k, v).is_some() {
                return self.err(format!("attribute `{k}` given twice"));
            }
            if self.eat("}") {
                return Ok(attrs);
            }
            self.expect(",")?;
        }
    }
}

/// Parses a module.
pub fn parse_module(text: &str) -> Result<Module, ParseError> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, s)| Cur {
            s,
            pos: 0,
            line: i + 1,
        })
        .filter(|c| {
            let t = c.s.trim();
            !t.is_empty() && !t.starts_with("//")
        });
    let Some(mut c) = lines.next() else {
        return Err(ParseError {
            line: 1,
            col: 1,
            message: "expected `fused @name ...`, found an empty file".into(),
        });
    };
    c.expect("fused")?;
    let name = c.name("@", "module")?;
    c.expect("flops=")?;
    let flops = c.int("a flop count")?;
    c.expect("min_bytes=")?;
    let min_bytes = c.int("a byte count")?;
    c.expect("{")?;
    c.end()?;
    let mut m = Module {
        name,
        flops,
        min_bytes,
        buffers: vec![],
        groups: vec![],
        results: vec![],
    };
    let mut group: Option<Group> = None;
    let mut done = false;
    let mut last_line = c.line;
    for mut c in lines {
        last_line = c.line;
        if done {
            return c.err("text after the module's closing `}`");
        }
        if let Some(g) = group.as_mut() {
            if c.eat("}") {
                c.end()?;
                m.groups.extend(group.take());
            } else {
                g.stmts.push(stmt(&mut c)?);
            }
        } else if c.eat("buffer") {
            let name = c.name("@", "buffer")?;
            c.expect("=")?;
            let value = c.name("%", "value")?;
            c.expect(":")?;
            let ty = c.ty()?;
            let kind = match c.word() {
                "input" => BufferKind::Input,
                "output" => BufferKind::Output,
                "temp" => BufferKind::Temp,
                w => return c.err(format!("expected input, output or temp, found `{w}`")),
            };
            c.end()?;
            m.buffers.push(Buffer {
                name,
                value,
                ty,
                kind,
            });
        } else if c.eat("group") {
            let name = c.name("@", "group")?;
            let anchor = c.word();
            if crate::Anchor::from_name(anchor).is_none() {
                return c.err(format!(
                    "expected pointwise, reduction, row, matmul or attention, found `{anchor}`"
                ));
            }
            c.expect("{")?;
            c.end()?;
            group = Some(Group {
                name,
                stmts: vec![],
            });
        } else if c.eat("return") {
            if !c.at_end() {
                loop {
                    m.results.push(c.name("@", "buffer")?);
                    if c.at_end() {
                        break;
                    }
                    c.expect(",")?;
                }
            }
        } else if c.eat("}") {
            c.end()?;
            done = true;
        } else {
            return c.err("expected `buffer`, `group`, `return` or `}`");
        }
    }
    if !done || group.is_some() {
        return Err(ParseError {
            line: last_line,
            col: 1,
            message: "unclosed `{`".into(),
        });
    }
    Ok(m)
}

fn stmt(c: &mut Cur<'_>) -> R<Stmt> {
    if c.eat("store") {
        let value = c.name("%", "value")?;
        c.expect("->")?;
        let buffer = c.name("@", "buffer")?;
        c.end()?;
        return Ok(Stmt::Store { value, buffer });
    }
    let value = c.name("%", "value")?;
    c.expect("=")?;
    let opname = c.word();
    if opname == "load" {
        let buffer = c.name("@", "buffer")?;
        c.end()?;
        return Ok(Stmt::Load { value, buffer });
    }
    let Some(op) = OpKind::from_name(opname) else {
        return c.err(format!("unknown op `{opname}`"));
    };
    let mut operands = vec![];
    c.ws();
    if c.rest().starts_with('%') {
        loop {
            operands.push(c.name("%", "operand")?);
            if !c.eat(",") {
                break;
            }
        }
    }
    let attrs = c.attrs()?;
    c.expect(":")?;
    let ty = c.ty()?;
    let loc = if c.eat("at") { Some(c.string()?) } else { None };
    c.end()?;
    Ok(Stmt::Op(OpStmt {
        value,
        op,
        operands,
        attrs,
        ty,
        loc,
    }))
}
