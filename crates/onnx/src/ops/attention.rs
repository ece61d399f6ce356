//! ONNX `Attention` (opset 23; `nonpad_kv_seqlen` of opset 24; the sliding window of later
//! opsets) as the chain irc's fusion planner makes one flash-attention kernel of:
//! `matmul(Q, Kᵀ)`, a scale, soft-capping, the mask (`select(keep, s, -inf)` or an additive
//! bias) and the causal band (`select(col <= row + offset, s, -inf)` over `iota`s, which the
//! band recognizer reads), `softmax`, `matmul(P, V)`. 3-D inputs are viewed as heads
//! (reshape, transpose) and the output viewed back; grouped-query K and V are broadcast over
//! the query heads each serves; past keys and values are concatenated in front.

use super::Node;
use super::math::{bin, broadcast_to, cast_to, reduce, reshape_to, select, un};
use super::shape::transpose_to as transpose;
use crate::ctx::{Ctx, R, Val};
use irc_ir::{Attr, Attrs, DType, OpKind, TensorType};

/// `[B, S, H·D]` viewed as `[B, H, S, D]`.
fn heads(cx: &mut Ctx, x: &Val, h: i64, what: &str) -> R<Val> {
    let s = cx.ty(x).shape;
    if h <= 0 || s[2] % h as u64 != 0 {
        return Err(format!(
            "{what}'s hidden size {} is not a multiple of {h} heads",
            s[2]
        ));
    }
    let x = reshape_to(cx, x, &[s[0], s[1], h as u64, s[2] / h as u64])?;
    transpose(cx, &x, &[0, 2, 1, 3])
}

/// `a and b` of boolean values (`select(a, b, a)`, which the band recognizer reads).
fn and(cx: &mut Ctx, a: Option<Val>, b: Val) -> R<Val> {
    match a {
        Some(a) => select(cx, &a, &b, &a),
        None => Ok(b),
    }
}

