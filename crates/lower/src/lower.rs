//! Lowering from the graph IR to the kernel IR.
//!
//! 1. **Plan.** Decide which values are *materialized* (get a device buffer): parameters, graph
//!    results, matmuls, reductions and composites, and elementwise values used more than once.
//!    Everything else is computed where it is read: views (transpose, reshape, broadcast) are
//!    layouts, scalar constants are literals, and single-use elementwise ops are inlined into
//!    their consumer's loads, so an elementwise chain becomes one kernel.
//! 2. **Kernels.** One kernel per materialized computed value, from a template per kind:
//!    elementwise (one element per thread, grid-stride), reduction and row composites (softmax,
//!    rmsnorm, layernorm: one block per row, block reductions), and a tiled matmul (shared-memory
//!    tiles, register accumulators, batch broadcasting and transposed operands through layouts).
//! 3. **Access layouts.** Every read goes through [`Builder::value_at`] with an *access layout*
//!    from the kernel's iteration coordinate to the value's row-major linear index. Reading
//!    through a view composes the view's layout with the access ([`composition`]); reading a
//!    buffer makes a tensor whose layout is the access itself. A view whose composition is not a
//!    layout (a reshape of a permuted tensor that does not divide evenly) makes the planner
//!    materialize that view and start again.
//!
//! Layouts list a tensor's dimensions innermost first (mode 0 is the last dimension), so that
//! CuTe's colexicographic 1-D coordinate is the row-major linear index.

use crate::LowerError;
use irc_fused::policy::splat_value;
use irc_ir::infer::{flatten_value, matmul_shape, normalize_axis, reduction_axes};
use irc_ir::print::value_names;
use irc_ir::{Attr, Category, DType, Graph, GraphBuilder, Inst, OpKind, ValueDef, ValueId};
use irc_kir::BufferKind;
use irc_kir::{self as kir, Builtin, Expr, Func, IdxOp, ReduceOp, Space, Stmt, TensorDecl, Ty};
use irc_layout::{Layout, LayoutError, coalesce, composition};
use std::collections::HashMap;

pub use irc_fused::SourceInfo;

const THREADS: u32 = 256;
/// Grid-stride loops launch at most this many blocks.
const MAX_BLOCKS: u64 = 1 << 20;
/// Kernels whose buffers all have fewer elements index with 32-bit integers.
const I32_LIMIT: u64 = 1 << 30;

/// A planned graph: its Fused IR (with the planner's remarks) and the kernel IR lowered from it.
#[derive(Clone, Debug)]
pub struct Planned {
    pub fused: irc_fused::Module,
    pub remarks: Vec<irc_fused::Remark>,
    pub kernels: kir::Module,
    /// Views lowering found it could not read through a layout, stored by the final plan.
    pub forced: Vec<ValueId>,
}

/// Plans a verified graph and lowers the plan. A view whose layout cannot be composed with its
/// reader's access is forced into memory and the graph planned again, so the returned Fused IR
/// is exactly what the kernel IR was lowered from.
pub fn plan_and_lower(g: &Graph, src: SourceInfo<'_>) -> Result<Planned, LowerError> {
    let names = value_names(g);
    let mut forced: Vec<ValueId> = vec![];
    // Each retry forces one more view, so this ends within the number of values.
    for _ in 0..=g.values.len() {
        let (fused, remarks) = irc_fused::plan_graph(g, src, &forced);
        irc_fused::verify_module(&fused)
            .map_err(|e| LowerError::Internal(format!("the fusion planner: {e}")))?;
        match lower(&fused) {
            Err(Retry::Materialize(name)) => {
                let v = names.iter().position(|n| *n == name).ok_or_else(|| {
                    LowerError::Internal(format!("lowering forced an unknown value %{name}"))
                })?;
                forced.push(ValueId(v as u32));
            }
            Err(Retry::Fail(e)) => return Err(e),
            Ok(kernels) => {
                return Ok(Planned {
                    fused,
                    remarks,
                    kernels,
                    forced,
                });
            }
        }
    }
    Err(LowerError::Internal("the planner did not converge".into()))
}

/// Lowers a verified graph to a verified kernel IR module.
pub fn lower_graph(g: &Graph, src: SourceInfo<'_>) -> Result<kir::Module, LowerError> {
    plan_and_lower(g, src).map(|p| p.kernels)
}

/// Lowers a verified Fused IR module to a verified kernel IR module.
pub fn lower_fused(m: &irc_fused::Module) -> Result<kir::Module, LowerError> {
    lower(m).map_err(|r| match r {
        Retry::Fail(e) => e,
        Retry::Materialize(v) => LowerError::Unsupported {
            op: format!("%{v}"),
            reason: "its view cannot be composed with its reader's access layout; plan the graph \
                     again with the view stored"
                .into(),
        },
    })
}

fn lower(m: &irc_fused::Module) -> R<kir::Module> {
    let (g, locs) = rebuild(m)?;
    let k = Lowering::new(&g, m, locs)?.run(m)?;
    kir::verify_module(&k).map_err(|e| LowerError::Internal(e.to_string()))?;
    Ok(k)
}

/// The graph a Fused IR module computes: its input buffers' values as parameters and each
/// group's ops as statements (a view recomputed by several groups once), with the source
/// location of each statement.
fn rebuild(m: &irc_fused::Module) -> R<(Graph, HashMap<ValueId, String>)> {
    let bad =
        |e: irc_ir::OpError| Retry::Fail(LowerError::Internal(format!("Fused IR: {}", e.message)));
    let mut b = GraphBuilder::new(m.name.clone());
    let mut id: HashMap<&str, ValueId> = HashMap::new();
    let mut locs = HashMap::new();
    for buf in m
        .buffers
        .iter()
        .filter(|b| b.kind == irc_fused::BufferKind::Input)
    {
        id.insert(&buf.value, b.param(&buf.value, buf.ty.clone()));
    }
    for o in m.groups.iter().flat_map(|g| g.ops()) {
        if id.contains_key(o.value.as_str()) {
            continue;
        }
        let operands = o
            .operands
            .iter()
            .map(|a| {
                id.get(a.as_str()).copied().ok_or_else(|| {
                    Retry::Fail(LowerError::Internal(format!("Fused IR: %{a} is undefined")))
                })
            })
            .collect::<R<Vec<_>>>()?;
        let v = b
            .op_typed(o.op, &operands, o.attrs.clone(), Some(&o.ty))
            .map_err(bad)?;
        b.name(v, &o.value);
        if let Some(l) = &o.loc {
            locs.insert(v, l.clone());
        }
        id.insert(&o.value, v);
    }
    let mut results = vec![];
    for r in &m.results {
        let buf = m.buffer(r).ok_or_else(|| {
            Retry::Fail(LowerError::Internal(format!("Fused IR: no buffer @{r}")))
        })?;
        results.push(id[buf.value.as_str()]);
    }
    Ok((b.finish(&results).map_err(bad)?, locs))
}

enum Retry {
    /// The view with this name cannot be read through a layout: store it.
    Materialize(String),
    Fail(LowerError),
}

impl From<LowerError> for Retry {
    fn from(e: LowerError) -> Retry {
        Retry::Fail(e)
    }
}

type R<T> = Result<T, Retry>;

fn internal(e: LayoutError) -> Retry {
    Retry::Fail(LowerError::Internal(format!("layout algebra: {e}")))
}

/// Row-major strides of a shape.
fn row_major(shape: &[u64]) -> Vec<i64> {
    let mut st = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * shape[i + 1] as i64;
    }
    st
}

/// A layout from `modes` given outermost first (as the graph lists dims), written innermost
/// first; a rank-0 tensor is `1:0`.
fn dims_layout(modes: &[(u64, i64)]) -> Result<Layout, LayoutError> {
    if modes.is_empty() {
        return Layout::int(1, 0);
    }
    let shape: Vec<i64> = modes.iter().rev().map(|&(s, _)| s as i64).collect();
    let stride: Vec<i64> = modes
        .iter()
        .rev()
        .map(|&(s, d)| if s == 1 { 0 } else { d })
        .collect();
    Layout::flat(&shape, &stride)
}

/// The layout reading a tensor of shape `from` broadcast (numpy rules) to shape `to`: a
/// coordinate of `to` to the row-major index of `from`.
fn broadcast_layout(from: &[u64], to: &[u64]) -> Result<Layout, LayoutError> {
    let st = row_major(from);
    let lead = to.len() - from.len();
    let modes: Vec<(u64, i64)> = to
        .iter()
        .enumerate()
        .map(|(j, &t)| {
            if j < lead || from[j - lead] == 1 {
                (t, 0)
            } else {
                (t, st[j - lead])
            }
        })
        .collect();
    dims_layout(&modes)
}

/// The elementwise-kernel access: the 1-D index itself.
fn linear(n: u64) -> Result<Layout, LayoutError> {
    Layout::int(n as i64, 1)
}

fn is_view(op: OpKind) -> bool {
    op.category() == Category::View
}

fn attr_f64(a: &Attr) -> f64 {
    match a {
        Attr::Bool(b) => f64::from(u8::from(*b)),
        other => other.as_f64().unwrap_or(0.0),
    }
}

/// The dtype element math runs in: f32 for 16-bit floats, f64 for f64, i64 for integers.
fn math_dtype(d: DType) -> DType {
    match d {
        DType::F16 | DType::BF16 | DType::F32 => DType::F32,
        DType::F64 => DType::F64,
        DType::I32 | DType::I64 | DType::I1 => DType::I64,
    }
}

struct Lowering<'g> {
    g: &'g Graph,
    names: Vec<String>,
    /// Source location of each statement.
    locs: HashMap<ValueId, String>,
    /// Value held in a buffer → the buffer's name.
    buffer_of: HashMap<ValueId, String>,
    module: kir::Module,
    index: kir::IndexWidth,
    /// Elementwise roots computed in a matmul's epilogue: root → the matmul it reads.
    epilogues: HashMap<ValueId, ValueId>,
}

