//! Vector widths: reinterpreting a layout over elements of another width (`upcast`, `downcast`,
//! `recast_layout`) and the longest contiguous vector two layouts share (`max_common_vector`,
//! `max_common_layout`, `max_alignment`), ported from C++ CuTe's `layout.hpp`.

use super::algebra::{coalesce, composition, logical_divide_layout, right_inverse};
use super::core::Layout;
use super::error::{LayoutError, Result, ceil_div, mul};
use super::int_tuple::IntTuple;
use super::swizzle::{ComposedLayout, Outer, Swizzle};

/// The layout over elements `n` times wider: the stride-1 mode shrinks by `n`, every other stride
/// is divided by `n` (rounding up), stride-0 modes stay.
///
/// @post `upcast(downcast(L, n), n) == L` for a layout with a stride-1 mode.
/// Each nonzero stride `d` and `n` must divide one another.
pub fn upcast(layout: &Layout, n: i64) -> Result<Layout> {
    positive("upcast", n)?;
    let stride = layout.stride().try_map(&mut |d| {
        if d == 0 {
            Ok(0)
        } else if d % n == 0 || n % d == 0 {
            Ok(d.signum() * ceil_div(d.abs(), n))
        } else {
            Err(LayoutError::divisibility(
                "upcast",
                format!("stride {d} of {layout} and {n} do not divide one another"),
            ))
        }
    })?;
    let shape = map_pairs(layout, &mut |s, d| {
        Ok(if d == 0 {
            s
        } else {
            ceil_div(s, ceil_div(n, d.abs()))
        })
    })?;
    Layout::new(shape, stride)
}

/// The layout over elements `n` times narrower: a stride-±1 mode grows `n` times, every other
/// stride is multiplied by `n`.
///
/// @post `size(result) == size(L) * n` when `L` has exactly one stride-±1 mode.
pub fn downcast(layout: &Layout, n: i64) -> Result<Layout> {
    positive("downcast", n)?;
    if !layout.stride().leaves().iter().any(|d| d.is_int(1)) {
        return Err(LayoutError::domain(
            "downcast",
            format!("{layout} has no stride-1 mode (downcast requires adjacent elements)"),
        ));
    }
    let shape = map_pairs(layout, &mut |s, d| {
        if d.abs() == 1 {
            mul("downcast", s, n)
        } else {
            Ok(s)
        }
    })?;
    let stride = layout.stride().try_map(&mut |d| {
        if d.abs() == 1 {
            Ok(d)
        } else {
            mul("downcast", d, n)
        }
    })?;
    Layout::new(shape, stride)
}

/// The layout of the same memory read as `new_bits`-bit elements instead of `old_bits`-bit ones
/// (CuTe's `recast_layout<Old, New>`): `upcast` by the reduced ratio's numerator, then `downcast`
/// by its denominator.
///
/// @post `recast_layout(L, b, b) == L`.
pub fn recast_layout(layout: &Layout, old_bits: i64, new_bits: i64) -> Result<Layout> {
    positive("recast_layout", old_bits)?;
    positive("recast_layout", new_bits)?;
    let g = gcd(old_bits, new_bits);
    let (num, den) = (new_bits / g, old_bits / g);
    let up = if num == 1 {
        layout.clone()
    } else {
        upcast(layout, num)?
    };
    if den == 1 { Ok(up) } else { downcast(&up, den) }
}

/// The largest layout `R` such that `a(R(i)) == i` and `b(R(i)) == i`: the contiguous vector the
/// two layouts share, as positions in their common domain.
///
/// @post `a(result(i)) == i` and `b(result(i)) == i` for all `0 <= i < size(result)`.
pub fn max_common_layout(a: &Layout, b: &Layout) -> Result<Layout> {
    let inv_b = right_inverse(b)?;
    let common = coalesce(&composition(a, &inv_b)?)?;
    let first = common.mode(0)?;
    if first.stride().is_int(1) {
        composition(&inv_b, &first)
    } else {
        Ok(Layout::unit())
    }
}

/// The number of contiguous elements `a` and `b` agree on: `size(max_common_layout(a, b))`.
///
/// @post `result >= 1`; for all `0 <= n < result`, `a(b.idx2crd(n)) == n`.
pub fn max_common_vector(a: &Layout, b: &Layout) -> Result<i64> {
    let common = coalesce(&composition(a, &right_inverse(b)?)?)?;
    let first = common.mode(0)?;
    if first.stride().is_int(1) {
        first.size()
    } else {
        Ok(1)
    }
}

