//! Lowering of the graph IR's v2 ops: comparisons, `select`, `iota`, `slice`, `concat` and
//! `gather`, all computed where they are read (at the reader's access layout).
//!
//! - A comparison or `select` is elementwise (its operands broadcast as a binary op's).
//! - `iota` is the coordinate along its axis of the row-major index the access reaches.
//! - `slice` is a view: its layout (the window's strides, `step · stride` per axis, possibly
//!   negative) plus a start offset, carried beside the access layout
//!   ([`Builder::value_at_off`]) down to the buffer, whose tensor gets the offset as its base.
//! - `concat` is a choice by the coordinate along its axis: nested `if`s, each branch reading
//!   its operand at the operand's own row-major index (so every load is in bounds).
//! - `gather` loads the index, wraps a negative one once, clamps an index still out of range
//!   to 0 for the address and yields NaN (floats) or 0 (integers, `i1` false) for it.

use crate::lower::{
    Builder, R, Retry, broadcast_layout, cast_to, dims_layout, int, internal, is_view, linear, lit,
    math_dtype, row_major,
};
use irc_ir::indexing::slice_windows;
use irc_ir::infer::normalize_axis;
use irc_ir::{Attr, DType, Inst, OpKind, ValueId};
use irc_kir::{self as kir, Expr, Func, IdxOp, Stmt, Ty};
use irc_layout::{Layout, LayoutError, composition};

/// Whether some stride of `access` is negative (a slice walking backwards).
pub(crate) fn has_negative_stride(access: &Layout) -> bool {
    access.leaves().iter().any(|&(s, d)| s > 1 && d < 0)
}

/// Reads through a view that acts on each dimension of `shape` (the view's own shape) on its
/// own — a transpose, a broadcast, a slice — at `offset + access(c)`: the view's layout maps
/// that to `view(offset) + Σ c_l · m_l · view(st_k)` when every leaf of the access steps along
/// one dimension `k` (its stride is `m_l · st_k`, `st` the row-major strides, `m_l` possibly
/// negative) and every coordinate stays inside its dimension (no carry between dimensions).
/// A leaf that runs on past its dimension's end in whole rows of it (a coalesced access over
/// several dimensions: `(8192 : 64)` over dims of 512 and 16 with strides 64 and 32768) is
/// split at the dimension's extent first. Returns that access layout (the access's modes,
/// each flattened) and offset, or `None`.
pub(crate) fn per_dim(
    view: &Layout,
    shape: &[u64],
    offset: i64,
    access: &Layout,
) -> Option<(Layout, i64)> {
    let st = row_major(shape);
    let total: u64 = shape.iter().product();
    if offset < 0 || offset as u64 >= total.max(1) {
        return None;
    }
    let image = |k: usize| view.eval(st[k]).ok();
    let (mut lo, mut hi) = (vec![0i64; shape.len()], vec![0i64; shape.len()]);
    let mut modes = vec![];
    for mode in access.modes() {
        let (mut sizes, mut strides) = (vec![], vec![]);
        for (size, stride) in mode.leaves() {
            if size <= 1 || stride == 0 {
                sizes.push(size);
                strides.push(0);
                continue;
            }
            let (mut size, mut stride) = (size, stride);
            loop {
                // The dimension the stride steps along: the one whose stride divides it with
                // a quotient below its extent.
                let k = (0..shape.len())
                    .find(|&k| stride % st[k] == 0 && (stride / st[k]).unsigned_abs() < shape[k])?;
                let m = stride / st[k];
                // Steps that stay inside dimension k from its start; a leaf that goes on
                // past them in whole rows of it continues along the next dimension out.
                let fit = (shape[k] as i64).checked_add(m.abs() - 1)? / m.abs();
                let (n, rest) = match size <= fit {
                    true => (size, 1),
                    false if shape[k] as i64 % m.abs() == 0 && size % fit == 0 => (fit, size / fit),
                    false => return None,
                };
                let reach = (n - 1).checked_mul(m)?;
                if reach < 0 {
                    lo[k] += reach;
                } else {
                    hi[k] += reach;
                }
                sizes.push(n);
                strides.push(m.checked_mul(image(k)?)?);
                if rest == 1 {
                    break;
                }
                (size, stride) = (rest, stride.checked_mul(n)?);
            }
        }
        modes.push(Layout::flat(&sizes, &strides).ok()?);
    }
    let fits = (0..shape.len()).all(|k| {
        let o = (offset / st[k]) % shape[k] as i64;
        o + lo[k] >= 0 && o + hi[k] < shape[k] as i64
    });
    if !fits {
        return None;
    }
    Some((Layout::concat(&modes).ok()?, view.eval(offset).ok()?))
}

