//! The core of the layout algebra: coalesce, filter, composition, complement, the inverses and
//! the kernel, ported from C++ CuTe's `layout.hpp` (every integer read as a static one).
//!
//! Each function states its post-condition in its doc, as CuTe's `layout.hpp` does; the property
//! tests in `crates/layout/tests/layout_props.rs` check them over the whole domain, and
//! `tests/cute_cases.rs` checks the printed results against the C++ CuTe on CuTe's own cases.

use super::core::{Layout, compact_strides};
use super::error::{LayoutError, Result, ceil_div, mul};
use super::int_tuple::{IntTuple, add_coords, leaf_mul, scale};

/// One `(shape, stride)` leaf; the stride is an integer or a basis element.
type Leaf = (i64, IntTuple);

/// Merge adjacent leaves from the back, as CuTe's `bw_coalesce`: a size-1 leaf is skipped, a
/// size-1 front is replaced, `s0:d0` before `s1:s0*d0` merge into `s0*s1:d0`.
/// With `keep_outside` (CuTe's `coalesce_x`) a trailing size-1 leaf is read as size 2, so the
/// function is kept outside the domain too.
fn bw_coalesce(leaves: Vec<Leaf>, keep_outside: bool) -> Result<Layout> {
    let Some(((last_s, last_d), init)) = leaves.split_last() else {
        return Ok(Layout::unit());
    };
    let first = if keep_outside && *last_s == 1 {
        2
    } else {
        *last_s
    };
    // `new` is kept back to front: its last element is the front of the result.
    let (mut new, mut single) = (vec![(first, last_d.clone())], true);
    for (s, d) in init.iter().rev() {
        let front = new.len() - 1;
        if *s == 1 {
            continue;
        } else if single && new[front].0 == 1 {
            new[front] = (*s, d.clone());
        } else if scale("coalesce", d, *s)? == new[front].1 {
            new[front] = (mul("coalesce", *s, new[front].0)?, d.clone());
        } else {
            new.push((*s, d.clone()));
            single = false;
        }
    }
    if single && new[0].0 == 1 {
        return Ok(Layout::unit());
    }
    new.reverse();
    Layout::from_leaves(new)
}

/// Flatten and merge as many modes as possible while keeping the function.
///
/// @post `size(result) == size(layout)`
/// @post `depth(result) <= 1`
/// @post `result(i) == layout(i)` for all `0 <= i < size(layout)`
/// @post no mode of `result` has size 1 unless `result` is `1:0`.
pub fn coalesce(layout: &Layout) -> Result<Layout> {
    bw_coalesce(layout.stride_leaves(), false)
}

/// [`coalesce`] that also keeps the function outside the domain (CuTe's `coalesce_x`, which
/// composition applies to its left operand): `(4,1):(1,0)` stays `(4,2):(1,0)`, not `4:1`.
///
/// @post `depth(result) <= 1` and `result(i) == layout(i)` for all `i >= 0`.
pub fn coalesce_x(layout: &Layout) -> Result<Layout> {
    bw_coalesce(layout.stride_leaves(), true)
}

/// Coalesce by mode following `profile`: a tuple profile recurses into the matching modes (modes
/// past its rank are kept as they are), an integer profile coalesces the whole (sub)layout.
///
/// @post `result(i) == layout(i)` and `rank(result) == rank(layout)` when `profile` is a tuple.
pub fn coalesce_profile(layout: &Layout, profile: &IntTuple) -> Result<Layout> {
    by_profile(layout, profile, "coalesce", &coalesce_profile, &coalesce)
}

fn coalesce_x_profile(layout: &Layout, profile: &IntTuple) -> Result<Layout> {
    by_profile(
        layout,
        profile,
        "composition",
        &coalesce_x_profile,
        &coalesce_x,
    )
}

/// Remove stride-0 and size-1 modes, then coalesce: the layout of the distinct images.
///
/// @post `depth(result) <= 1`, no mode of `result` has stride 0 unless `result` is `1:0`
/// @post the image set of `result` equals the image set of `layout`.
pub fn filter(layout: &Layout) -> Result<Layout> {
    let leaves = layout.stride_leaves().into_iter();
    bw_coalesce(
        leaves
            .map(|(s, d)| (if d.is_int(0) { 1 } else { s }, d))
            .collect(),
        false,
    )
}

