//! Handlers of the indexing ops beyond `Gather`: GatherElements, GatherND, ScatterND,
//! ScatterElements and NonZero. Each reads or writes the data flattened over the indexed dims, so that one
//! `gather` (or a `select` between the data and the gathered updates) does the work; where the
//! indices are known at import (as exporters write them: the attention mask's `[batch, key]`
//! pairs of the dynamo exporter, a state update's fixed positions) the flat offsets are
//! computed here.

use super::Node;
use super::math::{axis, bin, cast_to, one, reshape_to, select};
use crate::ctx::{Ctx, R, Val};
use irc_interp::{Data, Tensor};
use irc_ir::{Attr, Attrs, DType, OpKind, TensorType, ints};

/// Row-major strides of `dims`.
pub(super) fn strides(dims: &[u64]) -> Vec<u64> {
    let mut s = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1];
    }
    s
}

/// Index `v` of an axis of size `n`, negative ones counted from the end, or the error.
fn wrap(v: i64, n: u64, what: &str) -> R<u64> {
    let w = if v < 0 { v + n as i64 } else { v };
    u64::try_from(w)
        .ok()
        .filter(|&w| w < n)
        .ok_or_else(|| format!("{what} index {v} is out of range for a dim of {n}"))
}

/// Run-time indices `i` (i64) of an axis of `n`: wrapped once when negative, and whether each
/// is then inside `[0, n)`.
fn wrapped_index(cx: &mut Ctx, i: &Val, n: u64) -> R<(Val, Val)> {
    let n = cx.scalar(n as f64, DType::I64);
    let zero = cx.scalar(0.0, DType::I64);
    let neg = bin(cx, OpKind::Lt, i, &zero)?;
    let wrapped = bin(cx, OpKind::Add, i, &n)?;
    let i = select(cx, &neg, &wrapped, i)?;
    let lo = bin(cx, OpKind::Ge, &i, &zero)?;
    let hi = bin(cx, OpKind::Lt, &i, &n)?;
    let inside = select(cx, &lo, &hi, &lo)?;
    Ok((i, inside))
}

/// The indexed part of a GatherND/ScatterND: `batch` leading dims shared by data and indices,
/// then `k` = the indices' last dim of data dims addressed by each index tuple.
struct NdIndex {
    batch: usize,
    k: usize,
    /// The data dims the flat offset covers: `xs[..batch + k]`.
    lead: Vec<u64>,
    /// The positions: the indices' dims but the last.
    positions: Vec<u64>,
}

fn nd_index(xs: &[u64], is: &[u64], batch: i64) -> R<NdIndex> {
    let (r, q) = (xs.len(), is.len());
    let b = usize::try_from(batch)
        .ok()
        .filter(|&b| b < r.min(q))
        .ok_or_else(|| format!("batch_dims {batch} for data of rank {r}, indices of rank {q}"))?;
    let k = is[q - 1] as usize;
    if k == 0 || b + k > r {
        return Err(format!(
            "index tuples of {k} for data of rank {r} with {b} batch dims"
        ));
    }
    if is[..b] != xs[..b] {
        return Err(format!(
            "the batch dims differ: data {:?}, indices {:?}",
            &xs[..b],
            &is[..b]
        ));
    }
    Ok(NdIndex {
        batch: b,
        k,
        lead: xs[..b + k].to_vec(),
        positions: is[..q - 1].to_vec(),
    })
}

impl NdIndex {
    /// The flat offsets into `lead` of every position, from known indices.
    fn known_offsets(&self, idx: &[i64], what: &str) -> R<Vec<u64>> {
        let st = strides(&self.lead);
        let pos_st = strides(&self.positions);
        let count: u64 = self.positions.iter().product();
        let mut out = Vec::with_capacity(count as usize);
        for p in 0..count as usize {
            let mut f = 0;
            for d in 0..self.batch {
                f += (p as u64 / pos_st[d] % self.positions[d]) * st[d];
            }
            for j in 0..self.k {
                let d = self.batch + j;
                f += wrap(idx[p * self.k + j], self.lead[d], what)? * st[d];
            }
            out.push(f);
        }
        Ok(out)
    }

