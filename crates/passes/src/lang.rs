//! The graph IR as an egg language: one e-node per op with its attributes as data, the type
//! analysis, and the conversions `Graph → EGraph` (sharing kept: a value used twice is one
//! e-class) and selected e-nodes → `Graph`.

use egg::{DidMerge, Id, Language};
use irc_ir::{Attr, Attrs, DType, Graph, GraphBuilder, OpError, OpKind, TensorType, ValueId};
use std::collections::HashMap;

/// An attribute value that can be hashed and ordered (floats by their bits).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AKey {
    Int(i64),
    Float(u64),
    Bool(bool),
    Str(String),
    DType(DType),
    Array(Vec<AKey>),
}

impl AKey {
    pub fn from_attr(a: &Attr) -> AKey {
        match a {
            Attr::Int(i) => AKey::Int(*i),
            Attr::Float(x) => AKey::Float(x.to_bits()),
            Attr::Bool(b) => AKey::Bool(*b),
            Attr::Str(s) => AKey::Str(s.clone()),
            Attr::DType(d) => AKey::DType(*d),
            Attr::Array(xs) => AKey::Array(xs.iter().map(AKey::from_attr).collect()),
        }
    }

    pub fn to_attr(&self) -> Attr {
        match self {
            AKey::Int(i) => Attr::Int(*i),
            AKey::Float(b) => Attr::Float(f64::from_bits(*b)),
            AKey::Bool(b) => Attr::Bool(*b),
            AKey::Str(s) => Attr::Str(s.clone()),
            AKey::DType(d) => Attr::DType(*d),
            AKey::Array(xs) => Attr::Array(xs.iter().map(AKey::to_attr).collect()),
        }
    }
}

/// What an e-node computes: a graph parameter or an op.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Head {
    Param(u32),
    Op(OpKind),
}

/// One e-node: an op, its attributes (sorted by name), the written type of a constant or an
/// iota, and its operand e-classes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    pub head: Head,
    pub attrs: Vec<(String, AKey)>,
    /// Only for ops whose type is written, not inferred (`constant`, `iota`): (shape, dtype).
    pub written_ty: Option<(Vec<u64>, DType)>,
    pub children: Vec<Id>,
}

impl Node {
    pub fn op(op: OpKind, attrs: &Attrs, children: Vec<Id>) -> Node {
        let mut attrs: Vec<(String, AKey)> = attrs
            .iter()
            .filter(|(k, v)| {
                !(op == OpKind::Matmul && k.starts_with("transpose_") && **v == Attr::Bool(false))
            })
            .map(|(k, v)| (k.to_string(), AKey::from_attr(v)))
            .collect();
        attrs.sort();
        Node {
            head: Head::Op(op),
            attrs,
            written_ty: None,
            children,
        }
    }

    /// The node of a graph statement over the given operand classes, with its written type
    /// (`constant`, `iota`) kept.
    pub fn of_inst(g: &irc_ir::Graph, inst: &irc_ir::Inst, children: Vec<Id>) -> Node {
        let mut n = Node::op(inst.op, &inst.attrs, children);
        if inst.op.type_is_written() {
            let t = g.ty(inst.result);
            n.written_ty = Some((t.shape.clone(), t.dtype));
        }
        n
    }

    pub fn kind(&self) -> Option<OpKind> {
        match self.head {
            Head::Op(k) => Some(k),
            Head::Param(_) => None,
        }
    }

    pub fn is(&self, op: OpKind) -> bool {
        self.head == Head::Op(op)
    }

    pub fn attr(&self, name: &str) -> Option<Attr> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.to_attr())
    }

    pub fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.attr(name).and_then(|a| a.as_ints())
    }

    pub fn flag(&self, name: &str) -> bool {
        self.attr(name).and_then(|a| a.as_bool()).unwrap_or(false)
    }

    pub fn to_attrs(&self) -> Attrs {
        let mut a = Attrs::new();
        for (k, v) in &self.attrs {
            a.insert(k, v.to_attr());
        }
        a
    }
}

impl Language for Node {
    /// The head alone: coarser than [`Node::matches`] (as egg allows: nodes that match have the
    /// same head, and nodes sort by head first), and cheap. egg computes it for every node at
    /// every rebuild, to index classes by op for its pattern matcher, which irc does not use;
    /// the whole node as the discriminant cloned every node's attributes there.
    type Discriminant = Head;

    fn discriminant(&self) -> Self::Discriminant {
        self.head.clone()
    }

    fn matches(&self, other: &Self) -> bool {
        self.head == other.head
            && self.attrs == other.attrs
            && self.written_ty == other.written_ty
            && self.children.len() == other.children.len()
    }

    fn children(&self) -> &[Id] {
        &self.children
    }

    fn children_mut(&mut self) -> &mut [Id] {
        &mut self.children
    }
}