/// `view ∘ access`, checked to be the function it names: CuTe's composition also accepts a
/// stride below a mode size it does not divide (an access of `[28, 2]` through the transpose
/// `(8,7)` of a `[7, 8]` tensor), where the layout it returns is not `view(access(i))`. Checked at
/// up to 512 indices (the first 256 and 256 spread over the rest), where such a split shows at
/// its first wrap; `None` when the composition fails or disagrees, so the view is stored.
pub(crate) fn checked_composition(view: &Layout, access: &Layout) -> Option<Layout> {
    let composed = composition(view, access).ok()?;
    let n = access.size().ok()?;
    let spread = (n / 256).max(1);
    let sample = (0..n.min(256)).chain((0..256).map(|k| k * spread).filter(|&i| i < n));
    for i in sample {
        if composed.eval(i).ok()? != view.eval(access.eval(i).ok()?).ok()? {
            return None;
        }
    }
    Some(composed)
}

impl Builder<'_, '_> {
    /// A slice's view layout (a coordinate of the slice, its row-major index, to the source's
    /// index less the window's start) and the start offset.
    pub(crate) fn slice_view(&self, inst: &Inst) -> Result<(Layout, i64), LayoutError> {
        let src = &self.ty(inst.operands[0]).shape;
        let st = row_major(src);
        let windows = slice_windows(src, &inst.attrs).unwrap_or_default();
        let mut modes = vec![];
        let mut offset = 0i64;
        for (k, &d) in src.iter().enumerate() {
            let (start, step, len) = windows
                .get(k)
                .map_or((0, 1, d), |w| (w.start as i64, w.step, w.len));
            offset += start * st[k];
            modes.push((len, step * st[k]));
        }
        Ok((crate::lower::dims_layout(&modes)?, offset))
    }

    /// Operand `o` of the elementwise value `v` (of `shape`) at `offset + access(coord)`,
    /// broadcast as numpy does.
    pub(crate) fn operand_at(
        &mut self,
        v: ValueId,
        o: ValueId,
        access: &Layout,
        offset: i64,
    ) -> R<Expr> {
        let shape = self.ty(v).shape.clone();
        let oshape = self.ty(o).shape.clone();
        if oshape == shape {
            return self.value_at_off(o, access, offset);
        }
        let b = crate::lower::broadcast_layout(&oshape, &shape).map_err(internal)?;
        // Where the broadcast cannot be composed with the access (a reshape's split that a
        // broadcast mode does not divide), `v` is stored and read through its own layout.
        let materialize = || Retry::Materialize(self.l.names[v.index()].clone());
        if offset == 0 && !has_negative_stride(access) {
            let composed = checked_composition(&b, access).ok_or_else(materialize)?;
            return self.value_at_off(o, &composed, 0);
        }
        match per_dim(&b, &shape, offset, access) {
            Some((a, shift)) => self.value_at_off(o, &a, shift),
            None => Err(materialize()),
        }
    }

    /// The row-major index of the value read at `offset + access(coord)`.
    fn index_at(&mut self, access: &Layout, offset: i64) -> R<Expr> {
        let e = kir::offset_expr(access, &self.coord).map_err(internal)?;
        Ok(self.let_("r", Ty::Idx, Expr::idx(IdxOp::Add, e, Expr::Int(offset))))
    }

    fn axis(&self, inst: &Inst, default: i64) -> usize {
        let rank = self.ty(inst.result).shape.len();
        let a = inst
            .attrs
            .get("axis")
            .and_then(Attr::as_int)
            .unwrap_or(default);
        normalize_axis(a, rank).unwrap_or(0)
    }

    /// `value` at the coordinate `[index]` of a row-major walk of it.
    pub(crate) fn value_at_index(&mut self, value: ValueId, index: Expr) -> R<Expr> {
        let n = self.ty(value).numel();
        let saved = std::mem::replace(&mut self.coord, vec![index]);
        let r = self.value_at(value, &linear(n).map_err(internal)?);
        self.coord = saved;
        r
    }

