//! Policy rule 8: attention. `matmul(softmax(prologue(matmul(Q, Kᵀ))), V)` is one kernel
//! when the scores can be recomputed tile by tile in registers (flash attention).
//!
//! The chain is found from its end: a matmul whose first operand is a `softmax` over the last
//! axis (or a cast of one: an f32 softmax rounded back to f16), read by nothing else. Walking back from the softmax's operand through elementwise
//! values of the scores' shape computed inline reaches the scores' matmul. Every value on a
//! path between the two is the **prologue**: elementwise, of the scores' shape, computed inline
//! (read once), so the template computes it per score at that score's coordinate. What the
//! prologue reads besides the scores (a scale, a mask or bias tensor through its views, an
//! `iota` comparison for a causal mask) is any value readable at a coordinate.
//!
//! It is declined, with the reason, when the scores or probabilities are read elsewhere, when
//! the prologue reads the scores at other coordinates (a view, a `concat`, a `gather`) or is
//! stored, when the element type is not f16/bf16 (the template runs on tensor cores), when the
//! head dims are not multiples of 8 from 8 to 256, or when an operand is a vector or `P` is
//! transposed.

use crate::policy::{Dag, Home, NodeKind};
use irc_ir::infer::matmul_shape;
use irc_ir::{DType, OpKind};

/// The largest head dim the attention template takes (Q·Kᵀ's K and V's columns).
pub const MAX_HEAD_DIM: u64 = 256;

/// Whether the attention template takes head dim `d` (Q·Kᵀ's K or V's columns): a multiple
/// of 8 (16-byte rows of f16/bf16) up to [`MAX_HEAD_DIM`]. The kernels compute in tiles of
/// 16 (mma) or 64 (wgmma) columns, the columns past `d` zeros that are never stored.
pub fn head_dim_ok(d: u64) -> bool {
    d > 0 && d % 8 == 0 && d <= MAX_HEAD_DIM
}

/// One attention chain the policy looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttentionMatch {
    /// `matmul(P, V)`: the kernel's anchor.
    pub output: usize,
    /// The softmax `P`.
    pub softmax: usize,
    /// A cast of the softmax that the output matmul reads (an f32 softmax rounded back to the
    /// matmul's type, as models written for mixed precision do).
    pub p_cast: Option<usize>,
    /// `matmul(Q, Kᵀ)`, when found.
    pub scores: Option<usize>,
    /// The prologue: values on a path from the scores to the softmax (its operand included),
    /// in node order.
    pub prologue: Vec<usize>,
    /// Why the chain stays unfused; `None` when it is one attention kernel.
    pub declined: Option<String>,
    /// The node the reason is about, if one.
    pub declined_at: Option<usize>,
}

/// The attention chains of `d` given the homes of rules 1 to 5, each accepted or declined.
pub(crate) fn find(
    d: &impl Dag,
    home: &[Home],
    uses: &[usize],
    is_result: &[bool],
    forced_at: &impl Fn(usize) -> bool,
) -> Vec<AttentionMatch> {
    let mut out = vec![];
    for m2 in 0..d.len() {
        if d.kind(m2) != NodeKind::Anchor(OpKind::Matmul) {
            continue;
        }
        let Some(&p0) = d.operands(m2).first() else {
            continue;
        };
        let (p, p_cast) = match (d.op(p0), d.operands(p0).first()) {
            (Some(OpKind::Cast), Some(&s)) if d.kind(s) == NodeKind::Anchor(OpKind::Softmax) => {
                (s, Some(p0))
            }
            _ => (p0, None),
        };
        if d.kind(p) != NodeKind::Anchor(OpKind::Softmax) {
            continue;
        }
        let Some(&x) = d.operands(p).first() else {
            continue;
        };
        let shape = d.shape(x).to_vec();
        // The scores' matmul: reached from x through inline elementwise values of its shape.
        let mut found: Vec<usize> = vec![];
        let mut stack = vec![x];
        let mut seen = std::collections::HashSet::new();
        while let Some(y) = stack.pop() {
            if !seen.insert(y) {
                continue;
            }
            match d.kind(y) {
                NodeKind::Anchor(OpKind::Matmul) => {
                    if !found.contains(&y) {
                        found.push(y);
                    }
                }
                NodeKind::Elementwise if home[y] == Home::Inline && d.shape(y) == shape => {
                    stack.extend(d.operands(y).iter().copied());
                }
                _ => {}
            }
        }
        let mut m = AttentionMatch {
            output: m2,
            softmax: p,
            p_cast,
            scores: None,
            prologue: vec![],
            declined: None,
            declined_at: None,
        };
        let m1 = match found[..] {
            [m1] => m1,
            [] => {
                m.declined = Some(
                    "the softmax's operand is not computed from a matmul by elementwise \
                     statements computed inline"
                        .into(),
                );
                out.push(m);
                continue;
            }
            _ => {
                m.declined = Some("the scores are computed from two matmuls".into());
                out.push(m);
                continue;
            }
        };
        m.scores = Some(m1);
        m.prologue = path(d, x, m1);
        if let Err((why, at)) = check(d, &m, home, uses, is_result, forced_at, &shape) {
            m.declined = Some(why);
            m.declined_at = at;
        }
        out.push(m);
    }
    out
}

