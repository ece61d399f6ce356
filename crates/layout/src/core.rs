//! The [`Layout`] type: a congruent pair of hierarchical shape and stride, and the functions that
//! take it apart and put it together (rank, depth, size, cosize, modes, flatten, `crd2idx`,
//! `idx2crd`, evaluation, slicing, `make_layout`, append, prepend).

use std::fmt;

use super::error::{LayoutError, Result, mul};
use super::int_tuple::{IntTuple, add_coords, scale};

/// A CuTe layout `shape:stride`: a function from coordinates (or 1-D indices) to integers.
///
/// Invariants: `shape` and `stride` are congruent, every shape leaf is an integer of at least 1
/// (strides may be scaled basis elements, `1@0`), and the nesting depth is at most
/// [`super::MAX_DEPTH`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    shape: IntTuple,
    stride: IntTuple,
}

/// A coordinate that may contain `_` (all of a mode), used for slicing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coord {
    Int(i64),
    All,
    Tuple(Vec<Coord>),
    /// A scaled basis element `v@i` (only meaningful in strides).
    Basis(i64, Vec<usize>),
}

impl Coord {
    /// Whether some position is `_`.
    pub fn has_all(&self) -> bool {
        match self {
            Coord::Int(_) | Coord::Basis(..) => false,
            Coord::All => true,
            Coord::Tuple(t) => t.iter().any(Coord::has_all),
        }
    }

    /// The coordinate with `_` read as 0 (the offset of a slice).
    pub fn zeroed(&self) -> IntTuple {
        match self {
            Coord::Int(v) => IntTuple::Int(*v),
            Coord::Basis(v, p) => IntTuple::Basis(*v, p.clone()),
            Coord::All => IntTuple::Int(0),
            Coord::Tuple(t) => IntTuple::Tuple(t.iter().map(Coord::zeroed).collect()),
        }
    }
}

impl From<&IntTuple> for Coord {
    fn from(t: &IntTuple) -> Self {
        match t {
            IntTuple::Int(v) => Coord::Int(*v),
            IntTuple::Basis(v, p) => Coord::Basis(*v, p.clone()),
            IntTuple::Tuple(t) => Coord::Tuple(t.iter().map(Coord::from).collect()),
        }
    }
}

impl Layout {
    /// `shape:stride`, checked.
    ///
    /// @post `result.shape() == shape && result.stride() == stride`.
    pub fn new(shape: IntTuple, stride: IntTuple) -> Result<Self> {
        if !shape.congruent(&stride) {
            return Err(LayoutError::incongruent(
                "layout",
                format!("shape {shape} and stride {stride} differ in structure"),
            ));
        }
        shape.check_depth()?;
        if shape.has_basis() {
            return Err(LayoutError::domain(
                "layout",
                format!("shape {shape} holds a basis element; only strides may"),
            ));
        }
        if let Some(bad) = shape.flatten().into_iter().find(|&s| s < 1) {
            return Err(LayoutError::domain(
                "layout",
                format!("shape {shape} has a mode of size {bad}; sizes must be at least 1"),
            ));
        }
        Ok(Layout { shape, stride })
    }

    /// The compact column-major layout of `shape` (CuTe's `make_layout(shape)`): each mode's
    /// stride is the product of the sizes before it, and a size-1 mode gets stride 0.
    ///
    /// @post `result` is a bijection from `[0, size(shape))` onto itself.
    pub fn compact(shape: IntTuple) -> Result<Self> {
        let stride = compact_strides(&shape, 1)?;
        Layout::new(shape, stride)
    }

    /// The rank-1 layout `size:stride` with integer shape.
    pub fn int(size: i64, stride: i64) -> Result<Self> {
        Layout::new(IntTuple::Int(size), IntTuple::Int(stride))
    }

    /// The flat layout of `(shape, stride)` leaves: `(s0,...):(d0,...)`, `s:d` for one leaf, `1:0`
    /// for none.
    pub fn from_leaves(leaves: Vec<(i64, IntTuple)>) -> Result<Self> {
        match leaves.len() {
            0 => Ok(Layout::unit()),
            1 => {
                let (s, d) = leaves.into_iter().next().unwrap_or((1, IntTuple::Int(0)));
                Layout::new(IntTuple::Int(s), d)
            }
            _ => {
                let (s, d): (Vec<_>, Vec<_>) = leaves.into_iter().unzip();
                Layout::new(IntTuple::ints(&s), IntTuple::Tuple(d))
            }
        }
    }

