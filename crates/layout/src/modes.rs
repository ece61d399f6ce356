//! Building layouts from shapes and regrouping modes: `make_identity_layout`,
//! `make_ordered_layout`, `group_modes`, `dice`, `domain_distribute` (C++ CuTe's names).

use super::algebra::coalesce;
use super::core::{Coord, Layout, compact_strides};
use super::error::{LayoutError, Result, mul};
use super::int_tuple::IntTuple;

/// The identity layout of `shape`: strides are the basis elements of its modes
/// (`(4,(2,3))` gets `(1@0,(1@0@1,1@1@1))`), so it maps every coordinate to itself.
///
/// @post `result(c) == c` (as a coordinate) for every coordinate `c` of `shape`.
pub fn make_identity_layout(shape: &IntTuple) -> Result<Layout> {
    Layout::new(shape.clone(), basis_like(shape, &mut Vec::new()))
}

/// CuTe's `make_basis_like`: `E<path>` at every leaf, `1` for an integer shape.
fn basis_like(shape: &IntTuple, path: &mut Vec<usize>) -> IntTuple {
    match shape {
        IntTuple::Tuple(t) => IntTuple::Tuple(
            t.iter()
                .enumerate()
                .map(|(i, s)| {
                    path.push(i);
                    let e = basis_like(s, path);
                    path.pop();
                    e
                })
                .collect(),
        ),
        _ if path.is_empty() => IntTuple::Int(1),
        _ => IntTuple::Basis(1, path.clone()),
    }
}

/// A compact layout of `shape` whose modes are laid out in the order `order` (CuTe's
/// `make_ordered_layout`): `order` is congruent to `shape` or to a prefix of its nesting; each of
/// its integers ranks the (sub)mode it covers, the smallest fastest; equal ranks start at the same
/// stride. Size-1 leaves get stride 0.
///
/// @post `result` is a bijection onto `[0, size(shape))` when the ranks are distinct.
pub fn make_ordered_layout(shape: &IntTuple, order: &IntTuple) -> Result<Layout> {
    let mut units = Vec::new();
    order_units(shape, order, &mut units)?;
    let mut starts = Vec::new();
    for (_, o) in &units {
        let start = units
            .iter()
            .filter(|(_, p)| p < o)
            .try_fold(1, |acc, (s, _)| {
                mul("make_ordered_layout", acc, s.product()?)
            })?;
        starts.push(start);
    }
    let mut next = starts.into_iter();
    let stride = ordered_strides(shape, order, &mut next)?;
    Layout::new(shape.clone(), stride)
}

/// The (sub)shapes covered by the integers of `order`, with their ranks, depth first.
fn order_units(shape: &IntTuple, order: &IntTuple, out: &mut Vec<(IntTuple, i64)>) -> Result<()> {
    match (shape, order) {
        (_, IntTuple::Int(o)) => {
            out.push((shape.clone(), *o));
            Ok(())
        }
        (IntTuple::Tuple(ss), IntTuple::Tuple(os)) if ss.len() == os.len() => ss
            .iter()
            .zip(os)
            .try_for_each(|(s, o)| order_units(s, o, out)),
        _ => Err(LayoutError::incongruent(
            "make_ordered_layout",
            format!("order {order} does not match shape {shape}"),
        )),
    }
}

fn ordered_strides(
    shape: &IntTuple,
    order: &IntTuple,
    starts: &mut dyn Iterator<Item = i64>,
) -> Result<IntTuple> {
    match (shape, order) {
        (IntTuple::Tuple(ss), IntTuple::Tuple(os)) => ss
            .iter()
            .zip(os)
            .map(|(s, o)| ordered_strides(s, o, starts))
            .collect::<Result<Vec<_>>>()
            .map(IntTuple::Tuple),
        _ => compact_strides(shape, starts.next().unwrap_or(1)),
    }
}