impl<'g> Lowering<'g> {
    fn new(g: &'g Graph, m: &irc_fused::Module, locs: HashMap<ValueId, String>) -> R<Lowering<'g>> {
        let names = value_names(g);
        let id: HashMap<&str, ValueId> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), ValueId(i as u32)))
            .collect();
        let value = |name: &str| {
            id.get(name).copied().ok_or_else(|| {
                Retry::Fail(LowerError::Internal(format!(
                    "Fused IR: %{name} is undefined"
                )))
            })
        };
        let mut buffer_of = HashMap::new();
        let mut buffers = vec![];
        for b in &m.buffers {
            buffer_of.insert(value(&b.value)?, b.name.clone());
            buffers.push(kir::BufferDecl {
                name: b.name.clone(),
                dtype: b.ty.dtype,
                shape: b.ty.shape.clone(),
                kind: match b.kind {
                    irc_fused::BufferKind::Input => BufferKind::Input,
                    irc_fused::BufferKind::Output => BufferKind::Output,
                    irc_fused::BufferKind::Temp => BufferKind::Temp,
                },
            });
        }
        let mut epilogues = HashMap::new();
        for grp in &m.groups {
            if grp.anchor() != irc_fused::Anchor::Matmul {
                continue;
            }
            let anchor = grp.ops().find(|o| o.op == OpKind::Matmul).map(|o| &o.value);
            for (v, _) in grp.stores() {
                if Some(v) != anchor.map(String::as_str) {
                    epilogues.insert(value(v)?, value(anchor.map_or("", |a| a))?);
                }
            }
        }
        let index = if buffers.iter().all(|b| b.elements() < I32_LIMIT) {
            kir::IndexWidth::I32
        } else {
            kir::IndexWidth::I64
        };
        let module = kir::Module {
            name: m.name.clone(),
            flops: m.flops,
            min_bytes: m.min_bytes,
            buffers,
            constants: vec![],
            kernels: vec![],
            launches: vec![],
            results: m.results.clone(),
        };
        Ok(Lowering {
            g,
            names,
            locs,
            buffer_of,
            module,
            index,
            epilogues,
        })
    }

    fn run(mut self, m: &irc_fused::Module) -> R<kir::Module> {
        for grp in &m.groups {
            let Some((root, _)) = grp.stores().next() else {
                continue;
            };
            let v = ValueId(self.names.iter().position(|n| n == root).unwrap_or(0) as u32);
            // A root whose chain starts at a matmul is that matmul's epilogue.
            let at = self.epilogues.get(&v).copied().unwrap_or(v);
            let ValueDef::Inst(i) = self.g.values[at.index()].def else {
                return Err(Retry::Fail(LowerError::Internal(format!(
                    "group @{} stores a parameter",
                    grp.name
                ))));
            };
            let inst = &self.g.insts[i];
            let mut b = Builder::new(&self, grp.name.clone(), i);
            match inst.op.category() {
                Category::Matmul => b.matmul(inst, v)?,
                Category::Reduction => b.reduction(inst)?,
                Category::Composite => b.composite(inst)?,
                _ => b.elementwise(v)?,
            }
            let (kernel, args, constants) = b.finish();
            self.module.constants.extend(constants);
            self.module.launches.push(kir::LaunchStmt {
                kernel: kernel.name.clone(),
                args,
            });
            self.module.kernels.push(kernel);
        }
        Ok(self.module)
    }

    fn origin(&self, inst: &Inst) -> kir::Origin {
        let names = &self.names;
        let operands: Vec<String> = inst
            .operands
            .iter()
            .map(|o| format!("%{}", names[o.index()]))
            .collect();
        let op = format!(
            "%{} = {} {}",
            names[inst.result.index()],
            inst.op.name(),
            operands.join(", ")
        );
        let loc = self
            .locs
            .get(&inst.result)
            .cloned()
            .unwrap_or_else(|| "<builder>".to_string());
        kir::Origin {
            op: op.trim_end().to_string(),
            loc,
        }
    }
}

/// Builds one kernel.
struct Builder<'l, 'g> {
    l: &'l Lowering<'g>,
    kernel: kir::Kernel,
    /// Buffer bound to each parameter, in order.
    args: Vec<String>,
    param_of: HashMap<String, String>,
    tensor_of: HashMap<(String, String), String>,
    /// Statements of the innermost open block.
    out: Vec<Stmt>,
    /// The iteration coordinate value reads are expressed in.
    coord: Vec<Expr>,
    memo: HashMap<(ValueId, String), Expr>,
    next: usize,
    /// Constant arrays this kernel reads (moved to the module).
    constants: Vec<kir::ConstDecl>,
    /// Values held in registers at the current coordinate (a matmul's accumulator in its
    /// epilogue), with the access layout they are valid at.
    overrides: HashMap<ValueId, (Layout, Expr)>,
}

impl<'l, 'g> Builder<'l, 'g> {
    fn new(l: &'l Lowering<'g>, name: String, inst_index: usize) -> Self {
        let kernel = kir::Kernel {
            name,
            grid: [1, 1, 1],
            block: [THREADS, 1, 1],
            index: l.index,
            origins: vec![l.origin(&l.g.insts[inst_index])],
            params: vec![],
            tensors: vec![],
            body: vec![],
        };
        Builder {
            l,
            kernel,
            args: vec![],
            param_of: HashMap::new(),
            tensor_of: HashMap::new(),
            out: vec![],
            coord: vec![],
            memo: HashMap::new(),
            next: 0,
            constants: vec![],
            overrides: HashMap::new(),
        }
    }

    fn finish(mut self) -> (kir::Kernel, Vec<String>, Vec<kir::ConstDecl>) {
        self.kernel.body = std::mem::take(&mut self.out);
        (self.kernel, self.args, self.constants)
    }

    fn fresh(&mut self, hint: &str) -> String {
        self.next += 1;
        format!("{hint}{}", self.next - 1)
    }

    fn ty(&self, v: ValueId) -> &'g irc_ir::TensorType {
        &self.l.g.values[v.index()].ty
    }

    fn def(&self, v: ValueId) -> Option<&'g Inst> {
        match self.l.g.values[v.index()].def {
            ValueDef::Inst(i) => Some(&self.l.g.insts[i]),
            ValueDef::Param(_) => None,
        }
    }

    fn param(&mut self, buffer: &str) -> String {
        if let Some(p) = self.param_of.get(buffer) {
            return p.clone();
        }
        let dtype = self
            .l
            .module
            .buffers
            .iter()
            .find(|b| b.name == buffer)
            .expect("declared buffer")
            .dtype;
        let name = format!("p{}", self.kernel.params.len());
        self.kernel.params.push(kir::Param {
            name: name.clone(),
            dtype,
        });
        self.args.push(buffer.to_string());
        self.param_of.insert(buffer.to_string(), name.clone());
        name
    }

    /// A tensor of `space` with `layout`, reused when asked again.
    fn tensor(&mut self, space: Space, dtype: DType, layout: Layout) -> String {
        let key = (format!("{space:?}"), layout.to_string());
        if !matches!(space, Space::Shared | Space::Registers)
            && let Some(t) = self.tensor_of.get(&key)
        {
            return t.clone();
        }
        let name = format!("t{}", self.kernel.tensors.len());
        self.kernel.tensors.push(TensorDecl {
            name: name.clone(),
            dtype,
            space,
            layout,
        });
        self.tensor_of.insert(key, name.clone());
        name
    }

    fn global(&mut self, v: ValueId, layout: Layout) -> String {
        let buffer = self.l.buffer_of[&v].clone();
        let p = self.param(&buffer);
        self.tensor(Space::Global(p), self.ty(v).dtype, layout)
    }

    fn let_(&mut self, hint: &str, ty: Ty, value: Expr) -> Expr {
        if matches!(value, Expr::Var(_) | Expr::Int(_) | Expr::Builtin(_)) {
            return value;
        }
        let var = self.fresh(hint);
        self.out.push(Stmt::Let {
            var: var.clone(),
            ty,
            value,
        });
        Expr::Var(var)
    }

    /// Runs `f` to build the body of a nested block with its own value cache.
    fn block(&mut self, f: impl FnOnce(&mut Self) -> R<()>) -> R<Vec<Stmt>> {
        let saved_out = std::mem::take(&mut self.out);
        let saved_memo = std::mem::take(&mut self.memo);
        let r = f(self);
        let body = std::mem::replace(&mut self.out, saved_out);
        self.memo = saved_memo;
        r.map(|()| body)
    }

    /// `for %var = start to end step step { f }`, with `f` given the loop variable.
    fn for_(
        &mut self,
        hint: &str,
        start: Expr,
        end: Expr,
        step: Expr,
        unroll: bool,
        f: impl FnOnce(&mut Self, Expr) -> R<()>,
    ) -> R<()> {
        let var = self.fresh(hint);
        let v = Expr::var(&var);
        let body = self.block(|b| f(b, v))?;
        self.out.push(Stmt::For {
            var,
            start,
            end,
            step,
            unroll,
            body,
        });
        Ok(())
    }

    fn if_(&mut self, cond: Expr, f: impl FnOnce(&mut Self) -> R<()>) -> R<()> {
        let body = self.block(f)?;
        self.out.push(Stmt::If {
            cond,
            body,
            orelse: vec![],
        });
        Ok(())
    }

    /// The value `v` at the current iteration coordinate, where `access` maps that coordinate
    /// to `v`'s row-major linear index. The expression has `v`'s dtype.
    fn value_at(&mut self, v: ValueId, access: &Layout) -> R<Expr> {
        if let Some((a, e)) = self.overrides.get(&v) {
            return if a == access {
                Ok(e.clone())
            } else {
                Err(Retry::Fail(LowerError::Internal(format!(
                    "epilogue reads its matmul at {access}, not at {a}"
                ))))
            };
        }
        let coord: Vec<String> = self.coord.iter().map(kir::print::expr).collect();
        let key = (v, format!("{access} @ {}", coord.join(",")));
        if let Some(e) = self.memo.get(&key) {
            return Ok(e.clone());
        }
        let e = self.compute_at(v, access, true)?;
        self.memo.insert(key, e.clone());
        Ok(e)
    }

    /// A view's layout: a coordinate of the view (its row-major index) to the source's index.
    fn view_layout(&self, inst: &Inst) -> Result<Layout, LayoutError> {
        let src_shape = &self.ty(inst.operands[0]).shape;
        let shape = &self.ty(inst.result).shape;
        match inst.op {
            OpKind::Transpose => {
                let perm = inst
                    .attrs
                    .get("perm")
                    .and_then(Attr::as_ints)
                    .unwrap_or_default();
                let st = row_major(src_shape);
                let modes: Vec<(u64, i64)> = perm
                    .iter()
                    .map(|&p| {
                        let p = normalize_axis(p, src_shape.len()).unwrap_or(0);
                        (src_shape[p], st[p])
                    })
                    .collect();
                dims_layout(&modes)
            }
            OpKind::Broadcast => broadcast_layout(src_shape, shape),
            _ => linear(self.ty(inst.result).numel()),
        }
    }

    /// The buffer `v` is read from at `access`, following views, if `v` is a buffer or views
    /// of one (not a computed value).
    fn resolve(&mut self, mut v: ValueId, access: &Layout) -> Option<(ValueId, Layout)> {
        let mut access = access.clone();
        loop {
            if self.l.buffer_of.contains_key(&v) {
                return Some((v, access));
            }
            let inst = self.def(v)?;
            if !is_view(inst.op) {
                return None;
            }
            access = composition(&self.view_layout(inst).ok()?, &access).ok()?;
            let origin = self.l.origin(inst);
            if !self.kernel.origins.contains(&origin) {
                self.kernel.origins.push(origin);
            }
            v = inst.operands[0];
        }
    }

    /// Computes `v` (loading it when `load` and it has a buffer).
    fn compute_at(&mut self, v: ValueId, access: &Layout, load: bool) -> R<Expr> {
        let dtype = self.ty(v).dtype;
        if load && self.l.buffer_of.contains_key(&v) {
            let t = self.global(v, access.clone());
            let load = Expr::load(&t, self.coord.clone());
            return Ok(self.let_("v", Ty::Elem(dtype), load));
        }
        let inst = self
            .def(v)
            .expect("a value that is not materialized is computed");
        let origin = self.l.origin(inst);
        if !self.kernel.origins.contains(&origin) {
            self.kernel.origins.push(origin);
        }
        let shape = &self.ty(v).shape;
        if is_view(inst.op) {
            let src = inst.operands[0];
            let view = self.view_layout(inst).map_err(internal)?;
            // The view's layout maps v's coordinate to the source's index; composing with the
            // access maps the iteration coordinate there.
            let composed = composition(&view, access)
                .map_err(|_| Retry::Materialize(self.l.names[v.index()].clone()))?;
            return self.value_at(src, &composed);
        }
        match inst.op.category() {
            Category::Constant => {
                if let Some(x) = splat_value(&inst.attrs) {
                    return Ok(Expr::lit(dtype, x));
                }
                let name = format!("{}_c{}", self.kernel.name, self.constants.len());
                let mut flat = vec![];
                flatten_value(inst.attrs.get("value").unwrap_or(&Attr::Int(0)), &mut flat);
                let values = flat.iter().map(attr_f64).collect();
                self.constants.push(kir::ConstDecl {
                    name: name.clone(),
                    dtype,
                    values,
                });
                let t = self.tensor(Space::Const(name), dtype, access.clone());
                let load = Expr::load(&t, self.coord.clone());
                Ok(self.let_("v", Ty::Elem(dtype), load))
            }
            Category::Cast => {
                let x = inst.operands[0];
                let e = self.value_at(x, access)?;
                Ok(self.let_("v", Ty::Elem(dtype), Expr::cast(dtype, e)))
            }
            Category::Unary | Category::Binary => {
                let math = math_dtype(dtype);
                let mut args = vec![];
                for &o in &inst.operands {
                    let oshape = &self.ty(o).shape;
                    let e = if oshape == shape {
                        self.value_at(o, access)?
                    } else {
                        let b = broadcast_layout(oshape, shape).map_err(internal)?;
                        let composed = composition(&b, access).map_err(internal)?;
                        self.value_at(o, &composed)?
                    };
                    args.push(if math == dtype {
                        e
                    } else {
                        Expr::cast(math, e)
                    });
                }
                let f = Func::from_op(inst.op).ok_or_else(|| {
                    Retry::Fail(LowerError::Internal(format!(
                        "no scalar function for {}",
                        inst.op.name()
                    )))
                })?;
                let mut e = Expr::call(f, args);
                if math != dtype {
                    e = Expr::cast(dtype, e);
                }
                Ok(self.let_("v", Ty::Elem(dtype), e))
            }
            _ => Err(Retry::Fail(LowerError::Internal(format!(
                "{} is not materialized",
                inst.op.name()
            )))),
        }
    }
}

