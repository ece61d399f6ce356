//! The line cursor of the kernel IR's parser: words, punctuation, numbers, layouts and
//! expressions of one line, with the column of each error.

use super::*;

pub(super) struct Cursor<'a> {
    pub(super) text: &'a str,
    pub(super) pos: usize,
    pub(super) line: usize,
    pub(super) depth: usize,
}

fn is_word_char(ch: char) -> bool {
    ch.is_ascii_alphanumeric() || ch == '_' || ch == '.'
}

impl<'a> Cursor<'a> {
    pub(super) fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    pub(super) fn err(&self, message: String) -> ParseError {
        let col = self.text[..self.pos].chars().count() + 1;
        ParseError {
            line: self.line,
            col,
            message,
        }
    }

    pub(super) fn err_at(&self, pos: usize, message: String) -> ParseError {
        let pos = pos.min(self.text.len());
        let lead = self.text.len() - self.text.trim_start().len();
        let col = self.text[..pos.max(lead)].chars().count() + 1;
        ParseError {
            line: self.line,
            col,
            message,
        }
    }

    pub(super) fn skip_ws(&mut self) {
        let r = self.rest();
        self.pos += r.len() - r.trim_start().len();
    }

    pub(super) fn at_end(&mut self) -> bool {
        self.skip_ws();
        self.rest().is_empty()
    }

    pub(super) fn end(&mut self) -> Result<(), ParseError> {
        if self.at_end() {
            Ok(())
        } else {
            Err(self.err(format!("unexpected `{}`", self.rest())))
        }
    }

    pub(super) fn try_punct(&mut self, p: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(p) {
            self.pos += p.len();
            true
        } else {
            false
        }
    }

    pub(super) fn punct(&mut self, p: &str) -> Result<(), ParseError> {
        if self.try_punct(p) {
            Ok(())
        } else {
            Err(self.err(format!("expected `{p}`")))
        }
    }

    pub(super) fn word(&mut self) -> Result<String, ParseError> {
        self.skip_ws();
        let r = self.rest();
        let n = r.find(|ch: char| !is_word_char(ch)).unwrap_or(r.len());
        if n == 0 {
            return Err(self.err("expected a word".into()));
        }
        self.pos += n;
        Ok(r[..n].to_string())
    }

    pub(super) fn try_keyword(&mut self, k: &str) -> bool {
        self.skip_ws();
        let r = self.rest();
        if r.starts_with(k) && !r[k.len()..].starts_with(is_word_char) {
            self.pos += k.len();
            true
        } else {
            false
        }
    }

    pub(super) fn keyword(&mut self, k: &str) -> Result<(), ParseError> {
        if self.try_keyword(k) {
            Ok(())
        } else {
            Err(self.err(format!("expected `{k}`")))
        }
    }

    pub(super) fn sigil_name(&mut self, sigil: char) -> Result<String, ParseError> {
        self.skip_ws();
        if !self.rest().starts_with(sigil) {
            return Err(self.err(format!("expected a `{sigil}` name")));
        }
        self.pos += 1;
        let r = self.rest();
        let n = r
            .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
            .unwrap_or(r.len());
        if n == 0 {
            return Err(self.err(format!("expected a name after `{sigil}`")));
        }
        self.pos += n;
        Ok(r[..n].to_string())
    }

    pub(super) fn local(&mut self) -> Result<String, ParseError> {
        self.sigil_name('%')
    }

    pub(super) fn global(&mut self) -> Result<String, ParseError> {
        self.sigil_name('@')
    }

    pub(super) fn uint(&mut self) -> Result<u64, ParseError> {
        self.skip_ws();
        let r = self.rest();
        let n = r.find(|ch: char| !ch.is_ascii_digit()).unwrap_or(r.len());
        let v = r[..n]
            .parse()
            .map_err(|_| self.err("expected an unsigned integer".into()))?;
        self.pos += n;
        Ok(v)
    }

    /// `[a, b, ...]` of unsigned integers (possibly empty).
    pub(super) fn uint_list(&mut self) -> Result<Vec<u64>, ParseError> {
        self.punct("[")?;
        let mut v = vec![];
        if self.try_punct("]") {
            return Ok(v);
        }
        loop {
            v.push(self.uint()?);
            if self.try_punct("]") {
                return Ok(v);
            }
            self.punct(",")?;
        }
    }

