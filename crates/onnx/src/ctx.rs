//! The import context: the graph being built, the ONNX name environment, known (host) tensors,
//! constant folding, and the weights.

use crate::{Imported, Options};
use irc_interp::{Data, Tensor};
use irc_ir::{Attr, Attrs, DType, Graph, GraphBuilder, OpKind, Provenance, TensorType, ValueId};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// Known results with at most this many elements are folded at import time.
const FOLD_LIMIT: u64 = 1 << 16;

pub type R<T> = Result<T, String>;

/// An ONNX value: computed by the graph, or known on the host.
#[derive(Clone, Debug)]
pub enum Val {
    Dyn(ValueId),
    /// A known tensor, and the initializer name it came from (for its weight parameter).
    Known(Rc<Tensor>, Option<Rc<str>>),
}

/// An ONNX name as an irc value name (`[A-Za-z0-9_.$-]`; anything else becomes `_`).
pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.$-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

pub struct Ctx<'o> {
    b: GraphBuilder,
    env: HashMap<String, Val>,
    weights: Vec<(String, Tensor)>,
    param_names: HashSet<String>,
    /// Known tensors already written into the graph, by address (the tensor is kept alive,
    /// so its address is never reused by another).
    materialized: HashMap<*const Tensor, (Rc<Tensor>, ValueId)>,
    pub opset: i64,
    opts: &'o Options,
    /// The node being imported: its name becomes the provenance of what it adds.
    loc: Option<Provenance>,
}

