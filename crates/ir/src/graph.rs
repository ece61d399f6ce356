//! The SSA graph: values, statements (instructions), graphs and modules, and the builder.

use crate::attr::{AttrSpans, Attrs};
use crate::infer::{OpError, check_op};
use crate::span::{Provenance, Span};
use crate::{Attr, DType, OpKind, TensorType};

/// A value of a graph: a parameter or the result of a statement. Indexes [`Graph::values`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl ValueId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What defines a value.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ValueDef {
    /// The graph parameter at this position.
    Param(usize),
    /// The statement at this position of [`Graph::insts`].
    Inst(usize),
}

/// A value's type, its definition and the name it was written with, if any.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueData {
    pub ty: TensorType,
    pub def: ValueDef,
    /// The name hint (`q` for `%q`). The printer keeps hints that are unique and numbers the rest.
    pub name: Option<String>,
    pub span: Option<Span>,
}

/// One statement: `%result = op %operands... {attrs} : type loc(...)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Inst {
    pub op: OpKind,
    pub operands: Vec<ValueId>,
    pub attrs: Attrs,
    pub result: ValueId,
    /// Upstream provenance, `loc("model.py":41:9)`.
    pub loc: Option<Provenance>,
    /// The whole statement in the source text, if parsed.
    pub span: Option<Span>,
    /// Where each operand was written, if parsed (parallel to `operands`).
    pub operand_spans: Vec<Span>,
    pub attr_spans: AttrSpans,
}

/// A graph: parameters, statements in a valid execution order, results.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    pub name: String,
    pub params: Vec<ValueId>,
    pub insts: Vec<Inst>,
    pub results: Vec<ValueId>,
    /// The declared result types (`-> (tensor<..>, ..)`).
    pub result_types: Vec<TensorType>,
    pub values: Vec<ValueData>,
    pub span: Option<Span>,
    /// Where the `return` statement was written, if parsed.
    pub return_span: Option<Span>,
}

/// A file's worth of graphs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Module {
    pub graphs: Vec<Graph>,
}

impl Module {
    pub fn graph(&self, name: &str) -> Option<&Graph> {
        self.graphs.iter().find(|g| g.name == name)
    }
}

impl Graph {
    pub fn value(&self, v: ValueId) -> &ValueData {
        &self.values[v.index()]
    }

    pub fn ty(&self, v: ValueId) -> &TensorType {
        &self.values[v.index()].ty
    }

    /// The statement defining `v`, if it is not a parameter.
    pub fn def_inst(&self, v: ValueId) -> Option<&Inst> {
        match self.values.get(v.index())?.def {
            ValueDef::Inst(i) => self.insts.get(i),
            ValueDef::Param(_) => None,
        }
    }

    pub fn param_types(&self) -> impl Iterator<Item = &TensorType> {
        self.params.iter().map(|&p| self.ty(p))
    }

    /// For each value, the index of the last statement that reads it (`insts.len()` for graph
    /// results, `None` for values nothing reads). Lets executors free memory early.
    pub fn last_uses(&self) -> Vec<Option<usize>> {
        let mut last = vec![None; self.values.len()];
        for (i, inst) in self.insts.iter().enumerate() {
            for &v in &inst.operands {
                if let Some(slot) = last.get_mut(v.index()) {
                    *slot = Some(i);
                }
            }
        }
        for &r in &self.results {
            if let Some(slot) = last.get_mut(r.index()) {
                *slot = Some(self.insts.len());
            }
        }
        last
    }
}

/// Builds a graph statement by statement, inferring and checking each statement's type as it
/// is added, so that a finished graph always verifies.
///
/// ```
/// use irc_ir::{DType, GraphBuilder, OpKind, TensorType, Attrs};
/// let mut b = GraphBuilder::new("scale");
/// let x = b.param("x", TensorType::new([4, 8], DType::F32));
/// let e = b.unary(OpKind::Exp, x).unwrap();
/// let g = b.finish(&[e]).unwrap();
/// assert_eq!(g.insts.len(), 1);
/// irc_ir::verify_graph(&g).unwrap();
/// ```
#[derive(Debug)]
pub struct GraphBuilder {
    graph: Graph,
}

impl GraphBuilder {
    pub fn new(name: impl Into<String>) -> GraphBuilder {
        GraphBuilder {
            graph: Graph {
                name: name.into(),
                params: Vec::new(),
                insts: Vec::new(),
                results: Vec::new(),
                result_types: Vec::new(),
                values: Vec::new(),
                span: None,
                return_span: None,
            },
        }
    }

