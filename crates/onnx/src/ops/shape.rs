//! Handlers of the shape, layout, indexing and constant ops.

use super::Node;
use super::math::{axis, bin, cast_op, cast_to, known_ints, one, reshape_to, sc, select};
use crate::ctx::{Ctx, R, Val};
use irc_interp::{Data, Tensor};
use irc_ir::{Attr, Attrs, DType, OpKind, TensorType, ints};

fn to_shape(v: &[i64], what: &str) -> R<Vec<u64>> {
    v.iter()
        .map(|&d| u64::try_from(d).ok().filter(|&d| d > 0))
        .collect::<Option<Vec<u64>>>()
        .ok_or_else(|| {
            format!("{what} {v:?} has a zero-sized or negative dim, which irc does not support")
        })
}

pub fn identity(_: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    one(n.x(0)?)
}

pub fn dropout(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    if n.opt(2).is_some_and(|t| {
        cx.known(&t)
            .is_none_or(|t| t.data.to_bool().iter().any(|&b| b))
    }) {
        return Err("training mode is not supported (inference only)".into());
    }
    let x = n.x(0)?;
    let mut outs = vec![x.clone()];
    if n.n_out() > 1 {
        let shape: Vec<i64> = cx.ty(&x).shape.iter().map(|&d| d as i64).collect();
        let t = cx.scalar(1.0, DType::I1);
        outs.push(cx.op(
            OpKind::Broadcast,
            &[&t],
            Attrs::new().with("shape", ints(&shape)),
        )?);
    }
    Ok(outs)
}

pub fn cast(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    one(cast_op(cx, &x, n.int("to", 1))?)
}

pub fn cast_like(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, like) = (n.x(0)?, n.x(1)?);
    let d = cx.ty(&like).dtype;
    one(cast_to(cx, &x, d)?)
}

pub fn constant(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    if let Some(t) = n.tensor("value") {
        return one(cx.konst(crate::tensor::from_proto(t, cx.external())?));
    }
    if n.has("value_float") {
        return one(cx.scalar(n.float("value_float", 0.0) as f64, DType::F32));
    }
    if n.has("value_int") {
        return one(cx.konst(Tensor {
            ty: TensorType::scalar(DType::I64),
            data: Data::I64(vec![n.int("value_int", 0)]),
        }));
    }
    if let Some(v) = n.floats("value_floats") {
        let data = Data::F32(v);
        return one(cx.konst(Tensor {
            ty: TensorType::new([data.len() as u64], DType::F32),
            data,
        }));
    }
    if let Some(v) = n.ints("value_ints") {
        return one(cx.ints_val(&v));
    }
    Err("only the value, value_float(s) and value_int(s) forms are supported".into())
}

pub fn constant_of_shape(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let s = n.x(0)?;
    let dims = known_ints(cx, &s, "the shape input")?;
    let fill = match n.tensor("value") {
        Some(t) => crate::tensor::from_proto(t, cx.external())?,
        None => Tensor {
            ty: TensorType::scalar(DType::F32),
            data: Data::F32(vec![0.0]),
        },
    };
    if dims.contains(&0) && dims.iter().all(|&d| d >= 0) {
        // An empty known tensor (exporters pad shape lists with them): fine while it only
        // meets ops that drop it at import (`Concat`).
        return one(empty_known(cx, &dims, fill.ty.dtype));
    }
    let shape = to_shape(&dims, "shape")?;
    let v = cx.konst(fill.clone());
    let scalar = reshape_to(cx, &v, &[])?;
    let target: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    one(cx.op(
        OpKind::Broadcast,
        &[&scalar],
        Attrs::new().with("shape", ints(&target)),
    )?)
}

pub fn shape(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let dims: Vec<i64> = cx.ty(&x).shape.iter().map(|&d| d as i64).collect();
    let r = dims.len() as i64;
    let clampi = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let (s, e) = (clampi(n.int("start", 0)), clampi(n.int("end", r)));
    one(cx.ints_val(&dims[s..e.max(s)]))
}

