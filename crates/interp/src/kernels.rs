//! The reference implementation of each op class, with PyTorch's numerics: 16-bit floats and
//! f32 compute in f32 ("op math"), f64 in f64, integers in i64; every result is rounded to its
//! dtype once, at the op's output.

use crate::InterpError;
use crate::tensor::{Data, Tensor, map_data};
use crate::walk::{broadcast_strides, contiguous_strides, gather, par_map};
use irc_ir::infer::{flatten_value, matmul_shape, normalize_axis, reduction_axes};
use irc_ir::{Attr, Attrs, DType, OpKind, TensorType};
use num_traits::Float;
use rayon::prelude::*;

/// The arithmetic an element type computes in.
enum Domain {
    F32,
    F64,
    Int,
    Bool,
}

fn domain(d: DType) -> Domain {
    match d {
        DType::F16 | DType::BF16 | DType::F32 => Domain::F32,
        DType::F64 => Domain::F64,
        DType::I32 | DType::I64 => Domain::Int,
        DType::I1 => Domain::Bool,
    }
}

/// Floats the reference computes in.
pub trait Real: Float + Send + Sync + Default + std::iter::Sum {
    fn erf(self) -> Self;
    fn from_f64(x: f64) -> Self;
}

impl Real for f32 {
    fn erf(self) -> f32 {
        libm::erff(self)
    }
    fn from_f64(x: f64) -> f32 {
        x as f32
    }
}

impl Real for f64 {
    fn erf(self) -> f64 {
        libm::erf(self)
    }
    fn from_f64(x: f64) -> f64 {
        x
    }
}

/// The nearest integer, halves to the even one (IEEE `roundToIntegralTiesToEven`); NaN and the
/// infinities as they are.
pub fn round_half_even<T: Float>(x: T) -> T {
    let f = x.floor();
    let d = x - f;
    let half = T::from(0.5).unwrap_or_else(T::nan);
    let two = T::one() + T::one();
    if d < half {
        f
    } else if d > half {
        f + T::one()
    } else if d == half {
        if (f / two).floor() * two == f {
            f
        } else {
            f + T::one()
        }
    } else {
        x
    }
}

/// NaN-propagating maximum, as `torch.maximum`.
fn nan_max<T: Float>(a: T, b: T) -> T {
    if a.is_nan() || b.is_nan() {
        T::nan()
    } else if a > b {
        a
    } else {
        b
    }
}

fn nan_min<T: Float>(a: T, b: T) -> T {
    if a.is_nan() || b.is_nan() {
        T::nan()
    } else if a < b {
        a
    } else {
        b
    }
}

fn unary_real<T: Real>(op: OpKind, x: T) -> T {
    let one = T::one();
    match op {
        OpKind::Neg => -x,
        OpKind::Abs => x.abs(),
        OpKind::Exp => x.exp(),
        OpKind::Log => x.ln(),
        OpKind::Sqrt => x.sqrt(),
        OpKind::Rsqrt => one / x.sqrt(),
        OpKind::Tanh => x.tanh(),
        OpKind::Sigmoid => one / (one + (-x).exp()),
        OpKind::Relu => {
            if x.is_nan() {
                x
            } else {
                nan_max(x, T::zero())
            }
        }
        OpKind::Gelu => {
            x * T::from_f64(0.5) * (one + (x * T::from_f64(std::f64::consts::FRAC_1_SQRT_2)).erf())
        }
        OpKind::Silu => x / (one + (-x).exp()),
        OpKind::Recip => one / x,
        OpKind::Erf => x.erf(),
        OpKind::Sin => x.sin(),
        OpKind::Cos => x.cos(),
        OpKind::Floor => x.floor(),
        OpKind::Ceil => x.ceil(),
        OpKind::Round => round_half_even(x),
        _ => T::nan(),
    }
}

fn unary_int(op: OpKind, x: i64) -> i64 {
    match op {
        OpKind::Neg => x.wrapping_neg(),
        OpKind::Abs => x.wrapping_abs(),
        OpKind::Relu => x.max(0),
        _ => 0,
    }
}

fn binary_real<T: Real>(op: OpKind, a: T, b: T) -> T {
    match op {
        OpKind::Add => a + b,
        OpKind::Sub => a - b,
        OpKind::Mul => a * b,
        OpKind::Div => a / b,
        OpKind::Max => nan_max(a, b),
        OpKind::Min => nan_min(a, b),
        OpKind::Pow => a.powf(b),
        _ => T::nan(),
    }
}