    /// `eq ne lt le gt ge`: compared in op math (f32 for 16-bit floats, i64 for integers and
    /// `i1`), IEEE on floats.
    pub(crate) fn compare(&mut self, inst: &Inst, access: &Layout, offset: i64) -> R<Expr> {
        let d = self.ty(inst.operands[0]).dtype;
        let math = math_dtype(d);
        let mut args = vec![];
        for &o in &inst.operands {
            let e = self.operand_at(inst.result, o, access, offset)?;
            args.push(cast_to(math, self.val_dtype(o), e));
        }
        let f = Func::from_op(inst.op)
            .filter(|f| f.is_compare())
            .ok_or_else(|| {
                Retry::Fail(crate::LowerError::Internal(format!(
                    "no scalar comparison for {}",
                    inst.op.name()
                )))
            })?;
        Ok(self.let_("v", Ty::Elem(DType::I1), Expr::call(f, args)))
    }

    /// `select %c, %a, %b`: `c ? a : b`, no arithmetic and so no rounding.
    pub(crate) fn select(&mut self, inst: &Inst, access: &Layout, offset: i64) -> R<Expr> {
        let dtype = self.ty(inst.result).dtype;
        let mut args = vec![];
        for &o in &inst.operands {
            args.push(self.operand_at(inst.result, o, access, offset)?);
        }
        let ty = Ty::Elem(self.wide_of(dtype));
        Ok(self.let_("v", ty, Expr::call(Func::Select, args)))
    }

    /// `iota`: the coordinate along the axis of the index the access reaches.
    pub(crate) fn iota(&mut self, inst: &Inst, access: &Layout, offset: i64) -> R<Expr> {
        let ty = self.ty(inst.result);
        let (dtype, shape) = (ty.dtype, ty.shape.clone());
        let axis = self.axis(inst, 0);
        let r = self.index_at(access, offset)?;
        let st = row_major(&shape);
        let q = Expr::idx(
            IdxOp::Rem,
            Expr::idx(IdxOp::Div, r, Expr::Int(st[axis])),
            int(shape[axis]),
        );
        let q = self.let_("q", Ty::Idx, q);
        let v = self.let_("v", Ty::Elem(dtype), Expr::cast(dtype, q));
        Ok(self.widen(dtype, v))
    }

    /// `concat`: the operand whose range along the axis holds the coordinate, read at its own
    /// row-major index in a branch of its own.
    pub(crate) fn concat(&mut self, inst: &Inst, access: &Layout, offset: i64) -> R<Expr> {
        let ty = self.ty(inst.result);
        let (dtype, shape) = (ty.dtype, ty.shape.clone());
        if inst.operands.len() == 1 {
            return self.value_at_off(inst.operands[0], access, offset);
        }
        let axis = self.axis(inst, 0);
        let inner = row_major(&shape)[axis];
        let n = shape[axis] as i64;
        // Each operand: where it starts along the axis and its extent there.
        let mut parts = vec![];
        let mut start = 0i64;
        for &o in &inst.operands {
            let len = self.ty(o).shape[axis] as i64;
            parts.push((o, start, len));
            start += len;
        }
        if let Some(e) = self.vector_concat(&parts, (inner, n), dtype, access, offset)? {
            return Ok(e);
        }
        let r = self.index_at(access, offset)?;
        let q = Expr::idx(
            IdxOp::Rem,
            Expr::idx(IdxOp::Div, r.clone(), Expr::Int(inner)),
            Expr::Int(n),
        );
        let q = self.let_("q", Ty::Idx, q);
        let outer = self.let_(
            "o",
            Ty::Idx,
            Expr::idx(IdxOp::Div, r.clone(), Expr::Int(inner * n)),
        );
        let var = self.fresh("c");
        let ty = self.wide_of(dtype);
        self.out.push(Stmt::Var {
            var: var.clone(),
            ty: Ty::Elem(ty),
            init: lit(ty, 0.0),
        });
        let branches = self.concat_branches(&parts, &var, &q, &outer, &r, inner, n)?;
        self.out.extend(branches);
        Ok(Expr::Var(var))
    }