/// A known tensor with a zero-sized dim.
fn empty_known(cx: &Ctx, dims: &[i64], dtype: DType) -> Val {
    let shape: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
    cx.konst(Tensor {
        ty: TensorType::new(shape, dtype),
        data: Data::from_f64(dtype, vec![]),
    })
}

/// The indices ONNX Slice takes along each dim of `shape`: `(start, end, step)` per axis,
/// clamped as ONNX clamps them (a list may be empty).
fn slice_picks(
    shape: &[u64],
    axes: &[usize],
    starts: &[i64],
    ends: &[i64],
    steps: &[i64],
) -> Vec<Vec<u64>> {
    let mut picks: Vec<Vec<u64>> = shape.iter().map(|&d| (0..d).collect()).collect();
    for (i, &a) in axes.iter().enumerate() {
        let (n, step) = (shape[a] as i64, steps[i]);
        let at = |v: i64, lo: i64, hi: i64| (if v < 0 { v + n } else { v }).clamp(lo, hi);
        picks[a] = if n == 0 {
            vec![]
        } else if step > 0 {
            let (b, e) = (at(starts[i], 0, n), at(ends[i], 0, n));
            (b..e).step_by(step as usize).map(|v| v as u64).collect()
        } else {
            let (b, e) = (at(starts[i], 0, n - 1), at(ends[i], -1, n - 1));
            let mut v = vec![];
            let mut k = b;
            while k > e {
                v.push(k as u64);
                k += step;
            }
            v
        };
    }
    picks
}

/// ONNX Slice of a known tensor on the host (`picks` from [`slice_picks`]), where the result
/// may be empty (an exporter's shape arithmetic: `Shape`, `Slice`, `Concat`).
fn slice_known(t: &Tensor, picks: &[Vec<u64>]) -> Tensor {
    let shape = &t.ty.shape;
    let st = super::index::strides(shape);
    let out_shape: Vec<u64> = picks.iter().map(|p| p.len() as u64).collect();
    let count: u64 = out_shape.iter().product();
    let offsets = (0..count).map(|i| {
        let (mut rem, mut off) = (i, 0);
        for d in (0..shape.len()).rev() {
            off += picks[d][(rem % out_shape[d]) as usize] * st[d];
            rem /= out_shape[d];
        }
        off as usize
    });
    // Integers read as integers: an i64 past 2^53 (an exporter's INT64_MAX end) stays exact.
    let dtype = t.ty.dtype;
    let data = match dtype {
        DType::I32 | DType::I64 => {
            let v = t.data.to_i64();
            Data::from_i64(dtype, offsets.map(|o| v[o]).collect())
        }
        _ => {
            let v = t.data.to_f64();
            Data::from_f64(dtype, offsets.map(|o| v[o]).collect())
        }
    };
    Tensor {
        ty: TensorType::new(out_shape, dtype),
        data,
    }
}

pub fn size(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    one(cx.konst(Tensor {
        ty: TensorType::scalar(DType::I64),
        data: Data::I64(vec![cx.ty(&x).numel() as i64]),
    }))
}

pub fn range(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (s, l, d) = (n.x(0)?, n.x(1)?, n.x(2)?);
    let known = |v: &Val| cx.known(v).and_then(|t| t.data.to_f64().first().copied());
    let (Some(start), Some(limit), Some(delta)) = (known(&s), known(&l), known(&d)) else {
        return Err("start, limit and delta must be known at import time".into());
    };
    let count = ((limit - start) / delta).ceil();
    if !(count >= 1.0 && count <= (1u64 << 24) as f64) {
        return Err(format!(
            "Range({start}, {limit}, {delta}) is empty or has more than 2^24 elements"
        ));
    }
    let dtype = cx.ty(&s).dtype;
    let vals: Vec<f64> = (0..count as u64)
        .map(|i| start + i as f64 * delta)
        .collect();
    one(cx.konst(Tensor {
        ty: TensorType::new([vals.len() as u64], dtype),
        data: Data::from_f64(dtype, vals),
    }))
}

