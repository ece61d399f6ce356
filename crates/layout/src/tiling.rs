//! Divides and products: splitting a layout by a tiler, and reproducing a layout over another.
//!
//! A [`Tiler`] is a layout, `_` (leave the mode alone), or a tuple of tilers applied by mode, as
//! CuTe's `Tile`. The `zipped`, `tiled` and `flat` variants only regroup the modes of the logical
//! operation: for a tiler of rank `r` on a layout `A`,
//!
//! | operation | result modes |
//! |---|---|
//! | `logical_divide` | `((T0,R0),(T1,R1),...,A_r,...)` |
//! | `zipped_divide`  | `((T0,T1,...),(R0,R1,...,A_r,...))` |
//! | `tiled_divide`   | `((T0,T1,...),R0,R1,...,A_r,...)` |
//! | `flat_divide`    | `(T0,T1,...,R0,R1,...,A_r,...)` |
//!
//! and likewise for the products.

use std::fmt;

use super::algebra::{check_rank, coalesce, complement, complement_shape, composition};
use super::core::Layout;
use super::error::{Result, mul};
use super::int_tuple::IntTuple;

/// The second operand of divides, products and by-mode composition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tiler {
    /// One layout applied to the whole (an integer `n` is the layout `n:1`).
    Layout(Layout),
    /// One tiler per mode; modes past its length are left alone.
    Modes(Vec<Tiler>),
    /// `_`: leave the mode alone.
    All,
}