/// The largest `n` for which `upcast(layout, n)` succeeds: the alignment of the layout in elements.
///
/// @post `upcast(layout, result)` is `Ok`.
pub fn max_alignment(layout: &Layout) -> Result<i64> {
    let flat = coalesce(layout)?;
    let permuted = logical_divide_layout(&flat, &right_inverse(&flat)?)?;
    let stride1 = permuted.mode(1)?.stride().leaves();
    let d = stride1.first().and_then(IntTuple::as_int).unwrap_or(0);
    Ok(gcd(permuted.mode(0)?.size()?, d))
}

fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.abs(), b.abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn positive(op: &'static str, n: i64) -> Result<i64> {
    if n > 0 {
        Ok(n)
    } else {
        Err(LayoutError::domain(op, format!("{n} must be positive")))
    }
}

/// The shape with each leaf `s` replaced by `f(s, d)` for its integer stride `d`.
fn map_pairs(layout: &Layout, f: &mut dyn FnMut(i64, i64) -> Result<i64>) -> Result<IntTuple> {
    let mut strides = layout.stride().leaves().into_iter();
    layout.shape().try_map(&mut |s| match strides.next() {
        Some(IntTuple::Int(d)) => f(s, d),
        _ => Err(LayoutError::domain(
            "recast",
            format!("{layout} has basis strides; recasting needs integer strides"),
        )),
    })
}

/// `upcast` of a composed layout: each part upcast (CuTe's `upcast<N>(ComposedLayout)`); a swizzle
/// `Sw<B,M,S>` becomes `Sw<B,M-log2(n),S>` (`Sw<B+M-log2(n),0,S>` past zero) and the offset is
/// divided by `n`.
///
/// @post `recast_composed(upcast_composed(C, n)...)` keeps the swizzle's bit fields in bytes.
pub fn upcast_composed(c: &ComposedLayout, n: i64) -> Result<ComposedLayout> {
    let log2 = log2_exact("upcast", n)?;
    let outer = match &c.outer {
        Outer::Swizzle(s) => {
            let m = s.base() as i64 - log2;
            let (b, m) = if m >= 0 {
                (s.bits() as i64, m)
            } else {
                ((s.bits() as i64 + m).max(0), 0)
            };
            Outer::Swizzle(Swizzle::new(b, m, s.shift() as i64)?)
        }
        Outer::Layout(l) => Outer::Layout(upcast(l, n)?),
    };
    if c.offset % n != 0 {
        return Err(LayoutError::divisibility(
            "upcast",
            format!("offset {} of {c} is not a multiple of {n}", c.offset),
        ));
    }
    Ok(ComposedLayout {
        outer,
        offset: c.offset / n,
        layout: upcast(&c.layout, n)?,
    })
}

/// `downcast` of a composed layout: `Sw<B,M,S>` becomes `Sw<B,M+log2(n),S>`, the offset is
/// multiplied by `n`, layouts are downcast.
pub fn downcast_composed(c: &ComposedLayout, n: i64) -> Result<ComposedLayout> {
    let log2 = log2_exact("downcast", n)?;
    let outer = match &c.outer {
        Outer::Swizzle(s) => Outer::Swizzle(Swizzle::new(
            s.bits() as i64,
            s.base() as i64 + log2,
            s.shift() as i64,
        )?),
        Outer::Layout(l) => Outer::Layout(downcast(l, n)?),
    };
    Ok(ComposedLayout {
        outer,
        offset: mul("downcast", c.offset, n)?,
        layout: downcast(&c.layout, n)?,
    })
}

/// [`recast_layout`] of a composed layout.
pub fn recast_composed(c: &ComposedLayout, old_bits: i64, new_bits: i64) -> Result<ComposedLayout> {
    positive("recast_layout", old_bits)?;
    positive("recast_layout", new_bits)?;
    let g = gcd(old_bits, new_bits);
    let (num, den) = (new_bits / g, old_bits / g);
    let up = if num == 1 {
        c.clone()
    } else {
        upcast_composed(c, num)?
    };
    if den == 1 {
        Ok(up)
    } else {
        downcast_composed(&up, den)
    }
}

/// `log2(n)` for a power of two `n`.
fn log2_exact(op: &'static str, n: i64) -> Result<i64> {
    if n > 0 && n & (n - 1) == 0 {
        Ok(n.trailing_zeros() as i64)
    } else {
        Err(LayoutError::domain(
            op,
            format!("a swizzle recasts only by a power of two, not {n}"),
        ))
    }
}