    /// `if q < end0 { c <- x0 } else { if q < end1 { ... } else { c <- xn } }`.
    #[allow(clippy::too_many_arguments)]
    fn concat_branches(
        &mut self,
        parts: &[(ValueId, i64, i64)],
        var: &str,
        q: &Expr,
        outer: &Expr,
        r: &Expr,
        inner: i64,
        n: i64,
    ) -> R<Vec<Stmt>> {
        let [(o, start, len), rest @ ..] = parts else {
            return Ok(vec![]);
        };
        // The operand's own row-major index: r less the rows of the other operands before
        // this outer index and the operands before it along the axis.
        let j = Expr::idx(
            IdxOp::Sub,
            Expr::idx(
                IdxOp::Sub,
                r.clone(),
                Expr::idx(IdxOp::Mul, outer.clone(), Expr::Int((n - len) * inner)),
            ),
            Expr::Int(start * inner),
        );
        let body = self.block(|b| {
            let j = b.let_("j", Ty::Idx, j);
            let e = b.value_at_index(*o, j)?;
            b.out.push(Stmt::Assign {
                var: var.to_string(),
                value: e,
            });
            Ok(())
        })?;
        if rest.is_empty() {
            return Ok(body);
        }
        let mut orelse = vec![];
        let saved = std::mem::take(&mut self.out);
        let nested = self.concat_branches(rest, var, q, outer, r, inner, n);
        self.out = saved;
        orelse.extend(nested?);
        Ok(vec![Stmt::If {
            cond: Expr::idx(IdxOp::Lt, q.clone(), Expr::Int(start + len)),
            body,
            orelse,
        }])
    }

    /// `gather %x, %indices`: the index is loaded, wrapped once when negative, and clamped to
    /// 0 for the address when still out of range, where the result is NaN (0 for integers,
    /// false for `i1`): every load is in bounds.
    pub(crate) fn gather(&mut self, inst: &Inst, access: &Layout, offset: i64) -> R<Expr> {
        let dtype = self.ty(inst.result).dtype;
        let (x, indices) = (inst.operands[0], inst.operands[1]);
        let xshape = self.ty(x).shape.clone();
        let axis = {
            let a = inst.attrs.get("axis").and_then(Attr::as_int).unwrap_or(0);
            normalize_axis(a, xshape.len()).unwrap_or(0)
        };
        let inner: i64 = xshape[axis + 1..].iter().product::<u64>() as i64;
        let n = xshape[axis] as i64;
        let m = self.ty(indices).numel() as i64;
        let idt = self.ty(indices).dtype;
        let r = self.index_at(access, offset)?;
        let outer = Expr::idx(IdxOp::Div, r.clone(), Expr::Int(m * inner));
        let mid = Expr::idx(
            IdxOp::Rem,
            Expr::idx(IdxOp::Div, r.clone(), Expr::Int(inner)),
            Expr::Int(m),
        );
        let within = Expr::idx(IdxOp::Rem, r, Expr::Int(inner));
        let mid = self.let_("m", Ty::Idx, mid);
        let raw = self.value_at_index(indices, mid)?;
        let i64t = Ty::Elem(DType::I64);
        let i = self.let_("i", i64t, cast_to(DType::I64, idt, raw));
        let zero = lit(DType::I64, 0.0);
        let size = lit(DType::I64, n as f64);
        let neg = Expr::call(Func::Lt, vec![i.clone(), zero.clone()]);
        let wrapped = Expr::call(
            Func::Select,
            vec![neg, Expr::call(Func::Add, vec![i.clone(), size.clone()]), i],
        );
        let w = self.let_("w", i64t, wrapped);
        let ok = Expr::idx(
            IdxOp::And,
            Expr::call(Func::Ge, vec![w.clone(), zero.clone()]),
            Expr::call(Func::Lt, vec![w.clone(), size]),
        );
        let ok = self.let_("ok", Ty::Elem(DType::I1), ok);
        let clamped = Expr::call(Func::Select, vec![ok.clone(), w, zero]);
        let k = self.let_("k", Ty::Idx, Expr::call(Func::Index, vec![clamped]));
        let j = Expr::idx(
            IdxOp::Add,
            Expr::idx(
                IdxOp::Add,
                Expr::idx(IdxOp::Mul, outer, Expr::Int(n * inner)),
                Expr::idx(IdxOp::Mul, k, Expr::Int(inner)),
            ),
            within,
        );
        let j = self.let_("j", Ty::Idx, j);
        let e = self.value_at_index(x, j)?;
        let ty = self.wide_of(dtype);
        let fallback = if dtype.is_float() {
            lit(ty, f64::NAN)
        } else {
            lit(ty, 0.0)
        };
        Ok(self.let_(
            "v",
            Ty::Elem(ty),
            Expr::call(Func::Select, vec![ok, e, fallback]),
        ))
    }
}