/// Filter by mode following `profile` (see [`coalesce_profile`]).
pub fn filter_profile(layout: &Layout, profile: &IntTuple) -> Result<Layout> {
    by_profile(layout, profile, "filter", &filter_profile, &filter)
}

/// Apply `each` to the modes named by a tuple `profile` (keeping the rest) or `whole` to all of it.
fn by_profile(
    layout: &Layout,
    profile: &IntTuple,
    op: &'static str,
    each: &dyn Fn(&Layout, &IntTuple) -> Result<Layout>,
    whole: &dyn Fn(&Layout) -> Result<Layout>,
) -> Result<Layout> {
    let IntTuple::Tuple(ps) = profile else {
        return whole(layout);
    };
    check_rank(op, layout, ps.len())?;
    let mut modes = layout.modes();
    for (m, p) in modes.iter_mut().zip(ps) {
        *m = each(m, p)?;
    }
    Layout::concat(&modes)
}

/// Errors unless `layout` has at least `n` modes (a by-mode argument must not be longer).
pub(crate) fn check_rank(op: &'static str, layout: &Layout, n: usize) -> Result<()> {
    if layout.rank() >= n {
        Ok(())
    } else {
        Err(LayoutError::incongruent(
            op,
            format!(
                "{n} modes given for the rank-{} layout {layout}",
                layout.rank()
            ),
        ))
    }
}

/// Functional composition `lhs o rhs`.
///
/// @post `result(i) == lhs(rhs(i))` for all `0 <= i < size(rhs)`
/// @post `result` has the mode structure of `rhs` (each integer mode of `rhs` may become a tuple)
///
/// Divisibility: along `coalesce_x(lhs)`, each stride of `rhs` and each mode size must divide one
/// another ("stride divisibility") and each piece of `rhs`'s shape must divide what is left of it
/// ("shape divisibility"); otherwise the result is not a layout and the error names the numbers.
/// A basis stride `v@i` in `rhs` selects mode `i` of `lhs` (CuTe's coordinate composition).
pub fn composition(lhs: &Layout, rhs: &Layout) -> Result<Layout> {
    let flat = match coprofile(rhs)? {
        IntTuple::Int(_) => coalesce_x(lhs)?,
        profile => coalesce_x_profile(lhs, &profile)?,
    };
    compose_impl(flat.shape(), flat.stride(), rhs.shape(), rhs.stride())
}

/// The codomain profile of `layout`: `0` for integer strides, else the arithmetic tuple of the
/// strides' sum with every leaf 0 (CuTe's `coprofile`).
fn coprofile(layout: &Layout) -> Result<IntTuple> {
    let sum = layout
        .stride()
        .leaves()
        .iter()
        .try_fold(IntTuple::Int(0), |acc, d| {
            add_coords(&acc, &d.try_map(&mut |_| Ok(1))?)
        })?;
    sum.try_map(&mut |_| Ok(0))
}

/// `lhs o (rshape:rstride)` with `lhs` already coalesced (CuTe's `composition_impl`).
fn compose_impl(
    lshape: &IntTuple,
    lstride: &IntTuple,
    rshape: &IntTuple,
    rstride: &IntTuple,
) -> Result<Layout> {
    match (rshape, rstride) {
        (IntTuple::Tuple(ss), IntTuple::Tuple(ds)) => Layout::concat(
            &ss.iter()
                .zip(ds)
                .map(|(s, d)| compose_impl(lshape, lstride, s, d))
                .collect::<Result<Vec<_>>>()?,
        ),
        (_, IntTuple::Basis(v, path)) => {
            let (ls, ld) = (basis_get(lshape, path)?, basis_get(lstride, path)?);
            compose_impl(ls, ld, rshape, &IntTuple::Int(*v))
        }
        (_, d) if d.is_int(0) => Layout::new(rshape.clone(), d.clone()),
        (IntTuple::Int(_), _) if !lshape.is_tuple() => {
            Layout::new(rshape.clone(), leaf_mul("composition", rstride, lstride)?)
        }
        (IntTuple::Int(s), IntTuple::Int(d)) => compose_mode(lshape, lstride, *s, *d),
        _ => Err(LayoutError::incongruent(
            "composition",
            format!("shape {rshape} and stride {rstride} of the right operand"),
        )),
    }
}

/// The sub-tuple of `t` at the modes `path` (CuTe's `basis_get`).
fn basis_get<'a>(t: &'a IntTuple, path: &[usize]) -> Result<&'a IntTuple> {
    path.iter().try_fold(t, |t, &i| {
        t.mode(i).ok_or_else(|| {
            LayoutError::domain(
                "composition",
                format!("the basis element selects mode {i} of {t}, which has no such mode"),
            )
        })
    })
}

