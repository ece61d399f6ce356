//! Type inference and the per-statement typing rules.
//!
//! [`check_op`] is the one place that knows whether a statement is well formed: the builder,
//! the frontend and the verifier all call it, so they can never disagree.

use crate::ops::{AttrKind, Category};
use crate::{Attr, Attrs, DType, OpKind, TensorType};

/// Which part of a statement an [`OpError`] is about, so a parser can point at it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blame {
    /// The statement as a whole.
    Stmt,
    /// The operand at this position.
    Operand(usize),
    /// The attribute with this name.
    Attr(String),
    /// The written result type.
    ResultType,
}

/// A statement that does not type-check.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct OpError {
    pub blame: Blame,
    pub message: String,
}

impl OpError {
    pub fn stmt(message: impl Into<String>) -> OpError {
        OpError {
            blame: Blame::Stmt,
            message: message.into(),
        }
    }

    pub(crate) fn operand(i: usize, message: impl Into<String>) -> OpError {
        OpError {
            blame: Blame::Operand(i),
            message: message.into(),
        }
    }

    pub(crate) fn attr(name: &str, message: impl Into<String>) -> OpError {
        OpError {
            blame: Blame::Attr(name.to_string()),
            message: message.into(),
        }
    }
}

type Result<T> = std::result::Result<T, OpError>;

/// Checks a statement `op operands {attrs} : declared` and returns its result type.
///
/// The result type is inferred from the operands and attributes; when `declared` is given it
/// must equal the inferred type. A `constant` has no operands to infer from, so its declared
/// type is required and is its type.
pub fn check_op(
    op: OpKind,
    operands: &[&TensorType],
    attrs: &Attrs,
    declared: Option<&TensorType>,
) -> Result<TensorType> {
    let info = op.info();
    if operands.len() < info.arity.min || operands.len() > info.arity.max {
        return Err(OpError::stmt(format!(
            "'{op}' takes {} operand{}, got {}",
            info.arity,
            if info.arity.max == 1 { "" } else { "s" },
            operands.len()
        )));
    }
    check_attrs(op, attrs)?;
    check_special_operands(op, operands)?;
    let (lo, hi) = uniform_operands(op, operands.len());
    if let Some(first) = operands.get(lo) {
        for (i, t) in operands.iter().enumerate().take(hi).skip(lo) {
            if t.dtype != first.dtype {
                return Err(OpError::operand(
                    i,
                    format!(
                        "'{op}' operands must have one dtype, got {} and {}; insert a cast",
                        first.dtype, t.dtype
                    ),
                ));
            }
        }
        if !info.dtypes.admits(first.dtype) {
            return Err(OpError::operand(
                lo,
                format!(
                    "'{op}' accepts {}, got {}",
                    info.dtypes.describe(),
                    first.dtype
                ),
            ));
        }
    }
    if let Some(d) = declared {
        d.check().map_err(|e| OpError {
            blame: Blame::ResultType,
            message: format!("invalid result type: {e}"),
        })?;
    }
    let inferred = infer(op, operands, attrs, declared)?;
    inferred
        .check()
        .map_err(|e| OpError::stmt(format!("'{op}' would produce an invalid type: {e}")))?;
    match declared {
        Some(d) if *d != inferred => Err(OpError {
            blame: Blame::ResultType,
            message: format!("'{op}' produces {inferred}, but the statement declares {d}"),
        }),
        _ => Ok(inferred),
    }
}

/// The operands `lo..hi` that share one dtype, which the table's dtype rule constrains:
/// all of them but `select`'s condition and `gather`'s indices.
fn uniform_operands(op: OpKind, n: usize) -> (usize, usize) {
    match op {
        OpKind::Select => (1, n),
        OpKind::Gather => (0, n.min(1)),
        _ => (0, n),
    }
}

/// The operands outside the uniform group: `select`'s condition is `i1`, `gather`'s indices
/// are `i32` or `i64`.
fn check_special_operands(op: OpKind, xs: &[&TensorType]) -> Result<()> {
    match op {
        OpKind::Select if xs[0].dtype != DType::I1 => Err(OpError::operand(
            0,
            format!(
                "'select' condition must be i1, got {}; compare with 'ne' against zero to make one",
                xs[0].dtype
            ),
        )),
        OpKind::Gather if !matches!(xs[1].dtype, DType::I32 | DType::I64) => Err(OpError::operand(
            1,
            format!("'gather' indices must be i32 or i64, got {}", xs[1].dtype),
        )),
        _ => Ok(()),
    }
}

