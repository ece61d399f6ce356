//! From syntax tree to IR: name resolution, attribute conversion and typing of each statement.
//!
//! Errors are collected rather than returned at the first: a statement that fails leaves its
//! result *poisoned*, and later uses of a poisoned value are not reported again, so every
//! independent mistake in a file is reported once.

use crate::ast::{AstGraph, AstOp, AstStmt, Spanned};
use irc_ir::{
    AttrSpans, Attrs, Blame, Diagnostic, Graph, Inst, Module, OpKind, Span, TensorType, ValueData,
    ValueDef, ValueId, check_op,
};
use std::collections::HashMap;

/// Lowers every graph; returns the module or every problem found.
pub fn lower_module(graphs: Vec<AstGraph>, diags: &mut Vec<Diagnostic>) -> Module {
    let mut module = Module::default();
    let mut seen: HashMap<String, Span> = HashMap::new();
    for g in graphs {
        if let Some(prev) = seen.get(&g.name.node) {
            diags.push(
                Diagnostic::error(
                    Some(g.name.span),
                    format!("redefinition of graph @{}", g.name.node),
                )
                .with_note(Some(*prev), "previous definition is here"),
            );
            continue;
        }
        seen.insert(g.name.node.clone(), g.name.span);
        if let Some(graph) = GraphLowering::new(&g, diags).run(&g) {
            module.graphs.push(graph);
        }
    }
    module
}

/// What a name in scope refers to.
#[derive(Copy, Clone)]
enum Binding {
    Value(ValueId, Span),
    /// Defined by a statement that failed; uses are silently poisoned too.
    Poisoned(Span),
}

struct GraphLowering<'d> {
    graph: Graph,
    scope: HashMap<String, Binding>,
    diags: &'d mut Vec<Diagnostic>,
    ok: bool,
}

impl<'d> GraphLowering<'d> {
    fn new(g: &AstGraph, diags: &'d mut Vec<Diagnostic>) -> Self {
        GraphLowering {
            graph: Graph {
                name: g.name.node.clone(),
                params: Vec::new(),
                insts: Vec::new(),
                results: Vec::new(),
                result_types: Vec::new(),
                values: Vec::new(),
                span: Some(g.span),
                return_span: None,
            },
            scope: HashMap::new(),
            diags,
            ok: true,
        }
    }

    fn error(&mut self, span: Span, message: impl Into<String>) {
        self.ok = false;
        self.diags.push(Diagnostic::error(Some(span), message));
    }

    fn run(mut self, g: &AstGraph) -> Option<Graph> {
        for (name, ty) in &g.params {
            let binding = match &ty.node {
                Some(t) => Binding::Value(
                    self.new_value(name, t.clone(), ValueDef::Param(self.graph.params.len())),
                    name.span,
                ),
                None => {
                    self.ok = false;
                    Binding::Poisoned(name.span)
                }
            };
            if let Binding::Value(v, _) = binding {
                self.graph.params.push(v);
            }
            self.bind(name, binding);
        }
        for t in &g.results {
            match &t.node {
                Some(t) => self.graph.result_types.push(t.clone()),
                None => self.ok = false,
            }
        }
        let mut returned = false;
        for stmt in &g.body {
            if returned {
                let span = match stmt {
                    AstStmt::Op(op) => op.span,
                    AstStmt::Return { span, .. } => *span,
                    AstStmt::Error => continue,
                };
                self.error(
                    span,
                    "statement after `return`; `return` must be the last statement of a graph",
                );
                break;
            }
            match stmt {
                AstStmt::Op(op) => self.statement(op),
                AstStmt::Return { values, span } => {
                    returned = true;
                    self.ret(values, *span, g);
                }
                AstStmt::Error => self.ok = false,
            }
        }
        if !returned {
            self.error(g.close, format!("graph @{} has no `return`", g.name.node));
        }
        self.ok.then_some(self.graph)
    }

    fn new_value(&mut self, name: &Spanned<String>, ty: TensorType, def: ValueDef) -> ValueId {
        let id = ValueId(self.graph.values.len() as u32);
        self.graph.values.push(ValueData {
            ty,
            def,
            name: Some(name.node.clone()),
            span: Some(name.span),
        });
        id
    }

    fn bind(&mut self, name: &Spanned<String>, binding: Binding) {
        let prev = match self.scope.get(&name.node) {
            Some(Binding::Value(_, s)) | Some(Binding::Poisoned(s)) => Some(*s),
            None => None,
        };
        if let Some(prev) = prev {
            self.ok = false;
            self.diags.push(
                Diagnostic::error(
                    Some(name.span),
                    format!("redefinition of value %{}", name.node),
                )
                .with_note(Some(prev), "previous definition is here"),
            );
            return;
        }
        self.scope.insert(name.node.clone(), binding);
    }