    pub(super) fn dim3(&mut self) -> Result<[u32; 3], ParseError> {
        self.punct("(")?;
        let mut d = [0u32; 3];
        for (i, slot) in d.iter_mut().enumerate() {
            if i > 0 {
                self.punct(",")?;
            }
            let v = self.uint()?;
            *slot =
                u32::try_from(v).map_err(|_| self.err(format!("{v} does not fit in 32 bits")))?;
        }
        self.punct(")")?;
        Ok(d)
    }

    pub(super) fn dtype(&mut self) -> Result<DType, ParseError> {
        let start = self.pos;
        let w = self.word()?;
        w.parse()
            .map_err(|_| self.err_at(start, format!("unknown dtype `{w}`")))
    }

    pub(super) fn ty(&mut self) -> Result<Ty, ParseError> {
        if self.try_keyword("idx") {
            Ok(Ty::Idx)
        } else {
            Ok(Ty::Elem(self.dtype()?))
        }
    }

    pub(super) fn tensor_type(&mut self) -> Result<(Vec<u64>, DType), ParseError> {
        self.keyword("tensor")?;
        self.punct("<")?;
        let r = self.rest();
        let close = r.find('>').ok_or_else(|| self.err("expected `>`".into()))?;
        let body = &r[..close];
        let mut parts: Vec<&str> = body.split('x').collect();
        let dt = parts.pop().unwrap_or_default();
        let dtype = dt
            .parse()
            .map_err(|_| self.err(format!("unknown dtype `{dt}`")))?;
        let mut shape = vec![];
        for p in parts {
            shape.push(
                p.parse::<u64>()
                    .map_err(|_| self.err(format!("bad dimension `{p}`")))?,
            );
        }
        self.pos += close + 1;
        Ok((shape, dtype))
    }