/// `x` transposed by `perm`.
pub(super) fn transpose_to(cx: &mut Ctx, x: &Val, perm: &[i64]) -> R<Val> {
    cx.op(
        OpKind::Transpose,
        &[x],
        Attrs::new().with("perm", ints(perm)),
    )
}

pub fn transpose(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let r = cx.ty(&x).rank() as i64;
    let perm = n.ints("perm").unwrap_or_else(|| (0..r).rev().collect());
    one(transpose_to(cx, &x, &perm)?)
}

pub fn reshape_op(cx: &mut Ctx, x: &Val, spec: &[i64], allowzero: bool) -> R<Val> {
    let shape = cx.ty(x).shape;
    let mut out = Vec::with_capacity(spec.len());
    for (i, &d) in spec.iter().enumerate() {
        out.push(match d {
            0 if !allowzero => *shape.get(i).ok_or_else(|| {
                format!(
                    "shape entry {i} is 0 (copy) but the input has rank {}",
                    shape.len()
                )
            })? as i64,
            d => d,
        });
    }
    cx.op(
        OpKind::Reshape,
        &[x],
        Attrs::new().with("shape", ints(&out)),
    )
}

pub fn reshape(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, s) = (n.x(0)?, n.x(1)?);
    let spec = known_ints(cx, &s, "the shape input")?;
    one(reshape_op(cx, &x, &spec, n.int("allowzero", 0) != 0)?)
}

pub fn flatten(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let shape = cx.ty(&x).shape;
    let a = n.int("axis", 1);
    let a = if a < 0 { a + shape.len() as i64 } else { a };
    if !(0..=shape.len() as i64).contains(&a) {
        return Err(format!("axis {a} is out of range for rank {}", shape.len()));
    }
    let outer: u64 = shape[..a as usize].iter().product();
    let inner: u64 = shape[a as usize..].iter().product();
    one(super::math::reshape_to(cx, &x, &[outer, inner])?)
}

/// Axes from the attribute (before opset 13) or from input 1.
fn axes_of(cx: &Ctx, n: &Node) -> R<Option<Vec<i64>>> {
    match (n.ints("axes"), n.opt(1)) {
        (Some(a), _) => Ok(Some(a)),
        (None, Some(v)) => known_ints(cx, &v, "the axes input").map(Some),
        (None, None) => Ok(None),
    }
}

pub fn squeeze(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let shape = cx.ty(&x).shape;
    let axes = match axes_of(cx, n)? {
        Some(a) => a
            .iter()
            .map(|&a| axis(a, shape.len()))
            .collect::<R<Vec<usize>>>()?,
        None => (0..shape.len()).filter(|&i| shape[i] == 1).collect(),
    };
    if let Some(&bad) = axes.iter().find(|&&a| shape[a] != 1) {
        return Err(format!("axis {bad} has size {}, not 1", shape[bad]));
    }
    let out: Vec<u64> = (0..shape.len())
        .filter(|i| !axes.contains(i))
        .map(|i| shape[i])
        .collect();
    one(super::math::reshape_to(cx, &x, &out)?)
}

pub fn unsqueeze(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let shape = cx.ty(&x).shape;
    let axes = axes_of(cx, n)?.ok_or("the axes input is required")?;
    let rank = shape.len() + axes.len();
    let mut norm = axes
        .iter()
        .map(|&a| axis(a, rank))
        .collect::<R<Vec<usize>>>()?;
    norm.sort_unstable();
    norm.dedup();
    if norm.len() != axes.len() {
        return Err(format!("axes {axes:?} repeat an axis"));
    }
    let mut src = shape.iter();
    let out: Vec<u64> = (0..rank)
        .map(|i| {
            if norm.contains(&i) {
                1
            } else {
                src.next().copied().unwrap_or(1)
            }
        })
        .collect();
    one(super::math::reshape_to(cx, &x, &out)?)
}

