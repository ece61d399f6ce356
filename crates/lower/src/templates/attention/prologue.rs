//! How the attention kernels evaluate the scores' prologue: the forms recognized in the graph
//! (a folded constant scale, a mask band's select kept in its canonical form) and what each
//! kernel then computes per score ([`Prologue`]).

use irc_ir::ValueId;

/// How the kernels evaluate an attention prologue `x = f(s)` per score. A constant scale
/// `c > 0` (`x = s·c`, possibly under an additive `-inf` mask `select(keep, s·c, -inf)` or
/// over one) is folded into the exponent as FlashAttention does: the kernel keeps the raw
/// scores, `exp(c·s - c·m)` with `m` their max is one multiply-add and `ex2`. A recognized
/// mask band's condition is known true on key tiles wholly inside it, whose scores then skip
/// the mask.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Prologue {
    /// The value evaluated per score (`None`: the raw score as it is).
    pub(super) root: Option<ValueId>,
    /// A value of the prologue that is `s·scale`, read as the raw score.
    pub(super) alias: Option<ValueId>,
    /// The mask band's condition (true where a score is kept).
    pub(super) keep: Option<ValueId>,
    /// The folded scale.
    pub(super) scale: Option<f64>,
    /// Whether it is no more than a scale and a recognized mask band kept in the canonical
    /// form (`select(keep, s, -inf)`), which the kernel evaluates in a few registers.
    pub(super) plain: bool,
}

/// `(y, c)` where `x` is `y · c` (either order) for a splat constant `c > 0`, rounded to its
/// type.
fn scaled(g: &irc_ir::Graph, x: ValueId) -> Option<(ValueId, f64)> {
    let inst = g.def_inst(x)?;
    if inst.op != irc_ir::OpKind::Mul {
        return None;
    }
    let [a, b] = inst.operands.as_slice() else {
        return None;
    };
    let constant = |c: ValueId| -> Option<f64> {
        let ci = g.def_inst(c)?;
        if ci.op.category() != irc_ir::Category::Constant {
            return None;
        }
        let v = g.values[c.index()]
            .ty
            .dtype
            .round(irc_fused::policy::splat_value(&ci.attrs)?);
        (v > 0.0 && v.is_finite()).then_some(v)
    };
    match (constant(*b), constant(*a)) {
        (Some(c), _) => Some((*a, c)),
        (None, Some(c)) => Some((*b, c)),
        _ => None,
    }
}

/// `(keep, y)` where `x` is `select(keep, y, -inf)`.
fn masked(g: &irc_ir::Graph, x: ValueId) -> Option<(ValueId, ValueId)> {
    let inst = g.def_inst(x)?;
    if inst.op != irc_ir::OpKind::Select {
        return None;
    }
    let [keep, y, other] = inst.operands.as_slice() else {
        return None;
    };
    let oi = g.def_inst(*other)?;
    let splat = irc_fused::policy::splat_value(&oi.attrs);
    (oi.op.category() == irc_ir::Category::Constant && splat == Some(f64::NEG_INFINITY))
        .then_some((*keep, *y))
}

/// The prologue `x` of the scores `s` as the kernels evaluate it ([`Prologue`]); `causal`
/// when it is a recognized mask band.
pub(super) fn prologue_form(g: &irc_ir::Graph, x: ValueId, s: ValueId, causal: bool) -> Prologue {
    let keep = |k: ValueId| causal.then_some(k);
    // A scale of the score, nothing else; under the band's select in its canonical form
    // (`keep` known on whole tiles) the prologue is `plain`.
    let scaled_score = |v: ValueId| v == s || scaled(g, v).is_some_and(|(y, _)| y == s);
    if let Some((y, c)) = scaled(g, x) {
        if y == s {
            return Prologue {
                scale: Some(c),
                plain: true,
                ..Prologue::default()
            };
        }
        if let Some((k, kept)) = masked(g, y)
            && kept == s
        {
            return Prologue {
                root: Some(y),
                keep: keep(k),
                scale: Some(c),
                alias: None,
                plain: causal,
            };
        }
    }
    if let Some((k, kept)) = masked(g, x) {
        let scaled = scaled(g, kept).filter(|&(y, _)| y == s);
        return Prologue {
            root: Some(x),
            alias: scaled.map(|_| kept),
            keep: keep(k),
            scale: scaled.map(|(_, c)| c),
            plain: causal && scaled_score(kept),
        };
    }
    Prologue {
        root: Some(x),
        plain: scaled_score(x),
        ..Prologue::default()
    }
}
