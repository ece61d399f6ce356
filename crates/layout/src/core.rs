//! The [`Layout`] type: a congruent pair of hierarchical shape and stride, and the functions that
//! take it apart and put it together (rank, depth, size, cosize, modes, flatten, `crd2idx`,
//! `idx2crd`, evaluation, slicing, `make_layout`, append, prepend).

use std::fmt;

use super::error::{LayoutError, Result, add, mul};
use super::int_tuple::IntTuple;

/// A CuTe layout `shape:stride`: a function from coordinates (or 1-D indices) to integers.
///
/// Invariants: `shape` and `stride` are congruent, every shape leaf is at least 1, and the nesting
/// depth is at most [`super::MAX_DEPTH`].
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
}

impl Coord {
    /// Whether some position is `_`.
    pub fn has_all(&self) -> bool {
        match self {
            Coord::Int(_) => false,
            Coord::All => true,
            Coord::Tuple(t) => t.iter().any(Coord::has_all),
        }
    }

    /// The coordinate with `_` read as 0 (the offset of a slice).
    pub fn zeroed(&self) -> IntTuple {
        match self {
            Coord::Int(v) => IntTuple::Int(*v),
            Coord::All => IntTuple::Int(0),
            Coord::Tuple(t) => IntTuple::Tuple(t.iter().map(Coord::zeroed).collect()),
        }
    }
}

impl From<&IntTuple> for Coord {
    fn from(t: &IntTuple) -> Self {
        match t {
            IntTuple::Int(v) => Coord::Int(*v),
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
        if let Some(bad) = shape.flatten().into_iter().find(|&s| s < 1) {
            return Err(LayoutError::domain(
                "layout",
                format!("shape {shape} has a mode of size {bad}; sizes must be at least 1"),
            ));
        }
        Ok(Layout { shape, stride })
    }

    /// The compact column-major layout of `shape` (CuTe's `make_layout(shape)`).
    ///
    /// @post `result.stride() == shape.prefix_product(1)`.
    pub fn compact(shape: IntTuple) -> Result<Self> {
        let stride = shape.prefix_product(1)?;
        Layout::new(shape, stride)
    }

    /// The rank-1 layout `size:stride` with integer shape.
    pub fn int(size: i64, stride: i64) -> Result<Self> {
        Layout::new(IntTuple::Int(size), IntTuple::Int(stride))
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

    /// Size of the codomain as CuTe defines it: `L(size(L) - 1) + 1`.
    ///
    /// @post for non-negative strides, `result == 1 + max_i L(i)`.
    pub fn cosize(&self) -> Result<i64> {
        let last = self.eval(self.size()? - 1)?;
        add("cosize", last, 1)
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

    /// The leaves as `(shape, stride)` pairs in depth-first order.
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
        match self.shape {
            IntTuple::Int(_) => self.clone(),
            IntTuple::Tuple(_) => Layout {
                shape: IntTuple::ints(&self.shape.flatten()),
                stride: IntTuple::ints(&self.stride.flatten()),
            },
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
        crd2idx(crd, &self.shape, &self.stride)
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
fn crd2idx(crd: &IntTuple, shape: &IntTuple, stride: &IntTuple) -> Result<i64> {
    match (crd, shape, stride) {
        (IntTuple::Tuple(c), IntTuple::Tuple(s), IntTuple::Tuple(d)) if c.len() == s.len() => c
            .iter()
            .zip(s)
            .zip(d)
            .try_fold(0, |acc, ((c, s), d)| add("crd2idx", acc, crd2idx(c, s, d)?)),
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
fn inner_product(crd: &IntTuple, stride: &IntTuple) -> Result<i64> {
    match (crd, stride) {
        (IntTuple::Int(c), IntTuple::Int(d)) => mul("crd2idx", *c, *d),
        (IntTuple::Tuple(c), IntTuple::Tuple(d)) => c
            .iter()
            .zip(d)
            .try_fold(0, |acc, (c, d)| add("crd2idx", acc, inner_product(c, d)?)),
        _ => Err(LayoutError::incongruent(
            "crd2idx",
            format!("coordinate {crd} does not match stride {stride}"),
        )),
    }
}

/// Column-major split of `idx` (already checked to be in range) into a coordinate congruent to `shape`.
fn idx2crd(idx: i64, shape: &IntTuple) -> IntTuple {
    match shape {
        IntTuple::Int(_) => IntTuple::Int(idx),
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
        (Coord::Int(_), _) => Ok(Vec::new()),
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