/// The values on a path from `m1` to `x` (`m1` excluded, `x` included when it is not `m1`),
/// in node order: the prologue of the chain whose softmax reads `x`.
pub fn path(d: &impl Dag, x: usize, m1: usize) -> Vec<usize> {
    // Nodes between m1 and x: those x depends on (a walk back from x that stops at m1 and
    // below it) that depend on m1 (a forward pass in node order). Sets, not vectors of the
    // graph's size: this runs once per attention chain, so it may cost only what it visits.
    let mut back = std::collections::HashSet::new();
    let mut stack = vec![x];
    while let Some(y) = stack.pop() {
        if y <= m1 || !back.insert(y) {
            continue;
        }
        stack.extend(d.operands(y).iter().copied());
    }
    let mut between: Vec<usize> = back.into_iter().collect();
    between.sort_unstable();
    let mut dep = std::collections::HashSet::from([m1]);
    let mut out = vec![];
    for y in between {
        if d.operands(y).iter().any(|o| dep.contains(o)) {
            dep.insert(y);
            out.push(y);
        }
    }
    out
}

fn check(
    d: &impl Dag,
    m: &AttentionMatch,
    home: &[Home],
    uses: &[usize],
    is_result: &[bool],
    forced_at: &impl Fn(usize) -> bool,
    shape: &[u64],
) -> Result<(), (String, Option<usize>)> {
    let no = |s: &str| Err((s.to_string(), None));
    let (m2, p) = (m.output, m.softmax);
    let m1 = m.scores.unwrap_or(m2);
    if forced_at(m1) || forced_at(p) || forced_at(m2) {
        return no(
            "lowering stored a value of the chain (the template cannot be built for these \
             layouts)",
        );
    }
    for &y in &m.prologue {
        let ok =
            d.kind(y) == NodeKind::Elementwise && home[y] == Home::Inline && d.shape(y) == shape;
        if !ok {
            let how = match d.kind(y) {
                NodeKind::View => "through a view (at other coordinates)",
                NodeKind::Indexing => "at other coordinates (concat or gather)",
                _ if home[y] != Home::Inline => "and is kept in memory",
                _ => "into another shape",
            };
            return Err((
                format!("the prologue cannot be recomputed per tile: it reads the scores {how}"),
                Some(y),
            ));
        }
    }
    if is_result[m1] || uses[m1] > 1 {
        return no("the scores are read outside the chain (a result or a second reader)");
    }
    // Rule 5 stored the cast as a computed matmul operand; rule 8 takes it back if nothing
    // else reads it.
    if let Some(c) = m.p_cast
        && (is_result[c] || uses[c] > 1 || forced_at(c))
    {
        return no("the cast of the probabilities is read outside the chain");
    }
    if is_result[p] || uses[p] > 1 {
        return no("the probabilities are read outside the chain (a result or a second reader)");
    }
    if d.shape(m1) != shape {
        return no("the prologue changes the scores' shape");
    }
    // The softmax may run in f32 when a cast rounds it back to the matmul's type.
    let p_typed = if m.p_cast.is_some() { m2 } else { p };
    for v in [m1, p_typed, m2] {
        if !matches!(d.dtype(v), Some(DType::F16 | DType::BF16)) {
            let t = d.dtype(v).map_or("an unknown type", |t| t.name());
            return no(&format!(
                "the template runs on tensor cores: f16 or bf16 only, not {t}"
            ));
        }
    }
    let flag = |i: usize, n: &str| d.attr(i, n).and_then(|a| a.as_bool()).unwrap_or(false);
    if flag(m2, "transpose_a") {
        return no("the probabilities are read transposed");
    }
    let shape_of = |i: usize| {
        let [a, b] = d.operands(i) else {
            return None;
        };
        let (sa, sb) = (d.shape(*a), d.shape(*b));
        if sa.len() < 2 || sb.len() < 2 {
            return None;
        }
        matmul_shape(sa, sb, flag(i, "transpose_a"), flag(i, "transpose_b")).ok()
    };
    let (Some(qk), Some(pv)) = (shape_of(m1), shape_of(m2)) else {
        return no("an operand is a vector (rank 1)");
    };
    if !head_dim_ok(qk.k) || !head_dim_ok(pv.n) {
        return no(&format!(
            "head dims {} (Q·Kᵀ) and {} (V) must each be a multiple of 8 up to {MAX_HEAD_DIM}",
            qk.k, pv.n
        ));
    }
    let r = shape.len();
    if d.shape(m2).len() != r || d.shape(m2)[..r - 2] != shape[..r - 2] {
        return no("P·V broadcasts P's batch dims");
    }
    Ok(())
}