    /// The flat offsets of indices computed at run time: `Σ coord · stride` over the batch
    /// dims (iotas) and each index column (wrapped once when negative); an index outside its
    /// dim goes to `numel(lead)`, out of range for the gather.
    fn dyn_offsets(&self, cx: &mut Ctx, idx: &Val) -> R<Val> {
        let st = strides(&self.lead);
        let pty = TensorType::new(self.positions.clone(), DType::I64);
        let i = cast_to(cx, idx, DType::I64)?;
        let q = self.positions.len() + 1;
        let mut flat: Option<Val> = None;
        let mut inside: Option<Val> = None;
        // `op` folds `v` into `acc`: an addition, or (`None`) a logical and.
        let add = |cx: &mut Ctx, acc: &mut Option<Val>, v: Val, op: Option<OpKind>| -> R<()> {
            *acc = Some(match (acc.take(), op) {
                (Some(a), Some(op)) => bin(cx, op, &a, &v)?,
                (Some(a), None) => select(cx, &a, &v, &a)?,
                (None, _) => v,
            });
            Ok(())
        };
        for d in 0..self.batch {
            let mut c = cx.iota(&pty, d)?;
            if st[d] != 1 {
                let s = cx.scalar(st[d] as f64, DType::I64);
                c = bin(cx, OpKind::Mul, &c, &s)?;
            }
            add(cx, &mut flat, c, Some(OpKind::Add))?;
        }
        for j in 0..self.k {
            let d = self.batch + j;
            let attrs = Attrs::new()
                .with("axes", ints(&[q as i64 - 1]))
                .with("starts", ints(&[j as i64]))
                .with("ends", ints(&[j as i64 + 1]));
            let c = cx.op(OpKind::Slice, &[&i], attrs)?;
            let c = reshape_to(cx, &c, &self.positions)?;
            let (c, ok) = wrapped_index(cx, &c, self.lead[d])?;
            add(cx, &mut inside, ok, None)?;
            let c = match st[d] {
                1 => c,
                s => {
                    let s = cx.scalar(s as f64, DType::I64);
                    bin(cx, OpKind::Mul, &c, &s)?
                }
            };
            add(cx, &mut flat, c, Some(OpKind::Add))?;
        }
        let (flat, inside) = (flat.expect("k >= 1"), inside.expect("k >= 1"));
        let past = cx.scalar(self.lead.iter().product::<u64>() as f64, DType::I64);
        select(cx, &inside, &flat, &past)
    }
}

/// A known i64 tensor of `shape`.
fn known_i64(cx: &Ctx, shape: &[u64], v: Vec<i64>) -> Val {
    cx.konst(Tensor {
        ty: TensorType::new(shape.to_vec(), DType::I64),
        data: Data::I64(v),
    })
}

/// ONNX GatherND as one `gather` from the data flattened over its batch and indexed dims: the
/// position `p` (the indices' dims but the last) reads the row at the flat offset of
/// `(p's batch coordinates, indices[p, :])`.
pub fn gather_nd(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, idx) = (n.x(0)?, n.x(1)?);
    let (xs, is) = (cx.ty(&x).shape, cx.ty(&idx).shape);
    if is.is_empty() {
        return Err("GatherND needs indices of rank 1 or more".into());
    }
    let nd = nd_index(&xs, &is, n.int("batch_dims", 0))?;
    let flat = match cx.known(&idx) {
        Some(t) => {
            let offs = nd.known_offsets(&t.data.to_i64(), "GatherND")?;
            known_i64(
                cx,
                &nd.positions,
                offs.into_iter().map(|o| o as i64).collect(),
            )
        }
        None => nd.dyn_offsets(cx, &idx)?,
    };
    let rows: u64 = nd.lead.iter().product();
    let mut flat_shape = vec![rows];
    flat_shape.extend_from_slice(&xs[nd.batch + nd.k..]);
    let x1 = reshape_to(cx, &x, &flat_shape)?;
    let attrs = Attrs::new().with("axis", Attr::Int(0));
    one(cx.op(OpKind::Gather, &[&x1, &flat], attrs)?)
}