/// Every attribute is one the op declares, of the declared kind; every required one is there.
fn check_attrs(op: OpKind, attrs: &Attrs) -> Result<()> {
    let info = op.info();
    for (name, value) in attrs.iter() {
        let Some(spec) = info.attr(name) else {
            let known: Vec<&str> = info.attrs.iter().map(|a| a.name).collect();
            let accepted = if known.is_empty() {
                "it takes no attributes".to_string()
            } else {
                format!("it accepts {}", known.join(", "))
            };
            return Err(OpError::attr(
                name,
                format!("unknown attribute '{name}' for '{op}'; {accepted}"),
            ));
        };
        if !attr_has_kind(value, spec.kind) {
            return Err(OpError::attr(
                name,
                format!(
                    "attribute '{name}' of '{op}' must be {}, got {}",
                    spec.kind.describe(),
                    value.kind_name()
                ),
            ));
        }
    }
    match info
        .attrs
        .iter()
        .find(|a| a.required && attrs.get(a.name).is_none())
    {
        Some(missing) => Err(OpError::stmt(format!(
            "'{op}' requires the attribute '{}' ({})",
            missing.name,
            missing.kind.describe()
        ))),
        None => Ok(()),
    }
}

fn attr_has_kind(value: &Attr, kind: AttrKind) -> bool {
    match kind {
        AttrKind::Bool => value.as_bool().is_some(),
        AttrKind::Int => value.as_int().is_some(),
        AttrKind::Float => value.as_f64().is_some(),
        AttrKind::DType => value.as_dtype().is_some(),
        AttrKind::Ints => value.as_ints().is_some(),
        AttrKind::Value => is_value(value),
    }
}

fn is_value(value: &Attr) -> bool {
    match value {
        Attr::Int(_) | Attr::Float(_) | Attr::Bool(_) => true,
        Attr::Array(items) => items.iter().all(is_value),
        Attr::Str(_) | Attr::DType(_) => false,
    }
}

fn infer(
    op: OpKind,
    xs: &[&TensorType],
    attrs: &Attrs,
    declared: Option<&TensorType>,
) -> Result<TensorType> {
    match op.category() {
        Category::Matmul => infer_matmul(xs[0], xs[1], attrs),
        Category::View => infer_view(op, xs[0], attrs),
        Category::Constant => infer_constant(attrs, declared),
        Category::Cast => Ok(xs[0].with_dtype(
            attrs
                .get("dtype")
                .and_then(Attr::as_dtype)
                .unwrap_or(xs[0].dtype),
        )),
        Category::Unary => Ok(xs[0].clone()),
        Category::Binary => broadcast_shapes(&xs[0].shape, &xs[1].shape)
            .map(|s| xs[0].with_shape(s))
            .ok_or_else(|| {
                OpError::operand(
                    1,
                    format!(
                        "'{op}' operands {} and {} do not broadcast together",
                        xs[0], xs[1]
                    ),
                )
            }),
        Category::Reduction => {
            let axes = reduction_axes(xs[0].rank(), attrs)?;
            let keepdims = attrs
                .get("keepdims")
                .and_then(Attr::as_bool)
                .unwrap_or(false);
            Ok(xs[0].with_shape(reduced_shape(&xs[0].shape, &axes, keepdims)))
        }
        Category::Composite => infer_composite(op, xs, attrs),
        Category::Compare => broadcast_all(op, xs).map(|s| TensorType::new(s, DType::I1)),
        Category::Select => broadcast_all(op, xs).map(|s| xs[1].with_shape(s)),
        Category::Iota => crate::indexing::infer_iota(attrs, declared),
        Category::Slice => crate::indexing::slice_windows(&xs[0].shape, attrs)
            .map(|w| xs[0].with_shape(w.iter().map(|w| w.len).collect())),
        Category::Concat => crate::indexing::infer_concat(xs, attrs),
        Category::Gather => crate::indexing::infer_gather(xs[0], xs[1], attrs),
    }
}

