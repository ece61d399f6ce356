//! Small constructors of kernel-IR expressions and layouts the lowering and every template
//! use (`bx`, `add`, `mul`, `lt`, `int`, `lit`, `cast_to`, `concat`, `row_threads`).

use crate::lower::{R, THREADS, internal};
use irc_ir::DType;
use irc_kir::{Builtin, Expr, Func, IdxOp};
use irc_layout::Layout;

pub(crate) fn bx(b: Builtin) -> Expr {
    Expr::Builtin(b)
}

pub(crate) fn add(a: Expr, b: Expr) -> Expr {
    Expr::idx(IdxOp::Add, a, b)
}

pub(crate) fn mul(a: Expr, b: Expr) -> Expr {
    Expr::idx(IdxOp::Mul, a, b)
}

pub(crate) fn lt(a: Expr, b: Expr) -> Expr {
    Expr::idx(IdxOp::Lt, a, b)
}

pub(crate) fn int(n: u64) -> Expr {
    Expr::Int(n as i64)
}

pub(crate) fn concat(modes: &[Layout]) -> R<Layout> {
    Layout::concat(modes).map_err(internal)
}

/// Threads for a block that reduces rows of `k` elements.
pub(crate) fn row_threads(k: u64) -> u32 {
    k.next_power_of_two().clamp(32, u64::from(THREADS)) as u32
}

pub(crate) fn lit(d: DType, v: f64) -> Expr {
    if d.is_int() || d == DType::I1 {
        // Integer literals stay exact (an f64 cannot hold every i64).
        let i = if v.is_nan() {
            0
        } else if v >= i64::MAX as f64 {
            i64::MAX
        } else if v <= i64::MIN as f64 {
            i64::MIN
        } else {
            v as i64
        };
        Expr::cast(d, Expr::Int(i))
    } else {
        Expr::lit(d, v)
    }
}

/// `e` (of dtype `from`) converted to `to`, with no cast when they are the same.
pub(crate) fn cast_to(to: DType, from: DType, e: Expr) -> Expr {
    if to == from { e } else { Expr::cast(to, e) }
}

/// The dtype element math runs in: f32 for 16-bit floats, f64 for f64, i64 for integers.
pub(crate) fn math_dtype(d: DType) -> DType {
    match d {
        DType::F16 | DType::BF16 | DType::F32 => DType::F32,
        DType::F64 => DType::F64,
        DType::I32 | DType::I64 | DType::I1 => DType::I64,
    }
}

/// Scalar function `f` of `args` (already in [`math_dtype`]) for a result of `dtype`. An
/// exponential rounded to a 16-bit float is `2^(x·log2 e)` on the SFU's approximate `ex2`
/// (relative error about 2^-22 within the range where f32's `exp` is normal, against the
/// 2^-9 to 2^-12 of the rounding that follows; Triton computes every `exp` so), not the
/// accurate `expf`'s longer sequence.
pub(crate) fn scalar_math(f: Func, args: Vec<Expr>, dtype: DType) -> Expr {
    match (f, dtype, args.as_slice()) {
        (Func::Exp, DType::F16 | DType::BF16, [x]) => {
            let scaled = Expr::call(
                Func::Mul,
                vec![x.clone(), Expr::lit(DType::F32, std::f64::consts::LOG2_E)],
            );
            Expr::call(Func::Exp2, vec![scaled])
        }
        _ => Expr::call(f, args),
    }
}