/// Scatter with targets known at import: `targets[u]` is the flat row of the data (rows of
/// `row` elements) that update row `u` writes. The result is `select(hit, updates gathered
/// to their rows ⊕ data, data)`, `⊕` the reduction (`none`: the update itself; the last of
/// several updates of one row wins, which ONNX leaves undefined).
fn scatter_known(
    cx: &mut Ctx,
    data: &Val,
    updates: &Val,
    targets: &[u64],
    row: u64,
    reduction: &str,
) -> R<Val> {
    let xs = cx.ty(data).shape;
    let rows = xs.iter().product::<u64>() / row.max(1);
    let mut src = vec![0i64; rows as usize];
    let mut hit = vec![false; rows as usize];
    for (u, &t) in targets.iter().enumerate() {
        if hit[t as usize] && reduction != "none" {
            return Err(format!(
                "two updates of one position with reduction '{reduction}' (supported: each position updated once)"
            ));
        }
        src[t as usize] = u as i64;
        hit[t as usize] = true;
    }
    let op = match reduction {
        "none" => None,
        "add" => Some(OpKind::Add),
        "mul" => Some(OpKind::Mul),
        "max" => Some(OpKind::Max),
        "min" => Some(OpKind::Min),
        r => return Err(format!("reduction '{r}' (none, add, mul, max, min)")),
    };
    let d2 = reshape_to(cx, data, &[rows, row])?;
    let u2 = reshape_to(cx, updates, &[targets.len() as u64, row])?;
    let src = known_i64(cx, &[rows], src);
    let attrs = Attrs::new().with("axis", Attr::Int(0));
    let g = cx.op(OpKind::Gather, &[&u2, &src], attrs)?;
    let g = match op {
        None => g,
        Some(op) => bin(cx, op, &d2, &g)?,
    };
    let hit = cx.konst(Tensor {
        ty: TensorType::new([rows, 1], DType::I1),
        data: Data::I1(hit),
    });
    let out = select(cx, &hit, &g, &d2)?;
    reshape_to(cx, &out, &xs)
}

/// The elements' flat offsets of GatherElements/ScatterElements: the element at position
/// `p` of the indices (shape `is`) addresses `x[p_0, .., idx[p], .., p_{r-1}]` of data of
/// shape `xs`, whose flat offset is `Σ_d coord_d · stride_d` with `coord_axis = idx[p]`
/// (wrapped once when negative) and every other coordinate `p_d` (an `iota`). An index outside
/// `[-n, n)` of its axis is sent to the flat offset `numel(x)`, out of range for a gather (an
/// error on the interpreter) and matching no element of a scatter, instead of addressing a
/// neighbouring row.
fn element_offsets(cx: &mut Ctx, idx: &Val, xs: &[u64], a: usize, op: &str) -> R<Val> {
    let is = cx.ty(idx).shape;
    if xs.len() != is.len() {
        return Err(format!(
            "the indices have rank {} but the data rank {}; {op} needs them equal",
            is.len(),
            xs.len()
        ));
    }
    if let Some(d) = (0..xs.len()).find(|&d| d != a && is[d] > xs[d]) {
        return Err(format!(
            "the indices' dim {d} ({}) is larger than the data's ({})",
            is[d], xs[d]
        ));
    }
    let numel: u64 = xs.iter().product();
    let i = cast_to(cx, idx, DType::I64)?;
    let (i, inside) = wrapped_index(cx, &i, xs[a])?;
    let mut flat = i.clone();
    let mut stride: u64 = xs[a + 1..].iter().product();
    if stride != 1 {
        let s = cx.scalar(stride as f64, DType::I64);
        flat = bin(cx, OpKind::Mul, &flat, &s)?;
    }
    let ity = TensorType::new(is.clone(), DType::I64);
    stride = 1;
    for d in (0..xs.len()).rev() {
        if d != a && is[d] > 1 {
            let attrs = Attrs::new().with("axis", Attr::Int(d as i64));
            let mut c = cx.op_typed(OpKind::Iota, &[], attrs, Some(&ity))?;
            if stride != 1 {
                let s = cx.scalar(stride as f64, DType::I64);
                c = bin(cx, OpKind::Mul, &c, &s)?;
            }
            flat = bin(cx, OpKind::Add, &flat, &c)?;
        }
        stride *= xs[d];
    }
    let past = cx.scalar(numel as f64, DType::I64);
    select(cx, &inside, &flat, &past)
}

/// ONNX GatherElements as one `gather` from the flattened data at the elements' flat offsets
/// ([`element_offsets`]).
pub fn gather_elements(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, idx) = (n.x(0)?, n.x(1)?);
    let xs = cx.ty(&x).shape;
    let a = axis(n.int("axis", 0), xs.len())?;
    let flat = element_offsets(cx, &idx, &xs, a, "GatherElements")?;
    let x1 = reshape_to(cx, &x, &[xs.iter().product()])?;
    let attrs = Attrs::new().with("axis", Attr::Int(0));
    one(cx.op(OpKind::Gather, &[&x1, &flat], attrs)?)
}