/// Wide mode ([`Builder::wide`]): 16-bit float values read as f32.
impl Builder<'_, '_> {
    /// The type an expression of a `d` value has: `d`, or f32 for 16-bit floats in
    /// [`Builder::wide`] mode.
    pub(crate) fn wide_of(&self, d: DType) -> DType {
        if self.wide && matches!(d, DType::F16 | DType::BF16) {
            DType::F32
        } else {
            d
        }
    }

    /// The type of the expression [`Builder::value_at`] gives for `v`.
    pub(crate) fn val_dtype(&self, v: ValueId) -> DType {
        self.wide_of(self.ty(v).dtype)
    }

    /// `e`, of dtype `d`, as the expression of a `d` value ([`Builder::wide_of`]).
    pub(crate) fn widen(&mut self, d: DType, e: Expr) -> Expr {
        let w = self.wide_of(d);
        if w == d {
            return e;
        }
        // A literal is rounded here (through f32, as `cast` does), not in the kernel.
        if let Expr::Call(Func::Cast(_), args) = &e
            && let [Expr::Float(x)] = args.as_slice()
        {
            return Expr::lit(w, d.round(*x));
        }
        self.let_("w", Ty::Elem(w), Expr::cast(w, e))
    }

    /// A float constant as wide mode reads it: finite values beyond `±WIDE_BOUND` become
    /// `±WIDE_BOUND` (see there); elsewhere, and for integers, `x` itself.
    pub(crate) fn bound_lit(&self, d: DType, x: f64) -> f64 {
        // A constant its type rounds to ±inf stays (it is ±inf in the graph too).
        let r = d.round(x);
        match self.wide && d.is_float() && r.is_finite() && r.abs() > WIDE_BOUND {
            true => WIDE_BOUND.copysign(r),
            false => x,
        }
    }

    /// A float read from memory (`e`, already widened) as wide mode sees it: a finite value
    /// below `-WIDE_BOUND` becomes `-WIDE_BOUND`; `-inf` stays (an f16 never reaches it).
    pub(crate) fn bound_read(&mut self, d: DType, e: Expr) -> Expr {
        if !self.wide || !matches!(d, DType::BF16 | DType::F32 | DType::F64) {
            return e;
        }
        let w = self.wide_of(d);
        let lit = |x: f64| Expr::lit(w, x);
        let call = |f: Func, a: Vec<Expr>| Expr::call(f, a);
        let bounded = call(Func::Max, vec![e.clone(), lit(-WIDE_BOUND)]);
        let inf = call(Func::Eq, vec![e.clone(), lit(f64::NEG_INFINITY)]);
        self.let_("bd", Ty::Elem(w), call(Func::Select, vec![inf, e, bounded]))
    }
}

impl Builder<'_, '_> {
    /// Wide mode: whether `inst`, of 16-bit type `dtype`, is an addition of a mask constant so
    /// large that the type's rounding absorbs the score it is added to (`add(s, select(keep, 0,
    /// -10000))`, Hugging Face's `finfo(f16).min`: |c| ≥ 2^(mantissa bits), where the ulp is 1
    /// or more). The unfused graph rounds that sum to `dtype`, so a row masked whole is uniform
    /// there; computed in f32 it would keep the scores. Such an addition is rounded as the
    /// graph rounds it (two conversions a score, only in these kernels).
    pub(crate) fn absorbs_scores(&self, inst: &Inst, dtype: DType) -> bool {
        let bits = match dtype {
            DType::F16 => 10,
            DType::BF16 => 7,
            _ => return false,
        };
        self.wide
            && matches!(inst.op, OpKind::Add | OpKind::Sub)
            && inst
                .operands
                .iter()
                .any(|&o| self.carries_large(o, f64::from(1u32 << bits), 8))
    }

