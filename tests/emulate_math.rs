//! The emulator's scalar semantics (`tests/emulate.rs`): every kernel IR function and
//! reduction on f64 values, rounded by the caller to the element type.

use super::round;
use irc_kir::{Func, ReduceOp};

pub(super) fn reduce(op: ReduceOp, v: &[f64]) -> f64 {
    match op {
        ReduceOp::Sum => v.iter().sum(),
        ReduceOp::Max => v.iter().copied().fold(f64::NEG_INFINITY, |a, b| {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else {
                a.max(b)
            }
        }),
        ReduceOp::Min => v.iter().copied().fold(f64::INFINITY, |a, b| {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else {
                a.min(b)
            }
        }),
    }
}

pub(super) fn call(f: Func, a: &[f64]) -> f64 {
    let b = |x: bool| f64::from(u8::from(x));
    match f {
        Func::Neg => -a[0],
        Func::Abs => a[0].abs(),
        Func::Exp => a[0].exp(),
        Func::Exp2 => a[0].exp2(),
        Func::Log => a[0].ln(),
        Func::Sqrt => a[0].sqrt(),
        Func::Rsqrt => 1.0 / a[0].sqrt(),
        Func::Tanh => a[0].tanh(),
        Func::Sin => a[0].sin(),
        Func::Cos => a[0].cos(),
        Func::Floor => a[0].floor(),
        Func::Ceil => a[0].ceil(),
        Func::Round => a[0].round_ties_even(),
        Func::Sigmoid => 1.0 / (1.0 + (-a[0]).exp()),
        // NaN stays NaN (PyTorch's relu; both emitters test for it), where `f64::max` drops it.
        Func::Relu if a[0].is_nan() => a[0],
        Func::Relu => a[0].max(0.0),
        Func::Silu => a[0] / (1.0 + (-a[0]).exp()),
        Func::Recip | Func::Rcp => 1.0 / a[0],
        Func::Add => a[0] + a[1],
        Func::Sub => a[0] - a[1],
        Func::Mul => a[0] * a[1],
        Func::Div => a[0] / a[1],
        Func::Max => reduce(ReduceOp::Max, a),
        Func::Min => reduce(ReduceOp::Min, a),
        Func::MaxNum => a[0].max(a[1]),
        Func::Pow => a[0].powf(a[1]),
        Func::Eq => b(a[0] == a[1]),
        Func::Ne => b(a[0] != a[1]),
        Func::Lt => b(a[0] < a[1]),
        Func::Le => b(a[0] <= a[1]),
        Func::Gt => b(a[0] > a[1]),
        Func::Ge => b(a[0] >= a[1]),
        Func::Select => {
            if a[0] != 0.0 {
                a[1]
            } else {
                a[2]
            }
        }
        Func::Index => a[0],
        Func::Cast(d) => round(d, a[0]),
        // cvt.rna.tf32.f32: to nearest, ties away from zero, on the f32's bits.
        Func::Tf32 => {
            let x = a[0] as f32;
            if x.is_nan() {
                return f64::from(x);
            }
            f64::from(f32::from_bits(
                x.to_bits().wrapping_add(0x1000) & 0xffff_e000,
            ))
        }
        Func::Erf => libm::erf(a[0]),
        Func::Gelu => 0.5 * a[0] * (1.0 + libm::erf(a[0] / std::f64::consts::SQRT_2)),
    }
}