fn bx(b: Builtin) -> Expr {
    Expr::Builtin(b)
}

fn add(a: Expr, b: Expr) -> Expr {
    Expr::idx(IdxOp::Add, a, b)
}

fn mul(a: Expr, b: Expr) -> Expr {
    Expr::idx(IdxOp::Mul, a, b)
}

fn lt(a: Expr, b: Expr) -> Expr {
    Expr::idx(IdxOp::Lt, a, b)
}

fn int(n: u64) -> Expr {
    Expr::Int(n as i64)
}

fn concat(modes: &[Layout]) -> R<Layout> {
    Layout::concat(modes).map_err(internal)
}

/// Threads for a block that reduces rows of `k` elements.
fn row_threads(k: u64) -> u32 {
    k.next_power_of_two().clamp(32, u64::from(THREADS)) as u32
}

/// Matmul tile sizes: a block computes BM x BN outputs stepping BK along K; each of the
/// THREADS threads owns a TM x TN sub-tile, strided by the thread grid.
const BM: u64 = 64;
const BN: u64 = 64;
const BK: u64 = 16;
const TM: u64 = 4;
const TN: u64 = 4;

impl Builder<'_, '_> {
    /// `for %i = global thread index to n step (threads in grid)`: out[i] = v[i].
    fn elementwise(&mut self, v: ValueId) -> R<()> {
        let n = self.ty(v).numel();
        self.kernel.grid = [
            n.div_ceil(u64::from(THREADS)).clamp(1, MAX_BLOCKS) as u32,
            1,
            1,
        ];
        let access = linear(n).map_err(internal)?;
        let out = self.global(v, access.clone());
        let start = add(
            mul(bx(Builtin::BidX), bx(Builtin::NtidX)),
            bx(Builtin::TidX),
        );
        let step = mul(bx(Builtin::NctaidX), bx(Builtin::NtidX));
        self.for_("i", start, int(n), step, false, |b, i| {
            b.coord = vec![i.clone()];
            let e = b.compute_at(v, &access, false)?;
            b.out.push(Stmt::Store {
                tensor: out,
                coord: vec![i],
                value: e,
            });
            Ok(())
        })
    }

    /// `for %row = bid.x to rows step nctaid.x { ... }`: one block per row.
    fn rows(&mut self, rows: u64, f: impl FnOnce(&mut Self, Expr) -> R<()>) -> R<()> {
        self.kernel.grid = [rows.clamp(1, MAX_BLOCKS) as u32, 1, 1];
        self.for_(
            "row",
            bx(Builtin::BidX),
            int(rows),
            bx(Builtin::NctaidX),
            false,
            f,
        )
    }

    /// A block-strided loop over the `k` elements of a row; `f` gets the element index.
    fn row_loop(&mut self, k: u64, f: impl FnOnce(&mut Self, Expr) -> R<()>) -> R<()> {
        self.for_("k", bx(Builtin::TidX), int(k), bx(Builtin::NtidX), false, f)
    }

    /// `%acc` combined with `f` over a row, then reduced across the block.
    #[allow(clippy::too_many_arguments)]
    fn row_reduce(
        &mut self,
        k: u64,
        row: &Expr,
        acc_t: DType,
        op: ReduceOp,
        init: f64,
        f: impl FnOnce(&mut Self, Expr) -> R<Expr>,
    ) -> R<Expr> {
        let acc = self.fresh("acc");
        self.out.push(Stmt::Var {
            var: acc.clone(),
            ty: Ty::Elem(acc_t),
            init: lit(acc_t, init),
        });
        let row = row.clone();
        let acc_var = acc.clone();
        self.row_loop(k, |b, kv| {
            b.coord = vec![kv.clone(), row];
            let x = f(b, kv)?;
            let combine = match op {
                ReduceOp::Sum => Func::Add,
                ReduceOp::Max => Func::Max,
                ReduceOp::Min => Func::Min,
            };
            b.out.push(Stmt::Assign {
                var: acc_var.clone(),
                value: Expr::call(combine, vec![Expr::var(&acc_var), x]),
            });
            Ok(())
        })?;
        let red = self.fresh("red");
        self.out.push(Stmt::BlockReduce {
            var: red.clone(),
            ty: Ty::Elem(acc_t),
            op,
            value: Expr::var(&acc),
        });
        Ok(Expr::Var(red))
    }

    fn reduction(&mut self, inst: &Inst) -> R<()> {
        let x = inst.operands[0];
        let xshape = self.ty(x).shape.clone();
        let out_dtype = self.ty(inst.result).dtype;
        let axes = reduction_axes(xshape.len(), &inst.attrs)
            .map_err(|e| Retry::Fail(LowerError::Internal(e.message)))?;
        let st = row_major(&xshape);
        let red: Vec<(u64, i64)> = axes.iter().map(|&a| (xshape[a], st[a])).collect();
        let kept: Vec<(u64, i64)> = (0..xshape.len())
            .filter(|d| !axes.contains(d))
            .map(|d| (xshape[d], st[d]))
            .collect();
        let k: u64 = red.iter().map(|m| m.0).product();
        let rows = self.ty(inst.result).numel();
        let access = concat(&[
            dims_layout(&red).map_err(internal)?,
            dims_layout(&kept).map_err(internal)?,
        ])?;
        let acc_t = math_dtype(self.ty(x).dtype);
        let (op, init) = match (inst.op, acc_t) {
            (OpKind::ReduceMax, DType::I64) => (ReduceOp::Max, i64::MIN as f64),
            (OpKind::ReduceMin, DType::I64) => (ReduceOp::Min, i64::MAX as f64),
            (OpKind::ReduceMax, _) => (ReduceOp::Max, f64::NEG_INFINITY),
            (OpKind::ReduceMin, _) => (ReduceOp::Min, f64::INFINITY),
            _ => (ReduceOp::Sum, 0.0),
        };
        let out = self.global(inst.result, linear(rows).map_err(internal)?);
        self.kernel.block = [row_threads(k), 1, 1];
        self.rows(rows, |b, row| {
            let red = b.row_reduce(k, &row, acc_t, op, init, |b, _| {
                let e = b.value_at(x, &access)?;
                Ok(cast_to(acc_t, b.ty(x).dtype, e))
            })?;
            let mut value = red;
            if inst.op == OpKind::ReduceMean {
                value = Expr::call(Func::Div, vec![value, lit(acc_t, k as f64)]);
            }
            let value = cast_to(out_dtype, acc_t, value);
            b.if_(Expr::idx(IdxOp::Eq, bx(Builtin::TidX), Expr::Int(0)), |b| {
                b.out.push(Stmt::Store {
                    tensor: out,
                    coord: vec![row],
                    value,
                });
                Ok(())
            })
        })
    }