fn binary_int(op: OpKind, a: i64, b: i64) -> i64 {
    match op {
        OpKind::Add => a.wrapping_add(b),
        OpKind::Sub => a.wrapping_sub(b),
        OpKind::Mul => a.wrapping_mul(b),
        OpKind::Max => a.max(b),
        OpKind::Min => a.min(b),
        _ => 0,
    }
}

pub fn unary(op: OpKind, x: &Tensor) -> Result<Data, InterpError> {
    let d = x.ty.dtype;
    Ok(match domain(d) {
        Domain::F32 => Data::from_f32(
            d,
            x.data
                .to_f32()
                .into_par_iter()
                .map(|v| unary_real(op, v))
                .collect(),
        ),
        Domain::F64 => Data::from_f64(
            d,
            x.data
                .to_f64()
                .into_par_iter()
                .map(|v| unary_real(op, v))
                .collect(),
        ),
        Domain::Int => Data::from_i64(
            d,
            x.data
                .to_i64()
                .into_par_iter()
                .map(|v| unary_int(op, v))
                .collect(),
        ),
        Domain::Bool => return Err(unsupported(op, d)),
    })
}

fn unsupported(op: OpKind, d: DType) -> InterpError {
    InterpError::Unsupported(format!("'{op}' on {d}"))
}

pub fn binary(op: OpKind, a: &Tensor, b: &Tensor, out: &TensorType) -> Result<Data, InterpError> {
    let sa = broadcast_strides(&a.ty.shape, &out.shape);
    let sb = broadcast_strides(&b.ty.shape, &out.shape);
    let d = out.dtype;
    Ok(match domain(d) {
        Domain::F32 => {
            let (x, y) = (a.data.to_f32(), b.data.to_f32());
            Data::from_f32(
                d,
                par_map(&out.shape, [&sa, &sb], |[i, j]| binary_real(op, x[i], y[j])),
            )
        }
        Domain::F64 => {
            let (x, y) = (a.data.to_f64(), b.data.to_f64());
            Data::from_f64(
                d,
                par_map(&out.shape, [&sa, &sb], |[i, j]| binary_real(op, x[i], y[j])),
            )
        }
        Domain::Int => {
            let (x, y) = (a.data.to_i64(), b.data.to_i64());
            Data::from_i64(
                d,
                par_map(&out.shape, [&sa, &sb], |[i, j]| binary_int(op, x[i], y[j])),
            )
        }
        Domain::Bool => return Err(unsupported(op, d)),
    })
}

/// Transpose, broadcast and reshape: a strided read of the operand.
pub fn view(op: OpKind, x: &Tensor, out: &TensorType, attrs: &Attrs) -> Data {
    let strides = match op {
        OpKind::Transpose => {
            let inner = contiguous_strides(&x.ty.shape);
            let perm = attrs
                .get("perm")
                .and_then(Attr::as_ints)
                .unwrap_or_default();
            perm.iter()
                .map(|&p| normalize_axis(p, x.ty.rank()).map_or(0, |a| inner[a]))
                .collect()
        }
        OpKind::Broadcast => broadcast_strides(&x.ty.shape, &out.shape),
        _ => return x.data.clone(),
    };
    map_data!(&x.data, v => gather(v, &out.shape, &strides))
}

pub fn cast(x: &Tensor, to: DType) -> Data {
    match domain(to) {
        Domain::F32 => Data::from_f32(to, x.data.to_f32()),
        Domain::F64 => Data::F64(x.data.to_f64()),
        Domain::Int => match &x.data {
            Data::I32(_) | Data::I64(_) | Data::I1(_) => Data::from_i64(to, x.data.to_i64()),
            // Float to integer truncates toward zero; out-of-range values saturate, NaN is 0.
            float => Data::from_i64(
                to,
                float
                    .to_f64()
                    .into_iter()
                    .map(|v| {
                        if to == DType::I32 {
                            v as i32 as i64
                        } else {
                            v as i64
                        }
                    })
                    .collect(),
            ),
        },
        Domain::Bool => Data::I1(x.data.to_bool()),
    }
}

pub fn constant(ty: &TensorType, attrs: &Attrs) -> Data {
    let mut flat = Vec::new();
    if let Some(v) = attrs.get("value") {
        flatten_value(v, &mut flat);
    }
    let n = ty.numel() as usize;
    let pick = |i: usize| {
        flat.get(if flat.len() == 1 { 0 } else { i })
            .cloned()
            .unwrap_or(Attr::Int(0))
    };
    match domain(ty.dtype) {
        Domain::Int | Domain::Bool => Data::from_i64(
            ty.dtype,
            (0..n)
                .map(|i| match pick(i) {
                    Attr::Int(v) => v,
                    Attr::Bool(b) => i64::from(b),
                    other => other.as_f64().unwrap_or(0.0) as i64,
                })
                .collect(),
        ),
        _ => Data::from_f64(
            ty.dtype,
            (0..n)
                .map(|i| match pick(i) {
                    Attr::Bool(b) => f64::from(u8::from(b)),
                    other => other.as_f64().unwrap_or(0.0),
                })
                .collect(),
        ),
    }
}

