//! The kernel IR's text form: one statement per line, two spaces of indent per block.

use super::*;
use crate::manifest::BufferKind;
use irc_ir::TensorType;
use irc_ir::attr::format_float;
use irc_ir::span::quote;
use std::fmt::Write;

/// Prints a module; [`super::parse_module`] reads it back to an equal module.
pub fn print_module(m: &Module) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "module @{} flops={} min_bytes={} {{",
        m.name, m.flops, m.min_bytes
    );
    for b in &m.buffers {
        let kind = match b.kind {
            BufferKind::Input => "input",
            BufferKind::Output => "output",
            BufferKind::Temp => "temp",
            BufferKind::Zeroed => "zeroed",
        };
        let ty = TensorType::new(b.shape.clone(), b.dtype);
        let map = b.tensor_map.as_ref().map_or(String::new(), |t| {
            let list = |v: &mut dyn Iterator<Item = u64>| {
                v.map(|x| x.to_string()).collect::<Vec<_>>().join(", ")
            };
            format!(
                " tensormap(%{}, dims [{}], strides [{}], box [{}], swizzle {})",
                t.of,
                list(&mut t.dims.iter().copied()),
                list(&mut t.strides.iter().copied()),
                list(&mut t.box_dims.iter().map(|&x| u64::from(x))),
                t.swizzle
            )
        });
        let _ = writeln!(out, "  buffer %{} : {ty} {kind}{map}", b.name);
    }
    for c in &m.constants {
        let vals: Vec<String> = c.values.iter().map(|&v| format_float(v)).collect();
        let _ = writeln!(
            out,
            "  constant @{} : {} [{}]",
            c.name,
            c.dtype,
            vals.join(", ")
        );
    }
    for k in &m.kernels {
        print_kernel(&mut out, k);
    }
    for l in &m.launches {
        let args: Vec<String> = l.args.iter().map(|a| format!("%{a}")).collect();
        let _ = writeln!(out, "  launch @{}({})", l.kernel, args.join(", "));
    }
    let results: Vec<String> = m.results.iter().map(|r| format!("%{r}")).collect();
    let _ = writeln!(out, "  return {}", results.join(", "));
    out.push_str("}\n");
    out
}

fn print_kernel(out: &mut String, k: &Kernel) {
    let index = match k.index {
        IndexWidth::I32 => "i32",
        IndexWidth::I64 => "i64",
    };
    let [gx, gy, gz] = k.grid;
    let [bx, by, bz] = k.block;
    let occupancy = match k.occupancy {
        1 => String::new(),
        n => format!(" occupancy({n})"),
    };
    let _ = writeln!(
        out,
        "  kernel @{} grid({gx}, {gy}, {gz}) block({bx}, {by}, {bz}) index({index}){occupancy} {{",
        k.name
    );
    for o in &k.origins {
        let _ = writeln!(out, "    origin {} at {}", quote(&o.op), quote(&o.loc));
    }
    for p in &k.params {
        let _ = writeln!(out, "    param %{} : {}", p.name, p.dtype);
    }
    for t in &k.tensors {
        let space = match &t.space {
            Space::Global(p) => format!("global(%{p})"),
            Space::Const(c) => format!("const(@{c})"),
            Space::Shared => "shared".to_string(),
            Space::Registers => "regs".to_string(),
            Space::View(t) => format!("view(%{t})"),
        };
        let space = if t.offset == 0 {
            space
        } else {
            format!("{space} + {}", t.offset)
        };
        let _ = writeln!(
            out,
            "    tensor %{} : {} {space} = {}",
            t.name, t.dtype, t.layout
        );
    }
    print_block(out, &k.body, 2);
    out.push_str("  }\n");
}

fn print_block(out: &mut String, body: &[Stmt], depth: usize) {
    for s in body {
        print_stmt(out, s, depth);
    }
}