    fn composite(&mut self, inst: &Inst) -> R<()> {
        let x = inst.operands[0];
        let xt = self.ty(x).clone();
        let axis_attr = inst.attrs.get("axis").and_then(Attr::as_int).unwrap_or(-1);
        let axis = normalize_axis(axis_attr, xt.rank())
            .ok_or_else(|| Retry::Fail(LowerError::Internal("axis out of range".into())))?;
        let st = row_major(&xt.shape);
        let k = xt.shape[axis];
        let kept: Vec<(u64, i64)> = (0..xt.rank())
            .filter(|&d| d != axis)
            .map(|d| (xt.shape[d], st[d]))
            .collect();
        let rows = xt.numel() / k;
        let access = concat(&[
            dims_layout(&[(k, st[axis])]).map_err(internal)?,
            dims_layout(&kept).map_err(internal)?,
        ])?;
        let param_access = concat(&[
            Layout::int(k as i64, 1).map_err(internal)?,
            Layout::int(rows as i64, 0).map_err(internal)?,
        ])?;
        let math = math_dtype(xt.dtype);
        let dtype = xt.dtype;
        let eps =
            inst.attrs
                .get("eps")
                .and_then(Attr::as_f64)
                .unwrap_or(if inst.op == OpKind::Rmsnorm {
                    dtype.epsilon().unwrap_or(1e-6)
                } else {
                    1e-5
                });
        let out = self.global(inst.result, access.clone());
        let (w, bias) = (inst.operands.get(1).copied(), inst.operands.get(2).copied());
        let spec = RowSpec {
            x,
            k,
            rows,
            access: access.clone(),
            param_access: param_access.clone(),
            math,
            dtype,
            eps,
            out: out.clone(),
            w,
            bias,
        };
        if k.div_ceil(if k <= 1024 { 32 } else { u64::from(THREADS) }) <= 32 {
            return self.composite_cached(inst.op, spec);
        }
        self.kernel.block = [row_threads(k), 1, 1];
        let op = inst.op;
        let call = |f: Func, args: Vec<Expr>| Expr::call(f, args);
        self.rows(rows, |b, row| {
            let xf = |b: &mut Self| -> R<Expr> {
                let e = b.value_at(x, &access)?;
                Ok(cast_to(math, dtype, e))
            };
            let n = lit(math, k as f64);
            if op == OpKind::Softmax {
                let mx =
                    b.row_reduce(k, &row, math, ReduceOp::Max, f64::NEG_INFINITY, |b, _| {
                        xf(b)
                    })?;
                let mx = b.let_("max", Ty::Elem(math), mx);
                let sum = b.row_reduce(k, &row, math, ReduceOp::Sum, 0.0, |b, _| {
                    let e = xf(b)?;
                    Ok(call(Func::Exp, vec![call(Func::Sub, vec![e, mx.clone()])]))
                })?;
                let sum = b.let_("sum", Ty::Elem(math), sum);
                let row2 = row.clone();
                return b.row_loop(k, |b, kv| {
                    b.coord = vec![kv.clone(), row2.clone()];
                    let e = xf(b)?;
                    let y = call(
                        Func::Div,
                        vec![call(Func::Exp, vec![call(Func::Sub, vec![e, mx])]), sum],
                    );
                    b.out.push(Stmt::Store {
                        tensor: out,
                        coord: vec![kv, row2],
                        value: cast_to(dtype, math, y),
                    });
                    Ok(())
                });
            }
            let mean = if op == OpKind::Layernorm {
                let tot = b.row_reduce(k, &row, math, ReduceOp::Sum, 0.0, |b, _| xf(b))?;
                b.let_(
                    "mean",
                    Ty::Elem(math),
                    call(Func::Div, vec![tot, n.clone()]),
                )
            } else {
                lit(math, 0.0)
            };
            let m2 = mean.clone();
            let sq = b.row_reduce(k, &row, math, ReduceOp::Sum, 0.0, |b, _| {
                let e = xf(b)?;
                let d = if op == OpKind::Layernorm {
                    b.let_("d", Ty::Elem(math), call(Func::Sub, vec![e, m2]))
                } else {
                    e
                };
                Ok(call(Func::Mul, vec![d.clone(), d]))
            })?;
            let var = call(Func::Div, vec![sq, n]);
            let rstd = b.let_("rstd", Ty::Elem(math), rstd_of(var, eps, math));
            let row2 = row.clone();
            b.row_loop(k, |b, kv| {
                b.coord = vec![kv.clone(), row2.clone()];
                let e = xf(b)?;
                let centered = if op == OpKind::Layernorm {
                    call(Func::Sub, vec![e, mean])
                } else {
                    e
                };
                let mut y = call(Func::Mul, vec![centered, rstd]);
                if let Some(w) = w {
                    let wv = b.value_at(w, &param_access)?;
                    y = call(Func::Mul, vec![y, cast_to(math, b.ty(w).dtype, wv)]);
                }
                if let Some(bias) = bias {
                    let bv = b.value_at(bias, &param_access)?;
                    y = call(Func::Add, vec![y, cast_to(math, b.ty(bias).dtype, bv)]);
                }
                b.out.push(Stmt::Store {
                    tensor: out,
                    coord: vec![kv, row2],
                    value: cast_to(dtype, math, y),
                });
                Ok(())
            })
        })
    }

    /// A tiled matmul storing `root`: the matmul itself, or an elementwise chain over it
    /// computed in the epilogue from the accumulator (see `plan_epilogues`).
    fn matmul(&mut self, inst: &Inst, root: ValueId) -> R<()> {
        let (a, bv) = (inst.operands[0], inst.operands[1]);
        let (ashape, bshape) = (self.ty(a).shape.clone(), self.ty(bv).shape.clone());
        let flag = |n: &str| inst.attrs.get(n).and_then(Attr::as_bool).unwrap_or(false);
        let (ta, tb) = (flag("transpose_a"), flag("transpose_b"));
        let ms = matmul_shape(&ashape, &bshape, ta, tb)
            .map_err(|e| Retry::Fail(LowerError::Internal(e.message)))?;
        let (m, n, k) = (ms.m, ms.n, ms.k);
        let dtype = self.ty(inst.result).dtype;
        let acc_t = math_dtype(dtype);
        let nb = ms.batch.len();
        // Batch modes of an operand, broadcast to the output's batch dims.
        let batch_modes = |shape: &[u64], st: &[i64]| -> Vec<(u64, i64)> {
            let own = shape.len().saturating_sub(2);
            ms.batch
                .iter()
                .enumerate()
                .map(|(j, &size)| {
                    let i = j as i64 - (nb as i64 - own as i64);
                    if i < 0 || shape[i as usize] == 1 {
                        (size, 0)
                    } else {
                        (size, st[i as usize])
                    }
                })
                .collect()
        };
        let sa = row_major(&ashape);
        let ((_, am_st), (_, ak_st)) = if ashape.len() == 1 {
            ((1u64, 0i64), (k, 1i64))
        } else {
            let r = ashape.len();
            let (md, kd) = if ta { (r - 1, r - 2) } else { (r - 2, r - 1) };
            ((m, sa[md]), (k, sa[kd]))
        };
        let sb = row_major(&bshape);
        let ((_, bk_st), (_, bn_st)) = if bshape.len() == 1 {
            ((k, 1i64), (1u64, 0i64))
        } else {
            let r = bshape.len();
            let (kd, nd) = if tb { (r - 1, r - 2) } else { (r - 2, r - 1) };
            ((k, sb[kd]), (n, sb[nd]))
        };
        let oshape = self.ty(inst.result).shape.clone();
        let so = row_major(&oshape);
        let cm_st = if ms.squeeze_m { 0 } else { so[nb] };
        let cn_st = if ms.squeeze_n {
            0
        } else {
            so[oshape.len() - 1]
        };
        let out_batch: Vec<(u64, i64)> = ms.batch.iter().zip(&so).map(|(&s, &d)| (s, d)).collect();
        let li = |s: u64, d: i64| Layout::int(s as i64, d).map_err(internal);
        let access_a = concat(&[
            li(m, am_st)?,
            li(k, ak_st)?,
            dims_layout(&batch_modes(&ashape, &sa)).map_err(internal)?,
        ])?;
        let access_b = concat(&[
            li(k, bk_st)?,
            li(n, bn_st)?,
            dims_layout(&batch_modes(&bshape, &sb)).map_err(internal)?,
        ])?;
        let access_c = concat(&[
            li(m, cm_st)?,
            li(n, cn_st)?,
            dims_layout(&out_batch).map_err(internal)?,
        ])?;
        let batch: u64 = ms.batch.iter().product();
        if matches!(dtype, DType::F16 | DType::BF16) {
            // Which dimension is contiguous is a property of the memory read, so look through
            // views (a transposed operand is K-contiguous even though its logical N stride is 1).
            let unit =
                |s: &mut Self, v: ValueId, access: &Layout, mode: usize, logical: bool| match s
                    .resolve(v, access)
                {
                    Some((_, l)) => l
                        .modes()
                        .get(mode)
                        .and_then(|m| coalesce(m).ok())
                        .is_some_and(|m| m.leaves().first().is_some_and(|&(_, d)| d == 1)),
                    None => logical,
                };
            let a_k_fast = unit(self, a, &access_a, 1, ak_st == 1);
            let b_n_fast = unit(self, bv, &access_b, 1, bn_st == 1);
            let plan = TcPlan {
                m,
                n,
                k,
                batch,
                dtype,
                access_a,
                access_b,
                access_c,
                a_k_fast,
                b_n_fast,
            };
            return self.matmul_tc(inst, root, plan);
        }
        self.kernel.grid = matmul_grid(m, n, batch, BM, BN)?;
        self.kernel.block = [THREADS, 1, 1];
        let c = self.global(root, access_c.clone());
        let mm = inst.result;
        let tile = |d0: u64, d1: u64| {
            Layout::flat(&[d0 as i64, d1 as i64], &[d1 as i64 + 1, 1]).map_err(internal)
        };
        let sa_t = self.tensor(Space::Shared, acc_t, tile(BK, BM)?);
        let sb_t = self.tensor(Space::Shared, acc_t, tile(BK, BN)?);
        let acc = self.tensor(
            Space::Registers,
            acc_t,
            Layout::flat(&[TM as i64, TN as i64], &[1, TM as i64]).map_err(internal)?,
        );
        let tx = self.let_(
            "tx",
            Ty::Idx,
            Expr::idx(IdxOp::Rem, bx(Builtin::TidX), int(BN / TN)),
        );
        let ty = self.let_(
            "ty",
            Ty::Idx,
            Expr::idx(IdxOp::Div, bx(Builtin::TidX), int(BN / TN)),
        );
        let a_dtype = self.ty(a).dtype;
        let b_dtype = self.ty(bv).dtype;
        let per_thread = (BM * BK) / u64::from(THREADS);
        let a_k_fast = ak_st == 1;
        let b_n_fast = bn_st == 1;
        self.for_(
            "b",
            bx(Builtin::BidZ),
            int(batch),
            bx(Builtin::NctaidZ),
            false,
            |s, bi| {
                let m0 = s.let_("m0", Ty::Idx, mul(bx(Builtin::BidY), int(BM)));
                let n0 = s.let_("n0", Ty::Idx, mul(bx(Builtin::BidX), int(BN)));
                let zero = lit(acc_t, 0.0);
                let acc2 = acc.clone();
                s.for_("i", Expr::Int(0), int(TM), Expr::Int(1), true, |s, i| {
                    s.for_("j", Expr::Int(0), int(TN), Expr::Int(1), true, |s, j| {
                        s.out.push(Stmt::Store {
                            tensor: acc2,
                            coord: vec![i, j],
                            value: zero,
                        });
                        Ok(())
                    })
                })?;
                let (sa_t2, sb_t2, acc3) = (sa_t.clone(), sb_t.clone(), acc.clone());
                let (tx2, ty2, bi2, m02, n02) =
                    (tx.clone(), ty.clone(), bi.clone(), m0.clone(), n0.clone());
                s.for_("k0", Expr::Int(0), int(k), int(BK), false, |s, k0| {
                    s.for_(
                        "l",
                        Expr::Int(0),
                        int(per_thread),
                        Expr::Int(1),
                        true,
                        |s, l| {
                            let e = s.let_(
                                "e",
                                Ty::Idx,
                                add(mul(l, int(u64::from(THREADS))), bx(Builtin::TidX)),
                            );
                            // Thread-to-tile coordinates: consecutive threads walk the operand's
                            // contiguous dimension, so global loads coalesce.
                            let split = |s: &mut Self, fast: u64| -> (Expr, Expr) {
                                let lo = s.let_(
                                    "lo",
                                    Ty::Idx,
                                    Expr::idx(IdxOp::Rem, e.clone(), int(fast)),
                                );
                                let hi = s.let_(
                                    "hi",
                                    Ty::Idx,
                                    Expr::idx(IdxOp::Div, e.clone(), int(fast)),
                                );
                                (lo, hi)
                            };
                            let (ak, am) = if a_k_fast {
                                split(s, BK)
                            } else {
                                let (mm, kk) = split(s, BM);
                                (kk, mm)
                            };
                            let gm = s.let_("gm", Ty::Idx, add(m02.clone(), am.clone()));
                            let gk = s.let_("gk", Ty::Idx, add(k0.clone(), ak.clone()));
                            s.guarded_tile_load(
                                a,
                                &access_a,
                                vec![gm.clone(), gk.clone(), bi2.clone()],
                                Expr::idx(IdxOp::And, lt(gm, int(m)), lt(gk, int(k))),
                                a_dtype,
                                acc_t,
                                &sa_t2,
                                vec![ak, am],
                            )?;
                            let (bn, bk) = if b_n_fast {
                                split(s, BN)
                            } else {
                                let (kk, nn) = split(s, BK);
                                (nn, kk)
                            };
                            let gk2 = s.let_("gk", Ty::Idx, add(k0.clone(), bk.clone()));
                            let gn = s.let_("gn", Ty::Idx, add(n02.clone(), bn.clone()));
                            s.guarded_tile_load(
                                bv,
                                &access_b,
                                vec![gk2.clone(), gn.clone(), bi2.clone()],
                                Expr::idx(IdxOp::And, lt(gk2, int(k)), lt(gn, int(n))),
                                b_dtype,
                                acc_t,
                                &sb_t2,
                                vec![bk, bn],
                            )
                        },
                    )?;
                    s.out.push(Stmt::Sync);
                    let (sa_t3, sb_t3, acc4, tx3, ty3) = (
                        sa_t2.clone(),
                        sb_t2.clone(),
                        acc3.clone(),
                        tx2.clone(),
                        ty2.clone(),
                    );
                    s.for_("kk", Expr::Int(0), int(BK), Expr::Int(1), true, |s, kk| {
                        s.for_("i", Expr::Int(0), int(TM), Expr::Int(1), true, |s, i| {
                            let a_row = add(ty3.clone(), mul(i.clone(), int(BM / TM)));
                            let av = s.let_(
                                "a",
                                Ty::Elem(acc_t),
                                Expr::load(&sa_t3, vec![kk.clone(), a_row]),
                            );
                            s.for_("j", Expr::Int(0), int(TN), Expr::Int(1), true, |s, j| {
                                let b_col = add(tx3.clone(), mul(j.clone(), int(BN / TN)));
                                let bval = Expr::load(&sb_t3, vec![kk.clone(), b_col]);
                                let cur = Expr::load(&acc4, vec![i.clone(), j.clone()]);
                                let value = Expr::call(
                                    Func::Add,
                                    vec![cur, Expr::call(Func::Mul, vec![av, bval])],
                                );
                                s.out.push(Stmt::Store {
                                    tensor: acc4.clone(),
                                    coord: vec![i, j],
                                    value,
                                });
                                Ok(())
                            })
                        })
                    })?;
                    s.out.push(Stmt::Sync);
                    Ok(())
                })?;
                let (acc5, c2) = (acc.clone(), c.clone());
                let (tx4, ty4) = (tx.clone(), ty.clone());
                s.for_("i", Expr::Int(0), int(TM), Expr::Int(1), true, |s, i| {
                    s.for_("j", Expr::Int(0), int(TN), Expr::Int(1), true, |s, j| {
                        let gm = s.let_(
                            "cm",
                            Ty::Idx,
                            add(m0, add(ty4, mul(i.clone(), int(BM / TM)))),
                        );
                        let gn = s.let_(
                            "cn",
                            Ty::Idx,
                            add(n0, add(tx4, mul(j.clone(), int(BN / TN)))),
                        );
                        let cond =
                            Expr::idx(IdxOp::And, lt(gm.clone(), int(m)), lt(gn.clone(), int(n)));
                        s.if_(cond, |s| {
                            let acc_v = cast_to(dtype, acc_t, Expr::load(&acc5, vec![i, j]));
                            let v = if root == mm {
                                acc_v
                            } else {
                                s.coord = vec![gm.clone(), gn.clone(), bi.clone()];
                                s.overrides.insert(mm, (access_c.clone(), acc_v));
                                s.compute_at(root, &access_c, false)?
                            };
                            s.out.push(Stmt::Store {
                                tensor: c2,
                                coord: vec![gm, gn, bi],
                                value: v,
                            });
                            Ok(())
                        })
                    })
                })
            },
        )
    }