/// Per e-class facts: the type (every node of a class has it) and, for a class holding a
/// constant that is one value everywhere, that value.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassData {
    /// `None` only for an ill-typed node, which rules never add (they check first).
    pub ty: Option<TensorType>,
    pub splat: Option<f64>,
}

/// The e-class analysis: types by [`irc_ir::check_op`], the very rule the verifier uses.
#[derive(Clone, Debug, Default)]
pub struct TypeAnalysis {
    pub params: Vec<TensorType>,
    /// The type of the node being added, when the caller has just computed it ([`add_typed`]):
    /// `make` takes it instead of checking the node again.
    pub known: Option<TensorType>,
}

/// Adds `n`, whose type is `ty` (what [`node_type`] returns for it), without typing it again.
pub fn add_typed(eg: &mut EGraph, n: Node, ty: TensorType) -> Id {
    eg.analysis.known = Some(ty);
    let id = eg.add(n);
    eg.analysis.known = None;
    id
}

pub type EGraph = egg::EGraph<Node, TypeAnalysis>;

/// The type a node would have given its children's classes, or why it is ill-typed.
pub fn node_type(eg: &EGraph, n: &Node) -> Result<TensorType, OpError> {
    match n.head {
        Head::Param(i) => eg
            .analysis
            .params
            .get(i as usize)
            .cloned()
            .ok_or_else(|| OpError::stmt("no such parameter")),
        Head::Op(op) => {
            let mut tys = Vec::with_capacity(n.children.len());
            for &c in &n.children {
                match &eg[c].data.ty {
                    Some(t) => tys.push(t),
                    None => return Err(OpError::stmt("operand is ill-typed")),
                }
            }
            let declared = n
                .written_ty
                .as_ref()
                .map(|(s, d)| TensorType::new(s.clone(), *d));
            irc_ir::check_op(op, &tys, &n.to_attrs(), declared.as_ref())
        }
    }
}

/// The value of a constant node that holds one scalar value: the written value as its dtype
/// holds it (`100000 : f16` is inf, `1e-50 : f32` is 0), which is what every rule computes
/// from.
pub fn splat_value(n: &Node) -> Option<f64> {
    if !n.is(OpKind::Constant) {
        return None;
    }
    let v = match n.attr("value")? {
        Attr::Float(x) => x,
        Attr::Int(i) => i as f64,
        Attr::Bool(b) => {
            if b {
                1.0
            } else {
                0.0
            }
        }
        Attr::Array(_) | Attr::Str(_) | Attr::DType(_) => return None,
    };
    Some(n.written_ty.as_ref().map_or(v, |(_, d)| d.round(v)))
}

impl egg::Analysis<Node> for TypeAnalysis {
    type Data = ClassData;

    fn make(eg: &mut EGraph, n: &Node, _id: Id) -> ClassData {
        let known = eg.analysis.known.take();
        debug_assert!(known.is_none() || known == node_type(eg, n).ok());
        ClassData {
            ty: known.or_else(|| node_type(eg, n).ok()),
            splat: splat_value(n),
        }
    }

    fn merge(&mut self, a: &mut ClassData, b: ClassData) -> DidMerge {
        let mut changed_a = false;
        if a.ty.is_none() && b.ty.is_some() {
            a.ty = b.ty.clone();
            changed_a = true;
        }
        if a.splat.is_none() && b.splat.is_some() {
            a.splat = b.splat;
            changed_a = true;
        }
        DidMerge(changed_a, a.ty != b.ty || a.splat != b.splat)
    }
}

/// Where an e-class's value came from in the input: its name hint, its `loc(...)` provenance and
/// the source span of its statement, kept on whichever node extraction picks for the class (so
/// diagnostics and kernel comments still point at the user's source after rewriting).
#[derive(Clone, Debug, Default)]
pub struct Origin {
    pub name: Option<String>,
    pub loc: Option<irc_ir::Provenance>,
    pub span: Option<irc_ir::Span>,
}

/// A graph loaded into an e-graph: the root class of each result, and the names and
/// provenance of the original values by class, so the output keeps them.
pub struct Loaded {
    pub egraph: EGraph,
    pub roots: Vec<Id>,
    pub names: HashMap<Id, Origin>,
    /// The node each statement of the input was loaded as, with its class: extraction starts
    /// from the input, so it can only improve on it.
    pub original: Vec<(Id, Node)>,
}