/// A mask band: the prologue keeps a score only where `lo <= row - col <= hi` (`None`: no
/// bound on that side), `row` the query index and `col` the key index. A causal mask is
/// `lo = 0`; a sliding window of `w` keys adds `hi = w - 1`; a local window both ways has
/// `lo = -(w - 1)`. Every band holds the diagonal (`lo <= 0 <= hi`), so no row is wholly
/// masked by it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Band {
    pub lo: Option<i64>,
    pub hi: Option<i64>,
}

impl Band {
    /// The plain causal mask: `row >= col`.
    pub fn is_causal(&self) -> bool {
        self.lo == Some(0) && self.hi.is_none()
    }
}

impl std::fmt::Display for Band {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.lo, self.hi) {
            (Some(0), None) => write!(f, "causal"),
            (Some(0), Some(h)) => write!(f, "causal, a window of {} keys", h + 1),
            (lo, hi) => {
                let b = |x: Option<i64>| x.map_or("inf".to_string(), |v| v.to_string());
                let lo = lo.map_or("-inf".to_string(), |v| v.to_string());
                write!(f, "band {lo} <= row - col <= {}", b(hi))
            }
        }
    }
}

/// The band of an accepted chain's prologue mask that the kernel may use to skip key tiles:
/// its last step (possibly followed by a multiplication or division by a positive constant)
/// is `select(keep, s, -inf)` (or `select(drop, -inf, s)`), where `keep` is a comparison or a
/// conjunction of comparisons (`select(a, b, a)` or `select(a, b, false)`, ONNX's `And`) of
/// integer values `±(row - col) + c`: `iota`s along the query and key axes (possibly
/// broadcast), integer constants, `add`, `sub` and `neg`. Scores outside the band are
/// `-inf`, so a key tile wholly outside it contributes nothing. `None` where the mask is not
/// such a band or the band does not hold the diagonal.
pub fn band(d: &impl Dag, m: &AttentionMatch) -> Option<Band> {
    let &x = m.prologue.last()?;
    let on_chain = |i: &usize| m.prologue.contains(i) || m.scores == Some(*i);
    let splat = |i: usize| match d.kind(i) {
        NodeKind::Constant { splat: true } => d
            .attr(i, "value")
            .as_ref()
            .and_then(crate::policy::splat_of),
        _ => None,
    };
    let mut y = x;
    if let Some(op @ (OpKind::Mul | OpKind::Div)) = d.op(y) {
        let [a, b] = d.operands(y) else {
            return None;
        };
        // The mask is a factor or the dividend (`c / -inf` is `-0`, a kept score).
        let (on, off) = if m.prologue.contains(a) || op == OpKind::Div {
            (*a, *b)
        } else {
            (*b, *a)
        };
        // Positive and finite as the dtype holds it (`-inf · 0` is NaN).
        let held = |c: f64| d.dtype(off).map_or(c, |t| t.round(c));
        if !splat(off)
            .map(held)
            .is_some_and(|c| c > 0.0 && c.is_finite())
        {
            return None;
        }
        y = on;
    }
    if d.op(y) != Some(OpKind::Select) {
        return None;
    }
    let [c, a, b] = d.operands(y) else {
        return None;
    };
    let neg_inf = |i: usize| splat(i) == Some(f64::NEG_INFINITY);
    // Whether the score is kept where `c` is true.
    let keep_on_true = if neg_inf(*b) && on_chain(a) {
        true
    } else if neg_inf(*a) && on_chain(b) {
        false
    } else {
        return None;
    };
    let scores = d.shape(x);
    let (sq, sk) = match scores {
        [.., q, k] if *q < AFFINE_LIMIT as u64 && *k < AFFINE_LIMIT as u64 => {
            (*q as i64, *k as i64)
        }
        _ => return None,
    };
    // `a·row + b·col + c` of an integer value (memoized: shared subexpressions).
    let mut walk = Affine {
        d,
        scores,
        sq,
        sk,
        memo: Default::default(),
    };
    let mut affine = |i: usize| walk.of(i);
    let mut bounds = Band::default();
    let mut stack = vec![*c];
    while let Some(t) = stack.pop() {
        match d.op(t) {
            // A conjunction, when kept on true.
            Some(OpKind::Select) if keep_on_true => {
                let [p, q, r] = d.operands(t) else {
                    return None;
                };
                if *r != *p && splat(*r) != Some(0.0) {
                    return None;
                }
                stack.extend([*p, *q]);
            }
            Some(op @ (OpKind::Ge | OpKind::Gt | OpKind::Le | OpKind::Lt)) => {
                let [l, r] = d.operands(t) else {
                    return None;
                };
                if !matches!(d.dtype(*l), Some(DType::I32 | DType::I64)) {
                    return None;
                }
                let (la, lb, lc) = affine(*l)?;
                let (ra, rb, rc) = affine(*r)?;
                // e = l - r = sign·(row - col) + g, compared with 0.
                let (ea, eb, g) = (la - ra, lb - rb, lc - rc);
                if ea.abs() != 1 || eb != -ea {
                    return None;
                }
                // Dropped on true: the negated comparison keeps.
                let op = match (keep_on_true, op) {
                    (true, op) => op,
                    (false, OpKind::Ge) => OpKind::Lt,
                    (false, OpKind::Gt) => OpKind::Le,
                    (false, OpKind::Le) => OpKind::Gt,
                    (false, _) => OpKind::Ge,
                };
                // e >= k or e <= k, integers.
                let (at_least, k): (bool, i64) = match op {
                    OpKind::Ge => (true, 0),
                    OpKind::Gt => (true, 1),
                    OpKind::Le => (false, 0),
                    _ => (false, -1),
                };
                // sign·t + g >= k: t >= k - g (sign 1) or t <= g - k (sign -1).
                let lower = at_least == (ea == 1);
                let v = if ea == 1 {
                    k.checked_sub(g)?
                } else {
                    g.checked_sub(k)?
                };
                if lower {
                    bounds.lo = Some(bounds.lo.map_or(v, |l| l.max(v)));
                } else {
                    bounds.hi = Some(bounds.hi.map_or(v, |h| h.min(v)));
                }
            }
            _ => return None,
        }
    }
    let holds_diagonal = bounds.lo.unwrap_or(0) <= 0 && bounds.hi.unwrap_or(0) >= 0;
    // `row - col` is in `[-(sk - 1), sq - 1]`: a bound outside it bounds nothing.
    bounds.lo = bounds.lo.filter(|&l| l > -(sk - 1));
    bounds.hi = bounds.hi.filter(|&h| h < sq - 1);
    (holds_diagonal && (bounds.lo.is_some() || bounds.hi.is_some())).then_some(bounds)
}

