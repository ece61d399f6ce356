//! Handlers of softmax, the normalizations (layer, RMS, batch, instance and group norm) and
//! the global pools, each written as irc's composites or reductions.

use super::Node;
use super::math::*;
use crate::ctx::{Ctx, R, Val};
use irc_ir::{Attr, Attrs, DType, OpKind, ints};

pub fn softmax(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let attrs = Attrs::new().with("axis", Attr::Int(n.int("axis", -1)));
    one(cx.op(OpKind::Softmax, &[&x], attrs)?)
}

pub fn log_softmax(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let attrs = Attrs::new().with("axis", Attr::Int(n.int("axis", -1)));
    one(cx.op(OpKind::LogSoftmax, &[&x], attrs)?)
}

/// LayerNormalization / RMSNormalization over the axes `axis..rank`: irc's composites
/// normalize one axis, so the trailing axes are flattened into one around them.
fn norm(cx: &mut Ctx, n: &Node, op: OpKind) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let ty = cx.ty(&x);
    let a = axis(n.int("axis", -1), ty.rank())?;
    let inner: Vec<u64> = ty.shape[a..].to_vec();
    let k: u64 = inner.iter().product();
    let mut flat = ty.shape[..a].to_vec();
    flat.push(k);
    let xf = reshape_to(cx, &x, &flat)?;
    let mut operands = vec![xf];
    for i in 1..n.n_in().min(3) {
        if let Some(w) = n.opt(i) {
            let w = cast_to(cx, &w, ty.dtype)?;
            let inner_i: Vec<i64> = inner.iter().map(|&d| d as i64).collect();
            let wb = if cx.ty(&w).shape == inner {
                w
            } else {
                cx.op(
                    OpKind::Broadcast,
                    &[&w],
                    Attrs::new().with("shape", ints(&inner_i)),
                )?
            };
            operands.push(reshape_to(cx, &wb, &[k])?);
        } else if i == 1 && op == OpKind::Layernorm {
            return Err("the Scale input is required".into());
        }
    }
    let attrs = Attrs::new()
        .with("axis", Attr::Int(-1))
        .with("eps", Attr::Float(n.float("epsilon", 1e-5) as f64));
    let refs: Vec<&Val> = operands.iter().collect();
    let y = cx.op(op, &refs, attrs)?;
    let mut outs = vec![reshape_to(cx, &y, &ty.shape)?];
    if n.n_out() > 1 {
        outs.extend(norm_stats(cx, n, &x, a, op)?);
    }
    Ok(outs)
}

/// LayerNormalization's optional outputs Mean and InvStdDev (RMSNormalization has only the
/// latter), over the axes `a..`, kept as dims of size 1, in the stash type (f32 by default).
fn norm_stats(cx: &mut Ctx, n: &Node, x: &Val, a: usize, op: OpKind) -> R<Vec<Val>> {
    let stash = if n.int("stash_type", 1) == 1 {
        DType::F32
    } else {
        cx.ty(x).dtype
    };
    let xs = cast_to(cx, x, stash)?;
    let axes: Vec<i64> = (a as i64..cx.ty(x).rank() as i64).collect();
    let eps = cx.scalar(n.float("epsilon", 1e-5) as f64, stash);
    let (mean, sq) = if op == OpKind::Layernorm {
        let m = reduce(cx, OpKind::ReduceMean, &xs, &axes, true)?;
        let c = bin(cx, OpKind::Sub, &xs, &m)?;
        (Some(m), bin(cx, OpKind::Mul, &c, &c)?)
    } else {
        (None, bin(cx, OpKind::Mul, &xs, &xs)?)
    };
    let var = reduce(cx, OpKind::ReduceMean, &sq, &axes, true)?;
    let ve = bin(cx, OpKind::Add, &var, &eps)?;
    let inv = un(cx, OpKind::Rsqrt, &ve)?;
    Ok(mean.into_iter().chain([inv]).collect())
}

pub fn layernorm(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    norm(cx, n, OpKind::Layernorm)
}

pub fn rmsnorm(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    norm(cx, n, OpKind::Rmsnorm)
}

/// A per-channel `[C]` parameter reshaped to broadcast against `[N, C, ...]` of rank `rank`.
fn per_channel(cx: &mut Ctx, p: &Val, rank: usize) -> R<Val> {
    let c = cx.ty(p).numel();
    let mut s = vec![1u64; rank.saturating_sub(1)];
    if let Some(first) = s.first_mut() {
        *first = c;
    }
    reshape_to(cx, p, &s)
}

