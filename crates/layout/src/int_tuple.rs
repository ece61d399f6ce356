//! Hierarchical integer tuples: the shapes, strides and coordinates of layouts.
//!
//! An [`IntTuple`] is an integer or a (possibly empty) tuple of `IntTuple`s, printed in CuTe
//! notation without spaces: `(4,(2,3))`. A tuple of one element prints as `(4)` and is distinct
//! from the integer `4`, as `tuple<int>` is distinct from `int` in CuTe.

use std::fmt;

use super::error::{LayoutError, MAX_DEPTH, Result, mul};

/// An integer or a tuple of `IntTuple`s.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum IntTuple {
    Int(i64),
    Tuple(Vec<IntTuple>),
}

impl From<i64> for IntTuple {
    fn from(v: i64) -> Self {
        IntTuple::Int(v)
    }
}

impl IntTuple {
    /// A tuple of integers, `(v0,v1,...)`.
    pub fn ints(vs: &[i64]) -> Self {
        IntTuple::Tuple(vs.iter().map(|&v| IntTuple::Int(v)).collect())
    }

    /// The tuple of `items`, or the single item itself when there is exactly one
    /// (CuTe's `unwrap`, used where pycute returns `Layout(s, d)` for a single mode).
    pub fn unwrap_single(mut items: Vec<IntTuple>) -> Self {
        if items.len() == 1 {
            items.pop().unwrap_or(IntTuple::Int(1))
        } else {
            IntTuple::Tuple(items)
        }
    }

    /// The integer, when this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            IntTuple::Int(v) => Some(*v),
            IntTuple::Tuple(_) => None,
        }
    }

    /// Whether this is a tuple.
    pub fn is_tuple(&self) -> bool {
        matches!(self, IntTuple::Tuple(_))
    }

    /// Number of top-level modes; an integer has rank 1.
    pub fn rank(&self) -> usize {
        match self {
            IntTuple::Int(_) => 1,
            IntTuple::Tuple(t) => t.len(),
        }
    }

    /// Nesting depth: 0 for an integer, 1 + the deepest element for a tuple.
    pub fn depth(&self) -> usize {
        match self {
            IntTuple::Int(_) => 0,
            IntTuple::Tuple(t) => 1 + t.iter().map(IntTuple::depth).max().unwrap_or(0),
        }
    }

    /// Mode `i`. An integer has the single mode 0, itself (as in pycute's `layout[0]`).
    pub fn mode(&self, i: usize) -> Option<&IntTuple> {
        match self {
            IntTuple::Int(_) => (i == 0).then_some(self),
            IntTuple::Tuple(t) => t.get(i),
        }
    }

    /// The top-level modes as a slice (an integer is its own single mode).
    pub fn modes(&self) -> &[IntTuple] {
        match self {
            IntTuple::Int(_) => std::slice::from_ref(self),
            IntTuple::Tuple(t) => t,
        }
    }

    /// Product of all leaves (1 for the empty tuple).
    pub fn product(&self) -> Result<i64> {
        match self {
            IntTuple::Int(v) => Ok(*v),
            IntTuple::Tuple(t) => t
                .iter()
                .try_fold(1, |acc, e| mul("product", acc, e.product()?)),
        }
    }

    /// The leaves in depth-first order.
    pub fn flatten(&self) -> Vec<i64> {
        let mut out = Vec::new();
        self.flatten_into(&mut out);
        out
    }

    fn flatten_into(&self, out: &mut Vec<i64>) {
        match self {
            IntTuple::Int(v) => out.push(*v),
            IntTuple::Tuple(t) => t.iter().for_each(|e| e.flatten_into(out)),
        }
    }

    /// Whether `self` and `other` have the same tuple structure (CuTe's `congruent`).
    pub fn congruent(&self, other: &IntTuple) -> bool {
        match (self, other) {
            (IntTuple::Int(_), IntTuple::Int(_)) => true,
            (IntTuple::Tuple(a), IntTuple::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.congruent(y))
            }
            _ => false,
        }
    }

    /// The same structure with every leaf replaced by `f(leaf)`.
    pub fn try_map(&self, f: &mut impl FnMut(i64) -> Result<i64>) -> Result<IntTuple> {
        match self {
            IntTuple::Int(v) => Ok(IntTuple::Int(f(*v)?)),
            IntTuple::Tuple(t) => Ok(IntTuple::Tuple(
                t.iter().map(|e| e.try_map(f)).collect::<Result<_>>()?,
            )),
        }
    }

    /// Column-major (exclusive) prefix products starting at `init`: the compact strides of a shape.
    ///
    /// @post `result` is congruent to `self`; flattened, `result[0] == init` and
    /// `result[i+1] == result[i] * self[i]`.
    pub fn prefix_product(&self, init: i64) -> Result<IntTuple> {
        let mut acc = init;
        self.try_map(&mut |s| {
            let here = acc;
            acc = mul("prefix_product", acc, s)?;
            Ok(here)
        })
    }

    /// Errors unless the nesting is at most [`MAX_DEPTH`].
    pub fn check_depth(&self) -> Result<()> {
        if self.depth() > MAX_DEPTH {
            Err(LayoutError::TooDeep)
        } else {
            Ok(())
        }
    }
}

impl fmt::Display for IntTuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntTuple::Int(v) => write!(f, "{v}"),
            IntTuple::Tuple(t) => {
                f.write_str("(")?;
                for (i, e) in t.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{e}")?;
                }
                f.write_str(")")
            }
        }
    }
}