/// The largest magnitude of a value in a band's comparisons (`a·row + b·col + c` over the
/// scores' rows and columns): below it no value leaves the 32-bit range, where the
/// comparison's exact arithmetic is the kernel's (and the interpreter's) wrapping one.
const AFFINE_LIMIT: i64 = 1 << 30;

/// The walk of a band's comparisons over the DAG `d` whose scores have shape `scores`
/// (`sq` rows, `sk` columns, both under [`AFFINE_LIMIT`]); `memo` holds the values visited.
struct Affine<'a, D> {
    d: &'a D,
    scores: &'a [u64],
    sq: i64,
    sk: i64,
    memo: std::collections::HashMap<usize, Option<(i64, i64, i64)>>,
}

impl<D: Dag> Affine<'_, D> {
    /// `(a, b, c)` with value `i` equal to `a·row + b·col + c` at every score, `row` and
    /// `col` the last two axes' indices (`iota`s along them, possibly broadcast), every
    /// coefficient and constant under [`AFFINE_LIMIT`] in magnitude, or `None`.
    fn of(&mut self, i: usize) -> Option<(i64, i64, i64)> {
        if let Some(&v) = self.memo.get(&i) {
            return v;
        }
        // Every value over the scores' rows and columns stays under the limit: no 32-bit
        // wrapping where the comparison reads it exactly.
        let (sq, sk) = (self.sq, self.sk);
        let v = self.compute(i).filter(|&(a, b, c)| {
            [a, b, c].iter().all(|x| x.abs() < AFFINE_LIMIT)
                && a.abs() * sq + b.abs() * sk + c.abs() < AFFINE_LIMIT
        });
        self.memo.insert(i, v);
        v
    }

    fn compute(&mut self, i: usize) -> Option<(i64, i64, i64)> {
        let (d, scores) = (self.d, self.scores);
        let rank = scores.len() as i64;
        let mut rec = |j: usize| self.of(j);
        match d.op(i)? {
            OpKind::Broadcast => rec(*d.operands(i).first()?),
            OpKind::Iota => {
                let r = d.shape(i).len() as i64;
                let ax = d.attr(i, "axis").and_then(|a| a.as_int()).unwrap_or(0);
                let from_end = if ax < 0 { ax } else { ax - r };
                let dim = d.shape(i).get(usize::try_from(r + from_end).ok()?)?;
                let want = scores.get(usize::try_from(rank + from_end).ok()?)?;
                match (from_end, dim == want) {
                    (-2, true) => Some((1, 0, 0)),
                    (-1, true) => Some((0, 1, 0)),
                    _ => None,
                }
            }
            OpKind::Constant => {
                let v = d
                    .attr(i, "value")
                    .as_ref()
                    .and_then(crate::policy::splat_of)?;
                (v.fract() == 0.0 && v.abs() < 1e15).then_some((0, 0, v as i64))
            }
            OpKind::Add | OpKind::Sub => {
                let [l, r] = d.operands(i) else {
                    return None;
                };
                let ((a, b, c), (e, f, g)) = (rec(*l)?, rec(*r)?);
                // Each below the limit: the sums cannot overflow.
                Some(if d.op(i)? == OpKind::Add {
                    (a + e, b + f, c + g)
                } else {
                    (a - e, b - f, c - g)
                })
            }
            OpKind::Neg => {
                let (a, b, c) = rec(*d.operands(i).first()?)?;
                Some((-a, -b, -c))
            }
            _ => None,
        }
    }
}
