//! Building one kernel: the [`Builder`] a template drives — its tensors, parameters, scalar
//! statements and nested blocks — and reading a graph value at the kernel's iteration
//! coordinate through an access layout ([`Builder::value_at`]: an override held in registers,
//! a buffer's load, a view composed with the access, or the op computed in place).

use crate::LowerError;
use crate::indexing::{has_negative_stride, per_dim, same_map};
use crate::lower::*;
use irc_fused::policy::splat_value;
use irc_ir::infer::flatten_value;
use irc_ir::{Attr, Category, DType, Inst, OpKind, ValueDef, ValueId};
use irc_kir::{self as kir, Expr, Func, Space, Stmt, TensorDecl, Ty};
use irc_layout::Layout;
use std::collections::HashMap;

/// Builds one kernel.
pub(crate) struct Builder<'l, 'g> {
    pub(crate) l: &'l Lowering<'g>,
    pub(crate) kernel: kir::Kernel,
    /// Buffer bound to each parameter, in order.
    pub(crate) args: Vec<String>,
    pub(crate) param_of: HashMap<String, String>,
    pub(crate) tensor_of: HashMap<(String, String), String>,
    /// Statements of the innermost open block.
    pub(crate) out: Vec<Stmt>,
    /// The iteration coordinate value reads are expressed in.
    pub(crate) coord: Vec<Expr>,
    pub(crate) memo: HashMap<(ValueId, String), Expr>,
    pub(crate) next: usize,
    /// Constant arrays this kernel reads (moved to the module).
    pub(crate) constants: Vec<kir::ConstDecl>,
    /// Values held in registers at the current coordinate (a matmul's accumulator in its
    /// epilogue), with the access layout they are valid at.
    pub(crate) overrides: HashMap<ValueId, (Layout, Expr)>,
    /// The origins already named in the kernel's header.
    pub(crate) origins_seen: std::collections::HashSet<(String, String)>,
    /// The values the group stores.
    pub(crate) roots: Vec<ValueId>,
    /// Temp buffers the template adds (a split reduction's partials).
    pub(crate) temps: Vec<kir::BufferDecl>,
    /// Kernels launched before this one (a split reduction's first pass).
    pub(crate) pre: Vec<(kir::Kernel, Vec<String>, Vec<kir::ConstDecl>)>,
    /// The group's configuration (`None`: a template without a space).
    pub(crate) config: Option<crate::templates::Config>,
    /// Whether values of 16-bit float types are read as f32 without the rounding each op's
    /// result would get when stored ([`Builder::wide_of`]): an attention prologue, whose
    /// scores are f32 accumulators and never exist in memory.
    pub(crate) wide: bool,
    /// Whether `config` is the template's heuristic point (by default, or given as that very
    /// point): a template may then refine it from what only lowering sees (operand alignment),
    /// and the refined point is what the group reports.
    pub(crate) heuristic: bool,
    /// Values known to be this expression at every coordinate (an attention prologue's
    /// causal condition on a tile it keeps whole, a scaled score read raw).
    pub(crate) known: HashMap<ValueId, Expr>,
    /// The open vector loop of a row kernel (`templates/vector.rs`).
    pub(crate) vectors: Option<crate::templates::VectorStage>,
    /// The open shared-memory transpose of a pointwise kernel (`templates/transpose.rs`).
    pub(crate) stage: Option<crate::templates::TransposeStage>,
    /// Values this kernel stores that are computed, never read from their buffers, while it
    /// is set: a pass that runs before their stores (an epilogue reduction's operand chain,
    /// `templates/epilogue_reduce.rs`) would read memory no thread has written yet.
    pub(crate) unstored: std::collections::HashSet<ValueId>,
}