fn print_stmt(out: &mut String, s: &Stmt, depth: usize) {
    let pad = "  ".repeat(depth);
    match s {
        Stmt::Let { var, ty, value } => {
            let _ = writeln!(out, "{pad}%{var} : {} = {}", ty.name(), expr(value));
        }
        Stmt::Var { var, ty, init } => {
            let _ = writeln!(out, "{pad}var %{var} : {} = {}", ty.name(), expr(init));
        }
        Stmt::Assign { var, value } => {
            let _ = writeln!(out, "{pad}%{var} <- {}", expr(value));
        }
        Stmt::Store {
            tensor,
            coord,
            value,
        } => {
            let _ = writeln!(
                out,
                "{pad}store %{tensor}[{}], {}",
                exprs(coord),
                expr(value)
            );
        }
        Stmt::For {
            var,
            start,
            end,
            step,
            unroll,
            body,
        } => {
            let unroll = if *unroll { " unroll" } else { "" };
            let _ = writeln!(
                out,
                "{pad}for %{var} = {} to {} step {}{unroll} {{",
                expr(start),
                expr(end),
                expr(step)
            );
            print_block(out, body, depth + 1);
            let _ = writeln!(out, "{pad}}}");
        }
        Stmt::If { cond, body, orelse } => {
            let _ = writeln!(out, "{pad}if {} {{", expr(cond));
            print_block(out, body, depth + 1);
            if !orelse.is_empty() {
                let _ = writeln!(out, "{pad}}} else {{");
                print_block(out, orelse, depth + 1);
            }
            let _ = writeln!(out, "{pad}}}");
        }
        Stmt::Copy {
            width,
            dst,
            src,
            hint,
        } => {
            let f = |x: &Frag| format!("%{}[{}]", x.tensor, exprs(&x.at));
            let h = hint.suffix('.');
            let _ = writeln!(out, "{pad}copy.{width}{h} {}, {}", f(dst), f(src));
        }
        Stmt::Sync => {
            let _ = writeln!(out, "{pad}sync");
        }
        Stmt::Intrinsic { op, args } => {
            let args: Vec<String> = args
                .iter()
                .map(|a| match a {
                    Arg::Frag(x) => format!("%{}[{}]", x.tensor, exprs(&x.at)),
                    Arg::Expr(e) => expr(e),
                })
                .collect();
            if args.is_empty() {
                let _ = writeln!(out, "{pad}{}", op.name());
            } else {
                let _ = writeln!(out, "{pad}{} {}", op.name(), args.join(", "));
            }
        }
        Stmt::BlockReduce { var, ty, op, value } => {
            let _ = writeln!(
                out,
                "{pad}%{var} : {} = block_reduce.{} {}",
                ty.name(),
                op.name(),
                expr(value)
            );
        }
        Stmt::WarpReduce {
            var,
            ty,
            op,
            width,
            value,
        } => {
            let w = if *width == 32 {
                String::new()
            } else {
                format!(".{width}")
            };
            let _ = writeln!(
                out,
                "{pad}%{var} : {} = warp_reduce.{}{w} {}",
                ty.name(),
                op.name(),
                expr(value)
            );
        }
    }
}

fn exprs(es: &[Expr]) -> String {
    es.iter().map(expr).collect::<Vec<_>>().join(", ")
}

/// An expression in the text form: index arithmetic fully parenthesized, functions as calls.
pub fn expr(e: &Expr) -> String {
    match e {
        Expr::Int(i) => i.to_string(),
        Expr::Float(x) => format_float(*x),
        Expr::Var(v) => format!("%{v}"),
        Expr::Builtin(b) => b.name().to_string(),
        Expr::Load { tensor, coord } => format!("load %{tensor}[{}]", exprs(coord)),
        Expr::Idx(op, a, b) => format!("({} {} {})", expr(a), op.symbol(), expr(b)),
        Expr::Call(f, args) => format!("{}({})", f.name(), exprs(args)),
    }
}
