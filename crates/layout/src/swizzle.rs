//! Swizzles `Sw<B,M,S>` and composed layouts `Sw<B,M,S> o offset o L`.
//!
//! `Sw<B,M,S>(x)` XORs the `B` bits of `x` starting at bit `M + max(0,S)` into the `B` bits starting
//! at bit `M + max(0,-S)`: with `x = ...YYY...ZZZ[M bits]`, the result is `...YYY...(ZZZ^YYY)[M bits]`.
//! It is a bijection on every aligned block of `2^(B+M+|S|)` integers, which is why it can permute
//! shared-memory addresses to avoid bank conflicts without changing what a layout covers.

use std::fmt;

use super::core::Layout;
use super::error::{LayoutError, MAX_RENDER_CELLS, Result, add};

/// The swizzle function `Sw<bits, base, shift>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Swizzle {
    bits: u32,
    base: u32,
    shift: i32,
}

impl Swizzle {
    /// `Sw<bits,base,shift>`; requires `|shift| >= bits` (the two bit fields do not overlap) and all
    /// masks within 62 bits.
    pub fn new(bits: i64, base: i64, shift: i64) -> Result<Self> {
        let fits = |v: i64| (0..=62).contains(&v);
        if !fits(bits)
            || !fits(base)
            || !fits(shift.abs())
            || bits > shift.abs()
            || bits + base + shift.abs() > 62
        {
            return Err(LayoutError::domain(
                "swizzle",
                format!("Sw<{bits},{base},{shift}> needs 0 <= B <= |S| and B + M + |S| <= 62"),
            ));
        }
        Ok(Swizzle {
            bits: bits as u32,
            base: base as u32,
            shift: shift as i32,
        })
    }

    pub fn bits(&self) -> u32 {
        self.bits
    }

    pub fn base(&self) -> u32 {
        self.base
    }

    pub fn shift(&self) -> i32 {
        self.shift
    }

    /// The mask of the `YYY` bits (the source of the XOR).
    fn yyy_mask(&self) -> i64 {
        ((1i64 << self.bits) - 1) << (self.base as i32 + self.shift.max(0))
    }

    /// `x ^ ((x & yyy_mask) >> shift)` (a negative shift shifts left).
    ///
    /// @post `apply(apply(x)) == x`, and `apply` permutes each aligned block of `period()` integers.
    pub fn apply(&self, x: i64) -> i64 {
        let y = x & self.yyy_mask();
        let moved = if self.shift >= 0 {
            y >> self.shift
        } else {
            y << -self.shift
        };
        x ^ moved
    }

    /// `2^(B+M+|S|)`: the length of the blocks the swizzle permutes.
    pub fn period(&self) -> i64 {
        1i64 << (self.bits + self.base + self.shift.unsigned_abs())
    }
}

impl fmt::Display for Swizzle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sw<{},{},{}>", self.bits, self.base, self.shift)
    }
}

/// The outer function of a [`ComposedLayout`]: a swizzle or a layout.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outer {
    Swizzle(Swizzle),
    Layout(Layout),
}

impl fmt::Display for Outer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outer::Swizzle(s) => write!(f, "{s}"),
            Outer::Layout(l) => write!(f, "{l}"),
        }
    }
}

/// `outer o offset o layout`: `i -> outer(offset + layout(i))`, CuTe's `ComposedLayout<A,O,B>`
/// with `A` a swizzle (`Sw<3,3,3> o (8,64):(64,1)`) or a layout (`(4,5):(1,4) o 2 o (3,5):(1,4)`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ComposedLayout {
    pub outer: Outer,
    pub offset: i64,
    pub layout: Layout,
}

impl ComposedLayout {
    /// `swizzle o offset o layout`.
    pub fn swizzled(swizzle: Swizzle, offset: i64, layout: Layout) -> Self {
        ComposedLayout {
            outer: Outer::Swizzle(swizzle),
            offset,
            layout,
        }
    }

    /// The swizzle, when the outer function is one.
    pub fn swizzle(&self) -> Option<Swizzle> {
        match self.outer {
            Outer::Swizzle(s) => Some(s),
            Outer::Layout(_) => None,
        }
    }

    /// `outer(x)` for an inner value `x` (already offset).
    fn apply_outer(&self, x: i64) -> Result<i64> {
        match &self.outer {
            Outer::Swizzle(s) => Ok(s.apply(x)),
            Outer::Layout(l) => l.eval(x),
        }
    }

    /// The image of the 1-D index `i`.
    ///
    /// @post `result == outer(offset + layout(i))`.
    pub fn eval(&self, i: i64) -> Result<i64> {
        self.apply_outer(add("composed", self.offset, self.layout.eval(i)?)?)
    }

    /// The image of a coordinate.
    pub fn crd2idx(&self, crd: &super::IntTuple) -> Result<i64> {
        self.apply_outer(add("composed", self.offset, self.layout.crd2idx(crd)?)?)
    }

    /// Size of the domain: `size(layout)`.
    pub fn size(&self) -> Result<i64> {
        self.layout.size()
    }

    /// `1 + max_i self(i)`, by enumeration (an error past [`MAX_RENDER_CELLS`]` * 16` elements).
    ///
    /// pycute returns the swizzle's period here, which is not the codomain size when the layout
    /// spans more than one period; we compute the true value.
    pub fn cosize(&self) -> Result<i64> {
        let size = self.size()?;
        if size > MAX_RENDER_CELLS * 16 {
            return Err(LayoutError::domain(
                "cosize",
                format!("a composed layout of size {size} is too large to enumerate"),
            ));
        }
        let max = (0..size)
            .map(|i| self.eval(i))
            .try_fold(0i64, |m, v| v.map(|v| m.max(v)))?;
        add("cosize", max, 1)
    }

    /// The same outer function and offset over a new inner layout.
    pub fn with_layout(&self, layout: Layout) -> ComposedLayout {
        ComposedLayout {
            layout,
            ..self.clone()
        }
    }
}

impl fmt::Display for ComposedLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.offset == 0 {
            write!(f, "{} o {}", self.outer, self.layout)
        } else {
            write!(f, "{} o {} o {}", self.outer, self.offset, self.layout)
        }
    }
}