    pub(super) fn string(&mut self) -> Result<String, ParseError> {
        self.skip_ws();
        if !self.rest().starts_with('"') {
            return Err(self.err("expected a string".into()));
        }
        self.pos += 1;
        let mut out = String::new();
        let mut chars = self.rest().char_indices();
        while let Some((i, ch)) = chars.next() {
            match ch {
                '"' => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, 't')) => out.push('\t'),
                    Some((_, c)) => out.push(c),
                    None => break,
                },
                c => out.push(c),
            }
        }
        Err(self.err("unterminated string".into()))
    }

    pub(super) fn layout(&mut self) -> Result<Layout, ParseError> {
        self.skip_ws();
        let text = self.rest().trim_end();
        let l = parse_layout(text).map_err(|e| self.err(format!("invalid layout: {e}")))?;
        self.pos = self.text.len();
        Ok(l)
    }

    pub(super) fn number_f64(&mut self) -> Result<f64, ParseError> {
        match self.atom()? {
            Expr::Float(x) => Ok(x),
            Expr::Int(i) => Ok(i as f64),
            _ => Err(self.err("expected a number".into())),
        }
    }

    pub(super) fn frag(&mut self) -> Result<Frag, ParseError> {
        let tensor = self.local()?;
        self.punct("[")?;
        let mut at = vec![];
        if !self.try_punct("]") {
            at.push(self.expr()?);
            while self.try_punct(",") {
                at.push(self.expr()?);
            }
            self.punct("]")?;
        }
        Ok(Frag { tensor, at })
    }

    pub(super) fn coord(&mut self) -> Result<Vec<Expr>, ParseError> {
        self.punct("[")?;
        let mut es = vec![self.expr()?];
        while self.try_punct(",") {
            es.push(self.expr()?);
        }
        self.punct("]")?;
        Ok(es)
    }

    pub(super) fn expr(&mut self) -> Result<Expr, ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(format!("expression nested deeper than {MAX_DEPTH}")));
        }
        let mut lhs = self.cmp()?;
        while self.try_punct("&&") {
            let rhs = self.cmp()?;
            lhs = Expr::Idx(IdxOp::And, Box::new(lhs), Box::new(rhs));
        }
        self.depth -= 1;
        Ok(lhs)
    }

    pub(super) fn cmp(&mut self) -> Result<Expr, ParseError> {
        let lhs = self.sum()?;
        for op in [IdxOp::Le, IdxOp::Lt, IdxOp::Eq] {
            if self.try_punct(op.symbol()) {
                let rhs = self.sum()?;
                return Ok(Expr::Idx(op, Box::new(lhs), Box::new(rhs)));
            }
        }
        Ok(lhs)
    }

    pub(super) fn sum(&mut self) -> Result<Expr, ParseError> {
        let mut lhs = self.product()?;
        loop {
            self.skip_ws();
            let op = if self.rest().starts_with('+') {
                IdxOp::Add
            } else if self.rest().starts_with("- ") {
                IdxOp::Sub
            } else {
                return Ok(lhs);
            };
            self.pos += 1;
            let rhs = self.product()?;
            lhs = Expr::Idx(op, Box::new(lhs), Box::new(rhs));
        }
    }

    pub(super) fn product(&mut self) -> Result<Expr, ParseError> {
        let mut lhs = self.atom()?;
        loop {
            self.skip_ws();
            let op = match self.rest().chars().next() {
                Some('*') => IdxOp::Mul,
                Some('/') => IdxOp::Div,
                Some('%') if !self.rest()[1..].starts_with(is_word_char) => IdxOp::Rem,
                Some('^') => IdxOp::Xor,
                _ => return Ok(lhs),
            };
            self.pos += 1;
            let rhs = self.atom()?;
            lhs = Expr::Idx(op, Box::new(lhs), Box::new(rhs));
        }
    }

    pub(super) fn atom(&mut self) -> Result<Expr, ParseError> {
        self.skip_ws();
        let r = self.rest();
        let Some(first) = r.chars().next() else {
            return Err(self.err("expected an expression".into()));
        };
        if first == '(' {
            self.pos += 1;
            let e = self.expr()?;
            self.punct(")")?;
            return Ok(e);
        }
        if first == '%' {
            return Ok(Expr::Var(self.local()?));
        }
        if first.is_ascii_digit() || first == '-' {
            return self.number();
        }
        let start = self.pos;
        let w = self.word()?;
        match w.as_str() {
            "inf" => return Ok(Expr::Float(f64::INFINITY)),
            "nan" => return Ok(Expr::Float(f64::NAN)),
            "load" => {
                let tensor = self.local()?;
                let coord = self.coord()?;
                return Ok(Expr::Load { tensor, coord });
            }
            _ => {}
        }
        if let Some(b) = Builtin::ALL.into_iter().find(|b| b.name() == w) {
            return Ok(Expr::Builtin(b));
        }
        let f = Func::from_name(&w)
            .ok_or_else(|| self.err_at(start, format!("unknown function `{w}`")))?;
        self.punct("(")?;
        let mut args = vec![];
        if !self.try_punct(")") {
            loop {
                args.push(self.expr()?);
                if self.try_punct(")") {
                    break;
                }
                self.punct(",")?;
            }
        }
        Ok(Expr::Call(f, args))
    }

    pub(super) fn number(&mut self) -> Result<Expr, ParseError> {
        let r = self.rest();
        let neg = r.starts_with('-');
        let body = if neg { &r[1..] } else { r };
        if body.starts_with("inf") && !body[3..].starts_with(is_word_char) {
            self.pos += 3 + usize::from(neg);
            return Ok(Expr::Float(if neg {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }));
        }
        let mut n = 0;
        let bytes = body.as_bytes();
        while n < bytes.len() {
            let ch = bytes[n];
            let sign_after_e =
                (ch == b'-' || ch == b'+') && n > 0 && matches!(bytes[n - 1], b'e' | b'E');
            if ch.is_ascii_digit() || ch == b'.' || ch == b'e' || ch == b'E' || sign_after_e {
                n += 1;
            } else {
                break;
            }
        }
        let lit = &r[..n + usize::from(neg)];
        if n == 0 {
            return Err(self.err("expected a number".into()));
        }
        let is_float = body[..n].contains(['.', 'e', 'E']);
        let e = if is_float {
            Expr::Float(
                lit.parse()
                    .map_err(|_| self.err(format!("bad number `{lit}`")))?,
            )
        } else {
            Expr::Int(
                lit.parse()
                    .map_err(|_| self.err(format!("bad integer `{lit}`")))?,
            )
        };
        self.pos += lit.len();
        Ok(e)
    }
}
