//! Decomposition of the composite ops (softmax, log_softmax, rmsnorm, layernorm) into primitives.
//!
//! A composite computes in its op-math dtype (f32, or f64 for f64 inputs) and rounds once, as
//! PyTorch's fused kernels do; the decomposition says so explicitly: cast up, compute, cast back.
//! Every statement of an expansion keeps the composite's provenance.

use crate::graph::{Graph, GraphBuilder, Inst, ValueId};
use crate::infer::{OpError, normalize_axis};
use crate::ops::Category;
use crate::{Attr, DType, OpKind};

/// The dtype a composite over `d` computes in.
pub fn opmath_dtype(d: DType) -> DType {
    if d == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// Rewrites every composite statement of `g` into primitives. The result verifies whenever `g`
/// does, and computes the same function up to rounding.
pub fn decompose_graph(g: &Graph) -> Result<Graph, OpError> {
    let mut b = GraphBuilder::new(g.name.clone());
    let mut map: Vec<Option<ValueId>> = vec![None; g.values.len()];
    for &p in &g.params {
        let data = g.value(p);
        map[p.index()] = Some(b.param(data.name.as_deref().unwrap_or("arg"), data.ty.clone()));
    }
    let lookup = |map: &[Option<ValueId>], v: ValueId| {
        map.get(v.index())
            .copied()
            .flatten()
            .ok_or_else(|| OpError::stmt("operand used before definition"))
    };
    for inst in &g.insts {
        let operands = inst
            .operands
            .iter()
            .map(|&o| lookup(&map, o))
            .collect::<Result<Vec<_>, _>>()?;
        let first_new = b.graph().insts.len();
        let out = if inst.op.category() == Category::Composite {
            expand(&mut b, inst, &operands)?
        } else {
            b.op_typed(
                inst.op,
                &operands,
                inst.attrs.clone(),
                Some(g.ty(inst.result)),
            )?
        };
        for v in b.graph().insts[first_new..]
            .iter()
            .map(|i| i.result)
            .collect::<Vec<_>>()
        {
            b.set_loc(v, inst.loc.clone());
        }
        if let Some(name) = &g.value(inst.result).name {
            b.name(out, name);
        }
        map[inst.result.index()] = Some(out);
    }
    let results = g
        .results
        .iter()
        .map(|&r| lookup(&map, r))
        .collect::<Result<Vec<_>, _>>()?;
    b.finish(&results)
}

fn expand(b: &mut GraphBuilder, inst: &Inst, xs: &[ValueId]) -> Result<ValueId, OpError> {
    let x_ty = b.ty(xs[0]).clone();
    let dtype = x_ty.dtype;
    let rank = x_ty.rank();
    let axis_attr = inst.attrs.get("axis").and_then(Attr::as_int).unwrap_or(-1);
    let axis = normalize_axis(axis_attr, rank).ok_or_else(|| OpError::stmt("axis out of range"))?;
    let ax = [axis as i64];
    let calc = opmath_dtype(dtype);
    let up = |b: &mut GraphBuilder, v: ValueId| {
        if calc == dtype {
            Ok(v)
        } else {
            b.cast(v, calc)
        }
    };
    let x = up(b, xs[0])?;
    // A per-axis parameter (w or b, shaped [D]) reshaped to broadcast along `axis`.
    let along_axis = |b: &mut GraphBuilder, p: ValueId| -> Result<ValueId, OpError> {
        let p = up(b, p)?;
        let trailing = rank - 1 - axis;
        if trailing == 0 {
            return Ok(p);
        }
        let mut shape = vec![x_ty.shape[axis] as i64];
        shape.extend(std::iter::repeat_n(1, trailing));
        b.reshape(p, &shape)
    };
    let y = match inst.op {
        OpKind::Softmax => {
            let m = b.reduce(OpKind::ReduceMax, x, &ax, true)?;
            let s = b.binary(OpKind::Sub, x, m)?;
            let e = b.unary(OpKind::Exp, s)?;
            let z = b.reduce(OpKind::ReduceSum, e, &ax, true)?;
            b.binary(OpKind::Div, e, z)?
        }
        OpKind::LogSoftmax => {
            let m = b.reduce(OpKind::ReduceMax, x, &ax, true)?;
            let s = b.binary(OpKind::Sub, x, m)?;
            let e = b.unary(OpKind::Exp, s)?;
            let z = b.reduce(OpKind::ReduceSum, e, &ax, true)?;
            let l = b.unary(OpKind::Log, z)?;
            b.binary(OpKind::Sub, s, l)?
        }
        OpKind::Rmsnorm | OpKind::Layernorm => {
            let default_eps = if inst.op == OpKind::Rmsnorm {
                dtype.epsilon().unwrap_or(1e-6)
            } else {
                1e-5
            };
            let eps = inst
                .attrs
                .get("eps")
                .and_then(Attr::as_f64)
                .unwrap_or(default_eps);
            let centered = if inst.op == OpKind::Layernorm {
                let mu = b.reduce(OpKind::ReduceMean, x, &ax, true)?;
                b.binary(OpKind::Sub, x, mu)?
            } else {
                x
            };
            let sq = b.binary(OpKind::Mul, centered, centered)?;
            let ms = b.reduce(OpKind::ReduceMean, sq, &ax, true)?;
            let e = b.scalar(eps, calc)?;
            let t = b.binary(OpKind::Add, ms, e)?;
            let r = b.unary(OpKind::Rsqrt, t)?;
            let mut y = b.binary(OpKind::Mul, centered, r)?;
            if let Some(&w) = xs.get(1) {
                let w = along_axis(b, w)?;
                y = b.binary(OpKind::Mul, y, w)?;
            }
            if let Some(&bias) = xs.get(2) {
                let bias = along_axis(b, bias)?;
                y = b.binary(OpKind::Add, y, bias)?;
            }
            y
        }
        other => return Err(OpError::stmt(format!("'{other}' is not a composite"))),
    };
    if calc == dtype {
        Ok(y)
    } else {
        b.cast(y, dtype)
    }
}