/// Permutes `x` so the `axes` come last; returns the rows (contiguous, each `axes`' product
/// long) and the permutation used.
fn rows_last<T: Copy + Send + Sync + Default>(
    v: &[T],
    shape: &[u64],
    axes: &[usize],
) -> (Vec<T>, Vec<usize>) {
    let mut perm: Vec<usize> = (0..shape.len()).filter(|d| !axes.contains(d)).collect();
    perm.extend_from_slice(axes);
    let inner = contiguous_strides(shape);
    let strides: Vec<usize> = perm.iter().map(|&p| inner[p]).collect();
    let pshape: Vec<u64> = perm.iter().map(|&p| shape[p]).collect();
    (gather(v, &pshape, &strides), perm)
}

pub fn reduce(op: OpKind, x: &Tensor, attrs: &Attrs) -> Result<Data, InterpError> {
    let axes = reduction_axes(x.ty.rank(), attrs).map_err(|e| InterpError::BadInput(e.message))?;
    let r: usize = axes.iter().map(|&a| x.ty.shape[a] as usize).product();
    let d = x.ty.dtype;
    Ok(match domain(d) {
        Domain::F32 => Data::from_f32(
            d,
            reduce_rows(op, &rows_last(&x.data.to_f32(), &x.ty.shape, &axes).0, r),
        ),
        Domain::F64 => Data::from_f64(
            d,
            reduce_rows(op, &rows_last(&x.data.to_f64(), &x.ty.shape, &axes).0, r),
        ),
        Domain::Int => {
            let rows = rows_last(&x.data.to_i64(), &x.ty.shape, &axes).0;
            let out = rows
                .par_chunks(r)
                .map(|row| match op {
                    OpKind::ReduceSum => row.iter().fold(0i64, |a, &b| a.wrapping_add(b)),
                    OpKind::ReduceMax => row.iter().copied().max().unwrap_or(0),
                    _ => row.iter().copied().min().unwrap_or(0),
                })
                .collect();
            Data::from_i64(d, out)
        }
        Domain::Bool => return Err(unsupported(op, d)),
    })
}

/// `f(0) + ... + f(n - 1)` summed pairwise (blocks of 128 in order, then halves), as NumPy
/// sums: the rounding error grows with `log n`, not `n`, so a long row's sum in f32 stays a
/// reference for a GPU's tree reduction (a 4M-element row summed in order drifts by 1e-4).
pub(crate) fn pairwise_sum<T: Real>(n: usize, f: &impl Fn(usize) -> T) -> T {
    fn go<T: Real>(lo: usize, hi: usize, f: &impl Fn(usize) -> T) -> T {
        if hi - lo <= 128 {
            (lo..hi).fold(T::zero(), |a, i| a + f(i))
        } else {
            let mid = lo + (hi - lo) / 2;
            go(lo, mid, f) + go(mid, hi, f)
        }
    }
    go(0, n, f)
}

fn reduce_rows<T: Real>(op: OpKind, rows: &[T], r: usize) -> Vec<T> {
    rows.par_chunks(r)
        .map(|row| match op {
            OpKind::ReduceSum => pairwise_sum(row.len(), &|i| row[i]),
            OpKind::ReduceMean => pairwise_sum(row.len(), &|i| row[i]) / T::from_f64(r as f64),
            OpKind::ReduceMax => row.iter().copied().fold(T::neg_infinity(), nan_max),
            _ => row.iter().copied().fold(T::infinity(), nan_min),
        })
        .collect()
}

/// Rows a matmul task computes.
const MATMUL_ROWS: usize = 64;