pub fn expand(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, s) = (n.x(0)?, n.x(1)?);
    let spec = to_shape(&known_ints(cx, &s, "the shape input")?, "shape")?;
    let xs = cx.ty(&x).shape;
    let target = irc_ir::infer::broadcast_shapes(&xs, &spec)
        .ok_or_else(|| format!("shape {spec:?} does not broadcast with the input's {xs:?}"))?;
    if target == xs {
        return one(x);
    }
    let t: Vec<i64> = target.iter().map(|&d| d as i64).collect();
    one(cx.op(
        OpKind::Broadcast,
        &[&x],
        Attrs::new().with("shape", ints(&t)),
    )?)
}

pub fn gather(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, i) = (n.x(0)?, n.x(1)?);
    let attrs = Attrs::new().with("axis", Attr::Int(n.int("axis", 0)));
    one(cx.op(OpKind::Gather, &[&x, &i], attrs)?)
}

pub fn slice(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let starts = known_ints(cx, &n.x(1)?, "starts")?;
    let ends = known_ints(cx, &n.x(2)?, "ends")?;
    let mut attrs = Attrs::new()
        .with("starts", ints(&starts))
        .with("ends", ints(&ends));
    let axes = match n.opt(3) {
        Some(a) => Some(known_ints(cx, &a, "axes")?),
        None => None,
    };
    let steps = match n.opt(4) {
        Some(s) => Some(known_ints(cx, &s, "steps")?),
        None => None,
    };
    // A known tensor is sliced here; an empty slice of any tensor is an empty known one
    // (exporters' shape arithmetic, a rotary embedding's empty pass-through part), which a
    // `Concat` drops. (Malformed lists are left to the op's own check.)
    let ty = cx.ty(&x);
    let ax = match &axes {
        Some(a) => a
            .iter()
            .map(|&a| axis(a, ty.rank()))
            .collect::<R<Vec<usize>>>()?,
        None => (0..starts.len()).collect(),
    };
    let st = steps.clone().unwrap_or_else(|| vec![1; ax.len()]);
    if ax.len() == starts.len()
        && ax.len() == ends.len()
        && ax.len() == st.len()
        && ax.iter().all(|&a| a < ty.rank())
        && st.iter().all(|&s| s != 0)
    {
        let picks = slice_picks(&ty.shape, &ax, &starts, &ends, &st);
        if let Some(t) = cx.known(&x) {
            return one(cx.konst(slice_known(t, &picks)));
        }
        if picks.iter().any(|p| p.is_empty()) {
            let dims: Vec<i64> = picks.iter().map(|p| p.len() as i64).collect();
            return one(empty_known(cx, &dims, ty.dtype));
        }
    }
    if let Some(a) = axes {
        attrs.insert("axes", ints(&a));
    }
    if let Some(s) = steps {
        attrs.insert("steps", ints(&s));
    }
    one(cx.op(OpKind::Slice, &[&x], attrs)?)
}

pub fn concat(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let all = (0..n.n_in()).map(|i| n.x(i)).collect::<R<Vec<Val>>>()?;
    // Empty known operands (exporters' shape lists) add nothing.
    let xs: Vec<Val> = all
        .iter()
        .filter(|v| cx.known(v).is_none_or(|t| t.ty.numel() > 0))
        .cloned()
        .collect();
    if xs.is_empty() {
        return one(all[0].clone());
    }
    let refs: Vec<&Val> = xs.iter().collect();
    let attrs = Attrs::new().with("axis", Attr::Int(n.int("axis", 0)));
    one(cx.op(OpKind::Concat, &refs, attrs)?)
}

