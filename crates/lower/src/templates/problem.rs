//! What a kernel computes, as the configuration spaces and the tuning cache see it: a
//! [`Problem`] (its template, the sizes its space depends on, and a stable signature).
//!
//! The signature is a short readable summary (`matmul f16 b1 m4096 n4096 k4096`) followed by
//! `#` and a 64-bit FNV-1a hash of the group's canonical text: every load (the buffer's type,
//! buffers numbered by first use), every op (kind, attributes, result type, operands numbered
//! by position) and every store (the kind of buffer), with value and buffer names and source
//! locations left out. Two groups that compute the same thing on the same shapes, dtypes,
//! layouts (views and transposes are ops of the group) and epilogue get the same signature, in
//! any graph and in any run; a changed shape, dtype, view or epilogue op changes it.

use irc_fused::{Buffer, Group, Module, Stmt};
use irc_ir::infer::{matmul_shape, normalize_axis, reduction_axes};
use irc_ir::{Attr, Category, DType, Inst};
use std::collections::HashMap;
use std::fmt::Write;

/// The sizes a template's configuration space depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProblemShape {
    /// `n` output elements.
    Pointwise { n: u64 },
    /// `rows` outputs, each over `k` reduced elements; `innermost_kept` when the innermost
    /// dimension is not reduced (the column schedule's case).
    Reduction {
        rows: u64,
        k: u64,
        innermost_kept: bool,
    },
    /// `rows` rows of `k` elements (softmax, rmsnorm, layernorm); `passes` is 3 for the
    /// composites with two statistics (softmax's max and sum, layernorm's mean and variance),
    /// 2 for rmsnorm's one ([`composite_passes`]).
    Row { rows: u64, k: u64, passes: u64 },
    /// `batch` independent `m x k @ k x n` products.
    Matmul { batch: u64, m: u64, n: u64, k: u64 },
    /// `batch` attentions of `sq` queries over `sk` keys, `Q·Kᵀ` of head dim `d`, values of
    /// head dim `dv`; `causal` when the prologue is a recognized mask band (a causal mask, a
    /// sliding window); `plain` when the prologue is no more than a scale and that band (no
    /// tensor read per score, no other arithmetic).
    Attention {
        batch: u64,
        sq: u64,
        sk: u64,
        d: u64,
        dv: u64,
        causal: bool,
        plain: bool,
    },
    /// An attention group on the decoding template: `units` units of `rows` query rows (the
    /// query heads sharing a K/V head folded in, times the queries) over `keys` kept keys, head
    /// dims `d` and `dv`.
    Decode {
        units: u64,
        rows: u64,
        keys: u64,
        d: u64,
        dv: u64,
    },
}

/// One kernel's problem: what its template's space and the tuning cache are keyed on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The template's name (a row of [`super::TEMPLATES`]).
    pub template: &'static str,
    pub shape: ProblemShape,
    /// The dtype of the anchor's result (of the stored value for a pointwise group).
    pub dtype: DType,
    /// Bytes the group moves (what the cost model charges it).
    pub bytes: u64,
    /// Floating-point operations of the anchor (a multiply-add counts 2).
    pub flops: u64,
    /// Summary and hash of the group's canonical text (module docs).
    pub signature: String,
}

impl Problem {
    /// The key of this problem's per-kernel configuration in
    /// [`crate::LowerOptions::configs`]: `template@vVERSION:signature`, where the version is
    /// the template's configuration-space version (0 for a template without a space).
    pub fn key(&self) -> String {
        let version = super::config::space_of(self.template).map_or(0, |s| s.version());
        format!("{}@v{version}:{}", self.template, self.signature)
    }
}

/// FNV-1a, 64 bits: a hash that is the same on every machine and in every release.
pub fn fnv1a(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The group's canonical text (module docs).
pub fn canonical_text(m: &Module, g: &Group) -> String {
    canonical_text_by(g, |name| m.buffer(name))
}

/// [`canonical_text`] with buffers found by `buffer_of` (an index, on modules of many
/// buffers).
fn canonical_text_by<'a, 'm>(
    g: &'a Group,
    buffer_of: impl Fn(&str) -> Option<&'m Buffer>,
) -> String {
    let mut values: HashMap<&'a str, usize> = HashMap::new();
    let mut buffers: HashMap<&'a str, usize> = HashMap::new();
    let mut out = String::new();
    let mut buffer_id = |b: &'a str| {
        let n = buffers.len();
        *buffers.entry(b).or_insert(n)
    };
    for s in &g.stmts {
        match s {
            Stmt::Load { value, buffer } => {
                let id = buffer_id(buffer);
                let ty = buffer_of(buffer)
                    .map(|b| b.ty.to_string())
                    .unwrap_or_default();
                let n = values.len();
                values.insert(value, n);
                let _ = writeln!(out, "%{n} = load b{id} : {ty}");
            }
            Stmt::Op(o) => {
                let operands: Vec<String> = o
                    .operands
                    .iter()
                    .map(|a| {
                        values
                            .get(a.as_str())
                            .map_or("?".into(), |i| format!("%{i}"))
                    })
                    .collect();
                let attrs: Vec<String> = o.attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let n = values.len();
                values.insert(&o.value, n);
                let _ = writeln!(
                    out,
                    "%{n} = {} {} {{{}}} : {}",
                    o.op.name(),
                    operands.join(", "),
                    attrs.join(", "),
                    o.ty
                );
            }
            Stmt::Store { value, buffer } => {
                let kind = buffer_of(buffer).map_or("?", |b| b.kind.name());
                let v = values
                    .get(value.as_str())
                    .map_or("?".into(), |i| format!("%{i}"));
                let _ = writeln!(out, "store {v} -> {kind}");
            }
        }
    }
    out
}

