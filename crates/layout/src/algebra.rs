//! The core of the layout algebra: coalesce, filter, composition, complement and the inverses.
//!
//! Each function states its post-condition in its doc, as CuTe's `layout.hpp` does; the property
//! tests in `crates/layout/tests/layout_props.rs` check them over the whole domain.

use super::core::Layout;
use super::error::{LayoutError, Result, ceil_div, mul};
use super::int_tuple::IntTuple;

/// Flat `(shape, stride)` lists being built into a layout.
#[derive(Default)]
struct Flat {
    shape: Vec<i64>,
    stride: Vec<i64>,
}

impl Flat {
    fn push(&mut self, s: i64, d: i64) {
        self.shape.push(s);
        self.stride.push(d);
    }

    /// The layout `(s0,...):(d0,...)`, or `s:d` for one mode, or `1:0` for none.
    fn build(self) -> Result<Layout> {
        if self.shape.is_empty() {
            Ok(Layout::unit())
        } else {
            Layout::flat(&self.shape, &self.stride)
        }
    }
}

/// Flatten and merge as many modes as possible while keeping the function.
///
/// @post `size(result) == size(layout)`
/// @post `depth(result) <= 1`
/// @post `result(i) == layout(i)` for all `0 <= i < size(layout)`
/// @post no mode of `result` has size 1 unless `result` is `1:0`.
pub fn coalesce(layout: &Layout) -> Result<Layout> {
    let mut out = Flat {
        shape: vec![1],
        stride: vec![0],
    };
    for (s, d) in layout.leaves() {
        let k = out.shape.len() - 1;
        let (last_s, last_d) = (out.shape[k], out.stride[k]);
        if s == 1 {
            continue;
        } else if last_s == 1 {
            (out.shape[k], out.stride[k]) = (s, d);
        } else if last_s.checked_mul(last_d) == Some(d) {
            out.shape[k] = mul("coalesce", last_s, s)?;
        } else {
            out.push(s, d);
        }
    }
    out.build()
}

/// Coalesce by mode following `profile`: a tuple profile recurses into the matching modes (modes
/// past its rank are kept as they are), an integer profile coalesces the whole (sub)layout.
///
/// @post `result(i) == layout(i)` and `rank(result) == rank(layout)` when `profile` is a tuple.
pub fn coalesce_profile(layout: &Layout, profile: &IntTuple) -> Result<Layout> {
    by_profile(layout, profile, "coalesce", &coalesce_profile, &coalesce)
}

