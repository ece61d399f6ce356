//! The typing rules of the indexing ops (`slice`, `concat`, `gather`, `iota`) and the slice
//! window arithmetic that the interpreter and the passes share with the verifier.

use crate::infer::{OpError, normalize_axis};
use crate::{Attr, Attrs, DType, TensorType};

type Result<T> = std::result::Result<T, OpError>;

/// What a `slice` reads along one input axis: `len` indices `start, start + step, ...`.
/// Every index is in range (`0 <= start + i·step < dim` for `i < len`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub start: u64,
    pub step: i64,
    pub len: u64,
}

impl Window {
    /// The input index of the window's `i`-th element.
    pub fn index(&self, i: u64) -> u64 {
        (self.start as i128 + i as i128 * self.step as i128) as u64
    }

    /// Whether the window reads a contiguous run (step 1): a layout offset, a view.
    pub fn is_unit(&self) -> bool {
        self.step == 1
    }
}

fn ints(attrs: &Attrs, name: &str) -> Option<Vec<i64>> {
    attrs.get(name).and_then(Attr::as_ints)
}

/// The window along each axis of a `slice` of an operand of `shape` (axes not listed read
/// whole), as Python slicing computes it: negative bounds count from the end, then bounds are
/// clamped to the axis.
pub fn slice_windows(shape: &[u64], attrs: &Attrs) -> Result<Vec<Window>> {
    let rank = shape.len();
    let starts = ints(attrs, "starts").unwrap_or_default();
    let ends = ints(attrs, "ends").unwrap_or_default();
    let n = starts.len();
    if ends.len() != n {
        return Err(OpError::attr(
            "ends",
            format!("'ends' has {} entries but 'starts' has {n}", ends.len()),
        ));
    }
    let steps = ints(attrs, "steps").unwrap_or_else(|| vec![1; n]);
    if steps.len() != n {
        return Err(OpError::attr(
            "steps",
            format!("'steps' has {} entries but 'starts' has {n}", steps.len()),
        ));
    }
    let axes = match ints(attrs, "axes") {
        Some(a) => a,
        None => (0..n as i64).collect(),
    };
    if axes.len() != n {
        return Err(OpError::attr(
            "axes",
            format!("'axes' has {} entries but 'starts' has {n}", axes.len()),
        ));
    }
    let mut windows: Vec<Window> = shape
        .iter()
        .map(|&d| Window {
            start: 0,
            step: 1,
            len: d,
        })
        .collect();
    let mut seen = vec![false; rank];
    for k in 0..n {
        let a = normalize_axis(axes[k], rank).ok_or_else(|| {
            OpError::attr(
                "axes",
                format!("axis {} is out of range for rank {rank}", axes[k]),
            )
        })?;
        if std::mem::replace(&mut seen[a], true) {
            return Err(OpError::attr(
                "axes",
                format!("axis {} is repeated", axes[k]),
            ));
        }
        let step = steps[k];
        if step == 0 {
            return Err(OpError::attr("steps", "a 'steps' entry is 0"));
        }
        let dim = shape[a] as i128;
        let norm = |v: i64| {
            let v = v as i128;
            if v < 0 { v + dim } else { v }
        };
        let (lo, hi) = if step > 0 { (0, dim) } else { (-1, dim - 1) };
        let start = norm(starts[k]).clamp(lo, hi);
        let end = norm(ends[k]).clamp(lo, hi);
        let s = step as i128;
        let span = if step > 0 { end - start } else { start - end };
        let len = if span <= 0 {
            0
        } else {
            (span + s.abs() - 1) / s.abs()
        };
        if len == 0 {
            return Err(OpError::stmt(format!(
                "'slice' of axis {a} (size {dim}) from {} to {} by {step} is empty; tensors have no zero-sized dims",
                starts[k], ends[k]
            )));
        }
        windows[a] = Window {
            start: start as u64,
            step,
            len: len as u64,
        };
    }
    Ok(windows)
}