/// The numpy broadcast of every operand's shape.
fn broadcast_all(op: OpKind, xs: &[&TensorType]) -> Result<Vec<u64>> {
    let mut shape = xs[0].shape.clone();
    for (i, x) in xs.iter().enumerate().skip(1) {
        shape = broadcast_shapes(&shape, &x.shape).ok_or_else(|| {
            let others: Vec<String> = xs[..i].iter().map(|t| t.to_string()).collect();
            OpError::operand(
                i,
                format!(
                    "'{op}' operand {x} does not broadcast with {}",
                    others.join(" and ")
                ),
            )
        })?;
    }
    Ok(shape)
}

/// Normalizes an axis that may count from the end (`-1` is the last axis).
pub fn normalize_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis.checked_add(r)? } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

/// The axes a reduction reduces, normalized and sorted. Omitted `axes` means all axes.
pub fn reduction_axes(rank: usize, attrs: &Attrs) -> Result<Vec<usize>> {
    let Some(raw) = attrs.get("axes").and_then(Attr::as_ints) else {
        return Ok((0..rank).collect());
    };
    if raw.is_empty() {
        return Err(OpError::attr(
            "axes",
            "'axes' is empty; omit it to reduce over all axes",
        ));
    }
    let mut axes = Vec::with_capacity(raw.len());
    for a in raw {
        let n = normalize_axis(a, rank).ok_or_else(|| {
            OpError::attr("axes", format!("axis {a} is out of range for rank {rank}"))
        })?;
        if axes.contains(&n) {
            return Err(OpError::attr("axes", format!("axis {a} is repeated")));
        }
        axes.push(n);
    }
    axes.sort_unstable();
    Ok(axes)
}

/// The shape after reducing `axes` (sorted, normalized).
pub fn reduced_shape(shape: &[u64], axes: &[usize], keepdims: bool) -> Vec<u64> {
    let mut out = Vec::with_capacity(shape.len());
    for (i, &d) in shape.iter().enumerate() {
        if !axes.contains(&i) {
            out.push(d);
        } else if keepdims {
            out.push(1);
        }
    }
    out
}

/// Numpy broadcasting of two shapes, aligned at the right.
pub fn broadcast_shapes(a: &[u64], b: &[u64]) -> Option<Vec<u64>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[u64], i: usize| {
        if i + s.len() >= rank {
            s[i + s.len() - rank]
        } else {
            1
        }
    };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// The shapes `torch.matmul` multiplies, after transposition flags and 1-D promotion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatmulShape {
    /// Broadcast batch dims.
    pub batch: Vec<u64>,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    /// `a` was 1-D: the `m` dim (of size 1) is dropped from the result.
    pub squeeze_m: bool,
    /// `b` was 1-D: the `n` dim (of size 1) is dropped from the result.
    pub squeeze_n: bool,
}

impl MatmulShape {
    pub fn result_shape(&self) -> Vec<u64> {
        let mut out = self.batch.clone();
        if !self.squeeze_m {
            out.push(self.m);
        }
        if !self.squeeze_n {
            out.push(self.n);
        }
        out
    }
}

/// Analyses a matmul's operand shapes as `torch.matmul` does.
pub fn matmul_shape(
    a: &[u64],
    b: &[u64],
    transpose_a: bool,
    transpose_b: bool,
) -> Result<MatmulShape> {
    if a.is_empty() || b.is_empty() {
        let i = if a.is_empty() { 0 } else { 1 };
        return Err(OpError::operand(
            i,
            "'matmul' operands must have rank 1 or more",
        ));
    }
    for (i, (s, t)) in [(a, transpose_a), (b, transpose_b)].into_iter().enumerate() {
        if t && s.len() < 2 {
            return Err(OpError::operand(
                i,
                "a transposed matmul operand must have rank 2 or more",
            ));
        }
    }
    let swap_last2 = |s: &[u64], t: bool| {
        let mut s = s.to_vec();
        let r = s.len();
        if t {
            s.swap(r - 2, r - 1);
        }
        s
    };
    let (mut a2, mut b2) = (swap_last2(a, transpose_a), swap_last2(b, transpose_b));
    let squeeze_m = a2.len() == 1;
    let squeeze_n = b2.len() == 1;
    if squeeze_m {
        a2.insert(0, 1);
    }
    if squeeze_n {
        b2.push(1);
    }
    let (ra, rb) = (a2.len(), b2.len());
    let (m, k) = (a2[ra - 2], a2[ra - 1]);
    let (kb, n) = (b2[rb - 2], b2[rb - 1]);
    if k != kb {
        return Err(OpError::operand(
            1,
            format!("'matmul' contraction sizes differ: a has K = {k}, b has K = {kb}"),
        ));
    }
    let batch = broadcast_shapes(&a2[..ra - 2], &b2[..rb - 2]).ok_or_else(|| {
        OpError::operand(
            1,
            format!(
                "'matmul' batch dims {:?} and {:?} do not broadcast together",
                &a2[..ra - 2],
                &b2[..rb - 2]
            ),
        )
    })?;
    Ok(MatmulShape {
        batch,
        m,
        n,
        k,
        squeeze_m,
        squeeze_n,
    })
}