pub fn split(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let shape = cx.ty(&x).shape;
    let a = axis(n.int("axis", 0), shape.len())?;
    let dim = shape[a] as i64;
    let outs = n.n_out() as i64;
    let sizes = match (n.opt(1), n.ints("split")) {
        (Some(s), _) => known_ints(cx, &s, "the split input")?,
        (None, Some(s)) => s,
        (None, None) => {
            let k = if n.has("num_outputs") {
                n.int("num_outputs", outs)
            } else {
                outs
            };
            if k <= 0 {
                return Err("no outputs to split into".into());
            }
            let chunk = (dim + k - 1) / k;
            (0..k).map(|i| chunk.min(dim - i * chunk)).collect()
        }
    };
    if sizes.iter().sum::<i64>() != dim || sizes.iter().any(|&s| s < 0) {
        return Err(format!(
            "split sizes {sizes:?} do not cover axis {a} of size {dim} with nonnegative parts"
        ));
    }
    let mut start = 0;
    let mut vals = Vec::with_capacity(sizes.len());
    for s in sizes {
        // An empty part (a rotary embedding's pass-through) is an empty known value, as
        // Slice's is.
        if s == 0 {
            let mut dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
            dims[a] = 0;
            vals.push(empty_known(cx, &dims, cx.ty(&x).dtype));
            continue;
        }
        let attrs = Attrs::new()
            .with("axes", ints(&[a as i64]))
            .with("starts", ints(&[start]))
            .with("ends", ints(&[start + s]));
        vals.push(cx.op(OpKind::Slice, &[&x], attrs)?);
        start += s;
    }
    Ok(vals)
}

pub fn tile(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, r) = (n.x(0)?, n.x(1)?);
    let shape = cx.ty(&x).shape;
    let reps = to_shape(&known_ints(cx, &r, "repeats")?, "repeats")?;
    if reps.len() != shape.len() {
        return Err(format!("{} repeats for rank {}", reps.len(), shape.len()));
    }
    // [d0, d1] → [1, d0, 1, d1] → broadcast [r0, d0, r1, d1] → [r0·d0, r1·d1]
    let spread: Vec<u64> = shape.iter().flat_map(|&d| [1, d]).collect();
    let big: Vec<i64> = shape
        .iter()
        .zip(&reps)
        .flat_map(|(&d, &r)| [r as i64, d as i64])
        .collect();
    let out: Vec<u64> = shape.iter().zip(&reps).map(|(&d, &r)| d * r).collect();
    let s = super::math::reshape_to(cx, &x, &spread)?;
    let b = cx.op(
        OpKind::Broadcast,
        &[&s],
        Attrs::new().with("shape", ints(&big)),
    )?;
    one(super::math::reshape_to(cx, &b, &out)?)
}

fn permute(cx: &mut Ctx, x: &Val, split: &[u64], perm: &[i64], out: &[u64]) -> R<Val> {
    let s = super::math::reshape_to(cx, x, split)?;
    let t = transpose_to(cx, &s, perm)?;
    super::math::reshape_to(cx, &t, out)
}

fn nchw(cx: &Ctx, x: &Val) -> R<[u64; 4]> {
    let s = cx.ty(x).shape;
    <[u64; 4]>::try_from(s.as_slice())
        .map_err(|_| format!("the input must have rank 4 (NCHW), got {s:?}"))
}

pub fn depth_to_space(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let [b, c, h, w] = nchw(cx, &x)?;
    let k = n.int("blocksize", 0).max(0) as u64;
    if k == 0 || c % (k * k) != 0 {
        return Err(format!(
            "blocksize {k} does not divide the {c} channels into squares"
        ));
    }
    let c2 = c / (k * k);
    let out = [b, c2, h * k, w * k];
    let r = if n.string("mode").as_deref() == Some("CRD") {
        permute(cx, &x, &[b, c2, k, k, h, w], &[0, 1, 4, 2, 5, 3], &out)?
    } else {
        permute(cx, &x, &[b, k, k, c2, h, w], &[0, 3, 4, 1, 5, 2], &out)?
    };
    one(r)
}

pub fn space_to_depth(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let [b, c, h, w] = nchw(cx, &x)?;
    let k = n.int("blocksize", 0).max(0) as u64;
    if k == 0 || h % k != 0 || w % k != 0 {
        return Err(format!("blocksize {k} does not divide H = {h} and W = {w}"));
    }
    let split = [b, c, h / k, k, w / k, k];
    let out = [b, c * k * k, h / k, w / k];
    let perm = if n.string("mode").as_deref() == Some("CRD") {
        [0, 1, 3, 5, 2, 4]
    } else {
        [0, 3, 5, 1, 2, 4]
    };
    one(permute(cx, &x, &split, &perm, &out)?)
}

