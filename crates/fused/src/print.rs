//! The Fused IR's text form: deterministic, one statement per line, read back by
//! [`parse_module`](crate::parse_module).

use crate::{Module, OpStmt, Remark, Stmt};
use irc_ir::span::quote;
use std::fmt::Write;

/// Prints a module.
pub fn print_module(m: &Module) -> String {
    print_with_remarks(m, &[])
}

/// Prints a module with each group's remarks as `// remark:` comments under its header (the
/// parser skips comments, so the text still re-parses to the same module).
pub fn print_with_remarks(m: &Module, remarks: &[Remark]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "fused @{} flops={} min_bytes={} {{",
        m.name, m.flops, m.min_bytes
    );
    for b in &m.buffers {
        let _ = writeln!(
            out,
            "  buffer @{} = %{} : {} {}",
            b.name,
            b.value,
            b.ty,
            b.kind.name()
        );
    }
    for g in &m.groups {
        let _ = writeln!(out, "  group @{} {} {{", g.name, g.anchor().name());
        for r in remarks.iter().filter(|r| r.group == g.name) {
            let _ = writeln!(out, "    // remark: {}", r.text);
        }
        for s in &g.stmts {
            out.push_str("    ");
            match s {
                Stmt::Load { value, buffer } => {
                    let _ = write!(out, "%{value} = load @{buffer}");
                }
                Stmt::Op(o) => write_op(&mut out, o),
                Stmt::Store { value, buffer } => {
                    let _ = write!(out, "store %{value} -> @{buffer}");
                }
            }
            out.push('\n');
        }
        out.push_str("  }\n");
    }
    let results: Vec<String> = m.results.iter().map(|r| format!("@{r}")).collect();
    let _ = writeln!(out, "  return {}", results.join(", "));
    out.push_str("}\n");
    out
}

fn write_op(out: &mut String, o: &OpStmt) {
    let _ = write!(out, "%{} = {}", o.value, o.op.name());
    for (i, a) in o.operands.iter().enumerate() {
        let _ = write!(out, "{} %{a}", if i == 0 { "" } else { "," });
    }
    if !o.attrs.is_empty() {
        out.push_str(" {");
        for (i, (k, v)) in o.attrs.iter().enumerate() {
            let _ = write!(out, "{}{k} = {v}", if i == 0 { "" } else { ", " });
        }
        out.push('}');
    }
    let _ = write!(out, " : {}", o.ty);
    if let Some(loc) = &o.loc {
        let _ = write!(out, " at {}", quote(loc));
    }
}
