//! The reference on a sample of rows: running a large graph's reference affordably.
//!
//! Many graphs treat some axis of their results independently: a row of a matmul's result
//! needs one row of its left operand (and all of the right one), a softmax over the last axis
//! needs the same rows of its input, an elementwise op the same elements. [`plan`] finds, for
//! each result, such an axis (the same extent for all results), walking the graph backwards and
//! giving every value one requirement: all of it ([`Need::Full`]) or only the sampled indices
//! along one axis ([`Need::Axis`]). [`RowPlan::slice_graph`] then rewrites the graph to compute
//! only `k` indices along those axes, and [`gather`] picks the same indices out of the inputs
//! and of a full-size result, so the interpreter's output on the small graph equals those rows of
//! the big one exactly.
//!
//! An op the analysis does not understand, or a value needed both whole and sliced, makes a
//! plan impossible: the caller then runs the whole graph.

use crate::tensor::map_data;
use crate::{Data, Tensor};
use irc_ir::infer::{normalize_axis, reduction_axes};
use irc_ir::{Attr, Category, Graph, OpKind, ValueDef};

/// What part of a value the sampled results need.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Need {
    /// Nothing reads it (yet).
    None,
    /// Every element.
    Full,
    /// Only the sampled indices along this axis.
    Axis(usize),
}

/// A way to slice a graph: one [`Need`] per value.
#[derive(Clone, Debug, PartialEq)]
pub struct RowPlan {
    /// Indexed like [`Graph::values`].
    pub needs: Vec<Need>,
    /// The sliced axis of each result.
    pub result_axes: Vec<usize>,
    /// The extent of the sliced axis (the same for every sliced value).
    pub extent: u64,
    /// Elements computed (and matmul multiply-adds) by the sliced graph per sampled index,
    /// plus the unsliced work: what [`plan`] minimizes.
    pub cost_full: f64,
    pub cost_per_row: f64,
}

fn merge(needs: &mut [Need], v: usize, n: Need) -> Option<()> {
    match (needs[v], n) {
        (Need::None, _) => needs[v] = n,
        (a, b) if a == b => {}
        _ => return None,
    }
    Some(())
}

