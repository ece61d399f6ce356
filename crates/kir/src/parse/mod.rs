//! Parser of the kernel IR's text form (line-oriented: one statement per line).
//!
//! Lines whose first non-blank characters are `//` are comments. Every error carries the line
//! and column it was found at; nothing here panics on any input.

use super::*;
use crate::manifest::BufferKind;
use irc_layout::parse_layout;
use std::fmt;

mod cursor;
use cursor::Cursor;

/// A located syntax error in kernel IR text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub col: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Expression nesting beyond this is refused (the printer never writes it for real kernels).
const MAX_DEPTH: usize = 128;

/// Parses a module printed by [`super::print_module`]. The result is not verified; call
/// [`super::verify_module`] for that.
pub fn parse_module(text: &str) -> Result<Module, ParseError> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with("//")
        })
        .collect();
    let mut p = Parser { lines, pos: 0 };
    let m = p.module()?;
    if let Some(&(line, _)) = p.lines.get(p.pos) {
        return Err(ParseError {
            line,
            col: 1,
            message: "text after the end of the module".into(),
        });
    }
    Ok(m)
}

struct Parser<'a> {
    lines: Vec<(usize, &'a str)>,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn next_line(&mut self) -> Result<Cursor<'a>, ParseError> {
        let last = self.lines.last().map_or(1, |l| l.0);
        let &(line, text) = self.lines.get(self.pos).ok_or(ParseError {
            line: last,
            col: 1,
            message: "unexpected end of input (missing `}`?)".into(),
        })?;
        self.pos += 1;
        Ok(Cursor {
            text,
            pos: 0,
            line,
            depth: 0,
        })
    }

    fn peek_is_close(&self) -> bool {
        self.lines
            .get(self.pos)
            .is_some_and(|(_, l)| l.trim() == "}")
    }

    fn module(&mut self) -> Result<Module, ParseError> {
        let mut c = self.next_line()?;
        c.keyword("module")?;
        let name = c.global()?;
        c.keyword("flops")?;
        c.punct("=")?;
        let flops = c.uint()?;
        c.keyword("min_bytes")?;
        c.punct("=")?;
        let min_bytes = c.uint()?;
        c.punct("{")?;
        c.end()?;
        let mut m = Module {
            name,
            flops,
            min_bytes,
            buffers: vec![],
            constants: vec![],
            kernels: vec![],
            launches: vec![],
            results: vec![],
        };
        loop {
            let mut c = self.next_line()?;
            let word = c.word()?;
            match word.as_str() {
                "buffer" => {
                    let name = c.local()?;
                    c.punct(":")?;
                    let (shape, dtype) = c.tensor_type()?;
                    let kind = match c.word()?.as_str() {
                        "input" => BufferKind::Input,
                        "output" => BufferKind::Output,
                        "temp" => BufferKind::Temp,
                        "zeroed" => BufferKind::Zeroed,
                        other => return Err(c.err(format!("unknown buffer kind `{other}`"))),
                    };
                    let tensor_map = if c.try_keyword("tensormap") {
                        c.punct("(")?;
                        let of = c.local()?;
                        c.punct(",")?;
                        c.keyword("dims")?;
                        let dims = c.uint_list()?;
                        c.punct(",")?;
                        c.keyword("strides")?;
                        let strides = c.uint_list()?;
                        c.punct(",")?;
                        c.keyword("box")?;
                        let box_dims = c
                            .uint_list()?
                            .into_iter()
                            .map(|b| {
                                u32::try_from(b)
                                    .map_err(|_| c.err(format!("box extent {b} is too large")))
                            })
                            .collect::<Result<_, _>>()?;
                        c.punct(",")?;
                        c.keyword("swizzle")?;
                        let swizzle = c.uint()?;
                        let swizzle = u32::try_from(swizzle)
                            .map_err(|_| c.err(format!("swizzle {swizzle} is too large")))?;
                        c.punct(")")?;
                        Some(TensorMapDecl {
                            of,
                            dims,
                            strides,
                            box_dims,
                            swizzle,
                        })
                    } else {
                        None
                    };
                    c.end()?;
                    m.buffers.push(BufferDecl {
                        name,
                        dtype,
                        shape,
                        kind,
                        tensor_map,
                    });
                }
                "constant" => {
                    let name = c.global()?;
                    c.punct(":")?;
                    let dtype = c.dtype()?;
                    c.punct("[")?;
                    let mut values = vec![];
                    if !c.try_punct("]") {
                        loop {
                            values.push(c.number_f64()?);
                            if c.try_punct("]") {
                                break;
                            }
                            c.punct(",")?;
                        }
                    }
                    c.end()?;
                    m.constants.push(ConstDecl {
                        name,
                        dtype,
                        values,
                    });
                }
                "kernel" => {
                    let k = self.kernel(c)?;
                    m.kernels.push(k);
                }
                "launch" => {
                    let kernel = c.global()?;
                    c.punct("(")?;
                    let mut args = vec![];
                    if !c.try_punct(")") {
                        loop {
                            args.push(c.local()?);
                            if c.try_punct(")") {
                                break;
                            }
                            c.punct(",")?;
                        }
                    }
                    c.end()?;
                    m.launches.push(LaunchStmt { kernel, args });
                }
                "return" => {
                    if !c.at_end() {
                        loop {
                            m.results.push(c.local()?);
                            if c.at_end() {
                                break;
                            }
                            c.punct(",")?;
                        }
                    }
                    let mut close = self.next_line()?;
                    close.punct("}")?;
                    close.end()?;
                    return Ok(m);
                }
                other => {
                    return Err(c.err_at(0, format!("expected a module item, found `{other}`")));
                }
            }
        }
    }

    fn kernel(&mut self, mut c: Cursor<'a>) -> Result<Kernel, ParseError> {
        let name = c.global()?;
        c.keyword("grid")?;
        let grid = c.dim3()?;
        c.keyword("block")?;
        let block = c.dim3()?;
        c.keyword("index")?;
        c.punct("(")?;
        let index = match c.word()?.as_str() {
            "i32" => IndexWidth::I32,
            "i64" => IndexWidth::I64,
            other => return Err(c.err(format!("index width must be i32 or i64, found `{other}`"))),
        };
        c.punct(")")?;
        let mut occupancy = 1;
        if c.try_keyword("occupancy") {
            c.punct("(")?;
            let n = c.uint()?;
            occupancy =
                u32::try_from(n).map_err(|_| c.err(format!("{n} does not fit in 32 bits")))?;
            c.punct(")")?;
        }
        c.punct("{")?;
        c.end()?;
        let mut k = Kernel {
            name,
            grid,
            block,
            index,
            occupancy,
            origins: vec![],
            params: vec![],
            tensors: vec![],
            body: Default::default(),
        };
        // Header lines, then the body.
        while let Some(&(_, text)) = self.lines.get(self.pos) {
            let head = text.trim_start();
            if head.starts_with("origin ") {
                let mut c = self.next_line()?;
                c.keyword("origin")?;
                let op = c.string()?;
                c.keyword("at")?;
                let loc = c.string()?;
                c.end()?;
                k.origins.push(Origin { op, loc });
            } else if head.starts_with("param ") {
                let mut c = self.next_line()?;
                c.keyword("param")?;
                let name = c.local()?;
                c.punct(":")?;
                let dtype = c.dtype()?;
                c.end()?;
                k.params.push(Param { name, dtype });
            } else if head.starts_with("tensor ") {
                let mut c = self.next_line()?;
                c.keyword("tensor")?;
                let name = c.local()?;
                c.punct(":")?;
                let dtype = c.dtype()?;
                let space = match c.word()?.as_str() {
                    "global" => {
                        c.punct("(")?;
                        let p = c.local()?;
                        c.punct(")")?;
                        Space::Global(p)
                    }
                    "const" => {
                        c.punct("(")?;
                        let p = c.global()?;
                        c.punct(")")?;
                        Space::Const(p)
                    }
                    "shared" => Space::Shared,
                    "regs" => Space::Registers,
                    "view" => {
                        c.punct("(")?;
                        let t = c.local()?;
                        c.punct(")")?;
                        Space::View(t)
                    }
                    other => return Err(c.err(format!("unknown memory space `{other}`"))),
                };
                let offset = if c.try_punct("+") {
                    c.skip_ws();
                    match c.number()? {
                        Expr::Int(n) => n,
                        _ => return Err(c.err("expected an integer offset".into())),
                    }
                } else {
                    0
                };
                c.punct("=")?;
                let layout = c.layout()?;
                k.tensors.push(TensorDecl {
                    name,
                    dtype,
                    space,
                    offset,
                    layout,
                });
            } else {
                break;
            }
        }
        k.body = std::sync::Arc::new(self.block()?);
        Ok(k)
    }

    /// Statements up to and including the closing `}` line.
    fn block(&mut self) -> Result<Vec<Stmt>, ParseError> {
        let (body, has_else) = self.block_or_else()?;
        if has_else {
            let line = self.lines[self.pos - 1].0;
            return Err(ParseError {
                line,
                col: 1,
                message: "`else` without `if`".into(),
            });
        }
        Ok(body)
    }

    /// Statements up to a `}` line (false) or a `} else {` line (true), consumed.
    fn block_or_else(&mut self) -> Result<(Vec<Stmt>, bool), ParseError> {
        let mut body = vec![];
        loop {
            if self.peek_is_close() {
                self.pos += 1;
                return Ok((body, false));
            }
            if self
                .lines
                .get(self.pos)
                .is_some_and(|(_, l)| l.split_whitespace().eq(["}", "else", "{"]))
            {
                self.pos += 1;
                return Ok((body, true));
            }
            let c = self.next_line()?;
            body.push(self.stmt(c)?);
        }
    }

    fn stmt(&mut self, mut c: Cursor<'a>) -> Result<Stmt, ParseError> {
        c.skip_ws();
        if c.rest().starts_with('%') {
            let var = c.local()?;
            if c.try_punct("<-") {
                let value = c.expr()?;
                c.end()?;
                return Ok(Stmt::Assign { var, value });
            }
            c.punct(":")?;
            let ty = c.ty()?;
            c.punct("=")?;
            c.skip_ws();
            let scope = ["block_reduce.", "warp_reduce."]
                .into_iter()
                .find(|p| c.rest().starts_with(p));
            if let Some(prefix) = scope {
                c.pos += prefix.len();
                let word = c.word()?;
                let (name, width) = match word.split_once('.') {
                    Some((n, w)) if prefix == "warp_reduce." => match w.parse::<u32>() {
                        Ok(w) if w != 32 => (n, w),
                        _ => {
                            return Err(c.err(format!(
                                "expected a lane-group width below 32 after `{n}.`, found `{w}`"
                            )));
                        }
                    },
                    _ => (word.as_str(), 32),
                };
                let op = match name {
                    "sum" => ReduceOp::Sum,
                    "max" => ReduceOp::Max,
                    "min" => ReduceOp::Min,
                    other => return Err(c.err(format!("unknown block reduction `{other}`"))),
                };
                let value = c.expr()?;
                c.end()?;
                return Ok(if prefix == "warp_reduce." {
                    Stmt::WarpReduce {
                        var,
                        ty,
                        op,
                        width,
                        value,
                    }
                } else {
                    Stmt::BlockReduce { var, ty, op, value }
                });
            }
            let value = c.expr()?;
            c.end()?;
            return Ok(Stmt::Let { var, ty, value });
        }
        let word = c.word()?;
        match word.as_str() {
            "var" => {
                let var = c.local()?;
                c.punct(":")?;
                let ty = c.ty()?;
                c.punct("=")?;
                let init = c.expr()?;
                c.end()?;
                Ok(Stmt::Var { var, ty, init })
            }
            "store" => {
                let tensor = c.local()?;
                let coord = c.coord()?;
                c.punct(",")?;
                let value = c.expr()?;
                c.end()?;
                Ok(Stmt::Store {
                    tensor,
                    coord,
                    value,
                })
            }
            "for" => {
                let var = c.local()?;
                c.punct("=")?;
                let start = c.expr()?;
                c.keyword("to")?;
                let end = c.expr()?;
                c.keyword("step")?;
                let step = c.expr()?;
                let unroll = c.try_keyword("unroll");
                c.punct("{")?;
                c.end()?;
                let body = self.block()?;
                Ok(Stmt::For {
                    var,
                    start,
                    end,
                    step,
                    unroll,
                    body,
                })
            }
            "if" => {
                let cond = c.expr()?;
                c.punct("{")?;
                c.end()?;
                let (body, has_else) = self.block_or_else()?;
                let orelse = if has_else { self.block()? } else { vec![] };
                Ok(Stmt::If { cond, body, orelse })
            }
            "sync" => {
                c.end()?;
                Ok(Stmt::Sync)
            }
            w if w.starts_with("copy.") => {
                let rest = &w["copy.".len()..];
                let (width, hint) = match rest.split_once('.') {
                    None => (rest, CacheHint::Normal),
                    Some((n, h)) => match CacheHint::from_name(h) {
                        Some(hint) => (n, hint),
                        None => {
                            let names: Vec<String> = CacheHint::HINTS
                                .iter()
                                .map(|(n, _)| format!("`.{n}`"))
                                .collect();
                            return Err(c.err_at(
                                0,
                                format!(
                                    "unknown cache hint `.{h}` in `{w}` (expected {})",
                                    names.join(" or ")
                                ),
                            ));
                        }
                    },
                };
                let width = width
                    .parse::<u32>()
                    .map_err(|_| c.err_at(0, format!("bad copy width in `{w}`")))?;
                let dst = c.frag()?;
                c.punct(",")?;
                let src = c.frag()?;
                c.end()?;
                Ok(Stmt::Copy {
                    width,
                    dst,
                    src,
                    hint,
                })
            }
            other => {
                let Some(op) = Intrinsic::from_name(other) else {
                    return Err(c.err_at(0, format!("expected a statement, found `{other}`")));
                };
                let mut args = vec![];
                for (i, (_, kind)) in op.info().args.iter().enumerate() {
                    if i > 0 {
                        c.punct(",")?;
                    }
                    args.push(match kind {
                        k if k.is_expr() => Arg::Expr(c.expr()?),
                        _ => Arg::Frag(c.frag()?),
                    });
                }
                c.end()?;
                Ok(Stmt::Intrinsic { op, args })
            }
        }
    }
}