/// The most update-by-row matches a scatter with run-time indices builds (`[rows, updates]`,
/// times the row's elements for a reduction).
const DYN_SCATTER_LIMIT: u64 = 1 << 24;

/// Scatter with targets computed at run time: `targets` (i64, one per update row; past the
/// rows for an index out of range) compared with every data row (`[rows, updates]`): `none`
/// takes the last update of each row that has one (a `reduce_max` of the matching update
/// indices, then a gather), `add`, `max` and `min` reduce the matching updates and combine them
/// with the data.
fn scatter_dyn(
    cx: &mut Ctx,
    data: &Val,
    updates: &Val,
    targets: &Val,
    row: u64,
    reduction: &str,
) -> R<Val> {
    let xs = cx.ty(data).shape;
    let dt = cx.ty(data).dtype;
    let rows = xs.iter().product::<u64>() / row.max(1);
    let u = cx.ty(targets).numel();
    let cells = rows
        .saturating_mul(u)
        .saturating_mul(if reduction == "none" { 1 } else { row });
    if cells > DYN_SCATTER_LIMIT {
        return Err(format!(
            "a scatter with run-time indices of {u} updates into {rows} rows ({cells} matches; at most {DYN_SCATTER_LIMIT}): give the indices at import"
        ));
    }
    let t = reshape_to(cx, targets, &[1, u])?;
    let grid = TensorType::new([rows, u], DType::I64);
    let at_row = cx.iota(&grid, 0)?;
    let m = bin(cx, OpKind::Eq, &at_row, &t)?;
    let d2 = reshape_to(cx, data, &[rows, row])?;
    let u2 = reshape_to(cx, updates, &[u, row])?;
    let reduce = |cx: &mut Ctx, op: OpKind, x: &Val| {
        let attrs = Attrs::new()
            .with("axes", ints(&[1]))
            .with("keepdims", Attr::Bool(false));
        cx.op(op, &[x], attrs)
    };
    let out = match reduction {
        "none" => {
            let which = cx.iota(&grid, 1)?;
            let none = cx.scalar(-1.0, DType::I64);
            let cand = select(cx, &m, &which, &none)?;
            let last = reduce(cx, OpKind::ReduceMax, &cand)?;
            let zero = cx.scalar(0.0, DType::I64);
            let hit = bin(cx, OpKind::Ge, &last, &zero)?;
            let src = select(cx, &hit, &last, &zero)?;
            let attrs = Attrs::new().with("axis", Attr::Int(0));
            let g = cx.op(OpKind::Gather, &[&u2, &src], attrs)?;
            let hit = reshape_to(cx, &hit, &[rows, 1])?;
            select(cx, &hit, &g, &d2)?
        }
        "add" | "max" | "min" => {
            let (op, combine, identity) = match reduction {
                "add" => (OpKind::ReduceSum, OpKind::Add, 0.0),
                "max" => (OpKind::ReduceMax, OpKind::Max, f64::NEG_INFINITY),
                _ => (OpKind::ReduceMin, OpKind::Min, f64::INFINITY),
            };
            let identity = match dt {
                DType::I32 => identity.clamp(i32::MIN as f64, i32::MAX as f64),
                DType::I64 => identity.clamp(i64::MIN as f64, i64::MAX as f64),
                _ => identity,
            };
            let m3 = reshape_to(cx, &m, &[rows, u, 1])?;
            let u3 = reshape_to(cx, &u2, &[1, u, row])?;
            let fill = cx.scalar(identity, dt);
            let picked = select(cx, &m3, &u3, &fill)?;
            let r = reduce(cx, op, &picked)?;
            bin(cx, combine, &d2, &r)?
        }
        r => {
            return Err(format!(
                "reduction '{r}' with indices computed at run time is not supported (none, add, max and min are; give the indices at import for mul)"
            ));
        }
    };
    reshape_to(cx, &out, &xs)
}

/// A scatter's `reduction` attribute.
fn reduction(n: &Node) -> String {
    n.string("reduction").unwrap_or_else(|| "none".into())
}