    /// `var %x = 0; if cond { %x <- value } ; store smem[tile_coord], %x`.
    #[allow(clippy::too_many_arguments)]
    fn guarded_tile_load(
        &mut self,
        v: ValueId,
        access: &Layout,
        coord: Vec<Expr>,
        cond: Expr,
        dtype: DType,
        acc_t: DType,
        smem: &str,
        tile_coord: Vec<Expr>,
    ) -> R<()> {
        let x = self.fresh("x");
        self.out.push(Stmt::Var {
            var: x.clone(),
            ty: Ty::Elem(acc_t),
            init: lit(acc_t, 0.0),
        });
        let access = access.clone();
        let x2 = x.clone();
        self.if_(cond, |s| {
            s.coord = coord;
            let e = s.value_at(v, &access)?;
            s.out.push(Stmt::Assign {
                var: x2,
                value: cast_to(acc_t, dtype, e),
            });
            Ok(())
        })?;
        self.out.push(Stmt::Store {
            tensor: smem.to_string(),
            coord: tile_coord,
            value: Expr::var(&x),
        });
        Ok(())
    }
}

fn lit(d: DType, v: f64) -> Expr {
    if d.is_int() || d == DType::I1 {
        // Integer literals stay exact (an f64 cannot hold every i64).
        let i = if v.is_nan() {
            0
        } else if v >= i64::MAX as f64 {
            i64::MAX
        } else if v <= i64::MIN as f64 {
            i64::MIN
        } else {
            v as i64
        };
        Expr::cast(d, Expr::Int(i))
    } else {
        Expr::lit(d, v)
    }
}

/// `e` (of dtype `from`) converted to `to`, with no cast when they are the same.
fn cast_to(to: DType, from: DType, e: Expr) -> Expr {
    if to == from { e } else { Expr::cast(to, e) }
}

/// The rows whose starts the 32 lanes give `ldmatrix.x4`, as a layout from the lane to an
/// element of a 16x16 tile (column-major index `row + 16*col`, rows being M for A and N for B,
/// columns K). The four 8x8 matrices are the mma fragment registers in order: for A
/// (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15); for B the two
/// registers of atom 0 then of atom 1: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7),
/// (n 8-15, k 8-15). Lane `i` gives row `i % 8` of matrix `i / 8`; with `trans` the tile is stored
/// K-major-by-rows (each 8x8 matrix's stored rows are K), so the lane's row is a K row.
fn ldmatrix_x4_rows(b_operand: bool, trans: bool) -> Result<Layout, LayoutError> {
    // Lane bits: (i % 8, (i / 8) % 2, i / 16). Without trans the first walks rows (stride 1);
    // with trans it walks K (stride 16).
    let s0 = if trans { 16 } else { 1 };
    let (s1, s2) = match (b_operand, trans) {
        // A: matrix bit 0 is rows + 8, bit 1 is k + 8.
        (false, false) => (8, 128),
        (false, true) => (8, 128),
        // B: matrix bit 0 is k + 8, bit 1 is n + 8.
        (true, _) => (128, 8),
    };
    Layout::flat(&[8, 2, 2], &[s0, s1, s2])
}

/// The grid of a tiled matmul: N tiles on x, M tiles on y, batches on z (a grid-stride loop
/// covers batches beyond 65535).
fn matmul_grid(m: u64, n: u64, batch: u64, bm: u64, bn: u64) -> R<[u32; 3]> {
    let (gx, gy) = (n.div_ceil(bn), m.div_ceil(bm));
    if gy > 65535 || gx > i32::MAX as u64 {
        return Err(Retry::Fail(LowerError::Unsupported {
            op: "matmul".into(),
            reason: format!(
                "{m}x{n} needs {gy}x{gx} tiles of {bm}x{bn}; at most 65535 row tiles and 2^31-1 column tiles are supported"
            ),
        }));
    }
    Ok([gx as u32, gy as u32, batch.clamp(1, 65535) as u32])
}

/// What the tensor-core matmul template needs to know about one matmul.
struct TcPlan {
    m: u64,
    n: u64,
    k: u64,
    batch: u64,
    dtype: DType,
    /// `(m, k, batch)` → A's index, `(k, n, batch)` → B's, `(m, n, batch)` → C's.
    access_a: Layout,
    access_b: Layout,
    access_c: Layout,
    a_k_fast: bool,
    b_n_fast: bool,
}

/// Tensor-core tiles: a block of 8 warps (2 x 4) computes 128 x 128 outputs in 64-deep K
/// steps; each warp owns 64 x 32 outputs, 4 x 4 `mma.m16n8k16` atoms.
const TC_BM: u64 = 128;
const TC_BN: u64 = 128;
const TC_BK: u64 = 64;
const TC_WARPS_N: u64 = 4;
const TC_MT: u64 = 4;
const TC_NT: u64 = 4;
/// Row pitch of the shared tiles, in elements: K plus 8 keeps fragment reads spread over banks.
const TC_PITCH: i64 = 72;