/// The problem of the group whose anchor (or stored value) is `inst`, for `template`.
pub(crate) fn problem_of<'m>(
    m: &'m Module,
    buffers: &HashMap<&str, &'m Buffer>,
    g: &Group,
    graph: &irc_ir::Graph,
    inst: &Inst,
    template: &'static str,
    attention: Option<&super::AttentionOps<'_>>,
) -> Problem {
    let ty = |v: irc_ir::ValueId| &graph.values[v.index()].ty;
    let result = ty(inst.result);
    let mut flops = 0;
    let shape = match inst.op.category() {
        _ if let Some(ops) = attention => {
            let (s, o) = (&ty(ops.scores.result).shape, &ty(ops.output.result).shape);
            let dim = |sh: &[u64], from_end: usize| sh[sh.len() - from_end];
            let (sq, sk, dv) = (dim(s, 2), dim(s, 1), dim(o, 1));
            let batch = ty(ops.output.result).numel() / (sq * dv).max(1);
            let d = dim(&ty(ops.scores.operands[0]).shape, 1);
            flops = 2 * batch * sq * sk * (d + dv);
            ProblemShape::Attention {
                batch,
                sq,
                sk,
                d,
                dv,
                causal: ops.band.is_some(),
                plain: ops.plain,
            }
        }
        Category::Matmul => {
            let (a, b) = (ty(inst.operands[0]), ty(inst.operands[1]));
            let flag = |n: &str| inst.attrs.get(n).and_then(Attr::as_bool).unwrap_or(false);
            match matmul_shape(&a.shape, &b.shape, flag("transpose_a"), flag("transpose_b")) {
                Ok(s) => {
                    let batch = s.batch.iter().product();
                    flops = 2 * batch * s.m * s.n * s.k;
                    ProblemShape::Matmul {
                        batch,
                        m: s.m,
                        n: s.n,
                        k: s.k,
                    }
                }
                Err(_) => ProblemShape::Pointwise { n: result.numel() },
            }
        }
        Category::Reduction => {
            let x = ty(inst.operands[0]);
            let axes = reduction_axes(x.rank(), &inst.attrs).unwrap_or_default();
            let k = axes.iter().map(|&a| x.shape[a]).product();
            ProblemShape::Reduction {
                rows: result.numel(),
                k,
                innermost_kept: !axes.contains(&x.rank().saturating_sub(1))
                    && x.shape.last().is_some_and(|&d| d > 1),
            }
        }
        Category::Composite => {
            let x = ty(inst.operands[0]);
            let axis = inst.attrs.get("axis").and_then(Attr::as_int).unwrap_or(-1);
            let axis = normalize_axis(axis, x.rank()).unwrap_or(0);
            let k = x.shape.get(axis).copied().unwrap_or(1).max(1);
            ProblemShape::Row {
                rows: x.numel() / k,
                k,
                passes: composite_passes(inst.op),
            }
        }
        _ => ProblemShape::Pointwise { n: result.numel() },
    };
    let summary = match &shape {
        ProblemShape::Pointwise { n } => format!("pointwise {} n{n}", result.dtype),
        ProblemShape::Reduction {
            rows,
            k,
            innermost_kept,
        } => format!(
            "{} {} rows{rows} k{k}{}",
            inst.op.name(),
            result.dtype,
            if *innermost_kept { " cols" } else { "" }
        ),
        ProblemShape::Row { rows, k, .. } => {
            format!("{} {} rows{rows} k{k}", inst.op.name(), result.dtype)
        }
        ProblemShape::Matmul { batch, m, n, k } => {
            format!("matmul {} b{batch} m{m} n{n} k{k}", result.dtype)
        }
        ProblemShape::Attention {
            batch,
            sq,
            sk,
            d,
            dv,
            causal,
            plain,
        } => format!(
            "attention {} b{batch} q{sq} k{sk} d{}{}{}",
            result.dtype,
            if d == dv {
                format!("{dv}")
            } else {
                format!("{d}v{dv}")
            },
            if *causal { " causal" } else { "" },
            if *plain { "" } else { " prologue" }
        ),
        ProblemShape::Decode {
            units,
            rows,
            keys,
            d,
            dv,
        } => format!(
            "attention {} u{units} r{rows} k{keys} d{d}v{dv}",
            result.dtype
        ),
    };
    let ops = g.ops().count();
    Problem {
        template,
        shape,
        dtype: result.dtype,
        bytes: m.group_bytes_by(g, |name| buffers.get(name).copied()),
        flops,
        signature: format!(
            "{summary} ops{ops}#{:016x}",
            fnv1a(&canonical_text_by(g, |name| buffers.get(name).copied()))
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_is_the_reference_function() {
        // The published test vectors of FNV-1a 64.
        assert_eq!(fnv1a(""), 0xcbf29ce484222325);
        assert_eq!(fnv1a("a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a("foobar"), 0x85944171f73967e8);
    }
}

/// The passes over `x` of a row composite computed statistic by statistic: rmsnorm 2 (the sum
/// of squares, then the output), softmax and layernorm 3 (the max or mean first). The streamed
/// schedule reads `x` twice for every composite (it computes two statistics in one pass), but
/// the row heuristic's thresholds were measured with this count (`RowSchedule::choose`).
pub(crate) fn composite_passes(op: irc_ir::OpKind) -> u64 {
    if op == irc_ir::OpKind::Rmsnorm { 2 } else { 3 }
}