/// ONNX ScatterND: update row `p` (of the data's dims past the index tuple) goes to the flat
/// row of `indices[p, :]` (indices known at import, or computed at run time).
pub fn scatter_nd(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, idx, upd) = (n.x(0)?, n.x(1)?, n.x(2)?);
    let (xs, is) = (cx.ty(&x).shape, cx.ty(&idx).shape);
    if is.is_empty() {
        return Err("ScatterND needs indices of rank 1 or more".into());
    }
    let nd = nd_index(&xs, &is, 0)?;
    let mut want = nd.positions.clone();
    want.extend_from_slice(&xs[nd.k..]);
    if cx.ty(&upd).shape != want {
        return Err(format!(
            "updates of shape {:?}; indices {is:?} into data {xs:?} need {want:?}",
            cx.ty(&upd).shape
        ));
    }
    let row = xs[nd.k..].iter().product();
    let Some(t) = cx.known(&idx) else {
        let targets = nd.dyn_offsets(cx, &idx)?;
        return one(scatter_dyn(cx, &x, &upd, &targets, row, &reduction(n))?);
    };
    let targets = nd.known_offsets(&t.data.to_i64(), "ScatterND")?;
    one(scatter_known(cx, &x, &upd, &targets, row, &reduction(n))?)
}

/// ONNX ScatterElements: the update at position `p` goes to `p` with its `axis` coordinate
/// replaced by `indices[p]` (indices known at import, or computed at run time).
pub fn scatter_elements(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, idx, upd) = (n.x(0)?, n.x(1)?, n.x(2)?);
    let (xs, is) = (cx.ty(&x).shape, cx.ty(&idx).shape);
    if xs.len() != is.len() || cx.ty(&upd).shape != is {
        return Err(format!(
            "data {xs:?}, indices {is:?} and updates {:?}: indices and updates of one shape, of the data's rank",
            cx.ty(&upd).shape
        ));
    }
    let a = axis(n.int("axis", 0), xs.len())?;
    if let Some(d) = (0..xs.len()).find(|&d| d != a && is[d] > xs[d]) {
        return Err(format!(
            "the indices' dim {d} ({}) is larger than the data's ({})",
            is[d], xs[d]
        ));
    }
    let Some(known) = cx.known(&idx) else {
        let targets = element_offsets(cx, &idx, &xs, a, "ScatterElements")?;
        return one(scatter_dyn(cx, &x, &upd, &targets, 1, &reduction(n))?);
    };
    let idx = known.data.to_i64();
    let (xst, ist) = (strides(&xs), strides(&is));
    let mut targets = Vec::with_capacity(idx.len());
    for (p, &v) in idx.iter().enumerate() {
        let mut f = wrap(v, xs[a], "ScatterElements")? * xst[a];
        for d in (0..xs.len()).filter(|&d| d != a) {
            f += (p as u64 / ist[d] % is[d]) * xst[d];
        }
        targets.push(f);
    }
    one(scatter_known(cx, &x, &upd, &targets, 1, &reduction(n))?)
}

/// ONNX NonZero of a tensor known at import: the coordinates of its nonzero elements,
/// `[rank, count]`. (Of a tensor computed at run time its shape would depend on the values,
/// which irc's static shapes cannot say.)
pub fn non_zero(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let Some(t) = cx.known(&x) else {
        return Err("NonZero of a tensor computed at run time is not supported (its output's shape depends on the values; irc shapes are static)".into());
    };
    let xs = t.ty.shape.clone();
    if xs.is_empty() {
        return Err("NonZero of a scalar is not supported".into());
    }
    let st = strides(&xs);
    let nz: Vec<usize> = t
        .data
        .to_f64()
        .iter()
        .enumerate()
        .filter(|(_, v)| **v != 0.0)
        .map(|(i, _)| i)
        .collect();
    if nz.is_empty() {
        return Err("NonZero of a known tensor with no nonzero element: an empty result (irc tensors have no zero-sized dims)".into());
    }
    let rank = xs.len();
    let mut out = vec![0i64; rank * nz.len()];
    for (j, &i) in nz.iter().enumerate() {
        for d in 0..xs.len() {
            out[d * nz.len() + j] = (i as u64 / st[d] % xs[d]) as i64;
        }
    }
    one(known_i64(cx, &[rank as u64, nz.len() as u64], out))
}