/// The operand needs of one statement whose result is needed along `r` (result rank `rank`).
fn operand_needs(g: &Graph, inst: &irc_ir::Inst, r: usize) -> Option<Vec<Need>> {
    let out = &g.ty(inst.result).shape;
    let rank = out.len();
    // Numpy-style right alignment of an operand against the result.
    let aligned = |shape: &[u64], lead: usize, r: usize| -> Need {
        let off = lead - shape.len().min(lead);
        if r < off {
            return Need::Full;
        }
        let ax = r - off;
        if shape[ax] == 1 && out[r] != 1 {
            Need::Full
        } else {
            Need::Axis(ax)
        }
    };
    let shape_of = |i: usize| g.ty(inst.operands[i]).shape.as_slice();
    let int_attr = |name: &str, default: i64| {
        inst.attrs
            .get(name)
            .and_then(Attr::as_int)
            .unwrap_or(default)
    };
    let bool_attr = |name: &str| {
        inst.attrs
            .get(name)
            .and_then(Attr::as_bool)
            .unwrap_or(false)
    };
    Some(match inst.op.category() {
        Category::Unary | Category::Cast => vec![Need::Axis(r)],
        Category::Binary => (0..2).map(|i| aligned(shape_of(i), rank, r)).collect(),
        Category::Constant => vec![],
        Category::View => match inst.op {
            OpKind::Transpose => {
                let perm = inst.attrs.get("perm")?.as_ints()?;
                vec![Need::Axis(usize::try_from(*perm.get(r)?).ok()?)]
            }
            OpKind::Broadcast => vec![aligned(shape_of(0), rank, r)],
            OpKind::Reshape => {
                let s = shape_of(0);
                if s.len() > r && s[..=r] == out[..=r] {
                    vec![Need::Axis(r)]
                } else {
                    return None;
                }
            }
            _ => return None,
        },
        Category::Reduction => {
            let x = shape_of(0);
            let axes = reduction_axes(x.len(), &inst.attrs).ok()?;
            if bool_attr("keepdims") {
                if axes.contains(&r) {
                    return None;
                }
                vec![Need::Axis(r)]
            } else {
                let kept: Vec<usize> = (0..x.len()).filter(|a| !axes.contains(a)).collect();
                vec![Need::Axis(*kept.get(r)?)]
            }
        }
        Category::Composite => {
            let axis = normalize_axis(int_attr("axis", -1), rank)?;
            if axis == r {
                return None;
            }
            // Weights and biases are shaped like the normalized axis: read whole.
            let mut v = vec![Need::Axis(r)];
            v.resize(inst.operands.len(), Need::Full);
            v
        }
        Category::Compare | Category::Select => (0..inst.operands.len())
            .map(|i| aligned(shape_of(i), rank, r))
            .collect(),
        // Not analysed yet: a graph with these runs whole.
        Category::Iota | Category::Slice | Category::Concat | Category::Gather => return None,
        Category::Matmul => {
            let (a, b) = (shape_of(0), shape_of(1));
            if a.len() < 2 || b.len() < 2 || rank < 2 {
                return None;
            }
            let (ta, tb) = (bool_attr("transpose_a"), bool_attr("transpose_b"));
            if r == rank - 2 {
                vec![
                    Need::Axis(if ta { a.len() - 1 } else { a.len() - 2 }),
                    Need::Full,
                ]
            } else if r == rank - 1 {
                vec![
                    Need::Full,
                    Need::Axis(if tb { b.len() - 2 } else { b.len() - 1 }),
                ]
            } else {
                let batch = rank - 2;
                let one = |s: &[u64]| {
                    let sb = &s[..s.len() - 2];
                    let off = batch - sb.len().min(batch);
                    if r < off || (sb[r - off] == 1 && out[r] != 1) {
                        Need::Full
                    } else {
                        Need::Axis(r - off)
                    }
                };
                vec![one(a), one(b)]
            }
        }
    })
}

/// The needs of every value when result `i` is needed along `axes[i]`, or `None` when the graph
/// cannot be sliced so.
fn needs_for(g: &Graph, axes: &[usize]) -> Option<Vec<Need>> {
    let mut needs = vec![Need::None; g.values.len()];
    for (&res, &a) in g.results.iter().zip(axes) {
        merge(&mut needs, res.index(), Need::Axis(a))?;
    }
    for inst in g.insts.iter().rev() {
        let ops: Vec<Need> = match needs[inst.result.index()] {
            // Dead or whole: every operand whole.
            Need::None | Need::Full => vec![Need::Full; inst.operands.len()],
            Need::Axis(r) => operand_needs(g, inst, r)?,
        };
        if let Need::Axis(_) = needs[inst.result.index()] {
            if inst.op == OpKind::Constant
                && matches!(inst.attrs.get("value"), Some(Attr::Array(_)))
            {
                return None;
            }
        }
        for (&o, n) in inst.operands.iter().zip(ops) {
            merge(&mut needs, o.index(), n)?;
        }
    }
    Some(needs)
}

/// The cheapest way to slice `g`: each result sliced along an axis of one common extent (>1).
/// `None` when no such way exists.
pub fn plan(g: &Graph) -> Option<RowPlan> {
    let first = g.results.first()?;
    let mut best: Option<RowPlan> = None;
    for (a0, &extent) in g.ty(*first).shape.iter().enumerate() {
        if extent <= 1 {
            continue;
        }
        // Every combination of same-extent axes for the other results (few: ranks are small).
        let mut combos: Vec<Vec<usize>> = vec![vec![a0]];
        for &res in &g.results[1..] {
            let choices: Vec<usize> = g
                .ty(res)
                .shape
                .iter()
                .enumerate()
                .filter(|&(_, &d)| d == extent)
                .map(|(a, _)| a)
                .collect();
            combos = combos
                .into_iter()
                .flat_map(|c| choices.iter().map(move |&a| [c.clone(), vec![a]].concat()))
                .take(256)
                .collect();
        }
        for axes in combos {
            let Some(needs) = needs_for(g, &axes) else {
                continue;
            };
            let (full, per_row) = cost(g, &needs, extent);
            let better = best
                .as_ref()
                .is_none_or(|b| full + per_row < b.cost_full + b.cost_per_row);
            if better {
                best = Some(RowPlan {
                    needs,
                    result_axes: axes,
                    extent,
                    cost_full: full,
                    cost_per_row: per_row,
                });
            }
        }
    }
    best
}