    /// The flat layout `(s0,s1,...):(d0,d1,...)`, or `s:d` when there is exactly one mode.
    pub fn flat(shape: &[i64], stride: &[i64]) -> Result<Self> {
        if shape.len() == 1 && stride.len() == 1 {
            return Layout::int(shape[0], stride[0]);
        }
        Layout::new(IntTuple::ints(shape), IntTuple::ints(stride))
    }

    /// The identity-free layout `1:0`, a unit of the algebra.
    pub fn unit() -> Self {
        Layout {
            shape: IntTuple::Int(1),
            stride: IntTuple::Int(0),
        }
    }

    pub fn shape(&self) -> &IntTuple {
        &self.shape
    }

    pub fn stride(&self) -> &IntTuple {
        &self.stride
    }

    /// Number of top-level modes (1 for an integer shape).
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// Nesting depth of the shape (0 for an integer shape).
    pub fn depth(&self) -> usize {
        self.shape.depth()
    }

    /// Size of the domain: the product of the shape.
    pub fn size(&self) -> Result<i64> {
        self.shape.product()
    }

    /// Size of the codomain as CuTe defines it: `size(coshape(L))`, with
    /// `coshape(L) = 1 + sum_i (s_i - 1) * |d_i|` (a coordinate for basis strides).
    ///
    /// @post for non-negative integer strides, `result == 1 + max_i L(i)`.
    pub fn cosize(&self) -> Result<i64> {
        self.coshape()?
            .try_map(&mut |c| super::error::add("cosize", c, 1))?
            .product()
    }

    /// The largest image plus one, mode by mode of the codomain (an integer for integer strides).
    fn coshape(&self) -> Result<IntTuple> {
        self.stride_leaves()
            .iter()
            .try_fold(IntTuple::Int(0), |acc, (s, d)| {
                let d = d.try_map(&mut |v| Ok(v.abs()))?;
                add_coords(&acc, &scale("cosize", &d, s - 1)?)
            })
    }

    /// The leaves as `(shape, stride)` pairs in depth-first order, strides as integers or basis
    /// elements.
    pub fn stride_leaves(&self) -> Vec<(i64, IntTuple)> {
        self.shape
            .flatten()
            .into_iter()
            .zip(self.stride.leaves())
            .collect()
    }

    /// Whether some stride is a scaled basis element (the layout maps to coordinates).
    pub fn has_basis(&self) -> bool {
        self.stride.has_basis()
    }

    /// Mode `i` as a layout (an integer-shaped layout is its own mode 0).
    pub fn mode(&self, i: usize) -> Result<Layout> {
        match (self.shape.mode(i), self.stride.mode(i)) {
            (Some(s), Some(d)) => Ok(Layout {
                shape: s.clone(),
                stride: d.clone(),
            }),
            _ => Err(LayoutError::domain(
                "mode",
                format!("mode {i} of a rank-{} layout", self.rank()),
            )),
        }
    }

    /// The top-level modes, in order.
    pub fn modes(&self) -> Vec<Layout> {
        let strides = self.stride.modes();
        self.shape
            .modes()
            .iter()
            .zip(strides)
            .map(|(s, d)| Layout {
                shape: s.clone(),
                stride: d.clone(),
            })
            .collect()
    }

    /// The leaves as `(shape, stride)` pairs in depth-first order (a basis stride contributes its
    /// value; see [`Layout::stride_leaves`] for layouts with basis strides).
    pub fn leaves(&self) -> Vec<(i64, i64)> {
        self.shape
            .flatten()
            .into_iter()
            .zip(self.stride.flatten())
            .collect()
    }

    /// The same function with all nesting removed (an integer-shaped layout is unchanged).
    ///
    /// @post `depth(result) <= 1` and `result(i) == self(i)` for all `i`.
    pub fn flatten(&self) -> Layout {
        if self.shape.is_tuple() {
            Layout {
                shape: IntTuple::ints(&self.shape.flatten()),
                stride: IntTuple::Tuple(self.stride.leaves()),
            }
        } else {
            self.clone()
        }
    }