/// `col - row` over the last two dims of `shape`, as i64.
fn diagonal_offset(cx: &mut Ctx, shape: &[u64]) -> R<Val> {
    let r = shape.len();
    if r < 2 {
        return Err("the input must have rank 2 or more".into());
    }
    let ty = TensorType::new(shape[r - 2..].to_vec(), DType::I64);
    let rows = cx.op_typed(
        OpKind::Iota,
        &[],
        Attrs::new().with("axis", Attr::Int(0)),
        Some(&ty),
    )?;
    let cols = cx.op_typed(
        OpKind::Iota,
        &[],
        Attrs::new().with("axis", Attr::Int(1)),
        Some(&ty),
    )?;
    bin(cx, OpKind::Sub, &cols, &rows)
}

pub fn trilu(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let k = match n.opt(1) {
        Some(k) => known_ints(cx, &k, "k")?.first().copied().unwrap_or(0),
        None => 0,
    };
    let d = diagonal_offset(cx, &cx.ty(&x).shape)?;
    let kv = cx.scalar(k as f64, DType::I64);
    let op = if n.int("upper", 1) != 0 {
        OpKind::Ge
    } else {
        OpKind::Le
    };
    let keep = bin(cx, op, &d, &kv)?;
    let z = sc(cx, 0.0, &x);
    one(select(cx, &keep, &x, &z)?)
}

pub fn eye_like(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let ty = cx.ty(&x);
    if ty.rank() != 2 {
        return Err("the input must have rank 2".into());
    }
    let d = diagonal_offset(cx, &ty.shape)?;
    let kv = cx.scalar(n.int("k", 0) as f64, DType::I64);
    let on = bin(cx, OpKind::Eq, &d, &kv)?;
    let code = n.int("dtype", crate::tensor::code_of(ty.dtype));
    one(cast_op(cx, &on, code)?)
}

pub fn one_hot(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (idx, depth, values) = (n.x(0)?, n.x(1)?, n.x(2)?);
    let depth = cx
        .known(&depth)
        .and_then(|t| t.data.to_f64().first().copied())
        .ok_or("depth must be known at import time")? as i64;
    if depth <= 0 {
        return Err(format!("depth {depth} is not positive"));
    }
    let ishape = cx.ty(&idx).shape;
    let rank = ishape.len() + 1;
    let a = axis(n.int("axis", -1), rank)?;
    let i = cast_to(cx, &idx, DType::I64)?;
    // Negative indices count from the end of the depth.
    let z = cx.scalar(0.0, DType::I64);
    let dv = cx.scalar(depth as f64, DType::I64);
    let neg = bin(cx, OpKind::Lt, &i, &z)?;
    let wrapped = bin(cx, OpKind::Add, &i, &dv)?;
    let i = select(cx, &neg, &wrapped, &i)?;
    let mut out = ishape.clone();
    out.insert(a, depth as u64);
    let mut spread = ishape.clone();
    spread.insert(a, 1);
    let i = super::math::reshape_to(cx, &i, &spread)?;
    let ty = TensorType::new(out, DType::I64);
    let pos = cx.op_typed(
        OpKind::Iota,
        &[],
        Attrs::new().with("axis", Attr::Int(a as i64)),
        Some(&ty),
    )?;
    let hit = bin(cx, OpKind::Eq, &pos, &i)?;
    let vs = cx.ty(&values).shape;
    if vs != [2] {
        return Err(format!("values must have shape [2] (off, on), got {vs:?}"));
    }
    let off_on = |cx: &mut Ctx, k: i64| {
        let attrs = Attrs::new()
            .with("starts", ints(&[k]))
            .with("ends", ints(&[k + 1]));
        cx.op(OpKind::Slice, &[&values], attrs)
            .and_then(|v| super::math::reshape_to(cx, &v, &[]))
    };
    let (off, on) = (off_on(cx, 0)?, off_on(cx, 1)?);
    one(select(cx, &hit, &on, &off)?)
}
