//! The printer: the canonical text form of a module, built with the `pretty` crate.
//!
//! Output is deterministic: attributes print sorted by name, value names are the unique name
//! hints the values carry and sequential numbers (`%0`, `%1`, ...) for the rest, and the result
//! type of every statement is written. The text re-parses to an equal graph.

use crate::graph::{Graph, Module, ValueId};
use pretty::RcDoc;
use std::collections::HashSet;

/// Line width the printer wraps graph signatures at.
pub const WIDTH: usize = 100;

/// Prints a module: its graphs separated by blank lines, ending in a newline.
pub fn print_module(module: &Module) -> String {
    let docs = module.graphs.iter().map(graph_doc);
    render(RcDoc::intersperse(
        docs,
        RcDoc::hardline().append(RcDoc::hardline()),
    ))
}

/// Prints one graph, ending in a newline.
pub fn print_graph(g: &Graph) -> String {
    render(graph_doc(g))
}

fn render(doc: RcDoc<'_>) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = doc.render_fmt(WIDTH, &mut out);
    out.push('\n');
    out
}

/// Whether `name` may be written after `%` without quoting.
pub fn is_value_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.$-".contains(c))
}

/// The printed name of every value: unique hints kept, the rest numbered in definition order.
pub fn value_names(g: &Graph) -> Vec<String> {
    let order = definition_order(g);
    let mut taken: HashSet<&str> = HashSet::with_capacity(g.values.len());
    let mut names: Vec<Option<String>> = vec![None; g.values.len()];
    for &v in &order {
        if let Some(hint) = g.values[v.index()].name.as_deref()
            && is_value_name(hint)
            && taken.insert(hint)
        {
            names[v.index()] = Some(hint.to_string());
        }
    }
    // Numbers increase, so they only need to avoid the kept hints.
    let mut next = 0usize;
    for &v in &order {
        if names[v.index()].is_none() {
            while taken.contains(next.to_string().as_str()) {
                next += 1;
            }
            names[v.index()] = Some(next.to_string());
            next += 1;
        }
    }
    names
        .into_iter()
        .enumerate()
        .map(|(i, n)| n.unwrap_or_else(|| format!("v{i}")))
        .collect()
}

/// Parameters, then statement results, in order; any value neither defines comes last.
fn definition_order(g: &Graph) -> Vec<ValueId> {
    let mut seen = vec![false; g.values.len()];
    let mut order = Vec::with_capacity(g.values.len());
    for v in g.params.iter().chain(g.insts.iter().map(|i| &i.result)) {
        if v.index() < seen.len() && !std::mem::replace(&mut seen[v.index()], true) {
            order.push(*v);
        }
    }
    order.extend(
        (0..g.values.len())
            .filter(|&i| !seen[i])
            .map(|i| ValueId(i as u32)),
    );
    order
}

fn graph_doc(g: &Graph) -> RcDoc<'static> {
    let names: Vec<String> = value_names(g)
        .into_iter()
        .map(|n| format!("%{n}"))
        .collect();
    let name = |v: ValueId| names.get(v.index()).map_or("%?", String::as_str);
    let params: Vec<RcDoc<'static>> = g
        .params
        .iter()
        .map(|&p| {
            let ty = g
                .values
                .get(p.index())
                .map(|d| d.ty.to_string())
                .unwrap_or_default();
            RcDoc::text(format!("{}: {ty}", name(p)))
        })
        .collect();
    let results = match g.result_types.as_slice() {
        [one] => one.to_string(),
        many => format!(
            "({})",
            many.iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    // The signature is laid out by `pretty` (wrapped when wider than WIDTH); statements are one
    // line each, so they are written as plain text.
    let header = RcDoc::text(format!("graph @{}(", g.name))
        .append(
            RcDoc::line_()
                .append(balanced(&params, &RcDoc::text(",").append(RcDoc::line())))
                .nest(4),
        )
        .append(RcDoc::line_())
        .append(RcDoc::text(format!(") -> {results} {{")))
        .group();
    let mut body = String::new();
    for inst in &g.insts {
        write_inst(&mut body, g, inst, &name);
    }
    let rets: Vec<&str> = g.results.iter().map(|&r| name(r)).collect();
    body.push_str(&format!("  return {}\n}}", rets.join(", ")));
    header.append(RcDoc::hardline()).append(RcDoc::text(body))
}

/// `docs` separated by `sep`, as a balanced tree of appends: `RcDoc::intersperse` nests one
/// append per item, and dropping a document is recursive, so a signature of 18,000 parameters
/// (a 2,000-layer transformer's weights) overflowed a worker thread's stack.
fn balanced(docs: &[RcDoc<'static>], sep: &RcDoc<'static>) -> RcDoc<'static> {
    match docs {
        [] => RcDoc::nil(),
        [one] => one.clone(),
        _ => {
            let (l, r) = docs.split_at(docs.len() / 2);
            balanced(l, sep)
                .append(sep.clone())
                .append(balanced(r, sep))
        }
    }
}

/// Writes `  %r = op %a, %b {attrs} : type loc(...)` and a newline.
fn write_inst<'n>(
    out: &mut String,
    g: &Graph,
    inst: &crate::Inst,
    name: &impl Fn(ValueId) -> &'n str,
) {
    use std::fmt::Write;
    let _ = write!(out, "  {} = {}", name(inst.result), inst.op);
    for (i, &o) in inst.operands.iter().enumerate() {
        out.push_str(if i == 0 { " " } else { ", " });
        out.push_str(name(o));
    }
    if !inst.attrs.is_empty() {
        out.push_str(" {");
        for (i, (k, v)) in inst.attrs.iter().enumerate() {
            let _ = write!(out, "{}{k} = {v}", if i == 0 { "" } else { ", " });
        }
        out.push('}');
    }
    if let Some(d) = g.values.get(inst.result.index()) {
        let _ = write!(out, " : {}", d.ty);
    }
    if let Some(loc) = &inst.loc {
        let _ = write!(out, " {loc}");
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, GraphBuilder, TensorType};

    /// A signature of 100,000 parameters prints (and its document drops) on a 256 KiB stack:
    /// the parameter list is a balanced tree of appends, not one append per parameter.
    #[test]
    fn a_hundred_thousand_parameters_on_a_small_stack() {
        let text = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(|| {
                let mut b = GraphBuilder::new("wide");
                let ps: Vec<_> = (0..100_000)
                    .map(|i| b.param(&format!("p{i}"), TensorType::new([2], DType::F32)))
                    .collect();
                let g = b.finish(&ps[..1]).unwrap();
                print_graph(&g)
            })
            .unwrap()
            .join()
            .expect("printed without overflowing the stack");
        assert!(text.starts_with("graph @wide(\n    %p0: tensor<2xf32>,\n    %p1: tensor<2xf32>,"));
        assert_eq!(text.lines().count(), 100_000 + 4);
    }
}