/// `Graph → EGraph`. Every value becomes one e-class (two statements computing the same thing
/// share one, as hash-consing does).
pub fn load(g: &Graph) -> Loaded {
    let params: Vec<TensorType> = g.params.iter().map(|&p| g.ty(p).clone()).collect();
    let mut eg = EGraph::new(TypeAnalysis {
        params,
        known: None,
    });
    let mut map: Vec<Option<Id>> = vec![None; g.values.len()];
    let mut names = HashMap::new();
    let mut original = Vec::new();
    for (i, &p) in g.params.iter().enumerate() {
        let id = eg.add(Node {
            head: Head::Param(i as u32),
            attrs: vec![],
            written_ty: None,
            children: vec![],
        });
        map[p.index()] = Some(id);
    }
    for inst in &g.insts {
        let children: Vec<Id> = inst
            .operands
            .iter()
            .filter_map(|o| map[o.index()])
            .collect();
        let n = Node::of_inst(g, inst, children);
        let id = eg.add(n.clone());
        original.push((id, n));
        map[inst.result.index()] = Some(id);
        names.entry(id).or_insert_with(|| Origin {
            name: g.value(inst.result).name.clone(),
            loc: inst.loc.clone(),
            span: inst.span,
        });
    }
    eg.rebuild();
    let roots = g
        .results
        .iter()
        .filter_map(|r| map[r.index()])
        .map(|id| eg.find(id))
        .collect();
    let names = names.into_iter().map(|(k, v)| (eg.find(k), v)).collect();
    Loaded {
        egraph: eg,
        roots,
        names,
        original,
    }
}

/// Builds a graph from one chosen node per e-class (`choice`), in a valid order, keeping the
/// parameters of `original` (all of them, in order, with their names).
pub fn build_graph(
    original: &Graph,
    eg: &EGraph,
    choice: &HashMap<Id, Node>,
    roots: &[Id],
    names: &HashMap<Id, Origin>,
) -> Result<Graph, OpError> {
    let mut b = GraphBuilder::new(original.name.clone());
    let params: Vec<ValueId> = original
        .params
        .iter()
        .map(|&p| {
            b.param(
                original.value(p).name.as_deref().unwrap_or("arg"),
                original.ty(p).clone(),
            )
        })
        .collect();
    // Indexed by class id (vectors, not hash maps: the walk visits every selected class).
    let bound = eg
        .classes()
        .map(|c| usize::from(c.id) + 1)
        .max()
        .unwrap_or(0);
    let mut built: Vec<Option<ValueId>> = vec![None; bound];
    let mut on_path = vec![false; bound];
    // Iterative post-order: no recursion, so deep graphs cannot overflow the stack.
    let mut results = Vec::new();
    for &root in roots {
        let root = eg.find(root);
        let mut stack = vec![(root, false)];
        while let Some((c, expanded)) = stack.pop() {
            if built[usize::from(c)].is_some() {
                continue;
            }
            let n = choice
                .get(&c)
                .ok_or_else(|| OpError::stmt("extraction chose no node for a class"))?;
            if !expanded {
                if std::mem::replace(&mut on_path[usize::from(c)], true) {
                    return Err(OpError::stmt("extraction chose a cycle"));
                }
                stack.push((c, true));
                for &ch in n.children.iter().rev() {
                    let ch = eg.find(ch);
                    if built[usize::from(ch)].is_none() {
                        stack.push((ch, false));
                    }
                }
                continue;
            }
            on_path[usize::from(c)] = false;
            let v = match n.head {
                Head::Param(i) => params[i as usize],
                Head::Op(op) => {
                    let operands: Vec<ValueId> = n
                        .children
                        .iter()
                        .map(|&ch| {
                            built[usize::from(eg.find(ch))]
                                .ok_or_else(|| OpError::stmt("operand not built"))
                        })
                        .collect::<Result<_, _>>()?;
                    let declared = n
                        .written_ty
                        .as_ref()
                        .map(|(s, d)| TensorType::new(s.clone(), *d));
                    let v = b.op_typed(op, &operands, n.to_attrs(), declared.as_ref())?;
                    if let Some(o) = names.get(&c) {
                        if let Some(name) = &o.name {
                            b.name(v, name);
                        }
                        b.set_loc(v, o.loc.clone());
                        b.set_span(v, o.span);
                    }
                    v
                }
            };
            built[usize::from(c)] = Some(v);
        }
        results.push(built[usize::from(root)].ok_or_else(|| OpError::stmt("root not built"))?);
    }
    let mut g = b.finish(&results)?;
    inherit_origins(&mut g);
    Ok(g)
}

/// A statement that rewriting created has no source position of its own: it takes that of the
/// first statement reading it that has one (the statement it was rewritten from, or feeds).
fn inherit_origins(g: &mut Graph) {
    let mut consumers: Vec<Vec<usize>> = vec![vec![]; g.values.len()];
    for (i, inst) in g.insts.iter().enumerate() {
        for &o in &inst.operands {
            consumers[o.index()].push(i);
        }
    }
    for i in (0..g.insts.len()).rev() {
        if g.insts[i].span.is_some() || g.insts[i].loc.is_some() {
            continue;
        }
        let from = consumers[g.insts[i].result.index()]
            .iter()
            .find(|&&c| g.insts[c].span.is_some() || g.insts[c].loc.is_some())
            .copied();
        if let Some(c) = from {
            g.insts[i].span = g.insts[c].span;
            g.insts[i].loc = g.insts[c].loc.clone();
        }
    }
}