/// A compact layout with the shape of `layout` and strides in the order of its strides
/// (stride-0 modes keep stride 0): `make_layout_like((4,2):(4,1)) == (4,2):(2,1)`.
///
/// @post `shape(result) == shape(layout)`; the nonzero strides of `result` are ordered as those
///       of `layout`.
pub fn make_layout_like(layout: &Layout) -> Result<Layout> {
    let mut strides = layout.stride().leaves().into_iter();
    let shape = layout.shape().try_map(&mut |s| match strides.next() {
        Some(d) if d.is_int(0) => Ok(1),
        _ => Ok(s),
    })?;
    let order = layout.stride().try_map(&mut |d| Ok(d))?;
    if order.has_basis() {
        return Err(LayoutError::domain(
            "make_layout_like",
            format!("{layout} has basis strides"),
        ));
    }
    let stride = make_ordered_layout(&shape, &order)?.stride().clone();
    Layout::new(layout.shape().clone(), stride)
}

/// Modes `begin..end` of `layout` grouped into one mode (CuTe's `group<B,E>`).
///
/// @post `rank(result) == rank(layout) - (end - begin) + 1` and `result(i) == layout(i)`.
pub fn group_modes(layout: &Layout, begin: usize, end: usize) -> Result<Layout> {
    let modes = layout.modes();
    if begin > end || end > modes.len() {
        return Err(LayoutError::domain(
            "group_modes",
            format!(
                "modes {begin}..{end} of the rank-{} layout {layout}",
                modes.len()
            ),
        ));
    }
    let mut out = modes[..begin].to_vec();
    out.push(Layout::concat(&modes[begin..end])?);
    out.extend_from_slice(&modes[end..]);
    Layout::concat(&out)
}

/// The modes of `layout` at the integer positions of `crd` (the complement of slicing, which
/// keeps the `_` positions): `dice((_,1,_), (2,3,4):(1,2,6)) == (3):(2)`.
///
/// @post `rank(result)` is the number of integer positions of `crd` (at its top level).
pub fn dice(crd: &Coord, layout: &Layout) -> Result<Layout> {
    let (s, d) = (
        dice_tuple(crd, layout.shape())?,
        dice_tuple(crd, layout.stride())?,
    );
    Layout::new(s, d)
}

/// CuTe's `dice` on one tuple: an integer keeps the whole, `_` drops it, a tuple recurses and
/// concatenates what its elements keep.
fn dice_tuple(crd: &Coord, t: &IntTuple) -> Result<IntTuple> {
    match (crd, t) {
        (Coord::Int(_) | Coord::Basis(..), t) => Ok(t.clone()),
        (Coord::All, _) => Ok(IntTuple::Tuple(Vec::new())),
        (Coord::Tuple(c), IntTuple::Tuple(ts)) if c.len() == ts.len() => {
            let mut out = Vec::new();
            for (c, t) in c.iter().zip(ts) {
                match c {
                    Coord::All => {}
                    Coord::Tuple(_) => match dice_tuple(c, t)? {
                        IntTuple::Tuple(inner) => out.extend(inner),
                        other => out.push(other),
                    },
                    _ => out.push(t.clone()),
                }
            }
            Ok(IntTuple::Tuple(out))
        }
        _ => Err(LayoutError::incongruent(
            "dice",
            format!("coordinate does not match {t}"),
        )),
    }
}

/// A layout of `n` elements spread over the shape `shape`, taking from each mode in turn as much
/// as divides what is left (`domain_distribute((15,14), 6) == (3,2):(1,15)`).
///
/// @post `result` is ordered and injective, and `size(result)` divides `n`.
pub fn domain_distribute(shape: &IntTuple, n: i64) -> Result<Layout> {
    let flat = IntTuple::ints(&shape.flatten());
    let mut rest = n;
    let mut sizes = Vec::new();
    for s in flat.flatten() {
        let g = gcd(s, rest);
        sizes.push(g);
        rest /= g.max(1);
    }
    let strides = compact_strides(&flat, 1)?;
    let leaves = sizes.into_iter().zip(strides.leaves()).collect();
    coalesce(&Layout::from_leaves(leaves)?)
}

fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.abs(), b.abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}