    /// The layout whose modes are `layouts` (CuTe's `make_layout(L0, L1, ...)`).
    ///
    /// @post `rank(result) == layouts.len()` and `mode(result, i) == layouts[i]`.
    pub fn concat(layouts: &[Layout]) -> Result<Layout> {
        let shape = IntTuple::Tuple(layouts.iter().map(|l| l.shape.clone()).collect());
        let stride = IntTuple::Tuple(layouts.iter().map(|l| l.stride.clone()).collect());
        shape.check_depth()?;
        Ok(Layout { shape, stride })
    }

    /// `self` with `x` added as a last mode.
    ///
    /// @post `rank(result) == rank(self) + 1` and the last mode is `x`.
    pub fn append(&self, x: &Layout) -> Result<Layout> {
        let mut modes = self.modes();
        modes.push(x.clone());
        Layout::concat(&modes)
    }

    /// `self` with `x` added as a first mode.
    ///
    /// @post `rank(result) == rank(self) + 1` and mode 0 is `x`.
    pub fn prepend(&self, x: &Layout) -> Result<Layout> {
        let mut modes = vec![x.clone()];
        modes.extend(self.modes());
        Layout::concat(&modes)
    }

    /// The integer this layout maps the coordinate `crd` to.
    ///
    /// An integer coordinate for a tuple shape is split column-major, as in CuTe.
    /// @post `self.crd2idx(&self.idx2crd(i)?)? == self.eval(i)?`.
    pub fn crd2idx(&self, crd: &IntTuple) -> Result<i64> {
        match crd2val(crd, &self.shape, &self.stride)? {
            IntTuple::Int(v) => Ok(v),
            other => Err(LayoutError::domain(
                "crd2idx",
                format!("{self} maps {crd} to the coordinate {other}, not an integer"),
            )),
        }
    }

    /// The value this layout maps `crd` to: an integer, or a coordinate for basis strides.
    ///
    /// @post equals `crd2idx(crd)` for integer strides.
    pub fn crd2val(&self, crd: &IntTuple) -> Result<IntTuple> {
        crd2val(crd, &self.shape, &self.stride)
    }

    /// The natural (shape-congruent) coordinate of the 1-D index `idx`, column-major.
    ///
    /// @post `result` is congruent to `self.shape()` and each leaf is within its mode.
    pub fn idx2crd(&self, idx: i64) -> Result<IntTuple> {
        check_index("idx2crd", idx, &self.shape)?;
        Ok(idx2crd(idx, &self.shape))
    }

    /// `L(i)`: the image of the 1-D index `i`.
    pub fn eval(&self, i: i64) -> Result<i64> {
        self.crd2idx(&IntTuple::Int(i))
    }

    /// `L(i)` for a layout that may have basis strides: an integer or a coordinate.
    pub fn eval_coord(&self, i: i64) -> Result<IntTuple> {
        self.crd2val(&IntTuple::Int(i))
    }

    /// `L(crd)` with `_` in `crd`: the sub-layout over the `_` modes and the offset of the fixed ones.
    ///
    /// @post `result.0(j) + result.1 == self(crd with the _ positions set from j)`.
    pub fn slice_and_offset(&self, crd: &Coord) -> Result<(Layout, i64)> {
        let offset = self.crd2idx(&crd.zeroed())?;
        let (shape, stride) = (slice(crd, &self.shape)?, slice(crd, &self.stride)?);
        Ok((
            Layout::new(IntTuple::Tuple(shape), IntTuple::Tuple(stride))?,
            offset,
        ))
    }

    /// Every image `L(0), L(1), ..., L(size-1)`, for tests and rendering of small layouts.
    pub fn images(&self) -> Result<Vec<i64>> {
        (0..self.size()?).map(|i| self.eval(i)).collect()
    }
}

