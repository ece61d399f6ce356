//! Comparing a result with the reference: ‖out − ref‖ / ‖ref‖ in f64, with a tolerance by dtype.
//!
//! Tolerances: 1e-2 for f16 and bf16 (the mission's bar), 1e-4 for f32, 1e-10 for f64, exact
//! for integers and i1. An element that is NaN or ±inf in the result where the reference has a
//! finite value (or a different non-finite value) fails the comparison whatever the norm says;
//! elements where both hold the same non-finite value are left out of the norms.

use crate::{InterpError, Tensor};
use irc_ir::DType;

/// The default tolerance on the relative error for results of `dtype`.
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F16 | DType::BF16 => 1e-2,
        DType::F32 => 1e-4,
        DType::F64 => 1e-10,
        DType::I32 | DType::I64 | DType::I1 => 0.0,
    }
}

/// The tolerance for each result of `g`, in `return` order: a float result's is the loosest of
/// its own type's and those of the float values computed on its way (not the parameters, read
/// exactly by both sides, nor constants): a result rounded through bf16 can be checked no closer
/// than bf16's bar, whatever type it ends in (an f32 sum of a bf16 product, an f64 cast of an f32
/// product). An integer result is exact.
pub fn result_tolerances(g: &irc_ir::Graph) -> Vec<f64> {
    g.results
        .iter()
        .map(|&r| {
            let own = tolerance(g.ty(r).dtype);
            if !g.ty(r).dtype.is_float() {
                return own;
            }
            let mut seen = std::collections::HashSet::new();
            let (mut stack, mut tol) = (vec![r], own);
            while let Some(v) = stack.pop() {
                if !seen.insert(v) {
                    continue;
                }
                let Some(inst) = g.def_inst(v) else { continue };
                if inst.op.category() == irc_ir::Category::Constant {
                    continue;
                }
                if g.ty(v).dtype.is_float() {
                    tol = tol.max(tolerance(g.ty(v).dtype));
                }
                stack.extend(&inst.operands);
            }
            tol
        })
        .collect()
}

/// How a result compares with its reference.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// ‖out − ref‖₂ / ‖ref‖₂ over the elements finite in both (‖out − ref‖₂ when ‖ref‖ is 0).
    pub rel_err: f64,
    pub max_abs_err: f64,
    /// Elements non-finite in the result but not (the same way) in the reference.
    pub bad_nonfinite: usize,
    /// Elements compared.
    pub count: usize,
    pub tolerance: f64,
}

impl Comparison {
    pub fn passed(&self) -> bool {
        self.bad_nonfinite == 0 && self.rel_err <= self.tolerance
    }
}

/// Compares `out` with `reference` (same type) at `tolerance(dtype)`.
pub fn compare(out: &Tensor, reference: &Tensor) -> Result<Comparison, InterpError> {
    compare_at(out, reference, tolerance(out.ty.dtype))
}

/// [`compare`] at the given tolerance (a graph's: [`result_tolerances`]).
pub fn compare_at(
    out: &Tensor,
    reference: &Tensor,
    tolerance: f64,
) -> Result<Comparison, InterpError> {
    if out.ty != reference.ty {
        return Err(InterpError::BadInput(format!(
            "cannot compare {} with a reference of {}",
            out.ty, reference.ty
        )));
    }
    let (o, r) = (out.data.to_f64(), reference.data.to_f64());
    let finite = |x: f64, y: f64| x.is_finite() && y.is_finite();
    // The norms are summed in units of the largest magnitude, so squares of values near f64's
    // range (an f64 `exp` of a few hundred) neither overflow nor underflow.
    let scale = o
        .iter()
        .zip(&r)
        .filter(|&(&x, &y)| finite(x, y))
        .map(|(x, y)| x.abs().max(y.abs()))
        .fold(0.0f64, f64::max);
    let unit = if scale > 0.0 { scale } else { 1.0 };
    let (mut diff2, mut ref2, mut max_abs, mut bad) = (0.0f64, 0.0f64, 0.0f64, 0usize);
    for (&x, &y) in o.iter().zip(&r) {
        if finite(x, y) {
            let d = x / unit - y / unit;
            diff2 += d * d;
            ref2 += (y / unit) * (y / unit);
            max_abs = max_abs.max((x - y).abs());
        } else if !(x.is_nan() && y.is_nan()) && x != y {
            bad += 1;
        }
    }
    let rel_err = if ref2 > 0.0 {
        (diff2 / ref2).sqrt()
    } else {
        diff2.sqrt() * unit
    };
    Ok(Comparison {
        rel_err,
        max_abs_err: max_abs,
        bad_nonfinite: bad,
        count: o.len(),
        tolerance,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Data;
    use irc_ir::TensorType;

    fn t(v: Vec<f32>) -> Tensor {
        Tensor::new(TensorType::new([v.len() as u64], DType::F32), Data::F32(v)).unwrap()
    }

    /// Values whose squares overflow f64 (an f64 `exp` of 700) compare by their relative
    /// error, not NaN; so do values whose squares underflow.
    #[test]
    fn norms_of_huge_and_tiny_values() {
        let t64 = |v: Vec<f64>| {
            Tensor::new(TensorType::new([v.len() as u64], DType::F64), Data::F64(v)).unwrap()
        };
        for s in [1e300, 1e-300] {
            let c = compare_at(
                &t64(vec![s, 2.0 * s]),
                &t64(vec![s, 2.0 * s * (1.0 + 1e-12)]),
                1e-10,
            )
            .unwrap();
            assert!(c.passed(), "{s}: {c:?}");
            assert!((c.rel_err - 0.8944e-12).abs() < 1e-15, "{s}: {c:?}");
        }
    }

    #[test]
    fn relative_error_and_nonfinite() {
        let c = compare(&t(vec![1.0, 2.0, 3.0]), &t(vec![1.0, 2.0, 3.0])).unwrap();
        assert!(c.passed() && c.rel_err == 0.0);
        let c = compare(&t(vec![1.0, 0.0]), &t(vec![0.0, 1.0])).unwrap();
        assert!(!c.passed() && (c.rel_err - 2f64.sqrt()).abs() < 1e-12 && c.max_abs_err == 1.0);
        let c = compare(&t(vec![f32::NAN, 1.0]), &t(vec![1.0, 1.0])).unwrap();
        assert_eq!(c.bad_nonfinite, 1);
        assert!(!c.passed());
        let c = compare(
            &t(vec![f32::NAN, f32::INFINITY]),
            &t(vec![f32::NAN, f32::INFINITY]),
        )
        .unwrap();
        assert!(c.passed());
        let c = compare(&t(vec![f32::NEG_INFINITY]), &t(vec![f32::INFINITY])).unwrap();
        assert!(!c.passed());
        let i = |v: Vec<i32>| Tensor::new(TensorType::new([2], DType::I32), Data::I32(v)).unwrap();
        assert!(!compare(&i(vec![1, 2]), &i(vec![1, 3])).unwrap().passed());
        assert!(compare(&t(vec![1.0]), &i(vec![1, 2])).is_err());
    }
}