/// `lhs o (shape:stride)` for a flat tuple `lhs` and an integer mode (the fold of
/// CuTe's `composition_impl`).
fn compose_mode(lshape: &IntTuple, lstride: &IntTuple, shape: i64, stride: i64) -> Result<Layout> {
    let (ls, ld) = (lshape.modes(), lstride.modes());
    let (mut out, mut rest_s, mut rest_d) = (Vec::<Leaf>::new(), shape, stride);
    for (cs, cd) in ls.iter().zip(ld).take(ls.len() - 1) {
        let cs = cs.as_int().ok_or_else(|| {
            LayoutError::incongruent("composition", format!("nested left operand {lshape}"))
        })?;
        if rest_d % cs != 0 && rest_d >= cs {
            return Err(LayoutError::divisibility(
                "composition",
                format!(
                    "stride divisibility: stride {rest_d} and mode size {cs} of {lshape}:{lstride} do not divide one another"
                ),
            ));
        }
        let next_s = ceil_div(cs, rest_d.abs());
        let next_d = ceil_div(rest_d.abs(), cs) * rest_d.signum();
        if next_s != 1 && rest_s != 1 {
            let new_s = next_s.min(rest_s);
            if rest_s % new_s != 0 {
                return Err(LayoutError::divisibility(
                    "composition",
                    format!(
                        "shape divisibility: {new_s} of mode size {cs} in {lshape}:{lstride} does not divide the remaining shape {rest_s}"
                    ),
                ));
            }
            out.push((new_s, leaf_mul("composition", &IntTuple::Int(rest_d), cd)?));
            rest_s /= new_s;
        }
        rest_d = next_d;
    }
    let last_d = ld.last().unwrap_or(&IntTuple::Int(0));
    let rest = (
        rest_s,
        leaf_mul("composition", &IntTuple::Int(rest_d), last_d)?,
    );
    if out.is_empty() {
        return Layout::new(IntTuple::Int(rest.0), rest.1);
    }
    if rest_s != 1 {
        out.push(rest);
    }
    Layout::from_leaves(out)
}

/// The layout of the positions `layout` does not reach, up to `cotarget` (CuTe's
/// `complement(layout, cotarget)` with an integer cotarget).
///
/// @post disjoint images: `result(i) != layout(j)` for all `0 < i < size(result)` and all `j`
/// @post ordered: `result(i-1) < result(i)` for all `0 < i < size(result)`
/// @post `size(result) >= cotarget / size(filter(layout))` when `layout`'s modes tile (each
///       sorted stride a multiple of the extent of the smaller ones).
///
/// As in C++ CuTe, modes that do not tile are accepted and give a smaller result (the size
/// post-condition then fails: `complement((4,2):(1,6))` is `1:0`); only a non-injective layout
/// (a zero quotient of sorted strides) is an error.
pub fn complement(layout: &Layout, cotarget: i64) -> Result<Layout> {
    complement_shape(layout, &IntTuple::Int(cotarget))
}

/// [`complement`] with a shape as cotarget (as `logical_divide` passes `shape(coalesce(A))`):
/// the rest mode's size is `ceil_div(cotarget, extent)` folded over the cotarget's modes.
pub fn complement_shape(layout: &Layout, cotarget: &IntTuple) -> Result<Layout> {
    let f = filter(layout)?;
    if f.stride().is_int(0) {
        return Layout::compact(IntTuple::Int(
            ceil_div_tuple(cotarget, &IntTuple::Int(1))?.product()?,
        ));
    }
    let (mut shape, mut stride) = int_leaves("complement", &f)?;
    let (mut out_s, mut out_d) = (Vec::new(), vec![1i64]);
    while !shape.is_empty() {
        let (k, &min_d) = stride
            .iter()
            .enumerate()
            .min_by_key(|&(i, d)| (*d, i))
            .unwrap_or((0, &1));
        let new_s = min_d / out_d[out_d.len() - 1];
        if new_s == 0 {
            return Err(LayoutError::divisibility(
                "complement",
                format!(
                    "non-injective layout {layout}: stride {min_d} repeats within the extent {}",
                    out_d[out_d.len() - 1]
                ),
            ));
        }
        out_s.push(new_s);
        out_d.push(mul("complement", min_d, shape[k])?);
        shape.remove(k);
        stride.remove(k);
    }
    let extent = out_d.pop().unwrap_or(1);
    let rest = ceil_div_tuple(cotarget, &IntTuple::Int(extent))?.product()?;
    let mut leaves: Vec<Leaf> = out_s
        .into_iter()
        .zip(out_d)
        .map(|(s, d)| (s, IntTuple::Int(d)))
        .collect();
    leaves.push((rest, IntTuple::Int(if rest == 1 { 0 } else { extent })));
    coalesce(&Layout::from_leaves(leaves)?)
}