impl fmt::Display for Tiler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tiler::Layout(l) => write!(f, "{l}"),
            Tiler::All => f.write_str("_"),
            Tiler::Modes(ts) => {
                f.write_str("[")?;
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{t}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// Apply `op` mode by mode along a tuple tiler, keeping the modes of `layout` past its length.
fn by_mode(
    layout: &Layout,
    tilers: &[Tiler],
    name: &'static str,
    op: fn(&Layout, &Tiler) -> Result<Layout>,
) -> Result<Layout> {
    check_rank(name, layout, tilers.len())?;
    let mut modes = layout.modes();
    for (m, t) in modes.iter_mut().zip(tilers) {
        *m = op(m, t)?;
    }
    Layout::concat(&modes)
}

/// By-mode composition with a tiler. Modes of `lhs` past the tiler's length are dropped, as in the
/// C++ CuTe (`composition(Layout, Tiler)`: "Drop any modes of lhs that aren't hit by rhs");
/// pycute keeps them, and we follow the C++.
///
/// @post `result` has one mode per tiler mode, `mode(result, i) == composition(mode(lhs, i), tiler[i])`.
pub fn composition_tiler(lhs: &Layout, tiler: &Tiler) -> Result<Layout> {
    match tiler {
        Tiler::All => Ok(lhs.clone()),
        Tiler::Layout(rhs) => composition(lhs, rhs),
        Tiler::Modes(ts) => {
            check_rank("composition", lhs, ts.len())?;
            let modes = lhs
                .modes()
                .iter()
                .zip(ts)
                .map(|(m, t)| composition_tiler(m, t))
                .collect::<Result<Vec<_>>>()?;
            Layout::concat(&modes)
        }
    }
}

/// Split `layout` into the part the tiler selects and the rest:
/// `logical_divide(A, B) = A o (B, complement(B, shape(coalesce(A))))`.
///
/// @post for a layout tiler `B`: `rank(result) == 2`, `mode(result, 0) == A o B` as a function,
///       and `result(i) == A(make_layout(B, complement(B, shape(coalesce(A))))(i))`.
/// @post for a tuple tiler, mode `i` of `result` is `logical_divide(mode(A, i), tiler[i])`.
pub fn logical_divide(layout: &Layout, tiler: &Tiler) -> Result<Layout> {
    match tiler {
        Tiler::All => Ok(layout.clone()),
        Tiler::Modes(ts) => by_mode(layout, ts, "logical_divide", logical_divide),
        Tiler::Layout(b) => {
            let rest = complement_shape(b, coalesce(layout)?.shape())?;
            composition(layout, &Layout::concat(&[b.clone(), rest])?)
        }
    }
}

/// Reproduce `block` over the tiler: `logical_product(A, B) = (A, complement(A, size(A)*cosize(B)) o B)`.
///
/// @post for a layout tiler `B`: `rank(result) == 2`, `mode(result, 0) == A`, and
///       `size(result) == size(A) * size(B)`.
/// @post for a tuple tiler, mode `i` of `result` is `logical_product(mode(A, i), tiler[i])`.
pub fn logical_product(block: &Layout, tiler: &Tiler) -> Result<Layout> {
    match tiler {
        Tiler::All => Ok(block.clone()),
        Tiler::Modes(ts) => by_mode(block, ts, "logical_product", logical_product),
        Tiler::Layout(b) => {
            let cotarget = mul("logical_product", block.size()?, b.cosize()?)?;
            let rest = composition(&complement(block, cotarget)?, b)?;
            Layout::concat(&[block.clone(), rest])
        }
    }
}

/// Gather the rank-2 results of `op` at the tiler's leaves into `((tiles...),(rests..., untouched...))`
/// (CuTe's `tile_unzip`, `zip2_by` guided by the tiler). A `_` leaves its mode alone, so that mode
/// must itself have rank 2 and is split into its two modes, as in C++ CuTe.
///
/// @post `rank(result) == 2`; `mode(result, 0)` holds the tile modes in tiler order.
fn zip_by(
    layout: &Layout,
    tiler: &Tiler,
    op: fn(&Layout, &Tiler) -> Result<Layout>,
) -> Result<Layout> {
    match tiler {
        Tiler::All if layout.shape().is_tuple() && layout.rank() == 2 => Ok(layout.clone()),
        Tiler::All => Err(crate::LayoutError::incongruent(
            "zip",
            format!("a `_` tiler keeps the mode {layout}, which must have rank 2 to be zipped"),
        )),
        Tiler::Layout(_) => op(layout, tiler),
        Tiler::Modes(ts) => {
            check_rank("zip", layout, ts.len())?;
            let modes = layout.modes();
            let split = modes
                .iter()
                .zip(ts)
                .map(|(m, t)| zip_by(m, t, op))
                .collect::<Result<Vec<_>>>()?;
            let tiles = split
                .iter()
                .map(|s| s.mode(0))
                .collect::<Result<Vec<_>>>()?;
            let mut rests = split
                .iter()
                .map(|s| s.mode(1))
                .collect::<Result<Vec<_>>>()?;
            rests.extend(modes[ts.len()..].iter().cloned());
            Layout::concat(&[Layout::concat(&tiles)?, Layout::concat(&rests)?])
        }
    }
}

/// `((tile modes),(rest modes))`: see the module table.
pub fn zipped_divide(layout: &Layout, tiler: &Tiler) -> Result<Layout> {
    zip_by(layout, tiler, logical_divide)
}

/// `((tile modes),rest0,rest1,...)`: see the module table.
pub fn tiled_divide(layout: &Layout, tiler: &Tiler) -> Result<Layout> {
    unzip_second(&zipped_divide(layout, tiler)?)
}

/// `(tile0,tile1,...,rest0,rest1,...)`: see the module table.
pub fn flat_divide(layout: &Layout, tiler: &Tiler) -> Result<Layout> {
    unzip_both(&zipped_divide(layout, tiler)?)
}

/// `((block modes),(product modes))`: see the module table.
pub fn zipped_product(block: &Layout, tiler: &Tiler) -> Result<Layout> {
    zip_by(block, tiler, logical_product)
}

/// `((block modes),product0,product1,...)`.
pub fn tiled_product(block: &Layout, tiler: &Tiler) -> Result<Layout> {
    unzip_second(&zipped_product(block, tiler)?)
}

/// `(block0,block1,...,product0,product1,...)`.
pub fn flat_product(block: &Layout, tiler: &Tiler) -> Result<Layout> {
    unzip_both(&zipped_product(block, tiler)?)
}

/// `(r0, r1_0, r1_1, ...)` from a rank-2 `(r0, r1)` (CuTe's `result(_, repeat<R1>(_))`: a
/// rank-1 `r1` stays one mode).
fn unzip_second(zipped: &Layout) -> Result<Layout> {
    let mut modes = vec![zipped.mode(0)?];
    modes.extend(spread(zipped.mode(1)?));
    Layout::concat(&modes)
}

/// `(r0_0, r0_1, ..., r1_0, r1_1, ...)` from a rank-2 `(r0, r1)`.
fn unzip_both(zipped: &Layout) -> Result<Layout> {
    let mut modes = spread(zipped.mode(0)?);
    modes.extend(spread(zipped.mode(1)?));
    Layout::concat(&modes)
}

/// The modes of `m`, or `m` itself when it has rank 1 (slicing with `repeat<rank>(_)`).
fn spread(m: Layout) -> Vec<Layout> {
    if m.rank() == 1 { vec![m] } else { m.modes() }
}

/// Reproduce `block` over `tiler` with each tiler element a contiguous block of the result:
/// mode `i` of the result is `(block_i, product_i)`.
///
/// @post `rank(result) == max(rank(block), rank(tiler))` (two integer shapes give the rank-1 `((A,P))`)
/// @post `size(result) == size(block) * size(tiler)`, and `result` has the same image as
///       `logical_product(block, tiler)` (its modes are those modes, regrouped).
pub fn blocked_product(block: &Layout, tiler: &Layout) -> Result<Layout> {
    rank_sensitive_product(block, tiler, false)
}

/// Like [`blocked_product`] with the blocks interleaved (raked): mode `i` is `(product_i, block_i)`.
///
/// @post as [`blocked_product`], with each mode's two parts swapped.
pub fn raked_product(block: &Layout, tiler: &Layout) -> Result<Layout> {
    rank_sensitive_product(block, tiler, true)
}

/// The product of `block` and `tiler` padded to a common rank with `1:0` modes, zipped mode by mode.
fn rank_sensitive_product(block: &Layout, tiler: &Layout, raked: bool) -> Result<Layout> {
    let rank = block.rank().max(tiler.rank());
    let both_int = !block.shape().is_tuple() && !tiler.shape().is_tuple();
    let (a, b) = if both_int {
        (block.clone(), tiler.clone())
    } else {
        (pad(block, rank)?, pad(tiler, rank)?)
    };
    let product = logical_product(&a, &Tiler::Layout(b))?;
    let (a, c) = (product.mode(0)?, product.mode(1)?);
    if both_int {
        // CuTe zips two integer-shaped modes into one rank-1 mode: `((a,c))`.
        let pair = if raked { [c, a] } else { [a, c] };
        return Layout::concat(&[Layout::concat(&pair)?]);
    }
    let modes = a
        .modes()
        .into_iter()
        .zip(c.modes())
        .map(|(x, y)| Layout::concat(&if raked { [y, x] } else { [x, y] }));
    Layout::concat(&modes.collect::<Result<Vec<_>>>()?)
}

/// `layout` as a tuple of exactly `rank` modes, appending `1:0` modes (CuTe's `append<R>`).
fn pad(layout: &Layout, rank: usize) -> Result<Layout> {
    let mut modes = layout.modes();
    modes.resize(rank.max(modes.len()), Layout::unit());
    Layout::concat(&modes)
}

/// Repeat `block` until it has the shape `target` (mode by mode), the repetitions laid out in the
/// mode order `order` (column-major by default): `blocked_product(block, make_ordered_layout(
/// ceil_div(target, shape(block)), order))`.
///
/// @post `product_each(shape(result)) == product_each(target)`, and the first mode of each result
///       mode is `block`'s.
pub fn tile_to_shape(
    block: &Layout,
    target: &IntTuple,
    order: Option<&IntTuple>,
) -> Result<Layout> {
    let r = target.rank();
    if block.rank() > r {
        return Err(crate::LayoutError::incongruent(
            "tile_to_shape",
            format!("{block} has more modes than the target shape {target}"),
        ));
    }
    let padded = pad(block, r)?;
    let padded = if r == 1 && !target.is_tuple() {
        block.clone()
    } else {
        padded
    };
    let each = |t: &crate::IntTuple| -> Result<Vec<i64>> {
        t.modes().iter().map(crate::IntTuple::product).collect()
    };
    let (bs, ts) = (each(padded.shape())?, each(target)?);
    let mut product = Vec::new();
    for (b, t) in bs.iter().zip(&ts) {
        if t % b != 0 {
            return Err(crate::LayoutError::divisibility(
                "tile_to_shape",
                format!(
                    "block shape {} does not divide the target shape {target}",
                    padded.shape()
                ),
            ));
        }
        product.push(t / b);
    }
    if product.len() != ts.len() {
        // A block with fewer modes than the target after padding (an empty layout).
        return Err(crate::LayoutError::incongruent(
            "tile_to_shape",
            format!("{block} does not give a block for each mode of the target shape {target}"),
        ));
    }
    let pshape = if target.is_tuple() {
        crate::IntTuple::ints(&product)
    } else {
        crate::IntTuple::Int(product[0])
    };
    let tiler = match order {
        Some(o) => crate::modes::make_ordered_layout(&pshape, o)?,
        None => Layout::compact(pshape)?,
    };
    blocked_product(&padded, &tiler)
}