fn flag(attrs: &Attrs, name: &str) -> bool {
    attrs.get(name).and_then(Attr::as_bool).unwrap_or(false)
}

fn infer_matmul(a: &TensorType, b: &TensorType, attrs: &Attrs) -> Result<TensorType> {
    let shape = matmul_shape(
        &a.shape,
        &b.shape,
        flag(attrs, "transpose_a"),
        flag(attrs, "transpose_b"),
    )?;
    Ok(a.with_shape(shape.result_shape()))
}

fn ints_attr(attrs: &Attrs, name: &str) -> Vec<i64> {
    attrs.get(name).and_then(Attr::as_ints).unwrap_or_default()
}

fn infer_view(op: OpKind, x: &TensorType, attrs: &Attrs) -> Result<TensorType> {
    match op {
        OpKind::Transpose => {
            let perm = permutation(&ints_attr(attrs, "perm"), x.rank())?;
            Ok(x.with_shape(perm.iter().map(|&p| x.shape[p]).collect()))
        }
        OpKind::Reshape => reshape_shape(x, &ints_attr(attrs, "shape")).map(|s| x.with_shape(s)),
        _ => broadcast_to_shape(x, &ints_attr(attrs, "shape")).map(|s| x.with_shape(s)),
    }
}

/// Checks that `perm` is a permutation of `0..rank` (negative entries count from the end).
pub fn permutation(perm: &[i64], rank: usize) -> Result<Vec<usize>> {
    if perm.len() != rank {
        return Err(OpError::attr(
            "perm",
            format!(
                "'perm' has {} entries but the operand has rank {rank}",
                perm.len()
            ),
        ));
    }
    let mut seen = vec![false; rank];
    let mut out = Vec::with_capacity(rank);
    for &p in perm {
        let a = normalize_axis(p, rank).ok_or_else(|| {
            OpError::attr(
                "perm",
                format!("'perm' entry {p} is out of range for rank {rank}"),
            )
        })?;
        if std::mem::replace(&mut seen[a], true) {
            return Err(OpError::attr(
                "perm",
                format!("'perm' is not a permutation: {p} is repeated"),
            ));
        }
        out.push(a);
    }
    Ok(out)
}

fn to_dim(d: i64, attr: &str) -> Result<u64> {
    u64::try_from(d)
        .ok()
        .filter(|&d| d > 0)
        .ok_or_else(|| OpError::attr(attr, format!("'{attr}' entry {d} is not a positive size")))
}

fn reshape_shape(x: &TensorType, shape: &[i64]) -> Result<Vec<u64>> {
    let holes = shape.iter().filter(|&&d| d == -1).count();
    if holes > 1 {
        return Err(OpError::attr(
            "shape",
            "'shape' may contain -1 at most once",
        ));
    }
    let mut known: u64 = 1;
    for &d in shape.iter().filter(|&&d| d != -1) {
        known = known
            .checked_mul(to_dim(d, "shape")?)
            .ok_or_else(|| OpError::attr("shape", "'shape' has too many elements"))?;
    }
    let numel = x.numel();
    let fill = if holes == 1 {
        if numel % known != 0 {
            return Err(OpError::attr(
                "shape",
                format!(
                    "cannot reshape {x} ({numel} elements) to {shape:?}: {known} does not divide {numel}"
                ),
            ));
        }
        numel / known
    } else {
        1
    };
    let out: Vec<u64> = shape
        .iter()
        .map(|&d| if d == -1 { fill } else { d as u64 })
        .collect();
    let count: u64 = out.iter().product();
    if count != numel {
        return Err(OpError::attr(
            "shape",
            format!("cannot reshape {x} ({numel} elements) to {shape:?} ({count} elements)"),
        ));
    }
    Ok(out)
}