impl<'o> Ctx<'o> {
    /// The caller's reader of external tensor data, if any.
    pub fn external(&self) -> Option<&'o crate::ExternalData> {
        self.opts.external.as_ref()
    }

    pub fn new(name: &str, opset: i64, opts: &'o Options) -> Ctx<'o> {
        Ctx {
            b: GraphBuilder::new(name),
            env: HashMap::new(),
            weights: Vec::new(),
            param_names: HashSet::new(),
            materialized: HashMap::new(),
            opset,
            opts,
            loc: None,
        }
    }

    pub fn set_node(&mut self, node_name: &str, index: usize) {
        self.loc = Some(Provenance {
            file: if node_name.is_empty() {
                format!("node{index}")
            } else {
                node_name.to_string()
            },
            line: index as u32,
            col: 0,
        });
    }

    pub fn is_defined(&self, name: &str) -> bool {
        self.env.contains_key(name)
    }

    pub fn lookup(&self, name: &str) -> Option<Val> {
        self.env.get(name).cloned()
    }

    fn unique_param(&mut self, hint: &str) -> String {
        let base = sanitize(hint);
        let base = if base.is_empty() { "w".into() } else { base };
        let mut name = base.clone();
        let mut k = 1;
        while !self.param_names.insert(name.clone()) {
            name = format!("{base}_{k}");
            k += 1;
        }
        name
    }

    pub fn define_known(&mut self, name: &str, t: Tensor) {
        self.env
            .insert(name.to_string(), Val::Known(Rc::new(t), Some(name.into())));
    }

    pub fn define_input(&mut self, name: &str, ty: TensorType) {
        let p = self.unique_param(name);
        let v = self.b.param(&p, ty);
        self.env.insert(name.to_string(), Val::Dyn(v));
    }

    /// Binds a node output; a computed value takes the ONNX name as its name hint.
    pub fn define(&mut self, name: &str, v: Val, _index: usize) {
        if let Val::Dyn(id) = v
            && self.b.graph().value(id).name.is_none()
        {
            self.b.name(id, &sanitize(name));
        }
        self.env.insert(name.to_string(), v);
    }

    pub fn ty(&self, v: &Val) -> TensorType {
        match v {
            Val::Dyn(id) => self.b.ty(*id).clone(),
            Val::Known(t, _) => t.ty.clone(),
        }
    }

    /// The tensor of a known value.
    pub fn known<'v>(&self, v: &'v Val) -> Option<&'v Tensor> {
        match v {
            Val::Known(t, _) => Some(t),
            Val::Dyn(_) => None,
        }
    }

    /// A known tensor as a value.
    pub fn konst(&self, t: Tensor) -> Val {
        Val::Known(Rc::new(t), None)
    }

    /// A known rank-0 tensor.
    pub fn scalar(&self, x: f64, dtype: DType) -> Val {
        let data = Data::from_f64(dtype, vec![x]);
        self.konst(Tensor {
            ty: TensorType::scalar(dtype),
            data,
        })
    }

    /// A known 1-D i64 tensor.
    pub fn ints_val(&self, v: &[i64]) -> Val {
        self.konst(Tensor {
            ty: TensorType::new([v.len() as u64], DType::I64),
            data: Data::I64(v.to_vec()),
        })
    }

    /// The value as an irc value, writing a known tensor into the graph (inlined when small,
    /// a weight parameter otherwise) the first time.
    pub fn value(&mut self, v: &Val) -> R<ValueId> {
        let (t, name) = match v {
            Val::Dyn(id) => return Ok(*id),
            Val::Known(t, name) => (t, name),
        };
        if t.ty.numel() == 0 {
            return Err(empty_operand(&t.ty));
        }
        let key = Rc::as_ptr(t);
        if let Some((_, id)) = self.materialized.get(&key) {
            return Ok(*id);
        }
        // A boolean band over the last two axes (an exporter's folded causal or window mask)
        // is written as its `iota` comparisons: free in a kernel, and what the attention
        // planner reads as a band (skipping the key tiles outside it).
        if let Some(id) = self.band_of(t)? {
            self.materialized.insert(key, (t.clone(), id));
            return Ok(id);
        }
        // So is an integer `arange` along one axis (an exporter's folded query and key
        // positions, which a mask compares).
        if let Some(id) = self.arange_of(t)? {
            self.materialized.insert(key, (t.clone(), id));
            return Ok(id);
        }
        // Initializers are weights (but scalars); what the model computes or writes as a
        // Constant node is inlined when small.
        let limit = if name.is_some() {
            1
        } else {
            self.opts.inline_limit
        };
        // A computed tensor of one repeated value (padding, a broadcast fill) is a splat
        // constant whatever its size: free in a kernel, where an array or a weight would be
        // read from memory.
        let items = constant_attr(&t.data, t.ty.rank() == 0);
        let splat = match &items {
            Attr::Array(v) if name.is_none() && v.len() > 1 => {
                v.windows(2).all(|w| w[0] == w[1]).then(|| v[0].clone())
            }
            _ => None,
        };
        let id = if t.ty.numel() <= limit || splat.is_some() {
            let value = splat.unwrap_or(items);
            let attrs = Attrs::new().with("value", value);
            let id = self.emit(OpKind::Constant, &[], attrs, Some(&t.ty))?;
            if let Some(n) = name {
                self.b.name(id, &sanitize(n));
            }
            id
        } else {
            let p = self.unique_param(name.as_deref().unwrap_or("const"));
            self.weights.push((p.clone(), (**t).clone()));
            self.b.param(&p, t.ty.clone())
        };
        self.materialized.insert(key, (t.clone(), id));
        Ok(id)
    }

    /// The conjunction factors of a computed boolean value: `a and b` written `select(a, b,
    /// false)` or `select(a, b, a)` (ONNX's `And`), taken apart recursively; the value itself
    /// otherwise.
    pub fn conjuncts(&self, v: &Val) -> Vec<Val> {
        let g = self.b.graph();
        let Val::Dyn(id) = v else {
            return vec![v.clone()];
        };
        let is_false = |x: ValueId| {
            g.def_inst(x).is_some_and(|i| {
                i.op == OpKind::Constant && matches!(i.attrs.get("value"), Some(Attr::Bool(false)))
            })
        };
        match g.def_inst(*id) {
            Some(i) if i.op == OpKind::Select && g.ty(*id).dtype == DType::I1 => {
                let [a, b, c] = i.operands[..] else {
                    return vec![v.clone()];
                };
                if c == a || is_false(c) {
                    let mut out = self.conjuncts(&Val::Dyn(a));
                    out.extend(self.conjuncts(&Val::Dyn(b)));
                    out
                } else {
                    vec![v.clone()]
                }
            }
            _ => vec![v.clone()],
        }
    }

    /// Whether a value is computed from indices alone (`iota`s and constants through
    /// elementwise ops and views): a mask band, which the attention planner reads as one.
    pub fn index_only(&self, v: &Val) -> bool {
        let g = self.b.graph();
        let Val::Dyn(id) = v else {
            return true;
        };
        let mut stack = vec![*id];
        let mut seen = HashSet::new();
        while let Some(x) = stack.pop() {
            if !seen.insert(x) {
                continue;
            }
            let Some(i) = g.def_inst(x) else {
                return false;
            };
            use irc_ir::Category as C;
            match i.op.category() {
                C::Iota | C::Constant => {}
                C::View | C::Cast | C::Unary | C::Binary | C::Compare | C::Select => {
                    stack.extend(i.operands.iter().copied())
                }
                _ => return false,
            }
        }
        true
    }

    /// A known integer tensor of one dim over 1 (`n >= 2` long) holding `v0 + step · k`
    /// along it (step nonzero), written as `iota` (times `step`, plus `v0`); `None` otherwise.
    fn arange_of(&mut self, t: &Tensor) -> R<Option<ValueId>> {
        if !matches!(t.ty.dtype, DType::I32 | DType::I64) {
            return Ok(None);
        }
        let s = &t.ty.shape;
        let long: Vec<usize> = (0..s.len()).filter(|&d| s[d] > 1).collect();
        let [axis] = long[..] else {
            return Ok(None);
        };
        let v = t.data.to_i64();
        let (v0, step) = (v[0], v[1].wrapping_sub(v[0]));
        let exact = v
            .iter()
            .enumerate()
            .all(|(k, &x)| Some(x) == step.checked_mul(k as i64).and_then(|d| d.checked_add(v0)));
        if step == 0 || !exact {
            return Ok(None);
        }
        let mut x = self.emit_iota(&t.ty, axis)?;
        for (c, op) in [(step, OpKind::Mul), (v0, OpKind::Add)] {
            if c == i64::from(op == OpKind::Mul) {
                continue;
            }
            let k = self.emit_int(c, t.ty.dtype)?;
            x = self.emit(op, &[x, k], Attrs::new(), None)?;
        }
        Ok(Some(x))
    }

    /// A known boolean tensor `[1, .., 1, m, n]` (m·n > 1) that is true exactly where
    /// `lo <= i - j <= hi` (row `i`, column `j`; either bound absent), written as `iota`
    /// comparisons: `None` for any other tensor.
    fn band_of(&mut self, t: &Tensor) -> R<Option<ValueId>> {
        let s = &t.ty.shape;
        let Data::I1(bits) = &t.data else {
            return Ok(None);
        };
        let r = s.len();
        if r < 2 || s[..r - 2].iter().any(|&d| d != 1) || s[r - 2] * s[r - 1] < 2 {
            return Ok(None);
        }
        let (m, n) = (s[r - 2] as i64, s[r - 1] as i64);
        let at = |i: i64, j: i64| bits[(i * n + j) as usize];
        let kept = (0..m)
            .flat_map(|i| (0..n).map(move |j| (i, j)))
            .filter(|&(i, j)| at(i, j));
        let (lo, hi) = kept.fold((i64::MAX, i64::MIN), |(lo, hi), (i, j)| {
            (lo.min(i - j), hi.max(i - j))
        });
        if lo > hi {
            return Ok(None);
        }
        let band = (0..m).all(|i| (0..n).all(|j| at(i, j) == (lo <= i - j && i - j <= hi)));
        // Bounds that no position reaches bound nothing.
        let (lo, hi) = (
            Some(lo).filter(|&l| l > -(n - 1)),
            Some(hi).filter(|&h| h < m - 1),
        );
        if !band || (lo.is_none() && hi.is_none()) {
            return Ok(None);
        }
        let grid = TensorType::new(s.clone(), DType::I64);
        let row = self.emit_iota(&grid, r - 2)?;
        let col = self.emit_iota(&grid, r - 1)?;
        let diff = self.emit(OpKind::Sub, &[row, col], Attrs::new(), None)?;
        let mut keep: Option<ValueId> = None;
        for (bound, cmp) in [(lo, OpKind::Ge), (hi, OpKind::Le)] {
            let Some(b) = bound else { continue };
            let c = self.emit_int(b, DType::I64)?;
            let k = self.emit(cmp, &[diff, c], Attrs::new(), None)?;
            keep = Some(match keep {
                Some(p) => self.emit(OpKind::Select, &[p, k, p], Attrs::new(), None)?,
                None => k,
            });
        }
        Ok(keep)
    }

    /// Writes `op` over graph values into the graph (never folded), at the current node.
    fn emit(
        &mut self,
        op: OpKind,
        operands: &[ValueId],
        attrs: Attrs,
        ty: Option<&TensorType>,
    ) -> R<ValueId> {
        let id = self
            .b
            .op_typed(op, operands, attrs, ty)
            .map_err(|e| e.message)?;
        self.b.set_loc(id, self.loc.clone());
        Ok(id)
    }

    /// An `iota` of type `ty` along `axis`, written into the graph rather than folded: an index
    /// costs nothing in a kernel, and what is computed from indices alone (a scan's or mask's
    /// comparisons) fusion recomputes where it is read instead of loading a folded tensor.
    pub fn iota(&mut self, ty: &TensorType, axis: usize) -> R<Val> {
        Ok(Val::Dyn(self.emit_iota(ty, axis)?))
    }

    fn emit_iota(&mut self, ty: &TensorType, axis: usize) -> R<ValueId> {
        let attrs = Attrs::new().with("axis", Attr::Int(axis as i64));
        self.emit(OpKind::Iota, &[], attrs, Some(ty))
    }

    /// An integer scalar constant of `dt`, written into the graph.
    fn emit_int(&mut self, c: i64, dt: DType) -> R<ValueId> {
        let attrs = Attrs::new().with("value", Attr::Int(c));
        self.emit(OpKind::Constant, &[], attrs, Some(&TensorType::scalar(dt)))
    }

    /// Adds `op` over `operands`, folding it on the host when every operand is known and the
    /// result is small.
    pub fn op(&mut self, op: OpKind, operands: &[&Val], attrs: Attrs) -> R<Val> {
        self.op_typed(op, operands, attrs, None)
    }

    pub fn op_typed(
        &mut self,
        op: OpKind,
        operands: &[&Val],
        attrs: Attrs,
        declared: Option<&TensorType>,
    ) -> R<Val> {
        let tys: Vec<TensorType> = operands.iter().map(|v| self.ty(v)).collect();
        if let Some(t) = tys.iter().find(|t| t.numel() == 0) {
            return Err(empty_operand(t));
        }
        let refs: Vec<&TensorType> = tys.iter().collect();
        let ty = irc_ir::check_op(op, &refs, &attrs, declared).map_err(|e| {
            let args: Vec<String> = tys.iter().map(|t| t.to_string()).collect();
            format!("{} (irc '{op}' of {})", e.message, args.join(", "))
        })?;
        let known: Option<Vec<&Tensor>> = operands.iter().map(|v| self.known(v)).collect();
        if let Some(args) = known
            && ty.numel() <= FOLD_LIMIT
        {
            let data = irc_interp::eval(op, &args, &attrs, &ty).map_err(|e| e.to_string())?;
            return Ok(self.konst(Tensor { ty, data }));
        }
        let ids = operands
            .iter()
            .map(|v| self.value(v))
            .collect::<R<Vec<ValueId>>>()?;
        Ok(Val::Dyn(self.emit(op, &ids, attrs, declared)?))
    }

    pub fn finish(self, results: &[ValueId], opset: i64) -> R<Imported> {
        let graph: Graph = self.b.finish(results).map_err(|e| e.message)?;
        irc_ir::verify_graph(&graph).map_err(|d| {
            let msgs: Vec<String> = d.iter().map(|d| d.message.clone()).collect();
            format!(
                "internal error: the imported graph does not verify: {}",
                msgs.join("; ")
            )
        })?;
        Ok(Imported {
            graph,
            weights: self.weights,
            opset,
        })
    }
}

/// The error for an empty known tensor (an empty list of integers, the only zero-sized
/// tensor the importer reads) used as anything but a shape, axes or starts input.
fn empty_operand(t: &TensorType) -> String {
    format!(
        "an empty {t} can only be a shape or index-list input known at import time (irc tensors have no zero-sized dims)"
    )
}

/// A `constant`'s value attribute for host data (a scalar when `scalar`).
fn constant_attr(d: &Data, scalar: bool) -> Attr {
    let items: Vec<Attr> = match d {
        Data::I1(v) => v.iter().map(|&b| Attr::Bool(b)).collect(),
        Data::I32(_) | Data::I64(_) => d.to_i64().into_iter().map(Attr::Int).collect(),
        _ => d.to_f64().into_iter().map(Attr::Float).collect(),
    };
    if scalar && items.len() == 1 {
        items.into_iter().next().unwrap_or(Attr::Int(0))
    } else {
        Attr::Array(items)
    }
}
