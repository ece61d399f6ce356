//! Hierarchical integer tuples: the shapes, strides and coordinates of layouts.
//!
//! An [`IntTuple`] is an integer, a scaled basis element, or a (possibly empty) tuple of
//! `IntTuple`s, printed in CuTe notation without spaces: `(4,(2,3))`. A tuple of one element
//! prints as `(4)` and is distinct from the integer `4`, as `tuple<int>` is distinct from `int`.
//!
//! A scaled basis element `v@i` (CuTe's `ScaledBasis<v, i>`, `E<i>` when `v == 1`) is the
//! coordinate `(0,...,0,v)` with `v` in mode `i`; `v@j@i` is `E<i,j>` scaled by `v` (mode `i`, then
//! its submode `j`; CuTe prints the innermost mode first). Only strides hold them: a layout with
//! such strides maps indices to coordinates (`(4,8):(1@0,1@1)` is the identity on `(4,8)`), which
//! is how CuTe describes TMA and identity tensors.

use std::fmt;

use super::error::{LayoutError, MAX_DEPTH, Result, mul};

/// An integer or a tuple of `IntTuple`s.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum IntTuple {
    Int(i64),
    Tuple(Vec<IntTuple>),
    /// `value @ path`: `value` times the basis element `E<path[0], path[1], ...>`
    /// (mode `path[0]`, then submode `path[1]`, ...); `path` is never empty.
    Basis(i64, Vec<usize>),
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
            IntTuple::Tuple(_) | IntTuple::Basis(..) => None,
        }
    }

    /// Whether this is a tuple.
    pub fn is_tuple(&self) -> bool {
        matches!(self, IntTuple::Tuple(_))
    }

    /// Number of top-level modes; an integer has rank 1.
    pub fn rank(&self) -> usize {
        match self {
            IntTuple::Int(_) | IntTuple::Basis(..) => 1,
            IntTuple::Tuple(t) => t.len(),
        }
    }

    /// Nesting depth: 0 for an integer, 1 + the deepest element for a tuple.
    pub fn depth(&self) -> usize {
        match self {
            IntTuple::Int(_) | IntTuple::Basis(..) => 0,
            IntTuple::Tuple(t) => 1 + t.iter().map(IntTuple::depth).max().unwrap_or(0),
        }
    }

    /// Mode `i`. An integer has the single mode 0, itself (as in pycute's `layout[0]`).
    pub fn mode(&self, i: usize) -> Option<&IntTuple> {
        match self {
            IntTuple::Int(_) | IntTuple::Basis(..) => (i == 0).then_some(self),
            IntTuple::Tuple(t) => t.get(i),
        }
    }

    /// The top-level modes as a slice (an integer is its own single mode).
    pub fn modes(&self) -> &[IntTuple] {
        match self {
            IntTuple::Int(_) | IntTuple::Basis(..) => std::slice::from_ref(self),
            IntTuple::Tuple(t) => t,
        }
    }

    /// Product of all leaves (1 for the empty tuple); a basis leaf counts its value.
    pub fn product(&self) -> Result<i64> {
        match self {
            IntTuple::Int(v) | IntTuple::Basis(v, _) => Ok(*v),
            IntTuple::Tuple(t) => t
                .iter()
                .try_fold(1, |acc, e| mul("product", acc, e.product()?)),
        }
    }

    /// The leaf values in depth-first order (a basis leaf contributes its value).
    pub fn flatten(&self) -> Vec<i64> {
        let mut out = Vec::new();
        self.flatten_into(&mut out);
        out
    }

    fn flatten_into(&self, out: &mut Vec<i64>) {
        match self {
            IntTuple::Int(v) | IntTuple::Basis(v, _) => out.push(*v),
            IntTuple::Tuple(t) => t.iter().for_each(|e| e.flatten_into(out)),
        }
    }

    /// Whether `self` and `other` have the same tuple structure (CuTe's `congruent`).
    pub fn congruent(&self, other: &IntTuple) -> bool {
        match (self, other) {
            (IntTuple::Tuple(a), IntTuple::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.congruent(y))
            }
            (IntTuple::Tuple(_), _) | (_, IntTuple::Tuple(_)) => false,
            _ => true,
        }
    }

    /// The same structure with every leaf replaced by `f(leaf)`.
    pub fn try_map(&self, f: &mut impl FnMut(i64) -> Result<i64>) -> Result<IntTuple> {
        match self {
            IntTuple::Int(v) => Ok(IntTuple::Int(f(*v)?)),
            IntTuple::Basis(v, p) => Ok(IntTuple::Basis(f(*v)?, p.clone())),
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

    /// The leaves (integers and basis elements) in depth-first order.
    pub fn leaves(&self) -> Vec<IntTuple> {
        match self {
            IntTuple::Tuple(t) => t.iter().flat_map(IntTuple::leaves).collect(),
            leaf => vec![leaf.clone()],
        }
    }

    /// Whether some leaf is a scaled basis element.
    pub fn has_basis(&self) -> bool {
        match self {
            IntTuple::Int(_) => false,
            IntTuple::Basis(..) => true,
            IntTuple::Tuple(t) => t.iter().any(IntTuple::has_basis),
        }
    }

    /// Whether this is the integer `v`.
    pub fn is_int(&self, v: i64) -> bool {
        *self == IntTuple::Int(v)
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
            IntTuple::Basis(v, path) => {
                write!(f, "{v}")?;
                path.iter().rev().try_for_each(|m| write!(f, "@{m}"))
            }
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

/// A stride leaf times an integer: `d * k` (a basis element keeps its mode).
///
/// @post `scale(d, k)` evaluates to `k` times what `d` evaluates to.
pub fn scale(op: &'static str, d: &IntTuple, k: i64) -> Result<IntTuple> {
    d.try_map(&mut |v| mul(op, v, k))
}

/// The product of two stride leaves, at most one of which is a basis element.
pub fn leaf_mul(op: &'static str, a: &IntTuple, b: &IntTuple) -> Result<IntTuple> {
    match (a, b) {
        (IntTuple::Int(k), d) | (d, IntTuple::Int(k)) if !d.is_tuple() => scale(op, d, *k),
        _ => Err(LayoutError::domain(
            op,
            format!("cannot multiply {a} by {b}; at most one factor may be a basis element"),
        )),
    }
}

/// The basis element `v@path` as the arithmetic tuple it stands for: `(0,..,0,v)` with `v` at
/// `path` (an integer for an empty path).
pub fn basis_tuple(v: i64, path: &[usize]) -> IntTuple {
    match path.split_first() {
        None => IntTuple::Int(v),
        Some((&i, rest)) => {
            let mut t = vec![IntTuple::Int(0); i];
            t.push(basis_tuple(v, rest));
            IntTuple::Tuple(t)
        }
    }
}

/// Sum of two coordinates (CuTe's `ArithmeticTuple` addition): integers add; tuples add element
/// by element, the shorter padded with zeros; a basis element is its tuple; `0` is the identity.
///
/// @post `add_coords(a, 0) == a` and the sum is commutative.
pub fn add_coords(a: &IntTuple, b: &IntTuple) -> Result<IntTuple> {
    use IntTuple::*;
    match (a, b) {
        (Int(x), Int(y)) => Ok(Int(super::error::add("add", *x, *y)?)),
        (Int(0), other) | (other, Int(0)) => Ok(other.clone()),
        (Basis(v, p), other) | (other, Basis(v, p)) => add_coords(&basis_tuple(*v, p), other),
        (Tuple(x), Tuple(y)) => {
            let n = x.len().max(y.len());
            let zero = Int(0);
            (0..n)
                .map(|i| add_coords(x.get(i).unwrap_or(&zero), y.get(i).unwrap_or(&zero)))
                .collect::<Result<Vec<_>>>()
                .map(Tuple)
        }
        _ => Err(LayoutError::domain(
            "add",
            format!("cannot add the integer and the coordinate in {a} + {b}"),
        )),
    }
}