    /// Whether `v` may be a finite constant of magnitude at least `at`: such a splat, seen
    /// through views and casts, chosen by a `select` or scaling a value (`(1 - m) · min`, as
    /// BERT writes its padding mask), within `depth` steps.
    fn carries_large(&self, v: ValueId, at: f64, depth: u32) -> bool {
        let Some(c) = self.l.g.def_inst(v) else {
            return false;
        };
        let splat = |c: &Inst| {
            c.op == OpKind::Constant
                && irc_fused::policy::splat_value(&c.attrs)
                    .is_some_and(|x| x.is_finite() && x.abs() >= at)
        };
        let down = |u: ValueId| depth > 0 && self.carries_large(u, at, depth - 1);
        splat(c)
            || ((is_view(c.op) || c.op == OpKind::Cast) && down(c.operands[0]))
            || (c.op == OpKind::Select && c.operands[1..].iter().any(|&b| down(b)))
            || (c.op == OpKind::Mul && c.operands.iter().any(|&b| down(b)))
    }
}

/// The magnitude wide mode (an attention prologue) bounds finite float constants and reads to:
/// `2^100`. A mask written as the type's lowest finite value (Hugging Face's
/// `finfo(dtype).min`, -3.4e38 in bf16 or f32) would overflow to `-inf` once the softmax
/// multiplies it by `log2(e)`, and a row masked whole would then be `-inf - -inf`, NaN, where
/// the graph's softmax of equal values is uniform. Bounded, the row's scores are still equal
/// (a score is far below the bound's ulp, 2^76), their exponentials 1 and the row uniform; a
/// masked score in any other row still gives `exp2` 0.
pub(crate) const WIDE_BOUND: f64 = 1.2676506002282294e30;

impl<'g> Builder<'_, 'g> {
    /// A view's layout: a coordinate of the view (its row-major index) to the source's index.
    pub(crate) fn view_layout(&self, inst: &Inst) -> Result<Layout, LayoutError> {
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
            OpKind::Slice => Ok(self.slice_view(inst)?.0),
            _ => linear(self.ty(inst.result).numel()),
        }
    }

    /// [`Builder::resolve`] without recording the views as the kernel's origins: a question
    /// a template asks before it decides what to build.
    pub(crate) fn resolve_quiet(&self, v: ValueId, access: &Layout) -> Option<(ValueId, Layout)> {
        self.walk_views(v, access, &mut |_| {})
    }

    /// The buffer `v` is read from at `access`, following views, if `v` is a buffer or views
    /// of one (not a computed value); the views walked become origins of the kernel.
    pub(crate) fn resolve(&mut self, v: ValueId, access: &Layout) -> Option<(ValueId, Layout)> {
        let mut seen = vec![];
        let found = self.walk_views(v, access, &mut |inst| seen.push(inst));
        for inst in seen {
            let origin = self.l.origin(inst);
            self.add_origin(origin);
        }
        found
    }

    /// Follows `v`'s views down to a buffer, composing `access` through each, `on_view` given
    /// each view passed.
    fn walk_views(
        &self,
        mut v: ValueId,
        access: &Layout,
        on_view: &mut dyn FnMut(&'g Inst),
    ) -> Option<(ValueId, Layout)> {
        let mut access = access.clone();
        loop {
            if self.l.buffer_of.contains_key(&v) {
                return Some((v, access));
            }
            let inst = self.def(v)?;
            // A slice's window has an offset, which a buffer's access does not carry here.
            if !is_view(inst.op) || inst.op == OpKind::Slice {
                return None;
            }
            access = composition(&self.view_layout(inst).ok()?, &access).ok()?;
            on_view(inst);
            v = inst.operands[0];
        }
    }
}

/// Whether two access layouts are the same map of the iteration coordinate (mode by mode, the
/// coordinate's top-level entries): a read through a reshape composes to an equal function
/// that may be written differently.
pub(crate) fn same_map(a: &Layout, b: &Layout) -> bool {
    if a == b {
        return true;
    }
    let flat = |l: &Layout| -> Option<Vec<Layout>> {
        l.modes()
            .iter()
            .map(|m| irc_layout::coalesce(m).ok())
            .collect()
    };
    a.rank() == b.rank() && flat(a).is_some() && flat(a) == flat(b)
}