    /// The graph built so far.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    pub fn ty(&self, v: ValueId) -> &TensorType {
        self.graph.ty(v)
    }

    fn push_value(&mut self, data: ValueData) -> ValueId {
        let id = ValueId(self.graph.values.len() as u32);
        self.graph.values.push(data);
        id
    }

    /// Adds a parameter named `name` (no `%`).
    pub fn param(&mut self, name: &str, ty: TensorType) -> ValueId {
        let def = ValueDef::Param(self.graph.params.len());
        let id = self.push_value(ValueData {
            ty,
            def,
            name: Some(name.to_string()),
            span: None,
        });
        self.graph.params.push(id);
        id
    }

    /// Adds a statement, inferring its type (or checking it against `ty` for constants, whose
    /// type cannot be inferred).
    pub fn op_typed(
        &mut self,
        op: OpKind,
        operands: &[ValueId],
        attrs: Attrs,
        ty: Option<&TensorType>,
    ) -> Result<ValueId, OpError> {
        if let Some(bad) = operands
            .iter()
            .find(|v| v.index() >= self.graph.values.len())
        {
            return Err(OpError::stmt(format!(
                "operand {bad:?} is not a value of this graph"
            )));
        }
        let types: Vec<&TensorType> = operands.iter().map(|&v| self.graph.ty(v)).collect();
        let result_ty = check_op(op, &types, &attrs, ty)?;
        let result = self.push_value(ValueData {
            ty: result_ty,
            def: ValueDef::Inst(self.graph.insts.len()),
            name: None,
            span: None,
        });
        self.graph.insts.push(Inst {
            op,
            operands: operands.to_vec(),
            attrs,
            result,
            loc: None,
            span: None,
            operand_spans: Vec::new(),
            attr_spans: AttrSpans::default(),
        });
        Ok(result)
    }

    /// Adds a statement whose type is inferred.
    pub fn op(
        &mut self,
        op: OpKind,
        operands: &[ValueId],
        attrs: Attrs,
    ) -> Result<ValueId, OpError> {
        self.op_typed(op, operands, attrs, None)
    }

    /// Sets the name hint of a value.
    pub fn name(&mut self, v: ValueId, name: &str) {
        if let Some(data) = self.graph.values.get_mut(v.index()) {
            data.name = Some(name.to_string());
        }
    }

    /// Sets the provenance of the statement defining `v`.
    pub fn set_loc(&mut self, v: ValueId, loc: Option<Provenance>) {
        if let Some(ValueDef::Inst(i)) = self.graph.values.get(v.index()).map(|d| d.def) {
            self.graph.insts[i].loc = loc;
        }
    }

    /// Sets the source span of the statement defining `v` (for tools that rebuild a parsed
    /// graph, such as the passes, so later diagnostics still point at the source).
    pub fn set_span(&mut self, v: ValueId, span: Option<Span>) {
        if let Some(ValueDef::Inst(i)) = self.graph.values.get(v.index()).map(|d| d.def) {
            self.graph.insts[i].span = span;
        }
    }

    pub fn unary(&mut self, op: OpKind, x: ValueId) -> Result<ValueId, OpError> {
        self.op(op, &[x], Attrs::new())
    }

    pub fn binary(&mut self, op: OpKind, a: ValueId, b: ValueId) -> Result<ValueId, OpError> {
        self.op(op, &[a, b], Attrs::new())
    }

    pub fn matmul(&mut self, a: ValueId, b: ValueId) -> Result<ValueId, OpError> {
        self.op(OpKind::Matmul, &[a, b], Attrs::new())
    }

    /// A constant filled with `value`.
    pub fn constant(&mut self, value: f64, ty: TensorType) -> Result<ValueId, OpError> {
        let attrs = Attrs::new().with("value", Attr::Float(value));
        self.op_typed(OpKind::Constant, &[], attrs, Some(&ty))
    }

    /// A rank-0 constant of the given dtype.
    pub fn scalar(&mut self, value: f64, dtype: DType) -> Result<ValueId, OpError> {
        self.constant(value, TensorType::scalar(dtype))
    }

    pub fn cast(&mut self, x: ValueId, dtype: DType) -> Result<ValueId, OpError> {
        self.op(
            OpKind::Cast,
            &[x],
            Attrs::new().with("dtype", Attr::DType(dtype)),
        )
    }

    pub fn transpose(&mut self, x: ValueId, perm: &[i64]) -> Result<ValueId, OpError> {
        self.op(
            OpKind::Transpose,
            &[x],
            Attrs::new().with("perm", ints(perm)),
        )
    }

    pub fn reshape(&mut self, x: ValueId, shape: &[i64]) -> Result<ValueId, OpError> {
        self.op(
            OpKind::Reshape,
            &[x],
            Attrs::new().with("shape", ints(shape)),
        )
    }

    pub fn broadcast(&mut self, x: ValueId, shape: &[i64]) -> Result<ValueId, OpError> {
        self.op(
            OpKind::Broadcast,
            &[x],
            Attrs::new().with("shape", ints(shape)),
        )
    }

    pub fn reduce(
        &mut self,
        op: OpKind,
        x: ValueId,
        axes: &[i64],
        keepdims: bool,
    ) -> Result<ValueId, OpError> {
        let attrs = Attrs::new()
            .with("axes", ints(axes))
            .with("keepdims", Attr::Bool(keepdims));
        self.op(op, &[x], attrs)
    }

    /// Finishes the graph returning `results`; the declared result types are theirs.
    pub fn finish(mut self, results: &[ValueId]) -> Result<Graph, OpError> {
        if results.is_empty() {
            return Err(OpError::stmt("a graph must return at least one value"));
        }
        if let Some(bad) = results
            .iter()
            .find(|v| v.index() >= self.graph.values.len())
        {
            return Err(OpError::stmt(format!(
                "result {bad:?} is not a value of this graph"
            )));
        }
        self.graph.results = results.to_vec();
        self.graph.result_types = results.iter().map(|&r| self.graph.ty(r).clone()).collect();
        Ok(self.graph)
    }
}

/// An integer-array attribute.
pub fn ints(values: &[i64]) -> Attr {
    Attr::Array(values.iter().map(|&i| Attr::Int(i)).collect())
}