pub fn attention(cx: &mut Ctx, n: &Node) -> R<Vec<Val>> {
    let (q, k, v) = (n.x(0)?, n.x(1)?, n.x(2)?);
    let (mask, past_k, past_v, nonpad) = (n.opt(3), n.opt(4), n.opt(5), n.opt(6));
    let rank = cx.ty(&q).rank();
    if cx.ty(&k).rank() != rank || cx.ty(&v).rank() != rank || !matches!(rank, 3 | 4) {
        return Err("Q, K and V must all be 3-D ([B, S, H·D]) or all 4-D ([B, H, S, D])".into());
    }
    let dt = cx.ty(&q).dtype;
    if !dt.is_float() {
        return Err(format!("Attention of {dt} (float inputs only)"));
    }
    let (q, k, v) = if rank == 3 {
        let (hq, hkv) = (n.int("q_num_heads", 0), n.int("kv_num_heads", 0));
        (
            heads(cx, &q, hq, "Q")?,
            heads(cx, &k, hkv, "K")?,
            heads(cx, &v, hkv, "V")?,
        )
    } else {
        (q, k, v)
    };
    if past_k.is_some() != past_v.is_some() {
        return Err("past_key and past_value must be given together".into());
    }
    if past_k.is_some() && nonpad.is_some() {
        return Err("nonpad_kv_seqlen cannot be combined with past_key and past_value".into());
    }
    // The cache: past keys and values in front of this step's.
    let seq = |cx: &mut Ctx, past: Option<Val>, x: Val| -> R<Val> {
        match past {
            Some(p) => cx.op(
                OpKind::Concat,
                &[&p, &x],
                Attrs::new().with("axis", Attr::Int(2)),
            ),
            None => Ok(x),
        }
    };
    let past_len = past_k.as_ref().map_or(0, |p| cx.ty(p).shape[2] as i64);
    let (k, v) = (seq(cx, past_k, k)?, seq(cx, past_v, v)?);
    let (qs, ks, vs) = (cx.ty(&q).shape, cx.ty(&k).shape, cx.ty(&v).shape);
    let (b, hq, sq, d) = (qs[0], qs[1], qs[2], qs[3]);
    let (hkv, skv) = (ks[1], ks[2]);
    if ks[0] != b || vs[0] != b || vs[1] != hkv || vs[2] != skv || ks[3] != d {
        return Err(format!(
            "Q {qs:?}, K {ks:?} and V {vs:?} (as [B, H, S, D]) do not fit together"
        ));
    }
    if hq % hkv != 0 {
        return Err(format!("{hq} query heads over {hkv} key/value heads"));
    }
    // Grouped-query attention: each K/V head serves `hq / hkv` consecutive query heads.
    let repeat = |cx: &mut Ctx, x: &Val| -> R<Val> {
        if hq == hkv {
            return Ok(x.clone());
        }
        let s = cx.ty(x).shape;
        let x5 = reshape_to(cx, x, &[s[0], s[1], 1, s[2], s[3]])?;
        let x5 = broadcast_to(cx, &x5, &[s[0], s[1], hq / hkv, s[2], s[3]])?;
        reshape_to(cx, &x5, &[s[0], hq, s[2], s[3]])
    };
    let (present_k, present_v) = (k.clone(), v.clone());
    let (k, v) = (repeat(cx, &k)?, repeat(cx, &v)?);

    // The scores, scaled (ONNX scales Q and K by √scale each: the same product).
    let kt = transpose(cx, &k, &[0, 1, 3, 2])?;
    let mut s = bin(cx, OpKind::Matmul, &q, &kt)?;
    let scale = if n.has("scale") {
        n.float("scale", 1.0) as f64
    } else {
        1.0 / (d as f64).sqrt()
    };
    let c = cx.scalar(scale, dt);
    s = bin(cx, OpKind::Mul, &s, &c)?;
    let mut taps = vec![s.clone()];
    let softcap = n.float("softcap", 0.0) as f64;
    if softcap > 0.0 {
        let c = cx.scalar(softcap, dt);
        let t = bin(cx, OpKind::Div, &s, &c)?;
        let t = un(cx, OpKind::Tanh, &t)?;
        s = bin(cx, OpKind::Mul, &t, &c)?;
    }
    taps.push(s.clone());

    // The mask: `keep` (true where a key is attended) for the fully-masked-row guard, and the
    // scores with masked ones at -inf.
    let neg_inf = cx.scalar(f64::NEG_INFINITY, dt);
    let mut keep: Option<Val> = None;
    if let Some(m) = mask {
        let mut m = m;
        let ms = cx.ty(&m).shape;
        let mk = *ms.last().ok_or("attn_mask must have rank 1 or more")?;
        if mk < skv {
            // A mask shorter than the keys is padded: not attended.
            let mut pad = ms.clone();
            *pad.last_mut().expect("rank >= 1") = skv - mk;
            let fill = match cx.ty(&m).dtype {
                DType::I1 => cx.scalar(0.0, DType::I1),
                t => cx.scalar(f64::NEG_INFINITY, t),
            };
            let fill = broadcast_to(cx, &fill, &pad)?;
            let axis = ms.len() as i64 - 1;
            m = cx.op(
                OpKind::Concat,
                &[&m, &fill],
                Attrs::new().with("axis", Attr::Int(axis)),
            )?;
        } else if mk > skv {
            return Err(format!("attn_mask has {mk} keys, the keys {skv}"));
        }
        if cx.ty(&m).dtype == DType::I1 {
            // A conjunction's factors one select each, those computed from indices alone (a
            // band: the causal mask an exporter folded) last, where the planner reads the
            // band and skips the key tiles outside it.
            let (band_like, other): (Vec<Val>, Vec<Val>) =
                cx.conjuncts(&m).into_iter().partition(|f| cx.index_only(f));
            for f in other.iter().chain(&band_like) {
                s = select(cx, f, &s, &neg_inf)?;
            }
            keep = Some(m);
        } else {
            let m = cast_to(cx, &m, dt)?;
            s = bin(cx, OpKind::Add, &s, &m)?;
            keep = Some(bin(cx, OpKind::Ne, &m, &neg_inf)?);
        }
    }
    // Index grids over the scores' last two axes.
    let grid = TensorType::new([sq, skv], DType::I64);
    let row = cx.iota(&grid, 0)?;
    let col = cx.iota(&grid, 1)?;
    // Each batch entry's valid keys (an external cache), `[B, 1, 1, 1]`.
    let nonpad = match nonpad {
        Some(np) => {
            let np = cast_to(cx, &np, DType::I64)?;
            Some(reshape_to(cx, &np, &[b, 1, 1, 1])?)
        }
        None => None,
    };
    if let Some(np) = &nonpad {
        // Keys at or past a batch entry's valid length are not attended.
        let kept = bin(cx, OpKind::Lt, &col, np)?;
        s = select(cx, &kept, &s, &neg_inf)?;
        keep = Some(and(cx, keep, kept)?);
    }
    // The band: causal (`col <= row + offset`, offset the cache's length) and the window.
    let mut band: Option<Val> = None;
    let (left, right) = (
        n.int("left_window_size", -1),
        n.int("right_window_size", -1),
    );
    let causal = n.int("is_causal", 0) != 0;
    if causal || left >= 0 || right >= 0 {
        // The frontier's offset: the cache's length, or (an external cache) each batch
        // entry's valid keys less the queries.
        let off = match &nonpad {
            None => cx.scalar(past_len as f64, DType::I64),
            Some(np) => {
                let qn = cx.scalar(sq as f64, DType::I64);
                bin(cx, OpKind::Sub, np, &qn)?
            }
        };
        let pos = bin(cx, OpKind::Add, &row, &off)?;
        // `diff = pos - col`: causal keeps diff >= 0, the window -right <= diff <= left.
        let diff = bin(cx, OpKind::Sub, &pos, &col)?;
        let mut conds = vec![];
        if causal {
            conds.push(bin(cx, OpKind::Le, &col, &pos)?);
        }
        if left >= 0 {
            let l = cx.scalar(left as f64, DType::I64);
            conds.push(bin(cx, OpKind::Le, &diff, &l)?);
        }
        if right >= 0 {
            let r = cx.scalar(-right as f64, DType::I64);
            conds.push(bin(cx, OpKind::Ge, &diff, &r)?);
        }
        for c in conds {
            band = Some(and(cx, band, c)?);
        }
    }
    // Whether the band leaves a row without keys: query `i` keeps keys `j` in
    // `[i + off - left, min(i + off (causal), i + off + right)]` within `[0, skv)`.
    let band_empties = band.is_some()
        && (0..sq as i64).any(|i| {
            let pos = i + past_len;
            let lo = if left >= 0 { (pos - left).max(0) } else { 0 };
            let mut hi = skv as i64 - 1;
            if causal {
                hi = hi.min(pos);
            }
            if right >= 0 {
                hi = hi.min(pos + right);
            }
            lo > hi
        });
    let guard = keep.is_some() || band_empties;
    if let Some(bnd) = &band {
        s = select(cx, bnd, &s, &neg_inf)?;
        if keep.is_some() {
            keep = Some(and(cx, keep, bnd.clone())?);
        }
    }
    taps.push(s.clone());
    let p = cx.op(
        OpKind::Softmax,
        &[&s],
        Attrs::new().with("axis", Attr::Int(-1)),
    )?;
    let mut y = bin(cx, OpKind::Matmul, &p, &v)?;
    let mut p_out = p;
    // A row with no attended key is zero (where ONNX's softmax of all -inf is).
    if guard {
        let keep = match (keep, band) {
            (Some(k), _) => k,
            (None, Some(bnd)) => bnd,
            (None, None) => unreachable!("a guard needs a mask"),
        };
        let ones = cast_to(cx, &keep, dt)?;
        let any = reduce(cx, OpKind::ReduceMax, &ones, &[-1], true)?;
        let zero = cx.scalar(0.0, dt);
        let dead = bin(cx, OpKind::Eq, &any, &zero)?;
        y = select(cx, &dead, &zero, &y)?;
        if n.n_out() > 3 {
            p_out = select(cx, &dead, &zero, &p_out)?;
        }
    }
    taps.push(p_out);
    if rank == 3 {
        let dv = vs[3];
        let t = transpose(cx, &y, &[0, 2, 1, 3])?;
        y = reshape_to(cx, &t, &[b, sq, hq * dv])?;
    }
    let mut outs = vec![y, present_k, present_v];
    if n.n_out() > 3 {
        let mode = n.int("qk_matmul_output_mode", 0);
        let tap = usize::try_from(mode)
            .ok()
            .and_then(|m| taps.get(m).cloned())
            .ok_or_else(|| format!("qk_matmul_output_mode {mode} (0 to 3)"))?;
        outs.push(tap);
    }
    outs.truncate(n.n_out().max(1));
    Ok(outs)
}