pub fn matmul(
    a: &Tensor,
    b: &Tensor,
    attrs: &Attrs,
    out: &TensorType,
) -> Result<Data, InterpError> {
    let flag = |n: &str| attrs.get(n).and_then(Attr::as_bool).unwrap_or(false);
    let (ta, tb) = (flag("transpose_a"), flag("transpose_b"));
    let ms = matmul_shape(&a.ty.shape, &b.ty.shape, ta, tb)
        .map_err(|e| InterpError::BadInput(e.message))?;
    // Operands as [batch..., rows, cols] with their stored strides.
    let operand = |t: &Tensor, is_a: bool| -> (Vec<u64>, isize, isize) {
        let s = &t.ty.shape;
        let (batch, rows, cols) = match s.len() {
            1 if is_a => (Vec::new(), 1, s[0]),
            1 => (Vec::new(), s[0], 1),
            n => (s[..n - 2].to_vec(), s[n - 2], s[n - 1]),
        };
        let _ = rows;
        let (rs, cs) = (cols as isize, 1isize);
        let transposed = if is_a { ta } else { tb };
        let (rs, cs) = if transposed { (cs, rs) } else { (rs, cs) };
        (batch, rs, cs)
    };
    let (a_batch, rsa, csa) = operand(a, true);
    let (b_batch, rsb, csb) = operand(b, false);
    let (m, n, k) = (ms.m as usize, ms.n as usize, ms.k as usize);
    let a_mat = (ms.m * ms.k) as usize;
    let b_mat = (ms.k * ms.n) as usize;
    let sa: Vec<usize> = broadcast_strides(&a_batch, &ms.batch)
        .iter()
        .map(|s| s * a_mat)
        .collect();
    let sb: Vec<usize> = broadcast_strides(&b_batch, &ms.batch)
        .iter()
        .map(|s| s * b_mat)
        .collect();
    let batch_offsets: Vec<[usize; 2]> = par_map(&ms.batch, [&sa, &sb], |o| o);
    let d = out.dtype;
    let shape = GemmShape {
        m,
        n,
        k,
        rsa,
        csa,
        rsb,
        csb,
    };
    Ok(match domain(d) {
        Domain::F32 => Data::from_f32(
            d,
            gemm(&a.data.to_f32(), &b.data.to_f32(), &batch_offsets, &shape),
        ),
        Domain::F64 => Data::F64(gemm(
            &a.data.to_f64(),
            &b.data.to_f64(),
            &batch_offsets,
            &shape,
        )),
        _ => return Err(unsupported(OpKind::Matmul, d)),
    })
}

/// A batch of `m×k @ k×n` products with the operands' row and column strides.
struct GemmShape {
    m: usize,
    n: usize,
    k: usize,
    rsa: isize,
    csa: isize,
    rsb: isize,
    csb: isize,
}

/// Floats `matrixmultiply` multiplies.
trait Gemm: Real {
    /// `c = a @ b` for an `m×k` `a` and `k×n` `b`, `c` row-major with `n` columns.
    ///
    /// # Safety
    /// The pointers and strides must address `m×k`, `k×n` and `m×n` elements in bounds.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        c: *mut Self,
    );
}

impl Gemm for f32 {
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const f32,
        rsa: isize,
        csa: isize,
        b: *const f32,
        rsb: isize,
        csb: isize,
        c: *mut f32,
    ) {
        // SAFETY: forwarded from the caller.
        unsafe {
            matrixmultiply::sgemm(
                m, k, n, 1.0, a, rsa, csa, b, rsb, csb, 0.0, c, n as isize, 1,
            )
        }
    }
}

impl Gemm for f64 {
    unsafe fn gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const f64,
        rsa: isize,
        csa: isize,
        b: *const f64,
        rsb: isize,
        csb: isize,
        c: *mut f64,
    ) {
        // SAFETY: forwarded from the caller.
        unsafe {
            matrixmultiply::dgemm(
                m, k, n, 1.0, a, rsa, csa, b, rsb, csb, 0.0, c, n as isize, 1,
            )
        }
    }
}

/// Every product of the batch, in parallel over batches and row blocks.
fn gemm<T: Gemm>(x: &[T], y: &[T], batch_offsets: &[[usize; 2]], s: &GemmShape) -> Vec<T> {
    let mut c = vec![T::zero(); batch_offsets.len() * s.m * s.n];
    gemm_batches(&mut c, batch_offsets, s.m, s.n, |rows, oa, ob, dst| {
        let a = &x[oa + rows.start * s.rsa as usize..];
        // SAFETY: `matmul_shape` checked the operand shapes, so every element the strides
        // reach lies inside `x`, `y` and `dst` for these rows.
        unsafe {
            T::gemm(
                rows.len(),
                s.k,
                s.n,
                a.as_ptr(),
                s.rsa,
                s.csa,
                y[ob..].as_ptr(),
                s.rsb,
                s.csb,
                dst.as_mut_ptr(),
            )
        }
    });
    c
}