/// `concat`: every operand has one rank and agrees on every dim but the axis.
pub fn infer_concat(xs: &[&TensorType], attrs: &Attrs) -> Result<TensorType> {
    let first = xs[0];
    let axis = attrs.get("axis").and_then(Attr::as_int).unwrap_or(0);
    let a = normalize_axis(axis, first.rank()).ok_or_else(|| {
        OpError::attr(
            "axis",
            format!("axis {axis} is out of range for rank {}", first.rank()),
        )
    })?;
    let mut total: u64 = 0;
    for (i, x) in xs.iter().enumerate() {
        let agrees = x.rank() == first.rank()
            && (0..x.rank()).all(|d| d == a || x.shape[d] == first.shape[d]);
        if !agrees {
            return Err(OpError::operand(
                i,
                format!("'concat' operand {x} does not match {first} except along axis {axis}"),
            ));
        }
        total = total.saturating_add(x.shape[a]);
    }
    let mut shape = first.shape.clone();
    shape[a] = total;
    Ok(first.with_shape(shape))
}

/// `gather`: `x.shape[:axis] + indices.shape + x.shape[axis+1:]`.
pub fn infer_gather(x: &TensorType, indices: &TensorType, attrs: &Attrs) -> Result<TensorType> {
    let axis = attrs.get("axis").and_then(Attr::as_int).unwrap_or(0);
    let a = normalize_axis(axis, x.rank()).ok_or_else(|| {
        OpError::attr(
            "axis",
            format!("axis {axis} is out of range for rank {}", x.rank()),
        )
    })?;
    let mut shape = x.shape[..a].to_vec();
    shape.extend_from_slice(&indices.shape);
    shape.extend_from_slice(&x.shape[a + 1..]);
    Ok(x.with_shape(shape))
}

/// `iota`: the written type is the type; its axis must exist and its dtype be numeric.
pub fn infer_iota(attrs: &Attrs, declared: Option<&TensorType>) -> Result<TensorType> {
    let Some(ty) = declared else {
        return Err(OpError::stmt(
            "'iota' needs its result type written, e.g. `: tensor<4x8xi32>`",
        ));
    };
    if ty.dtype == DType::I1 {
        return Err(OpError::stmt(
            "'iota' produces float or integer dtypes, not i1",
        ));
    }
    let axis = attrs.get("axis").and_then(Attr::as_int).unwrap_or(0);
    normalize_axis(axis, ty.rank()).ok_or_else(|| {
        OpError::attr(
            "axis",
            format!("axis {axis} is out of range for rank {}", ty.rank()),
        )
    })?;
    Ok(ty.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::ints as int_attr;

    fn win(shape: &[u64], starts: &[i64], ends: &[i64], steps: &[i64]) -> Result<Vec<Window>> {
        let attrs = Attrs::new()
            .with("starts", int_attr(starts))
            .with("ends", int_attr(ends))
            .with("steps", int_attr(steps));
        slice_windows(shape, &attrs)
    }

    #[test]
    fn python_slicing() {
        let w = |s, e, st| win(&[10], &[s], &[e], &[st]).map(|w| w[0]);
        // x[2:7]
        assert_eq!(w(2, 7, 1).unwrap().len, 5);
        // x[-3:] with an i64::MAX end, as ONNX exporters write it
        let t = w(-3, i64::MAX, 1).unwrap();
        assert_eq!((t.start, t.len), (7, 3));
        // x[::-1] with ONNX's INT64_MIN end
        let r = w(-1, i64::MIN, -1).unwrap();
        assert_eq!((r.start, r.step, r.len), (9, -1, 10));
        assert_eq!(r.index(9), 0);
        // x[1:8:3] = 1, 4, 7
        assert_eq!(w(1, 8, 3).unwrap().len, 3);
        assert!(w(5, 2, 1).is_err());
        assert!(w(0, 2, 0).is_err());
    }
}