fn broadcast_to_shape(x: &TensorType, shape: &[i64]) -> Result<Vec<u64>> {
    let (r, rx) = (shape.len(), x.rank());
    if r < rx {
        return Err(OpError::attr(
            "shape",
            format!("cannot broadcast {x} to rank {r}: the target has fewer dims than the operand"),
        ));
    }
    let mut out = Vec::with_capacity(r);
    for (i, &d) in shape.iter().enumerate() {
        let src = (i + rx >= r).then(|| x.shape[i + rx - r]);
        let dim = match (d, src) {
            (-1, Some(s)) => s,
            (-1, None) => {
                return Err(OpError::attr(
                    "shape",
                    format!("'shape' entry -1 at position {i} has no operand dim to keep"),
                ));
            }
            (d, _) => to_dim(d, "shape")?,
        };
        if let Some(s) = src
            && s != 1
            && s != dim
        {
            return Err(OpError::attr(
                "shape",
                format!("cannot broadcast {x} to {shape:?}: dim {s} does not match {dim}"),
            ));
        }
        out.push(dim);
    }
    Ok(out)
}

/// The values of a constant's `value` attribute, flattened.
pub fn flatten_value(value: &Attr, out: &mut Vec<Attr>) {
    match value {
        Attr::Array(items) => items.iter().for_each(|i| flatten_value(i, out)),
        other => out.push(other.clone()),
    }
}

fn infer_constant(attrs: &Attrs, declared: Option<&TensorType>) -> Result<TensorType> {
    let Some(ty) = declared else {
        return Err(OpError::stmt(
            "'constant' needs its result type written, e.g. `: tensor<f32>`",
        ));
    };
    let value = attrs.get("value").cloned().unwrap_or(Attr::Int(0));
    let mut flat = Vec::new();
    flatten_value(&value, &mut flat);
    if matches!(value, Attr::Array(_)) && flat.len() as u64 != ty.numel() {
        return Err(OpError::attr(
            "value",
            format!(
                "'value' has {} elements but {ty} has {}",
                flat.len(),
                ty.numel()
            ),
        ));
    }
    for v in &flat {
        let ok = match (v, ty.dtype) {
            (_, d) if d.is_float() => true,
            (Attr::Bool(_), _) => true,
            (Attr::Float(x), d) => x.fract() == 0.0 && int_fits(*x as i64, d) && x.abs() < 9.3e18,
            (Attr::Int(i), d) => int_fits(*i, d),
            _ => false,
        };
        if !ok {
            return Err(OpError::attr(
                "value",
                format!("value {v} cannot be represented as {}", ty.dtype),
            ));
        }
    }
    Ok(ty.clone())
}

fn infer_composite(op: OpKind, xs: &[&TensorType], attrs: &Attrs) -> Result<TensorType> {
    let x = xs[0];
    let axis = attrs.get("axis").and_then(Attr::as_int).unwrap_or(-1);
    let a = normalize_axis(axis, x.rank()).ok_or_else(|| {
        OpError::attr(
            "axis",
            format!("axis {axis} is out of range for rank {}", x.rank()),
        )
    })?;
    for (i, p) in xs.iter().enumerate().skip(1) {
        if p.shape != [x.shape[a]] {
            let name = op.info().operands[i];
            return Err(OpError::operand(
                i,
                format!(
                    "'{op}' {name} must have shape [{}] (the size of axis {axis}), got {p}",
                    x.shape[a]
                ),
            ));
        }
    }
    if let Some(eps) = attrs.get("eps").and_then(Attr::as_f64)
        && !(eps >= 0.0 && eps.is_finite())
    {
        return Err(OpError::attr(
            "eps",
            format!("'eps' must be finite and non-negative, got {eps}"),
        ));
    }
    Ok(x.clone())
}

fn int_fits(i: i64, d: DType) -> bool {
    match d {
        DType::I1 => i == 0 || i == 1,
        DType::I32 => i32::try_from(i).is_ok(),
        _ => true,
    }
}