/// Splits the output into per-batch row blocks and runs `kernel(rows, a_offset, b_offset,
/// dst)` on each in parallel.
fn gemm_batches<T: Send>(
    c: &mut [T],
    batch_offsets: &[[usize; 2]],
    m: usize,
    n: usize,
    kernel: impl Fn(std::ops::Range<usize>, usize, usize, &mut [T]) + Sync,
) {
    c.par_chunks_mut(m * n)
        .zip(batch_offsets)
        .for_each(|(cb, &[oa, ob])| {
            cb.par_chunks_mut(MATMUL_ROWS * n)
                .enumerate()
                .for_each(|(blk, dst)| {
                    let start = blk * MATMUL_ROWS;
                    kernel(start..start + dst.len() / n, oa, ob, dst);
                });
        });
}

/// Softmax, rmsnorm and layernorm, computed in op math along the axis and rounded once.
pub fn composite(op: OpKind, xs: &[&Tensor], attrs: &Attrs) -> Result<Data, InterpError> {
    let x = xs[0];
    let d = x.ty.dtype;
    Ok(match domain(d) {
        Domain::F32 => {
            let params: Vec<Vec<f32>> = xs[1..].iter().map(|t| t.data.to_f32()).collect();
            Data::from_f32(
                d,
                composite_real(op, &x.data.to_f32(), &x.ty, &params, attrs)?,
            )
        }
        Domain::F64 => {
            let params: Vec<Vec<f64>> = xs[1..].iter().map(|t| t.data.to_f64()).collect();
            Data::F64(composite_real(op, &x.data.to_f64(), &x.ty, &params, attrs)?)
        }
        _ => return Err(unsupported(op, d)),
    })
}

fn composite_real<T: Real>(
    op: OpKind,
    x: &[T],
    ty: &TensorType,
    params: &[Vec<T>],
    attrs: &Attrs,
) -> Result<Vec<T>, InterpError> {
    let axis_attr = attrs.get("axis").and_then(Attr::as_int).unwrap_or(-1);
    let axis = normalize_axis(axis_attr, ty.rank())
        .ok_or_else(|| InterpError::BadInput("axis out of range".into()))?;
    let default_eps = if op == OpKind::Rmsnorm {
        ty.dtype.epsilon().unwrap_or(1e-6)
    } else {
        1e-5
    };
    let eps = T::from_f64(
        attrs
            .get("eps")
            .and_then(Attr::as_f64)
            .unwrap_or(default_eps),
    );
    let r = ty.shape[axis] as usize;
    let (rows, perm) = rows_last(x, &ty.shape, &[axis]);
    let (w, b) = (params.first(), params.get(1));
    let n = T::from_f64(r as f64);
    let mut out = vec![T::zero(); rows.len()];
    out.par_chunks_mut(r)
        .zip(rows.par_chunks(r))
        .for_each(|(o, row)| match op {
            OpKind::Softmax => {
                let m = row.iter().copied().fold(T::neg_infinity(), nan_max);
                for (o, &v) in o.iter_mut().zip(row) {
                    *o = (v - m).exp();
                }
                let s: T = pairwise_sum(o.len(), &|i| o[i]);
                o.iter_mut().for_each(|v| *v = *v / s);
            }
            OpKind::LogSoftmax => {
                let m = row.iter().copied().fold(T::neg_infinity(), nan_max);
                let s: T = pairwise_sum(row.len(), &|i| (row[i] - m).exp());
                let l = s.ln();
                for (o, &v) in o.iter_mut().zip(row) {
                    *o = (v - m) - l;
                }
            }
            _ => {
                let mean = if op == OpKind::Layernorm {
                    pairwise_sum(row.len(), &|i| row[i]) / n
                } else {
                    T::zero()
                };
                let var = pairwise_sum(row.len(), &|i| (row[i] - mean) * (row[i] - mean)) / n;
                let rstd = T::one() / (var + eps).sqrt();
                for (i, (o, &v)) in o.iter_mut().zip(row).enumerate() {
                    let mut y = (v - mean) * rstd;
                    if let Some(w) = w {
                        y = y * w[i];
                    }
                    if let Some(b) = b {
                        y = y + b[i];
                    }
                    *o = y;
                }
            }
        });
    // Undo the permutation that put the axis last.
    let pshape: Vec<u64> = perm.iter().map(|&p| ty.shape[p]).collect();
    let pstrides = contiguous_strides(&pshape);
    let mut inv = vec![0usize; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    let strides: Vec<usize> = inv.iter().map(|&i| pstrides[i]).collect();
    Ok(gather(&out, &ty.shape, &strides))
}
