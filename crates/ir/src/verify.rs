//! The graph verifier.
//!
//! Invariants checked, by group:
//!
//! **Structure (SSA)**
//! - every value is defined exactly once: parameter `i` is defined by `ValueDef::Param(i)`,
//!   statement `i`'s result by `ValueDef::Inst(i)`, and no other value claims either;
//! - every operand and result refers to a value of the graph, defined before the statement that
//!   reads it (statements are in a valid execution order);
//! - a graph returns at least one value, as many as it declares result types.
//!
//! **Types**
//! - every type has positive dims, rank ≤ 16 and at most 2^48 elements;
//! - every statement satisfies its op's typing rule ([`check_op`]): arity, known attributes of
//!   the right kinds, required attributes present, dtypes the op accepts (one dtype for all
//!   operands but `select`'s `i1` condition and `gather`'s `i32`/`i64` indices), and shapes
//!   (numpy broadcasting, batched-matmul broadcasting, permutations, reduction axes, reshape
//!   element counts, non-empty slice windows, concat dims agreeing off the axis, gather and
//!   iota axes in range); its recorded result type equals the inferred one;
//! - every returned value has its declared result type.
//!
//! **Module**
//! - graph names are unique.
//!
//! Not checked yet (TODO): unused values and dead statements (legal, left to passes); that
//! provenance paths exist. `gather` index values are data, checked at run time (the
//! interpreter reports an index outside `[-n, n)`), never here.

use crate::TensorType;
use crate::graph::{Graph, Module, ValueDef, ValueId};
use crate::infer::{Blame, check_op};
use crate::span::{Diagnostic, Span};
use std::collections::HashSet;

/// Verifies every graph of a module; returns every problem found.
pub fn verify_module(module: &Module) -> Result<(), Vec<Diagnostic>> {
    let mut diags = Vec::new();
    let mut names = HashSet::new();
    for g in &module.graphs {
        if !names.insert(g.name.as_str()) {
            diags.push(Diagnostic::error(
                g.span,
                format!("graph @{} is defined more than once", g.name),
            ));
        }
        if let Err(d) = verify_graph(g) {
            diags.extend(d);
        }
    }
    if diags.is_empty() { Ok(()) } else { Err(diags) }
}

/// Verifies one graph; returns every problem found.
pub fn verify_graph(g: &Graph) -> Result<(), Vec<Diagnostic>> {
    let mut v = Verifier {
        g,
        diags: Vec::new(),
        defined: vec![false; g.values.len()],
    };
    v.check_defs();
    v.check_params();
    v.check_insts();
    v.check_results();
    if v.diags.is_empty() {
        Ok(())
    } else {
        Err(v.diags)
    }
}

struct Verifier<'g> {
    g: &'g Graph,
    diags: Vec<Diagnostic>,
    /// Whether each value has been defined by the point of the walk.
    defined: Vec<bool>,
}

impl Verifier<'_> {
    fn error(&mut self, span: Option<Span>, message: String) {
        self.diags.push(Diagnostic::error(span, message));
    }

    fn exists(&self, v: ValueId) -> bool {
        v.index() < self.g.values.len()
    }

    /// Each value's `def` points at a parameter or statement that names it back.
    fn check_defs(&mut self) {
        let g = self.g;
        for (i, data) in g.values.iter().enumerate() {
            let id = ValueId(i as u32);
            let ok = match data.def {
                ValueDef::Param(p) => g.params.get(p) == Some(&id),
                ValueDef::Inst(s) => g.insts.get(s).is_some_and(|inst| inst.result == id),
            };
            if !ok {
                self.error(
                    data.span,
                    format!(
                        "value {} is not defined by what it claims ({:?})",
                        self.name(id),
                        data.def
                    ),
                );
            }
        }
    }

    fn name(&self, v: ValueId) -> String {
        match self.g.values.get(v.index()).and_then(|d| d.name.as_deref()) {
            Some(n) => format!("%{n}"),
            None => format!("%<{}>", v.0),
        }
    }

    fn check_type(&mut self, span: Option<Span>, ty: &TensorType) {
        if let Err(e) = ty.check() {
            self.error(span, format!("invalid type {ty}: {e}"));
        }
    }

    fn define(&mut self, v: ValueId, span: Option<Span>) {
        if !self.exists(v) {
            self.error(span, format!("value {v:?} does not exist"));
        } else if std::mem::replace(&mut self.defined[v.index()], true) {
            self.error(
                span,
                format!("value {} is defined more than once", self.name(v)),
            );
        }
    }

    fn check_params(&mut self) {
        for &p in &self.g.params {
            let span = self.g.values.get(p.index()).and_then(|d| d.span);
            self.define(p, span);
            if self.exists(p) {
                self.check_type(span, self.g.ty(p));
            }
        }
    }

    fn check_insts(&mut self) {
        let g = self.g;
        for inst in &g.insts {
            let mut operands_ok = true;
            for (i, &o) in inst.operands.iter().enumerate() {
                let span = inst.operand_spans.get(i).copied().or(inst.span);
                if !self.exists(o) || !self.defined[o.index()] {
                    self.error(
                        span,
                        format!(
                            "operand {} of '{}' is used before it is defined",
                            self.name(o),
                            inst.op
                        ),
                    );
                    operands_ok = false;
                }
            }
            self.define(inst.result, inst.span);
            if !operands_ok || !self.exists(inst.result) {
                continue;
            }
            let types: Vec<&TensorType> = inst.operands.iter().map(|&o| g.ty(o)).collect();
            let recorded = g.ty(inst.result);
            self.check_type(inst.span, recorded);
            if let Err(e) = check_op(inst.op, &types, &inst.attrs, Some(recorded)) {
                let span = match &e.blame {
                    Blame::Operand(i) => inst.operand_spans.get(*i).copied(),
                    Blame::Attr(name) => inst.attr_spans.get(name),
                    Blame::Stmt | Blame::ResultType => None,
                }
                .or(inst.span);
                self.error(span, e.message);
            }
        }
    }

    fn check_results(&mut self) {
        let g = self.g;
        let span = g.return_span.or(g.span);
        if g.results.is_empty() {
            self.error(span, format!("graph @{} returns no value", g.name));
        }
        if g.results.len() != g.result_types.len() {
            self.error(
                span,
                format!(
                    "graph @{} declares {} results but returns {}",
                    g.name,
                    g.result_types.len(),
                    g.results.len()
                ),
            );
        }
        for (i, (&r, declared)) in g.results.iter().zip(&g.result_types).enumerate() {
            if !self.exists(r) || !self.defined[r.index()] {
                self.error(
                    span,
                    format!("result {i} ({}) is not defined", self.name(r)),
                );
            } else if g.ty(r) != declared {
                self.error(
                    span,
                    format!(
                        "result {i} has type {}, but the graph declares {declared}",
                        g.ty(r)
                    ),
                );
            }
        }
    }
}