/// CuTe's `compact_major<LayoutLeft>(shape, init)`: column-major prefix products starting at
/// `init`, with stride 0 for every size-1 mode.
///
/// @post congruent to `shape`; a leaf is 0 where the shape is 1, else the product of `init` and
///       the shape leaves before it.
pub fn compact_strides(shape: &IntTuple, init: i64) -> Result<IntTuple> {
    let mut acc = init;
    shape.try_map(&mut |s| {
        if s == 1 {
            return Ok(0);
        }
        let here = acc;
        acc = mul("compact", acc, s)?;
        Ok(here)
    })
}

/// Errors unless `0 <= idx < size(shape)`.
fn check_index(op: &'static str, idx: i64, shape: &IntTuple) -> Result<()> {
    let size = shape.product()?;
    if (0..size).contains(&idx) {
        Ok(())
    } else {
        Err(LayoutError::domain(
            op,
            format!("coordinate {idx} is out of range for shape {shape} of size {size}"),
        ))
    }
}

/// `crd . stride` after splitting integer coordinates column-major over tuple shapes.
fn crd2val(crd: &IntTuple, shape: &IntTuple, stride: &IntTuple) -> Result<IntTuple> {
    match (crd, shape, stride) {
        (IntTuple::Tuple(c), IntTuple::Tuple(s), IntTuple::Tuple(d)) if c.len() == s.len() => c
            .iter()
            .zip(s)
            .zip(d)
            .try_fold(IntTuple::Int(0), |acc, ((c, s), d)| {
                add_coords(&acc, &crd2val(c, s, d)?)
            }),
        (IntTuple::Int(i), _, _) => {
            check_index("crd2idx", *i, shape)?;
            inner_product(&idx2crd(*i, shape), stride)
        }
        _ => Err(LayoutError::incongruent(
            "crd2idx",
            format!("coordinate {crd} does not match shape {shape}"),
        )),
    }
}

/// The sum of `crd[i] * stride[i]` over congruent tuples.
fn inner_product(crd: &IntTuple, stride: &IntTuple) -> Result<IntTuple> {
    match (crd, stride) {
        (IntTuple::Int(c), d) if !d.is_tuple() => scale("crd2idx", d, *c),
        (IntTuple::Tuple(c), IntTuple::Tuple(d)) => {
            c.iter().zip(d).try_fold(IntTuple::Int(0), |acc, (c, d)| {
                add_coords(&acc, &inner_product(c, d)?)
            })
        }
        _ => Err(LayoutError::incongruent(
            "crd2idx",
            format!("coordinate {crd} does not match stride {stride}"),
        )),
    }
}

/// Column-major split of `idx` (already checked to be in range) into a coordinate congruent to `shape`.
fn idx2crd(idx: i64, shape: &IntTuple) -> IntTuple {
    match shape {
        IntTuple::Int(_) | IntTuple::Basis(..) => IntTuple::Int(idx),
        IntTuple::Tuple(modes) => {
            let mut rest = idx;
            let n = modes.len();
            let crd = modes.iter().enumerate().map(|(k, m)| {
                // In range, so every product fits (it divides size(shape)).
                let size = m.product().unwrap_or(1).max(1);
                let here = if k + 1 == n { rest } else { rest % size };
                rest /= size;
                idx2crd(here, m)
            });
            IntTuple::Tuple(crd.collect())
        }
    }
}

/// The elements of `target` selected by the `_` positions of `crd`, one tuple level per `_`
/// (CuTe's `slice`: fixed positions vanish, tuples of the remaining ones are concatenated).
fn slice(crd: &Coord, target: &IntTuple) -> Result<Vec<IntTuple>> {
    match (crd, target) {
        (Coord::All, t) => Ok(vec![t.clone()]),
        (Coord::Int(_) | Coord::Basis(..), _) => Ok(Vec::new()),
        (Coord::Tuple(c), IntTuple::Tuple(t)) if c.len() == t.len() => {
            let parts = c
                .iter()
                .zip(t)
                .map(|(c, t)| slice(c, t))
                .collect::<Result<Vec<_>>>()?;
            Ok(parts.into_iter().flatten().collect())
        }
        _ => Err(LayoutError::incongruent(
            "slice",
            format!("coordinate does not match {target}"),
        )),
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.shape, self.stride)
    }
}
