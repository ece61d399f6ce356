//! Handlers of the indexing ops beyond `Gather`: GatherND, ScatterND, ScatterElements and
//! NonZero. Each reads or writes the data flattened over the indexed dims, so that one
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
fn strides(dims: &[u64]) -> Vec<u64> {
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
        let zero = cx.scalar(0.0, DType::I64);
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
            let n = cx.scalar(self.lead[d] as f64, DType::I64);
            let neg = bin(cx, OpKind::Lt, &c, &zero)?;
            let wrapped = bin(cx, OpKind::Add, &c, &n)?;
            let c = select(cx, &neg, &wrapped, &c)?;
            let lo = bin(cx, OpKind::Ge, &c, &zero)?;
            let hi = bin(cx, OpKind::Lt, &c, &n)?;
            let ok = select(cx, &lo, &hi, &lo)?;
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

/// A scatter's `reduction` attribute.
fn reduction(n: &Node) -> String {
    n.string("reduction").unwrap_or_else(|| "none".into())
}

/// The indices of a scatter, which irc needs at import.
fn known_indices(cx: &Ctx, idx: &Val, op: &str) -> R<Vec<i64>> {
    cx.known(idx).map(|t| t.data.to_i64()).ok_or_else(|| {
        format!("{op} with indices computed at run time is not supported (they must be known at import: an initializer, a Constant, or computed from shapes)")
    })
}

/// ONNX ScatterND with indices known at import: update row `p` (of the data's dims past the
/// index tuple) goes to the flat row of `indices[p, :]`.
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
    let targets = nd.known_offsets(&known_indices(cx, &idx, "ScatterND")?, "ScatterND")?;
    let row = xs[nd.k..].iter().product();
    one(scatter_known(cx, &x, &upd, &targets, row, &reduction(n))?)
}

/// ONNX ScatterElements (and the older Scatter) with indices known at import: the update at
/// position `p` goes to `p` with its `axis` coordinate replaced by `indices[p]`.
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
    let idx = known_indices(cx, &idx, "ScatterElements")?;
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