impl<'l, 'g> Builder<'l, 'g> {
    pub(crate) fn new(l: &'l Lowering<'g>, name: String, inst_index: usize) -> Self {
        let kernel = kir::Kernel {
            name,
            grid: [1, 1, 1],
            block: [THREADS, 1, 1],
            index: l.index,
            occupancy: 1,
            origins: vec![l.origin(&l.g.insts[inst_index])],
            params: vec![],
            tensors: vec![],
            body: Default::default(),
        };
        let kernel_origins = kernel
            .origins
            .iter()
            .map(|o| (o.op.clone(), o.loc.clone()))
            .collect();
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
            origins_seen: kernel_origins,
            roots: vec![],
            temps: vec![],
            pre: vec![],
            config: None,
            wide: false,
            heuristic: false,
            known: HashMap::new(),
            vectors: None,
            stage: None,
            unstored: Default::default(),
        }
    }

    pub(crate) fn finish(mut self) -> (kir::Kernel, Vec<String>, Vec<kir::ConstDecl>) {
        self.kernel.body = std::sync::Arc::new(std::mem::take(&mut self.out));
        (self.kernel, self.args, self.constants)
    }

    pub(crate) fn fresh(&mut self, hint: &str) -> String {
        self.next += 1;
        // Tensors and parameters are `t{n}` and `p{n}` in the same namespace.
        let hint = if matches!(hint, "t" | "p") {
            format!("{hint}v")
        } else {
            hint.to_string()
        };
        format!("{hint}{}", self.next - 1)
    }

    pub(crate) fn ty(&self, v: ValueId) -> &'g irc_ir::TensorType {
        &self.l.g.values[v.index()].ty
    }

    /// The statement index of `inst` in the graph (a new kernel's origin).
    pub(crate) fn inst_index(&self, inst: &Inst) -> R<usize> {
        match self.l.g.values[inst.result.index()].def {
            ValueDef::Inst(i) => Ok(i),
            ValueDef::Param(_) => Err(Retry::Fail(LowerError::Internal(
                "a kernel anchor without a statement".into(),
            ))),
        }
    }

    pub(crate) fn def(&self, v: ValueId) -> Option<&'g Inst> {
        self.l.g.def_inst(v)
    }

    /// Whether parameter `p` is bound to a buffer the kernel writes: a temp the template added
    /// (scratch its blocks write and read back: a split reduction's partials) or the buffer of
    /// a value the group stores.
    pub(crate) fn writes_param(&self, p: &str) -> bool {
        self.param_of.iter().any(|(buffer, q)| {
            q == p
                && (self.temps.iter().any(|t| &t.name == buffer)
                    || self
                        .roots
                        .iter()
                        .any(|r| self.l.buffer_of.get(r) == Some(buffer)))
        })
    }

    pub(crate) fn param(&mut self, buffer: &str) -> String {
        if let Some(p) = self.param_of.get(buffer) {
            return p.clone();
        }
        let dtype = match self.temps.iter().find(|b| b.name == buffer) {
            Some(t) => t.dtype,
            None => *self.l.dtype_of.get(buffer).expect("declared buffer"),
        };
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
    pub(crate) fn tensor(&mut self, space: Space, dtype: DType, layout: Layout) -> String {
        self.tensor_at(space, dtype, layout, 0)
    }

    /// A tensor of `space` whose elements start `offset` elements in (a slice's window).
    pub(crate) fn tensor_at(
        &mut self,
        space: Space,
        dtype: DType,
        layout: Layout,
        offset: i64,
    ) -> String {
        let key = (format!("{space:?} + {offset}"), layout.to_string());
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
            offset,
            layout,
        });
        self.tensor_of.insert(key, name.clone());
        name
    }

    pub(crate) fn global(&mut self, v: ValueId, layout: Layout) -> String {
        let buffer = self.l.buffer_of[&v].clone();
        let p = self.param(&buffer);
        self.tensor(Space::Global(p), self.ty(v).dtype, layout)
    }

    pub(crate) fn let_(&mut self, hint: &str, ty: Ty, value: Expr) -> Expr {
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
    pub(crate) fn block(&mut self, f: impl FnOnce(&mut Self) -> R<()>) -> R<Vec<Stmt>> {
        let saved_out = std::mem::take(&mut self.out);
        let saved_memo = std::mem::take(&mut self.memo);
        let r = f(self);
        let body = std::mem::replace(&mut self.out, saved_out);
        self.memo = saved_memo;
        r.map(|()| body)
    }

    /// `for %var = start to end step step { f }`, with `f` given the loop variable.
    pub(crate) fn for_(
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

    pub(crate) fn if_(&mut self, cond: Expr, f: impl FnOnce(&mut Self) -> R<()>) -> R<()> {
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
    pub(crate) fn value_at(&mut self, v: ValueId, access: &Layout) -> R<Expr> {
        self.value_at_off(v, access, 0)
    }

    /// [`Builder::value_at`] where the coordinate maps to `offset + access(coord)`: the access
    /// of a value read through a slice, whose window starts `offset` elements in.
    pub(crate) fn value_at_off(&mut self, v: ValueId, access: &Layout, offset: i64) -> R<Expr> {
        // Reads recurse on the depth of the fused chain (thousands of ops in one kernel): the
        // stack grows on the heap instead of overflowing.
        stacker::maybe_grow(256 * 1024, 16 * 1024 * 1024, || {
            self.value_at_here(v, access, offset)
        })
    }

    fn value_at_here(&mut self, v: ValueId, access: &Layout, offset: i64) -> R<Expr> {
        if let Some(e) = self.known.get(&v) {
            return Ok(e.clone());
        }
        if let Some((a, e)) = self.overrides.get(&v) {
            return if offset == 0 && same_map(a, access) {
                Ok(e.clone())
            } else {
                Err(Retry::Fail(LowerError::Internal(format!(
                    "epilogue reads its matmul at {access}, not at {a}"
                ))))
            };
        }
        let coord: Vec<String> = self.coord.iter().map(kir::print::expr).collect();
        let key = (v, format!("{offset} + {access} @ {}", coord.join(",")));
        if let Some(e) = self.memo.get(&key) {
            return Ok(e.clone());
        }
        let e = self.compute_at_off(v, access, offset, true)?;
        self.memo.insert(key, e.clone());
        Ok(e)
    }

    /// Names a graph op the kernel computes in its header, once (a set keeps this linear on
    /// long chains).
    pub(crate) fn add_origin(&mut self, origin: kir::Origin) {
        if self
            .origins_seen
            .insert((origin.op.clone(), origin.loc.clone()))
        {
            self.kernel.origins.push(origin);
        }
    }

    pub(crate) fn compute_at(&mut self, v: ValueId, access: &Layout, load: bool) -> R<Expr> {
        self.compute_at_off(v, access, 0, load)
    }

    /// [`Builder::compute_at`] at `offset + access(coord)`.
    pub(crate) fn compute_at_off(
        &mut self,
        v: ValueId,
        access: &Layout,
        offset: i64,
        load: bool,
    ) -> R<Expr> {
        let dtype = self.ty(v).dtype;
        if load && self.l.buffer_of.contains_key(&v) && !self.unstored.contains(&v) {
            let buffer = self.l.buffer_of[&v].clone();
            let p = self.param(&buffer);
            let e = match self.staged_read(&p, dtype, access, offset)? {
                Some(e) => e,
                None => match self.vector_read(&p, dtype, access, offset)? {
                    Some(e) => e,
                    None => {
                        let t = self.tensor_at(Space::Global(p), dtype, access.clone(), offset);
                        let load = Expr::load(&t, self.coord.clone());
                        self.let_("v", Ty::Elem(dtype), load)
                    }
                },
            };
            let e = self.widen(dtype, e);
            return Ok(self.bound_read(dtype, e));
        }
        let inst = self
            .def(v)
            .expect("a value that is not materialized is computed");
        let origin = self.l.origin(inst);
        self.add_origin(origin);
        let shape = &self.ty(v).shape;
        if is_view(inst.op) {
            let src = inst.operands[0];
            let view = self.view_layout(inst).map_err(internal)?;
            let materialize = || Retry::Materialize(self.l.names[v.index()].clone());
            // The view's layout maps v's coordinate to the source's index; composing with the
            // access maps the iteration coordinate there. An offset goes through a view
            // dimension by dimension, so the shifted access must not carry between dimensions
            // (a reshape is the identity on indices and keeps it as it is).
            let (composed, shift) =
                if inst.op == OpKind::Reshape || (offset == 0 && !has_negative_stride(access)) {
                    let composed = crate::indexing::checked_composition(&view, access)
                        .ok_or_else(materialize)?;
                    (composed, offset)
                } else {
                    per_dim(&view, shape, offset, access).ok_or_else(materialize)?
                };
            let window = match inst.op {
                OpKind::Slice => self.slice_view(inst).map_err(internal)?.1,
                _ => 0,
            };
            return self.value_at_off(src, &composed, shift + window);
        }
        match inst.op.category() {
            Category::Constant => {
                if let Some(x) = splat_value(&inst.attrs) {
                    let x = self.bound_lit(dtype, x);
                    return Ok(self.widen(dtype, Expr::lit(dtype, x)));
                }
                let name = format!("{}_c{}", self.kernel.name, self.constants.len());
                let mut flat = vec![];
                flatten_value(inst.attrs.get("value").unwrap_or(&Attr::Int(0)), &mut flat);
                let values = flat
                    .iter()
                    .map(|a| self.bound_lit(dtype, attr_f64(a)))
                    .collect();
                self.constants.push(kir::ConstDecl {
                    name: name.clone(),
                    dtype,
                    values,
                });
                let t = self.tensor_at(Space::Const(name), dtype, access.clone(), offset);
                let load = Expr::load(&t, self.coord.clone());
                let v = self.let_("v", Ty::Elem(dtype), load);
                Ok(self.widen(dtype, v))
            }
            Category::Cast => {
                let x = inst.operands[0];
                let e = self.value_at_off(x, access, offset)?;
                let v = self.let_("v", Ty::Elem(dtype), Expr::cast(dtype, e));
                Ok(self.widen(dtype, v))
            }
            Category::Unary | Category::Binary => {
                let math = math_dtype(dtype);
                let mut args = vec![];
                for &o in &inst.operands {
                    let e = self.operand_at(v, o, access, offset)?;
                    args.push(cast_to(math, self.val_dtype(o), e));
                }
                let f = Func::from_op(inst.op).ok_or_else(|| {
                    Retry::Fail(LowerError::Internal(format!(
                        "no scalar function for {}",
                        inst.op.name()
                    )))
                })?;
                let mut e = self.scalar_math(f, args, dtype);
                let result = self.wide_of(dtype);
                if math != result {
                    e = Expr::cast(result, e);
                } else if self.absorbs_scores(inst, dtype) {
                    e = Expr::cast(result, Expr::cast(dtype, e));
                }
                Ok(self.let_("v", Ty::Elem(result), e))
            }
            Category::Compare => self.compare(inst, access, offset),
            Category::Select => self.select(inst, access, offset),
            Category::Iota => self.iota(inst, access, offset),
            Category::Concat => self.concat(inst, access, offset),
            Category::Gather => self.gather(inst, access, offset),
            _ => Err(Retry::Fail(LowerError::Internal(format!(
                "{} is not materialized",
                inst.op.name()
            )))),
        }
    }
}