/// Remove stride-0 and size-1 modes, then coalesce: the layout of the distinct images.
///
/// @post `depth(result) <= 1`, no mode of `result` has stride 0 unless `result` is `1:0`
/// @post the image set of `result` equals the image set of `layout`.
pub fn filter(layout: &Layout) -> Result<Layout> {
    let mut out = Flat::default();
    for (s, d) in layout
        .leaves()
        .into_iter()
        .filter(|&(s, d)| s != 1 && d != 0)
    {
        out.push(s, d);
    }
    coalesce(&out.build()?)
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
/// Divisibility: along coalesced `lhs`, each stride of `rhs` and each mode size must divide one
/// another, and each piece of `rhs`'s shape must divide what is left of it; otherwise the result is
/// not a layout and the error names the mode and the numbers.
pub fn composition(lhs: &Layout, rhs: &Layout) -> Result<Layout> {
    match (rhs.shape(), rhs.stride()) {
        (IntTuple::Int(s), IntTuple::Int(d)) => compose_mode(lhs, *s, *d),
        _ => Layout::concat(
            &rhs.modes()
                .iter()
                .map(|m| composition(lhs, m))
                .collect::<Result<Vec<_>>>()?,
        ),
    }
}

/// `lhs o (shape:stride)` for one integer mode of the right-hand side.
fn compose_mode(lhs: &Layout, shape: i64, stride: i64) -> Result<Layout> {
    if stride == 0 {
        return Layout::int(shape, 0);
    }
    if stride < 0 {
        return Err(LayoutError::domain(
            "composition",
            format!("negative stride {stride} in the right operand"),
        ));
    }
    let flat = coalesce(lhs)?;
    let leaves = flat.leaves();
    let (&(_, last_d), init) = leaves.split_last().unwrap_or((&(1, 0), &[]));
    let (mut rest_s, mut rest_d, mut out) = (shape, stride, Flat::default());
    for (k, &(cs, cd)) in init.iter().enumerate() {
        let new_s = split_step(&flat, k, cs, rest_s, rest_d)?;
        if new_s != 1 {
            out.push(new_s, mul("composition", rest_d, cd)?);
        }
        rest_s /= new_s;
        rest_d = ceil_div(rest_d, cs);
    }
    if rest_s != 1 || out.shape.is_empty() {
        out.push(rest_s, mul("composition", rest_d, last_d)?);
    }
    out.build()
}

/// How much of the remaining `rest_s:rest_d` falls into mode `k` (size `cs`) of coalesced `lhs`,
/// checking CuTe's stride and shape divisibility conditions.
fn split_step(flat: &Layout, k: usize, cs: i64, rest_s: i64, rest_d: i64) -> Result<i64> {
    if rest_s == 1 {
        return Ok(1);
    }
    if cs % rest_d != 0 && rest_d % cs != 0 {
        return Err(LayoutError::divisibility(
            "composition",
            format!(
                "stride {rest_d} and mode {k} (size {cs}) of the coalesced left operand {flat} do not divide one another"
            ),
        ));
    }
    let new_s = (cs / rest_d).clamp(1, rest_s);
    if rest_s % new_s != 0 {
        return Err(LayoutError::divisibility(
            "composition",
            format!(
                "mode {k} (size {cs}) of the coalesced left operand {flat} takes {new_s} of the remaining shape {rest_s}, which {new_s} does not divide"
            ),
        ));
    }
    Ok(new_s)
}

/// The layout of the positions `layout` does not reach, up to `cotarget`.
///
/// @post disjoint images: `result(i) != layout(j)` for all `0 < i < size(result)` and all `j`
/// @post ordered: `result(i-1) < result(i)` for all `0 < i < size(result)`
/// @post `size(result) * size(filter(layout)) >= cotarget`, and `make_layout(layout, result)` is
///       a bijection onto `[0, cosize)` when `layout` is injective.
///
/// Errors when a stride (sorted ascending) is not a multiple of the extent covered by the
/// smaller modes: then no complement with these post-conditions exists (the modes overlap or
/// interleave). C++ CuTe and pycute silently return a layout violating the size post-condition.
pub fn complement(layout: &Layout, cotarget: i64) -> Result<Layout> {
    let mut modes: Vec<(i64, i64)> = layout
        .leaves()
        .into_iter()
        .filter(|&(s, d)| s != 1 && d != 0)
        .map(|(s, d)| (d, s))
        .collect();
    modes.sort_unstable();
    let (mut out, mut cur) = (Flat::default(), 1i64);
    for (d, s) in modes {
        if d < cur || d % cur != 0 {
            return Err(LayoutError::divisibility(
                "complement",
                format!(
                    "in {layout}, the mode {s}:{d} does not start at a multiple of {cur}, the extent of the modes with smaller strides"
                ),
            ));
        }
        out.push(d / cur, cur);
        cur = mul("complement", d, s)?;
    }
    if cotarget < 1 {
        return Err(LayoutError::domain(
            "complement",
            format!("cotarget {cotarget} must be at least 1"),
        ));
    }
    out.push(ceil_div(cotarget, cur), cur);
    coalesce(&out.build()?)
}

/// [`complement`] with cotarget `cosize(filter(layout))`, CuTe's one-argument form.
pub fn complement_default(layout: &Layout) -> Result<Layout> {
    complement(layout, filter(layout)?.cosize()?)
}

/// The right inverse: the largest `result` with `layout(result(i)) == i`.
///
/// @post `layout(result(i)) == i` for all `0 <= i < size(result)`
/// @post `result` is coalesced.
///
/// Stride-0 modes are skipped, as the C++ CuTe does; pycute instead stops at them (returning
/// `1:0` for any layout with a stride-0 mode), which contradicts the post-condition's maximality.
pub fn right_inverse(layout: &Layout) -> Result<Layout> {
    let leaves = layout.leaves();
    let prefix = IntTuple::ints(&leaves.iter().map(|l| l.0).collect::<Vec<_>>())
        .prefix_product(1)?
        .flatten();
    let mut sorted: Vec<(i64, i64, i64)> = leaves
        .iter()
        .zip(prefix)
        .map(|(&(s, d), p)| (d, s, p))
        .collect();
    sorted.sort_unstable();
    let (mut out, mut cur) = (Flat::default(), 1i64);
    for (d, s, p) in sorted.into_iter().filter(|&(d, s, _)| s != 1 && d != 0) {
        if d != cur {
            break;
        }
        out.push(s, p);
        cur = mul("right_inverse", s, d)?;
    }
    coalesce(&out.build()?)
}

/// The left inverse: `result(layout(i)) == i` for every `i`, when `layout` is injective.
///
/// @post `result(layout(i)) == i` for all `0 <= i < size(layout)` (injective `layout`)
/// Defined as `right_inverse(make_layout(layout, complement(layout)))`.
pub fn left_inverse(layout: &Layout) -> Result<Layout> {
    let comp = complement_default(layout)?;
    right_inverse(&Layout::concat(&[layout.clone(), comp])?)
}
