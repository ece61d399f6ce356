//! Small constructors of kernel-IR expressions and layouts the lowering and every template
//! use (`bx`, `add`, `mul`, `sub`, `div`, `rem`, `lt`, `int`, `lit`, `cast_to`, `concat`,
//! `row_threads`, `Builder::guarded`).

use crate::lower::{Builder, R, THREADS, internal};
use irc_ir::DType;
use irc_kir::{Builtin, Expr, Func, IdxOp, Stmt, Ty};
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

pub(crate) fn sub(a: Expr, b: Expr) -> Expr {
    Expr::idx(IdxOp::Sub, a, b)
}

pub(crate) fn div(a: Expr, b: Expr) -> Expr {
    Expr::idx(IdxOp::Div, a, b)
}

pub(crate) fn rem(a: Expr, b: Expr) -> Expr {
    Expr::idx(IdxOp::Rem, a, b)
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
        // Integer literals stay exact (an f64 cannot hold every i64), saturated to the type's
        // range (an i32 max's identity is i32::MIN, whatever a conversion would wrap to).
        let (lo, hi) = match d {
            DType::I32 => (i64::from(i32::MIN), i64::from(i32::MAX)),
            _ => (i64::MIN, i64::MAX),
        };
        let i = if v.is_nan() {
            0
        } else if v >= hi as f64 {
            hi
        } else if v <= lo as f64 {
            lo
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

impl Builder<'_, '_> {
    /// `body`, inside `if cond` where there is a condition.
    pub(crate) fn guarded(&mut self, cond: Option<Expr>, body: Vec<Stmt>) {
        match cond {
            Some(cond) => self.out.push(Stmt::If {
                cond,
                body,
                orelse: vec![],
            }),
            None => self.out.extend(body),
        }
    }

    /// Scalar function `f` of `args` (already in [`math_dtype`]) for a result of `dtype`. Where
    /// the result is rounded to a 16-bit float next, the transcendental ops run on the SFU's
    /// approximate `exp2` and `rcp` (relative errors about 2^-22, against the 2^-9 to 2^-12 of
    /// the rounding; Triton computes every `exp` so) instead of the accurate sequences:
    /// `exp(x) = 2^(x·log2 e)`, `sigmoid(x) = rcp(1 + exp(−x))`,
    /// `silu(x) = (x·s) · rcp((1 + exp(−x))·s)` (`s` a power of two keeping the reciprocal
    /// normal), and `gelu(x) = x · Φ(x)` with `Φ` from
    /// Abramowitz and Stegun's 7.1.26 (`erfc(z) ≈ P(t)·e^(−z²)`, `t = 1/(1 + p·z)`, absolute
    /// error below 1.5e-7), taken as `erfc` itself below zero (no cancellation in `1 + erf`).
    pub(crate) fn scalar_math(&mut self, f: Func, args: Vec<Expr>, dtype: DType) -> Expr {
        let approximated = matches!(f, Func::Exp | Func::Sigmoid | Func::Silu | Func::Gelu);
        if !matches!(dtype, DType::F16 | DType::BF16) || args.len() != 1 || !approximated {
            return Expr::call(f, args);
        }
        let x = self.let_("x", Ty::Elem(DType::F32), args[0].clone());
        let c = |v: f64| Expr::lit(DType::F32, v);
        let call = |f: Func, a: Vec<Expr>| Expr::call(f, a);
        let fmul = |a: Expr, b: Expr| call(Func::Mul, vec![a, b]);
        let fadd = |a: Expr, b: Expr| call(Func::Add, vec![a, b]);
        let exp = |a: Expr| call(Func::Exp2, vec![fmul(a, c(std::f64::consts::LOG2_E))]);
        let f32 = Ty::Elem(DType::F32);
        match f {
            Func::Exp => exp(x),
            Func::Sigmoid => call(Func::Rcp, vec![fadd(c(1.0), exp(call(Func::Neg, vec![x])))]),
            Func::Silu => {
                // (x·s) · rcp((1 + exp(−x))·s), s = 2^-64 below x = −64 and 1 elsewhere (two
                // SFU operations, not three): x · rcp(1 + exp(−x)) alone would flush the
                // reciprocal to zero where it is subnormal (x near −88) though the product is
                // a normal value of bf16; s keeps it normal, and is exact.
                let s = call(
                    Func::Select,
                    vec![
                        call(Func::Lt, vec![x.clone(), c(-64.0)]),
                        c(2f64.powi(-64)),
                        c(1.0),
                    ],
                );
                let s = self.let_("s", f32, s);
                let den = fadd(c(1.0), exp(call(Func::Neg, vec![x.clone()])));
                fmul(fmul(x, s.clone()), call(Func::Rcp, vec![fmul(den, s)]))
            }
            Func::Gelu => {
                // z = |x|/√2; q = P(t)·e^(−z²) = erfc(z); Φ(x) = q/2 below zero, else 1 − q/2.
                let z = call(
                    Func::Abs,
                    vec![fmul(x.clone(), c(std::f64::consts::FRAC_1_SQRT_2))],
                );
                let z = self.let_("z", f32, z);
                let t = call(
                    Func::Rcp,
                    vec![fadd(c(1.0), fmul(c(0.327_591_1), z.clone()))],
                );
                let t = self.let_("t", f32, t);
                let coeffs = [
                    1.061_405_429,
                    -1.453_152_027,
                    1.421_413_741,
                    -0.284_496_736,
                    0.254_829_592,
                ];
                let mut p = c(coeffs[0]);
                for &a in &coeffs[1..] {
                    p = fadd(fmul(p, t.clone()), c(a));
                }
                let p = fmul(p, t);
                let ez = exp(call(Func::Neg, vec![fmul(z.clone(), z)]));
                let half_q = self.let_("hq", f32, fmul(fmul(p, ez), c(0.5)));
                let below = call(Func::Lt, vec![x.clone(), c(0.0)]);
                let phi = call(
                    Func::Select,
                    vec![below, half_q.clone(), call(Func::Sub, vec![c(1.0), half_q])],
                );
                fmul(x, phi)
            }
            _ => call(f, args),
        }
    }
}