impl Builder<'_, '_> {
    /// A matmul on tensor cores (f16/bf16 in, f32 accumulate), storing `root` as `matmul` does.
    ///
    /// Every fragment access is a layout: the shared tiles are `(rows, k)` with pitch
    /// [`TC_PITCH`]; a warp's A fragments are the view `composition(tile16x16, mma_a)` extended
    /// with the atom, k-step and warp modes, and likewise for B; the accumulator's (row, col) per
    /// value comes from the `mma_c` atom.
    fn matmul_tc(&mut self, inst: &Inst, root: ValueId, p: TcPlan) -> R<()> {
        use irc_layout::mma_m16n8k16_c;
        let (a, bv) = (inst.operands[0], inst.operands[1]);
        self.kernel.grid = matmul_grid(p.m, p.n, p.batch, TC_BM, TC_BN)?;
        self.kernel.block = [THREADS, 1, 1];
        let dt = p.dtype;
        let c = self.global(root, p.access_c.clone());
        let mm = inst.result;
        let li = |s: i64, d: i64| Layout::int(s, d).map_err(internal);
        // 16-byte stores of C where it is N-contiguous with N a multiple of 8 and the chain keeps
        // the matmul's dtype.
        let c_vec = match vector_layout(&p.access_c, 1, 8) {
            Some(l) if self.ty(root).dtype == dt => Some(self.global(root, l)),
            _ => None,
        };
        // Shared tiles are (rows, k). The operand's contiguous dimension in global memory is
        // contiguous in shared memory too, so tiles fill with 16-byte copies where they can.
        let smem_strides = |k_fast: bool, rows: u64| -> (i64, i64) {
            if k_fast {
                (TC_PITCH, 1)
            } else {
                (1, rows as i64 + 8)
            }
        };
        let (sa_r, sa_k) = smem_strides(p.a_k_fast, TC_BM);
        let (sb_r, sb_k) = smem_strides(!p.b_n_fast, TC_BN);
        let tile = |rows: u64, r: i64, k: i64| {
            Layout::flat(&[rows as i64, TC_BK as i64], &[r, k]).map_err(internal)
        };
        let sa = self.tensor(Space::Shared, dt, tile(TC_BM, sa_r, sa_k)?);
        let sb = self.tensor(Space::Shared, dt, tile(TC_BN, sb_r, sb_k)?);
        // The epilogue's staging tile reuses A's shared tile once the main loop is done: half
        // the block's rows, pitch 136 (16-byte rows; the accumulator pairs a warp stores land
        // in distinct banks).
        let stage = self.tensor(
            Space::View(sa.clone()),
            dt,
            Layout::flat(&[TC_BM as i64 / 2, TC_BN as i64], &[TC_BN as i64 + 8, 1])
                .map_err(internal)?,
        );
        let stage_v = self.tensor(
            Space::View(sa.clone()),
            dt,
            Layout::flat(
                &[8, TC_BM as i64 / 2, TC_BN as i64 / 8],
                &[1, TC_BN as i64 + 8, 8],
            )
            .map_err(internal)?,
        );
        // Fragments come from shared memory by `ldmatrix.x4`: each lane names the start of one
        // 8-element row of a 16x16 tile (`ldmatrix_x4_rows`, composed with the tile's layout),
        // extended with modes for the atom, the k-step and the warp. `.trans` where the tile's
        // contiguous dimension is M (A) or N (B). `tests::ldmatrix_feeds_the_mma_atoms` checks
        // that what each lane receives is the mma atom's fragment.
        let atom_c = mma_m16n8k16_c().map_err(internal)?;
        let (trans_a, trans_b) = (!p.a_k_fast, p.b_n_fast);
        let tile16 = |r: i64, k: i64| Layout::flat(&[16, 16], &[r, k]).map_err(internal);
        let lanes_a = composition(
            &tile16(sa_r, sa_k)?,
            &ldmatrix_x4_rows(false, trans_a).map_err(internal)?,
        )
        .map_err(internal)?;
        let lanes_b = composition(
            &tile16(sb_r, sb_k)?,
            &ldmatrix_x4_rows(true, trans_b).map_err(internal)?,
        )
        .map_err(internal)?;
        let warps_m = (THREADS as u64 / 32 / TC_WARPS_N) as i64;
        let va = concat(&[
            lanes_a,
            li(TC_MT as i64, 16 * sa_r)?,
            li(TC_BK as i64 / 16, 16 * sa_k)?,
            li(warps_m, (TC_MT * 16) as i64 * sa_r)?,
        ])?;
        let vb = concat(&[
            lanes_b,
            li(TC_NT as i64 / 2, 16 * sb_r)?,
            li(TC_BK as i64 / 16, 16 * sb_k)?,
            li(TC_WARPS_N as i64, (TC_NT * 8) as i64 * sb_r)?,
        ])?;
        let rows_a = self.tensor(Space::View(sa.clone()), dt, va);
        let rows_b = self.tensor(Space::View(sb.clone()), dt, vb);
        let fa = self.tensor(
            Space::Registers,
            dt,
            Layout::flat(&[8, TC_MT as i64], &[1, 8]).map_err(internal)?,
        );
        let fb = self.tensor(
            Space::Registers,
            dt,
            Layout::flat(&[4, TC_NT as i64], &[1, 4]).map_err(internal)?,
        );
        // One ldmatrix.x4 fills the B fragments of two atoms: 8 values, atom pairs.
        let fb_pairs = self.tensor(
            Space::View(fb.clone()),
            dt,
            Layout::flat(&[8, TC_NT as i64 / 2], &[1, 8]).map_err(internal)?,
        );
        let acc = self.tensor(
            Space::Registers,
            DType::F32,
            Layout::flat(&[4, TC_MT as i64, TC_NT as i64], &[1, 4, 4 * TC_MT as i64])
                .map_err(internal)?,
        );
        let lane = self.let_(
            "lane",
            Ty::Idx,
            Expr::idx(IdxOp::Rem, bx(Builtin::TidX), Expr::Int(32)),
        );
        let warp = self.let_(
            "warp",
            Ty::Idx,
            Expr::idx(IdxOp::Div, bx(Builtin::TidX), Expr::Int(32)),
        );
        let wm = self.let_(
            "wm",
            Ty::Idx,
            Expr::idx(IdxOp::Div, warp.clone(), int(TC_WARPS_N)),
        );
        let wn = self.let_("wn", Ty::Idx, Expr::idx(IdxOp::Rem, warp, int(TC_WARPS_N)));
        let unrolled =
            |s: &mut Self, hint: &str, n: u64, f: &mut dyn FnMut(&mut Self, Expr) -> R<()>| {
                s.for_(hint, Expr::Int(0), int(n), Expr::Int(1), true, |s, i| {
                    f(s, i)
                })
            };
        self.for_(
            "b",
            bx(Builtin::BidZ),
            int(p.batch),
            bx(Builtin::NctaidZ),
            false,
            |s, bi| {
                let m0 = s.let_("m0", Ty::Idx, mul(bx(Builtin::BidY), int(TC_BM)));
                let n0 = s.let_("n0", Ty::Idx, mul(bx(Builtin::BidX), int(TC_BN)));
                unrolled(s, "v", 4, &mut |s, v| {
                    unrolled(s, "i", TC_MT, &mut |s, i| {
                        let v = v.clone();
                        unrolled(s, "j", TC_NT, &mut |s, j| {
                            s.out.push(Stmt::Store {
                                tensor: acc.clone(),
                                coord: vec![v.clone(), i.clone(), j],
                                value: lit(DType::F32, 0.0),
                            });
                            Ok(())
                        })
                    })
                })?;
                s.for_("k0", Expr::Int(0), int(p.k), int(TC_BK), false, |s, k0| {
                    let tiles = [
                        TileLoad {
                            v: a,
                            access: p.access_a.clone(),
                            rows: TC_BM,
                            extent: p.m,
                            row0: m0.clone(),
                            row_pos: 0,
                            k_fast: p.a_k_fast,
                            smem: sa.clone(),
                            strides: (sa_r, sa_k),
                        },
                        TileLoad {
                            v: bv,
                            access: p.access_b.clone(),
                            rows: TC_BN,
                            extent: p.n,
                            row0: n0.clone(),
                            row_pos: 1,
                            k_fast: !p.b_n_fast,
                            smem: sb.clone(),
                            strides: (sb_r, sb_k),
                        },
                    ];
                    for t in &tiles {
                        s.tc_tile_load(t, &k0, &bi, p.k, dt)?;
                    }
                    s.out.push(Stmt::Sync);
                    // The k-steps of a tile stay a loop: fragment registers are indexed by the
                    // unrolled atom loops inside, and two interleaved k-steps cost registers.
                    s.for_(
                        "ks",
                        Expr::Int(0),
                        int(TC_BK / 16),
                        Expr::Int(1),
                        false,
                        |s, ks| {
                            let frag = |t: &str, at: Vec<Expr>| kir::Frag {
                                tensor: t.to_string(),
                                at,
                            };
                            unrolled(s, "i", TC_MT, &mut |s, i| {
                                s.out.push(Stmt::Ldmatrix {
                                    trans: trans_a,
                                    dst: frag(&fa, vec![i.clone()]),
                                    src: frag(
                                        &rows_a,
                                        vec![lane.clone(), i, ks.clone(), wm.clone()],
                                    ),
                                });
                                Ok(())
                            })?;
                            unrolled(s, "j", TC_NT / 2, &mut |s, j| {
                                s.out.push(Stmt::Ldmatrix {
                                    trans: trans_b,
                                    dst: frag(&fb_pairs, vec![j.clone()]),
                                    src: frag(
                                        &rows_b,
                                        vec![lane.clone(), j, ks.clone(), wn.clone()],
                                    ),
                                });
                                Ok(())
                            })?;
                            unrolled(s, "i", TC_MT, &mut |s, i| {
                                unrolled(s, "j", TC_NT, &mut |s, j| {
                                    let f = |t: &str, at: Vec<Expr>| kir::Frag {
                                        tensor: t.to_string(),
                                        at,
                                    };
                                    s.out.push(Stmt::Mma {
                                        d: f(&acc, vec![i.clone(), j.clone()]),
                                        a: f(&fa, vec![i.clone()]),
                                        b: f(&fb, vec![j]),
                                    });
                                    Ok(())
                                })
                            })
                        },
                    )?;
                    s.out.push(Stmt::Sync);
                    Ok(())
                })?;
                // Epilogue, through shared memory in two halves of 64 rows: the warps of a half
                // store their accumulators (value v of atom (i, j) sits at (row, col) =
                // mma_c(lane, v) of that atom), then all threads read 8 consecutive columns
                // each, apply the elementwise chain over the matmul, and store them with one
                // 16-byte copy where the output allows.
                let atom_c_layout = atom_c.layout().clone();
                s.for_(
                    "h",
                    Expr::Int(0),
                    Expr::Int(2),
                    Expr::Int(1),
                    false,
                    |s, h| {
                        s.out.push(Stmt::Sync);
                        let mine = Expr::idx(IdxOp::Eq, wm.clone(), h.clone());
                        s.if_(mine, |s| {
                            unrolled(s, "i", TC_MT, &mut |s, i| {
                                let i2 = i.clone();
                                unrolled(s, "j", TC_NT, &mut |s, j| {
                                    let (i3, j2) = (i2.clone(), j.clone());
                                    unrolled(s, "v", 4, &mut |s, v| {
                                        let cidx = kir::offset_expr(
                                            &atom_c_layout,
                                            &[lane.clone(), v.clone()],
                                        )
                                        .map_err(internal)?;
                                        let cidx = s.let_("ci", Ty::Idx, cidx);
                                        let row = add(
                                            mul(i3.clone(), Expr::Int(16)),
                                            Expr::idx(IdxOp::Rem, cidx.clone(), Expr::Int(16)),
                                        );
                                        let col = add(
                                            add(
                                                mul(wn.clone(), int(TC_NT * 8)),
                                                mul(j2.clone(), Expr::Int(8)),
                                            ),
                                            Expr::idx(IdxOp::Div, cidx, Expr::Int(16)),
                                        );
                                        let accv = cast_to(
                                            dt,
                                            DType::F32,
                                            Expr::load(&acc, vec![v, i3.clone(), j2.clone()]),
                                        );
                                        s.out.push(Stmt::Store {
                                            tensor: stage.clone(),
                                            coord: vec![row, col],
                                            value: accv,
                                        });
                                        Ok(())
                                    })
                                })
                            })
                        })?;
                        s.out.push(Stmt::Sync);
                        let chunks = (TC_BM / 2) * TC_BN / 8 / u64::from(THREADS);
                        unrolled(s, "l", chunks, &mut |s, l| {
                            let e = s.let_(
                                "e",
                                Ty::Idx,
                                add(mul(l, int(u64::from(THREADS))), bx(Builtin::TidX)),
                            );
                            let c8 = s.let_(
                                "c8",
                                Ty::Idx,
                                Expr::idx(IdxOp::Rem, e.clone(), int(TC_BN / 8)),
                            );
                            let r = s.let_("r", Ty::Idx, Expr::idx(IdxOp::Div, e, int(TC_BN / 8)));
                            let col0 = s.let_("c0", Ty::Idx, mul(c8.clone(), Expr::Int(8)));
                            let gm = s.let_(
                                "cm",
                                Ty::Idx,
                                add(add(m0.clone(), mul(h.clone(), int(TC_BM / 2))), r.clone()),
                            );
                            let gn0 = s.let_("cn", Ty::Idx, add(n0.clone(), col0.clone()));
                            // Each element: the chain over the matmul's (rounded) value.
                            let element = |s: &mut Self, z: Expr| -> R<(Expr, Expr, Expr)> {
                                let gn = s.let_("cz", Ty::Idx, add(gn0.clone(), z.clone()));
                                let col = add(col0.clone(), z);
                                let staged = Expr::load(&stage, vec![r.clone(), col.clone()]);
                                let value = if root == mm {
                                    staged
                                } else {
                                    s.coord = vec![gm.clone(), gn.clone(), bi.clone()];
                                    s.overrides.insert(mm, (p.access_c.clone(), staged));
                                    s.compute_at(root, &p.access_c, false)?
                                };
                                Ok((gn, col, value))
                            };
                            match &c_vec {
                                Some(gv) => {
                                    // In place in the staging tile, then one copy of 8 elements.
                                    if root != mm {
                                        unrolled(s, "z", 8, &mut |s, z| {
                                            let gn = add(gn0.clone(), z.clone());
                                            let cond = Expr::idx(
                                                IdxOp::And,
                                                lt(gm.clone(), int(p.m)),
                                                lt(gn, int(p.n)),
                                            );
                                            s.if_(cond, |s| {
                                                let (_, col, value) = element(s, z.clone())?;
                                                s.out.push(Stmt::Store {
                                                    tensor: stage.clone(),
                                                    coord: vec![r.clone(), col],
                                                    value,
                                                });
                                                Ok(())
                                            })
                                        })?;
                                    }
                                    let cond = Expr::idx(
                                        IdxOp::And,
                                        lt(gm.clone(), int(p.m)),
                                        lt(gn0.clone(), int(p.n)),
                                    );
                                    let (gv, stage_v) = (gv.clone(), stage_v.clone());
                                    s.if_(cond, |s| {
                                        s.out.push(Stmt::Copy {
                                            width: 8,
                                            dst: kir::Frag {
                                                tensor: gv,
                                                at: vec![
                                                    gm.clone(),
                                                    Expr::idx(
                                                        IdxOp::Div,
                                                        gn0.clone(),
                                                        Expr::Int(8),
                                                    ),
                                                    bi.clone(),
                                                ],
                                            },
                                            src: kir::Frag {
                                                tensor: stage_v,
                                                at: vec![r.clone(), c8.clone()],
                                            },
                                        });
                                        Ok(())
                                    })
                                }
                                None => unrolled(s, "z", 8, &mut |s, z| {
                                    let gn = add(gn0.clone(), z.clone());
                                    let cond = Expr::idx(
                                        IdxOp::And,
                                        lt(gm.clone(), int(p.m)),
                                        lt(gn, int(p.n)),
                                    );
                                    s.if_(cond, |s| {
                                        let (gn, _, value) = element(s, z.clone())?;
                                        s.out.push(Stmt::Store {
                                            tensor: c.clone(),
                                            coord: vec![gm.clone(), gn, bi.clone()],
                                            value,
                                        });
                                        Ok(())
                                    })
                                }),
                            }
                        })
                    },
                )
            },
        )
    }
}