/// (unsliced work, work per sampled index): elements produced, plus multiply-adds for matmul.
fn cost(g: &Graph, needs: &[Need], extent: u64) -> (f64, f64) {
    let (mut full, mut per_row) = (0.0, 0.0);
    for inst in &g.insts {
        let out = g.ty(inst.result);
        let mut work = out.numel() as f64;
        if inst.op == OpKind::Matmul {
            let a = &g.ty(inst.operands[0]).shape;
            let ta = inst
                .attrs
                .get("transpose_a")
                .and_then(Attr::as_bool)
                .unwrap_or(false);
            let k = if ta {
                a[a.len().saturating_sub(2)]
            } else {
                a[a.len() - 1]
            };
            work *= k as f64;
        }
        match needs[inst.result.index()] {
            Need::Axis(_) => per_row += work / extent as f64,
            _ => full += work,
        }
    }
    (full, per_row)
}

impl RowPlan {
    /// The graph computing only `k` indices along the planned axes (values' types, `reshape`
    /// and `broadcast` shapes rewritten); it verifies.
    pub fn slice_graph(&self, g: &Graph, k: u64) -> Result<Graph, String> {
        let mut s = g.clone();
        for (v, n) in self.needs.iter().enumerate() {
            if let Need::Axis(a) = *n {
                s.values[v].ty.shape[a] = k;
            }
        }
        for inst in &mut s.insts {
            if let Need::Axis(a) = self.needs[inst.result.index()] {
                if matches!(inst.op, OpKind::Reshape | OpKind::Broadcast) {
                    if let Some(mut shape) = inst.attrs.get("shape").and_then(Attr::as_ints) {
                        if shape.get(a).is_some_and(|&d| d != -1) {
                            shape[a] = k as i64;
                        }
                        inst.attrs.insert("shape", irc_ir::ints(&shape));
                    }
                }
            }
        }
        for (i, &res) in s.results.iter().enumerate() {
            s.result_types[i] = s.values[res.index()].ty.clone();
        }
        irc_ir::verify_graph(&s).map_err(|d| {
            format!(
                "the sliced graph does not verify: {}",
                d.first().map(|d| d.message.clone()).unwrap_or_default()
            )
        })?;
        Ok(s)
    }

    /// The axis along which parameter `i` is gathered, if any.
    pub fn param_axis(&self, g: &Graph, i: usize) -> Option<usize> {
        let p = *g.params.get(i)?;
        debug_assert!(matches!(g.value(p).def, ValueDef::Param(_)));
        match self.needs[p.index()] {
            Need::Axis(a) => Some(a),
            _ => None,
        }
    }
}

/// `k` distinct indices of `0..extent`, sorted, drawn from `seed` (all of them when
/// `k >= extent`). Always includes the first and last index when k ≥ 2: edges are where
/// tiling bugs live.
pub fn sample_rows(extent: u64, k: u64, seed: u64) -> Vec<u64> {
    if k >= extent {
        return (0..extent).collect();
    }
    let mut picked = std::collections::BTreeSet::new();
    if k >= 2 {
        picked.insert(0);
        picked.insert(extent - 1);
    }
    let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
    while (picked.len() as u64) < k {
        // splitmix64
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        picked.insert(z % extent);
    }
    picked.into_iter().collect()
}