    /// Resolves a use; `None` if undefined (reported) or poisoned (reported at its definition).
    fn resolve(&mut self, name: &Spanned<String>) -> Option<ValueId> {
        match self.scope.get(&name.node) {
            Some(Binding::Value(v, _)) => Some(*v),
            Some(Binding::Poisoned(_)) => {
                self.ok = false;
                None
            }
            None => {
                self.error(name.span, format!("use of undefined value %{}", name.node));
                None
            }
        }
    }

    fn statement(&mut self, op: &AstOp) {
        let typed = self.type_statement(op);
        let binding = match typed {
            Some((kind, operands, attrs, attr_spans, ty)) => {
                let v = self.new_value(&op.result, ty, ValueDef::Inst(self.graph.insts.len()));
                self.graph.insts.push(Inst {
                    op: kind,
                    operands,
                    attrs,
                    result: v,
                    loc: op.loc.clone(),
                    span: Some(op.span),
                    operand_spans: op.operands.iter().map(|o| o.span).collect(),
                    attr_spans,
                });
                Binding::Value(v, op.result.span)
            }
            None => {
                self.ok = false;
                Binding::Poisoned(op.result.span)
            }
        };
        self.bind(&op.result, binding);
    }

    #[allow(clippy::type_complexity)]
    fn type_statement(
        &mut self,
        op: &AstOp,
    ) -> Option<(OpKind, Vec<ValueId>, Attrs, AttrSpans, TensorType)> {
        let kind = match OpKind::from_name(&op.op.node) {
            Some(k) => Some(k),
            None => {
                let hint = suggest(&op.op.node)
                    .map(|s| format!("; did you mean '{s}'?"))
                    .unwrap_or_default();
                self.error(op.op.span, format!("unknown op '{}'{hint}", op.op.node));
                None
            }
        };
        let operands: Vec<Option<ValueId>> = op.operands.iter().map(|o| self.resolve(o)).collect();
        let mut attrs = Attrs::new();
        let mut attr_spans = AttrSpans::default();
        let mut attrs_ok = true;
        for a in &op.attrs {
            if let Some(prev) = attr_spans.get(&a.name.node) {
                self.ok = false;
                self.diags.push(
                    Diagnostic::error(
                        Some(a.name.span),
                        format!("attribute '{}' is given twice", a.name.node),
                    )
                    .with_note(Some(prev), "first given here"),
                );
                attrs_ok = false;
                continue;
            }
            attr_spans.spans.push((a.name.node.clone(), a.span));
            match &a.value {
                Some(v) => {
                    attrs.insert(&a.name.node, v.clone());
                }
                None => attrs_ok = false,
            }
        }
        let declared = match &op.ty {
            Some(t) => Some(t.node.clone()?),
            None => None,
        };
        let kind = kind?;
        let operands: Vec<ValueId> = operands.into_iter().collect::<Option<_>>()?;
        if !attrs_ok {
            return None;
        }
        let types: Vec<&TensorType> = operands.iter().map(|&v| self.graph.ty(v)).collect();
        match check_op(kind, &types, &attrs, declared.as_ref()) {
            Ok(ty) => Some((kind, operands, attrs, attr_spans, ty)),
            Err(e) => {
                let span = match &e.blame {
                    Blame::Stmt => op.span,
                    Blame::Operand(i) => op.operands.get(*i).map_or(op.span, |o| o.span),
                    Blame::Attr(name) => attr_spans.get(name).unwrap_or(op.span),
                    Blame::ResultType => op.ty.as_ref().map_or(op.span, |t| t.span),
                };
                self.error(span, e.message);
                None
            }
        }
    }

    fn ret(&mut self, values: &[Spanned<String>], span: Span, g: &AstGraph) {
        self.graph.return_span = Some(span);
        let resolved: Vec<Option<ValueId>> = values.iter().map(|v| self.resolve(v)).collect();
        if values.is_empty() {
            self.error(span, "`return` needs at least one value");
            return;
        }
        if values.len() != g.results.len() {
            self.error(
                span,
                format!(
                    "graph @{} declares {} result(s) but returns {}",
                    g.name.node,
                    g.results.len(),
                    values.len()
                ),
            );
            return;
        }
        for ((v, name), declared) in resolved.iter().zip(values).zip(&g.results) {
            let (Some(v), Some(declared)) = (v, &declared.node) else {
                continue;
            };
            let actual = self.graph.ty(*v).clone();
            if actual != *declared {
                self.error(
                    name.span,
                    format!(
                        "returned value %{} has type {actual}, but the graph declares {declared}",
                        name.node
                    ),
                );
            }
        }
        self.graph.results = resolved.into_iter().flatten().collect();
    }
}

/// The op whose name is closest to `name`, if it is close.
fn suggest(name: &str) -> Option<&'static str> {
    irc_ir::ALL_OPS
        .iter()
        .map(|op| (edit_distance(name, op.name()), op.name()))
        .filter(|&(d, _)| d <= 2)
        .min()
        .map(|(_, n)| n)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}