/// [`complement`] with cotarget `cosize(filter(layout))`, CuTe's one-argument form.
pub fn complement_default(layout: &Layout) -> Result<Layout> {
    complement(layout, filter(layout)?.cosize()?)
}

/// The leaves of `layout` as integer shapes and strides, or an error naming `op`.
fn int_leaves(op: &'static str, layout: &Layout) -> Result<(Vec<i64>, Vec<i64>)> {
    layout
        .stride_leaves()
        .into_iter()
        .map(|(s, d)| match d {
            IntTuple::Int(d) => Ok((s, d)),
            _ => Err(LayoutError::domain(
                op,
                format!("{layout} has basis strides; {op} needs integer strides"),
            )),
        })
        .collect::<Result<Vec<_>>>()
        .map(|v| v.into_iter().unzip())
}

/// Coalesced shape, strides, exclusive prefix products of the shape, and indices sorted by stride.
type SortedModes = (Vec<i64>, Vec<i64>, Vec<i64>, Vec<usize>);

/// The common start of the inverses ([`SortedModes`]). The sort is CuTe's exchange sort (ties
/// keep its order).
fn sorted_modes(op: &'static str, layout: &Layout) -> Result<SortedModes> {
    let (shape, stride) = int_leaves(op, &coalesce(layout)?)?;
    let mut pre = vec![1i64];
    for &s in &shape[..shape.len().saturating_sub(1)] {
        pre.push(mul(op, pre[pre.len() - 1], s)?);
    }
    let mut order: Vec<usize> = (0..stride.len()).collect();
    for i in 0..order.len() {
        for j in i + 1..order.len() {
            if stride[order[j]] < stride[order[i]] {
                order.swap(i, j);
            }
        }
    }
    Ok((shape, stride, pre, order))
}

/// The right inverse: the largest `result` with `layout(result(i)) == i`.
///
/// @post `layout(result(i)) == i` for all `0 <= i < size(result)`
/// @post `result` is coalesced.
///
/// The contiguous run of strides `1, s0, s0*s1, ...` is followed through the modes sorted by
/// stride; stride-0 modes and the modes past a gap are skipped, as in C++ CuTe (pycute stops at a
/// stride-0 mode).
pub fn right_inverse(layout: &Layout) -> Result<Layout> {
    let (shape, stride, pre, order) = sorted_modes("right_inverse", layout)?;
    let (mut leaves, mut curr): (Vec<Leaf>, i64) = (vec![(1, IntTuple::Int(0))], 1);
    for i in order {
        if stride[i] == curr {
            leaves.push((shape[i], IntTuple::Int(pre[i])));
            curr = mul("right_inverse", shape[i], stride[i])?;
        }
    }
    coalesce(&Layout::from_leaves(leaves)?)
}

/// The left inverse (CuTe's quasi-inverse): `result(layout(i)) == i` for every `i` when `layout`
/// is injective, and `layout(result(layout(i))) == layout(i)` always.
///
/// @post `layout(result(layout(i))) == layout(i)` for all `0 <= i < size(layout)`
///
/// Each nonzero stride (sorted) must be a multiple of the size covered so far ("left inverse
/// divisibility"); the gaps become stride-0 modes: `left_inverse(4:2) == (2,4):(0,1)`.
pub fn left_inverse(layout: &Layout) -> Result<Layout> {
    let (shape, stride, pre, order) = sorted_modes("left_inverse", layout)?;
    let (mut out_s, mut out_d, mut size) = (Vec::new(), vec![0i64], 1i64);
    for &i in &order {
        if stride[i] == 0 {
            continue;
        }
        if stride[i] % size != 0 {
            return Err(LayoutError::divisibility(
                "left_inverse",
                format!(
                    "stride {} of {layout} is not a multiple of {size}, the size covered by the smaller strides",
                    stride[i]
                ),
            ));
        }
        out_s.push(stride[i] / size);
        out_d.push(pre[i]);
        size = mul("left_inverse", size, stride[i] / size)?;
    }
    out_s.push(order.last().map_or(1, |&i| shape[i]));
    let leaves = out_s
        .into_iter()
        .zip(out_d)
        .map(|(s, d)| (s, IntTuple::Int(d)));
    coalesce(&Layout::from_leaves(leaves.collect())?)
}