/// The indices `rows` of `t` along `axis`.
pub fn gather(t: &Tensor, axis: usize, rows: &[u64]) -> Result<Tensor, crate::InterpError> {
    let shape = &t.ty.shape;
    if axis >= shape.len() || rows.iter().any(|&r| r >= shape[axis]) {
        return Err(crate::InterpError::BadInput(format!(
            "cannot gather rows {rows:?} along axis {axis} of {}",
            t.ty
        )));
    }
    let outer: usize = shape[..axis].iter().product::<u64>() as usize;
    let inner: usize = shape[axis + 1..].iter().product::<u64>() as usize;
    let extent = shape[axis] as usize;
    let data: Data = map_data!(&t.data, v => pick(v, outer, extent, inner, rows));
    let mut ty = t.ty.clone();
    ty.shape[axis] = rows.len() as u64;
    Tensor::new(ty, data)
}

fn pick<T: Copy>(v: &[T], outer: usize, extent: usize, inner: usize, rows: &[u64]) -> Vec<T> {
    let mut out = Vec::with_capacity(outer * rows.len() * inner);
    for o in 0..outer {
        for &r in rows {
            let start = (o * extent + r as usize) * inner;
            out.extend_from_slice(&v[start..start + inner]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_graph;
    use irc_ir::{DType, GraphBuilder, TensorType};

    fn attention_like() -> Graph {
        let mut b = GraphBuilder::new("att");
        let t = |s: &[u64]| TensorType::new(s.to_vec(), DType::F32);
        let q = b.param("q", t(&[2, 8, 4]));
        let k = b.param("k", t(&[2, 8, 4]));
        let w = b.param("w", t(&[4]));
        let kt = b.transpose(k, &[0, 2, 1]).unwrap();
        let s = b.matmul(q, kt).unwrap();
        let mut attrs = irc_ir::Attrs::new();
        attrs.insert("axis", Attr::Int(-1));
        let p = b.op(OpKind::Softmax, &[s], attrs).unwrap();
        let o = b.matmul(p, k).unwrap();
        let o = b.binary(OpKind::Mul, o, w).unwrap();
        b.finish(&[o]).unwrap()
    }

    #[test]
    fn slices_attention_along_query_rows() {
        let g = attention_like();
        let plan = plan(&g).expect("sliceable");
        // Query rows (axis 1, extent 8) are cheapest: k and w stay whole.
        assert_eq!((plan.result_axes.clone(), plan.extent), (vec![1], 8));
        assert_eq!(plan.param_axis(&g, 0), Some(1));
        assert_eq!(plan.param_axis(&g, 1), None);
        let rows = sample_rows(8, 3, 7);
        assert_eq!(rows.len(), 3);
        let small = plan.slice_graph(&g, 3).unwrap();
        let inputs: Vec<Tensor> = (0..3)
            .map(|i| crate::random_tensor(g.ty(g.params[i]), 1, i as u64))
            .collect();
        let full = run_graph(&g, inputs.clone()).unwrap();
        let sliced_inputs: Vec<Tensor> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| match plan.param_axis(&g, i) {
                Some(a) => gather(t, a, &rows).unwrap(),
                None => t.clone(),
            })
            .collect();
        let got = run_graph(&small, sliced_inputs).unwrap();
        assert_eq!(got[0], gather(&full[0], 1, &rows).unwrap());
    }

    #[test]
    fn reduction_over_the_only_long_axis_is_not_sliceable_there() {
        let mut b = GraphBuilder::new("r");
        let x = b.param("x", TensorType::new([1, 64], DType::F32));
        let mut attrs = irc_ir::Attrs::new();
        attrs.insert("axis", Attr::Int(-1));
        let s = b.op(OpKind::Softmax, &[x], attrs).unwrap();
        let g = b.finish(&[s]).unwrap();
        assert_eq!(plan(&g), None);
    }

    #[test]
    fn sample_rows_are_distinct_sorted_and_keep_edges() {
        let r = sample_rows(1000, 10, 3);
        assert_eq!(r.len(), 10);
        assert!(r.windows(2).all(|w| w[0] < w[1]));
        assert_eq!((r[0], r[9]), (0, 999));
        assert_eq!(sample_rows(4, 10, 3), vec![0, 1, 2, 3]);
    }
}