/// One operand tile of the tensor-core matmul: `rows x TC_BK` elements of `v` into `smem`.
struct TileLoad {
    v: ValueId,
    /// `(m, k, batch)` for A, `(k, n, batch)` for B → the operand's index.
    access: Layout,
    rows: u64,
    /// M or N.
    extent: u64,
    row0: Expr,
    /// Where the row coordinate sits in `access`'s coordinate (0 for A, 1 for B).
    row_pos: usize,
    /// Whether K is the operand's contiguous dimension.
    k_fast: bool,
    smem: String,
    /// The shared tile's (row, k) strides.
    strides: (i64, i64),
}

/// `layout` with mode `fast` (which must be `size:1`, size a multiple of `w`) split into a
/// leading `w:1` vector mode and `(size/w):w`, when every other stride is a multiple of `w`.
fn vector_layout(layout: &Layout, fast: usize, w: i64) -> Option<Layout> {
    let modes = layout.modes();
    let f = coalesce(modes.get(fast)?).ok()?;
    let size = match f.leaves().as_slice() {
        [(s, 1)] if s % w == 0 => *s,
        _ => return None,
    };
    let aligned = modes
        .iter()
        .enumerate()
        .all(|(i, m)| i == fast || m.leaves().iter().all(|&(s, d)| s == 1 || d % w == 0));
    if !aligned {
        return None;
    }
    let mut out = vec![Layout::int(w, 1).ok()?];
    for (i, m) in modes.into_iter().enumerate() {
        out.push(if i == fast {
            Layout::int(size / w, w).ok()?
        } else {
            m
        });
    }
    Layout::concat(&out).ok()
}

impl Builder<'_, '_> {
    /// Fills one shared tile for K step `k0`: 16-byte copies when the operand is a buffer (or
    /// views of one) whose contiguous dimension allows it, element by element otherwise; out of
    /// range elements are zero.
    fn tc_tile_load(&mut self, t: &TileLoad, k0: &Expr, bi: &Expr, kdim: u64, dt: DType) -> R<()> {
        const W: u64 = 8;
        let k_pos = 1 - t.row_pos;
        let coord_of = |row: Expr, k: Expr| -> Vec<Expr> {
            let mut c = vec![Expr::Int(0), Expr::Int(0), bi.clone()];
            c[t.row_pos] = row;
            c[k_pos] = k;
            c
        };
        let fast_pos = if t.k_fast { k_pos } else { t.row_pos };
        let (r_st, k_st) = t.strides;
        let vector = if dt.size_bytes() * W == 16 {
            self.resolve(t.v, &t.access)
                .and_then(|(buf, l)| vector_layout(&l, fast_pos, W as i64).map(|vl| (buf, vl)))
        } else {
            None
        };
        let unrolled =
            |s: &mut Self, hint: &str, n: u64, f: &mut dyn FnMut(&mut Self, Expr) -> R<()>| {
                s.for_(hint, Expr::Int(0), int(n), Expr::Int(1), true, |s, i| {
                    f(s, i)
                })
            };
        let e_of = |s: &mut Self, l: Expr| {
            s.let_(
                "e",
                Ty::Idx,
                add(mul(l, int(u64::from(THREADS))), bx(Builtin::TidX)),
            )
        };
        let split = |s: &mut Self, e: &Expr, fast: u64| -> (Expr, Expr) {
            let lo = s.let_("lo", Ty::Idx, Expr::idx(IdxOp::Rem, e.clone(), int(fast)));
            let hi = s.let_("hi", Ty::Idx, Expr::idx(IdxOp::Div, e.clone(), int(fast)));
            (lo, hi)
        };
        let li = |s: u64, d: i64| Layout::int(s as i64, d).map_err(internal);
        let Some((buf, gl)) = vector else {
            let per_thread = t.rows * TC_BK / u64::from(THREADS);
            return unrolled(self, "l", per_thread, &mut |s, l| {
                let e = e_of(s, l);
                // Consecutive threads walk the operand's contiguous dimension.
                let (rr, kk) = if t.k_fast {
                    let (kk, rr) = split(s, &e, TC_BK);
                    (rr, kk)
                } else {
                    split(s, &e, t.rows)
                };
                let grow = s.let_("gr", Ty::Idx, add(t.row0.clone(), rr.clone()));
                let gk = s.let_("gk", Ty::Idx, add(k0.clone(), kk.clone()));
                let cond = Expr::idx(
                    IdxOp::And,
                    lt(grow.clone(), int(t.extent)),
                    lt(gk.clone(), int(kdim)),
                );
                s.guarded_tile_load(
                    t.v,
                    &t.access,
                    coord_of(grow, gk),
                    cond,
                    dt,
                    dt,
                    &t.smem,
                    vec![rr, kk],
                )
            });
        };
        let g = self.global(buf, gl);
        let sv_layout = if t.k_fast {
            concat(&[
                li(W, 1)?,
                li(t.rows, r_st)?,
                li(TC_BK / W, W as i64 * k_st)?,
            ])?
        } else {
            concat(&[
                li(W, 1)?,
                li(t.rows / W, W as i64 * r_st)?,
                li(TC_BK, k_st)?,
            ])?
        };
        let sv = self.tensor(Space::View(t.smem.clone()), dt, sv_layout);
        let per_thread = t.rows * TC_BK / W / u64::from(THREADS);
        unrolled(self, "l", per_thread, &mut |s, l| {
            let e = e_of(s, l);
            let (rr, kk, scoord) = if t.k_fast {
                let (kv, rr) = split(s, &e, TC_BK / W);
                let kk = s.let_("kk", Ty::Idx, mul(kv.clone(), int(W)));
                (rr.clone(), kk, vec![rr, kv])
            } else {
                let (rv, kk) = split(s, &e, t.rows / W);
                let rr = s.let_("rr", Ty::Idx, mul(rv.clone(), int(W)));
                (rr, kk.clone(), vec![rv, kk])
            };
            let grow = s.let_("gr", Ty::Idx, add(t.row0.clone(), rr.clone()));
            let gk = s.let_("gk", Ty::Idx, add(k0.clone(), kk.clone()));
            let cond = Expr::idx(
                IdxOp::And,
                lt(grow.clone(), int(t.extent)),
                lt(gk.clone(), int(kdim)),
            );
            let mut gcoord = coord_of(grow, gk);
            gcoord[fast_pos] = Expr::idx(IdxOp::Div, gcoord[fast_pos].clone(), int(W));
            let body = vec![Stmt::Copy {
                width: W as u32,
                dst: kir::Frag {
                    tensor: sv.clone(),
                    at: scoord,
                },
                src: kir::Frag {
                    tensor: g.clone(),
                    at: gcoord,
                },
            }];
            // Out of range: zeros, element by element.
            let (smem, rr2, kk2) = (t.smem.clone(), rr.clone(), kk.clone());
            let orelse = s.block(|s| {
                unrolled(s, "z", W, &mut |s, z| {
                    let coord = if t.k_fast {
                        vec![rr2.clone(), add(kk2.clone(), z)]
                    } else {
                        vec![add(rr2.clone(), z), kk2.clone()]
                    };
                    s.out.push(Stmt::Store {
                        tensor: smem.clone(),
                        coord,
                        value: lit(dt, 0.0),
                    });
                    Ok(())
                })
            })?;
            s.out.push(Stmt::If { cond, body, orelse });
            Ok(())
        })
    }
}

/// `1 / sqrt(var + eps)`, as the reference interpreter computes it.
fn rstd_of(var: Expr, eps: f64, math: DType) -> Expr {
    let call = Expr::call;
    call(
        Func::Recip,
        vec![call(
            Func::Sqrt,
            vec![call(Func::Add, vec![var, lit(math, eps)])],
        )],
    )
}