/// The kernel: the layout of the coordinates `layout` maps to 0, over its stride-0 leaves.
///
/// @post `layout(result(i)) == 0` for all `0 <= i < size(result)`
/// @post `size(result) == size(layout) / size(filter(layout))` (for injective non-zero part)
pub fn nullspace(layout: &Layout) -> Result<Layout> {
    let flat = layout.flatten();
    let pre = compact_strides(flat.shape(), 1)?;
    let leaves: Vec<Leaf> = flat
        .stride_leaves()
        .into_iter()
        .zip(pre.leaves())
        .filter(|((_, d), _)| d.is_int(0))
        .map(|((s, _), p)| (s, p))
        .collect();
    Layout::from_leaves(leaves)
}

/// CuTe's `ceil_div` on integer tuples: element-wise for two tuples (missing modes of `b` are 1),
/// folded over the modes of `a` for a tuple and an integer
/// (`ceil_div((4,6),8) == (1,3)`), by the product of `b` for an integer and a tuple.
///
/// @post `result` is congruent to `a`.
pub fn ceil_div_tuple(a: &IntTuple, b: &IntTuple) -> Result<IntTuple> {
    div_tuple(a, b, "ceil_div", &|x, y| Ok(ceil_div(x, y)))
}

/// CuTe's `shape_div`: as [`ceil_div_tuple`], with the divisibility condition
/// (`a % b == 0 || b % a == 0`) on each integer pair.
///
/// @post `shape_div((4,5,6), 40) == (1,1,3)`.
pub fn shape_div(a: &IntTuple, b: &IntTuple) -> Result<IntTuple> {
    div_tuple(a, b, "shape_div", &|x, y| {
        if x % y == 0 || y % x == 0 {
            Ok(ceil_div(x, y))
        } else {
            Err(LayoutError::divisibility(
                "shape_div",
                format!("{x} and {y} do not divide one another"),
            ))
        }
    })
}

fn div_tuple(
    a: &IntTuple,
    b: &IntTuple,
    op: &'static str,
    div: &dyn Fn(i64, i64) -> Result<i64>,
) -> Result<IntTuple> {
    let positive = |v: i64| {
        if v > 0 {
            Ok(v)
        } else {
            Err(LayoutError::domain(op, format!("division by {v}")))
        }
    };
    match (a, b) {
        (IntTuple::Tuple(x), IntTuple::Tuple(y)) => {
            if y.len() > x.len() {
                return Err(LayoutError::incongruent(
                    op,
                    format!("{b} has more modes than {a}"),
                ));
            }
            let one = IntTuple::Int(1);
            x.iter()
                .enumerate()
                .map(|(i, xi)| div_tuple(xi, y.get(i).unwrap_or(&one), op, div))
                .collect::<Result<Vec<_>>>()
                .map(IntTuple::Tuple)
        }
        (IntTuple::Tuple(x), IntTuple::Int(y)) => {
            let mut rest = IntTuple::Int(*y);
            let mut out = Vec::new();
            for xi in x {
                out.push(div_tuple(xi, &rest, op, div)?);
                rest = div_tuple(&rest, xi, op, div)?;
            }
            Ok(IntTuple::Tuple(out))
        }
        (IntTuple::Int(x), IntTuple::Tuple(_)) => {
            div_tuple(&IntTuple::Int(*x), &IntTuple::Int(b.product()?), op, div)
        }
        (IntTuple::Int(x), IntTuple::Int(y)) => Ok(IntTuple::Int(div(*x, positive(*y)?)?)),
        _ => Err(LayoutError::domain(
            op,
            format!("{a} / {b} on basis elements"),
        )),
    }
}

/// `logical_divide(A, B)` for a layout tiler (kept here so `recast` can use it without `tiling`).
pub(crate) fn logical_divide_layout(a: &Layout, b: &Layout) -> Result<Layout> {
    let rest = complement_shape(b, coalesce(a)?.shape())?;
    composition(a, &Layout::concat(&[b.clone(), rest])?)
}