/// BatchNormalization: `(x - mean) · rsqrt(var + eps) · scale + bias` per channel, with the
/// given statistics, or (`training_mode=1`: BiT's weight standardization writes it) those of
/// `x` itself over every axis but the channel's (the population variance), and then the
/// running statistics' updates as the second and third outputs.
pub fn batchnorm(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let rank = cx.ty(&x).rank();
    let [scale, b, run_mean, run_var] =
        [1, 2, 3, 4].map(|i| n.x(i).and_then(|v| per_channel(cx, &v, rank)));
    let (scale, b, run_mean, run_var) = (scale?, b?, run_mean?, run_var?);
    let training = n.int("training_mode", 0) != 0;
    let (mean, var) = if training {
        let axes: Vec<i64> = (0..rank as i64).filter(|&a| a != 1).collect();
        let m = reduce(cx, OpKind::ReduceMean, &x, &axes, true)?;
        let c = bin(cx, OpKind::Sub, &x, &m)?;
        let sq = bin(cx, OpKind::Mul, &c, &c)?;
        let v = reduce(cx, OpKind::ReduceMean, &sq, &axes, true)?;
        (m, v)
    } else {
        (run_mean.clone(), run_var.clone())
    };
    let eps = sc(cx, n.float("epsilon", 1e-5) as f64, &var);
    let ve = bin(cx, OpKind::Add, &var, &eps)?;
    let r = un(cx, OpKind::Rsqrt, &ve)?;
    let k = bin(cx, OpKind::Mul, &r, &scale)?;
    let c = bin(cx, OpKind::Sub, &x, &mean)?;
    let y = bin(cx, OpKind::Mul, &c, &k)?;
    let y = bin(cx, OpKind::Add, &y, &b)?;
    if !training || n.n_out() < 2 {
        return one(y);
    }
    // running = running · momentum + current · (1 - momentum), as `[C]` vectors.
    let momentum = n.float("momentum", 0.9) as f64;
    let channels = cx.ty(&x).shape[1];
    let mut outs = vec![y];
    for (running, current) in [(&run_mean, &mean), (&run_var, &var)] {
        let keep = sc(cx, momentum, running);
        let take = sc(cx, 1.0 - momentum, current);
        let a = bin(cx, OpKind::Mul, running, &keep)?;
        let c = bin(cx, OpKind::Mul, current, &take)?;
        let s = bin(cx, OpKind::Add, &a, &c)?;
        outs.push(reshape_to(cx, &s, &[channels])?);
    }
    Ok(outs)
}

pub fn instance_norm(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, scale, b) = (n.x(0)?, n.x(1)?, n.x(2)?);
    let rank = cx.ty(&x).rank();
    let axes: Vec<i64> = (2..rank as i64).collect();
    let m = reduce(cx, OpKind::ReduceMean, &x, &axes, true)?;
    let c = bin(cx, OpKind::Sub, &x, &m)?;
    let sq = bin(cx, OpKind::Mul, &c, &c)?;
    let var = reduce(cx, OpKind::ReduceMean, &sq, &axes, true)?;
    let eps = sc(cx, n.float("epsilon", 1e-5) as f64, &x);
    let ve = bin(cx, OpKind::Add, &var, &eps)?;
    let r = un(cx, OpKind::Rsqrt, &ve)?;
    let y = bin(cx, OpKind::Mul, &c, &r)?;
    let (s, b) = (per_channel(cx, &scale, rank)?, per_channel(cx, &b, rank)?);
    let y = bin(cx, OpKind::Mul, &y, &s)?;
    one(bin(cx, OpKind::Add, &y, &b)?)
}

/// GroupNormalization: `[N, C, ...]` viewed as `[N, G, C/G · spatial]`, normalized over the
/// last axis (irc's `layernorm`, in f32 and rounded once), viewed back and scaled and shifted
/// per channel (opset 21's `[C]` parameters) or per group (opset 18's `[G]`).
pub fn group_norm(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (x, scale, b) = (n.x(0)?, n.x(1)?, n.x(2)?);
    let ty = cx.ty(&x);
    if ty.rank() < 2 {
        return Err(format!("the input {:?} must be [N, C, ...]", ty.shape));
    }
    let (nb, c) = (ty.shape[0], ty.shape[1]);
    let g = u64::try_from(n.int("num_groups", 0))
        .ok()
        .filter(|&g| g > 0 && c % g == 0)
        .ok_or_else(|| format!("num_groups must divide the {c} channels"))?;
    let per: u64 = ty.shape[1..].iter().product::<u64>() / g;
    let grouped = reshape_to(cx, &x, &[nb, g, per])?;
    let attrs = Attrs::new()
        .with("axis", Attr::Int(-1))
        .with("eps", Attr::Float(n.float("epsilon", 1e-5) as f64));
    let y = cx.op(OpKind::Layernorm, &[&grouped], attrs)?;
    let y = reshape_to(cx, &y, &ty.shape)?;
    let mut params = Vec::with_capacity(2);
    for p in [scale, b] {
        let p = cast_to(cx, &p, ty.dtype)?;
        let k = cx.ty(&p).numel();
        let p = if k == c {
            p
        } else if k == g {
            // [G] → [G, C/G] → [C]
            let col = reshape_to(cx, &p, &[g, 1])?;
            let wide = cx.op(
                OpKind::Broadcast,
                &[&col],
                Attrs::new().with("shape", ints(&[g as i64, (c / g) as i64])),
            )?;
            reshape_to(cx, &wide, &[c])?
        } else {
            return Err(format!(
                "scale and bias must have {c} (channels) or {g} (groups) elements, got {k}"
            ));
        };
        params.push(per_channel(cx, &p, ty.rank())?);
    }
    let y = bin(cx, OpKind::Mul, &y, &params[0])?;
    one(bin(cx, OpKind::Add, &y, &params[1])?)
}

fn global_pool(cx: &mut Ctx, n: &Node, op: OpKind) -> R<Vec<Val>> {
    let x = n.x(0)?;
    let axes: Vec<i64> = (2..cx.ty(&x).rank() as i64).collect();
    one(reduce(cx, op, &x, &axes, true)?)
}

pub fn global_avg_pool(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    global_pool(cx, n, OpKind::ReduceMean)
}
pub fn global_max_pool(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    global_pool(cx, n, OpKind::ReduceMax)
}