/// A row composite: `x` read at `access` (`(k, row)` → index), `rows` rows of `k` elements.
struct RowSpec {
    x: ValueId,
    k: u64,
    rows: u64,
    access: Layout,
    /// `(k, row)` → index of the weight and bias (`[k]`).
    param_access: Layout,
    math: DType,
    dtype: DType,
    eps: f64,
    out: String,
    w: Option<ValueId>,
    bias: Option<ValueId>,
}

impl Builder<'_, '_> {
    /// softmax / rmsnorm / layernorm with the row held in registers: `x` is read once. Rows of
    /// up to 1024 elements take one warp each (8 rows per block, warp reductions only); longer
    /// rows one block each. Each thread holds `ceil(k / threads per row)` <= 32 values.
    fn composite_cached(&mut self, op: OpKind, r: RowSpec) -> R<()> {
        let warp_mode = r.k <= 1024;
        let group = if warp_mode { 32 } else { u64::from(THREADS) };
        let per_thread = r.k.div_ceil(group);
        let rows_per_block = if warp_mode {
            u64::from(THREADS) / 32
        } else {
            1
        };
        self.kernel.block = [THREADS, 1, 1];
        self.kernel.grid = [
            r.rows.div_ceil(rows_per_block).clamp(1, MAX_BLOCKS) as u32,
            1,
            1,
        ];
        let cache = self.tensor(
            Space::Registers,
            r.math,
            Layout::int(per_thread as i64, 1).map_err(internal)?,
        );
        let (lane, start, step) = if warp_mode {
            let lane = self.let_(
                "lane",
                Ty::Idx,
                Expr::idx(IdxOp::Rem, bx(Builtin::TidX), Expr::Int(32)),
            );
            let warp = self.let_(
                "warp",
                Ty::Idx,
                Expr::idx(IdxOp::Div, bx(Builtin::TidX), Expr::Int(32)),
            );
            (
                lane,
                add(mul(bx(Builtin::BidX), int(rows_per_block)), warp),
                mul(bx(Builtin::NctaidX), int(rows_per_block)),
            )
        } else {
            (bx(Builtin::TidX), bx(Builtin::BidX), bx(Builtin::NctaidX))
        };
        let math = r.math;
        let call = |f: Func, args: Vec<Expr>| Expr::call(f, args);
        let n = lit(math, r.k as f64);
        self.for_("row", start, int(r.rows), step, false, |s, row| {
            // One pass over the cached values: `f(k index, j) -> statements`, guarded by k < K.
            let pass = |s: &mut Self, f: &mut dyn FnMut(&mut Self, Expr, Expr) -> R<()>| -> R<()> {
                s.for_(
                    "j",
                    Expr::Int(0),
                    int(per_thread),
                    Expr::Int(1),
                    true,
                    |s, j| {
                        let kv =
                            s.let_("kx", Ty::Idx, add(lane.clone(), mul(j.clone(), int(group))));
                        s.if_(lt(kv.clone(), int(r.k)), |s| f(s, kv, j))
                    },
                )
            };
            let reduce = |s: &mut Self, op: ReduceOp, value: Expr| -> Expr {
                let var = s.fresh("red");
                let ty = Ty::Elem(math);
                s.out.push(if warp_mode {
                    Stmt::WarpReduce {
                        var: var.clone(),
                        ty,
                        op,
                        value,
                    }
                } else {
                    Stmt::BlockReduce {
                        var: var.clone(),
                        ty,
                        op,
                        value,
                    }
                });
                Expr::Var(var)
            };
            let accumulate = |s: &mut Self, init: f64| -> String {
                let acc = s.fresh("acc");
                s.out.push(Stmt::Var {
                    var: acc.clone(),
                    ty: Ty::Elem(math),
                    init: lit(math, init),
                });
                acc
            };
            let cached = |j: &Expr| Expr::load(&cache, vec![j.clone()]);
            // Pass 1: load the row, accumulating max (softmax), sum of squares (rmsnorm) or sum.
            let (first_op, init) = if op == OpKind::Softmax {
                (ReduceOp::Max, f64::NEG_INFINITY)
            } else {
                (ReduceOp::Sum, 0.0)
            };
            let acc1 = accumulate(s, init);
            pass(s, &mut |s, kv, j| {
                s.coord = vec![kv, row.clone()];
                let e = s.value_at(r.x, &r.access)?;
                let xv = s.let_("xv", Ty::Elem(math), cast_to(math, r.dtype, e));
                s.out.push(Stmt::Store {
                    tensor: cache.clone(),
                    coord: vec![j],
                    value: xv.clone(),
                });
                let contribution = if op == OpKind::Rmsnorm {
                    call(Func::Mul, vec![xv.clone(), xv])
                } else {
                    xv
                };
                let f = if first_op == ReduceOp::Max {
                    Func::Max
                } else {
                    Func::Add
                };
                s.out.push(Stmt::Assign {
                    var: acc1.clone(),
                    value: call(f, vec![Expr::var(&acc1), contribution]),
                });
                Ok(())
            })?;
            let r1 = reduce(s, first_op, Expr::var(&acc1));
            let store = |s: &mut Self, kv: Expr, y: Expr| {
                s.out.push(Stmt::Store {
                    tensor: r.out.clone(),
                    coord: vec![kv, row.clone()],
                    value: cast_to(r.dtype, math, y),
                });
            };
            let scale = |s: &mut Self, kv: &Expr, mut y: Expr| -> R<Expr> {
                s.coord = vec![kv.clone(), row.clone()];
                if let Some(w) = r.w {
                    let wv = s.value_at(w, &r.param_access)?;
                    y = call(Func::Mul, vec![y, cast_to(math, s.ty(w).dtype, wv)]);
                }
                if let Some(b) = r.bias {
                    let bv = s.value_at(b, &r.param_access)?;
                    y = call(Func::Add, vec![y, cast_to(math, s.ty(b).dtype, bv)]);
                }
                Ok(y)
            };
            match op {
                OpKind::Softmax => {
                    let mx = s.let_("max", Ty::Elem(math), r1);
                    let acc2 = accumulate(s, 0.0);
                    pass(s, &mut |s, _, j| {
                        let e = s.let_(
                            "ex",
                            Ty::Elem(math),
                            call(
                                Func::Exp,
                                vec![call(Func::Sub, vec![cached(&j), mx.clone()])],
                            ),
                        );
                        s.out.push(Stmt::Store {
                            tensor: cache.clone(),
                            coord: vec![j],
                            value: e.clone(),
                        });
                        s.out.push(Stmt::Assign {
                            var: acc2.clone(),
                            value: call(Func::Add, vec![Expr::var(&acc2), e]),
                        });
                        Ok(())
                    })?;
                    let sum = reduce(s, ReduceOp::Sum, Expr::var(&acc2));
                    let sum = s.let_("sum", Ty::Elem(math), sum);
                    pass(s, &mut |s, kv, j| {
                        store(s, kv, call(Func::Div, vec![cached(&j), sum.clone()]));
                        Ok(())
                    })
                }
                OpKind::Rmsnorm => {
                    let var = call(Func::Div, vec![r1, n.clone()]);
                    let rstd = s.let_("rstd", Ty::Elem(math), rstd_of(var, r.eps, math));
                    pass(s, &mut |s, kv, j| {
                        let y = scale(s, &kv, call(Func::Mul, vec![cached(&j), rstd.clone()]))?;
                        store(s, kv, y);
                        Ok(())
                    })
                }
                _ => {
                    let mean = s.let_("mean", Ty::Elem(math), call(Func::Div, vec![r1, n.clone()]));
                    let acc2 = accumulate(s, 0.0);
                    pass(s, &mut |s, _, j| {
                        let d = s.let_(
                            "d",
                            Ty::Elem(math),
                            call(Func::Sub, vec![cached(&j), mean.clone()]),
                        );
                        s.out.push(Stmt::Assign {
                            var: acc2.clone(),
                            value: call(
                                Func::Add,
                                vec![Expr::var(&acc2), call(Func::Mul, vec![d.clone(), d])],
                            ),
                        });
                        Ok(())
                    })?;
                    let q = reduce(s, ReduceOp::Sum, Expr::var(&acc2));
                    let var = call(Func::Div, vec![q, n.clone()]);
                    let rstd = s.let_("rstd", Ty::Elem(math), rstd_of(var, r.eps, math));
                    pass(s, &mut |s, kv, j| {
                        let centered = call(Func::Sub, vec![cached(&j), mean.clone()]);
                        let y = scale(s, &kv, call(Func::Mul, vec![centered, rstd.clone()]))?;
                        store(s, kv, y);
                        Ok(())
                    })
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use irc_layout::{IntTuple, mma_m16n8k16_a, mma_m16n8k16_b};

    /// What `ldmatrix.x4` hands lane `t` as value `v` (register `v / 2`, half `v % 2`), as a
    /// shared offset, given the row starts `rows(lane)` and the tile's contiguous stride 1:
    /// without `.trans` element `2(t%4) + v%2` of the row of lane `8(v/2) + t/4`; with it,
    /// element `t/4` of the row of lane `8(v/2) + 2(t%4) + v%2`.
    fn delivered(rows: &Layout, trans: bool, t: i64, v: i64) -> i64 {
        let j = v / 2;
        if trans {
            rows.eval(8 * j + 2 * (t % 4) + v % 2).unwrap() + t / 4
        } else {
            rows.eval(8 * j + t / 4).unwrap() + 2 * (t % 4) + v % 2
        }
    }

    #[test]
    fn ldmatrix_feeds_the_mma_atoms() {
        // (row stride, k stride) of the shared tile: K-contiguous (pitch 40), or rows contiguous
        // (pitch 136).
        for (r, k, trans) in [(40, 1, false), (1, 136, true)] {
            let tile16 = Layout::flat(&[16, 16], &[r, k]).unwrap();
            // A: 8 values of one 16x16 atom.
            let rows = composition(&tile16, &ldmatrix_x4_rows(false, trans).unwrap()).unwrap();
            let atom = composition(&tile16, mma_m16n8k16_a().unwrap().layout()).unwrap();
            for t in 0..32 {
                for v in 0..8 {
                    let want = atom.crd2idx(&IntTuple::ints(&[t, v])).unwrap();
                    assert_eq!(delivered(&rows, trans, t, v), want, "A r={r} t={t} v={v}");
                }
            }
            // B: values 0-3 are atom 0 (n 0-7), values 4-7 atom 1 (n 8-15).
            let rows = composition(&tile16, &ldmatrix_x4_rows(true, trans).unwrap()).unwrap();
            let tile8 = Layout::flat(&[8, 16], &[r, k]).unwrap();
            let atom = composition(&tile8, mma_m16n8k16_b().unwrap().layout()).unwrap();
            for t in 0..32 {
                for v in 0..8 {
                    let want =
                        atom.crd2idx(&IntTuple::ints(&[t, v % 4])).unwrap() + (v / 4) * 8 * r;
                    assert_eq!(delivered(&rows, trans, t, v), want, "B r={r} t={t} v={v}");
                }
            }
        }
    }
}
