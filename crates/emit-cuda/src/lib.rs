//! CUDA C++ emission from the kernel IR.
//!
//! One self-contained file: CUDA's own `cuda_fp16.h`/`cuda_bf16.h`, a small prelude of
//! `irc_*` device helpers (conversions with the spec's rounding and saturation, NaN-propagating
//! max/min, the composite activations, a block reduction), constant arrays, and one
//! `extern "C"` kernel per kernel IR kernel, each headed by a comment naming the graph ops and
//! source locations it computes. The launch manifest is embedded as JSON between
//! `BEGIN IRC MANIFEST` / `END IRC MANIFEST` comment lines.
//!
//! Every load and store offset is [`kir::offset_expr`] of the tensor's layout: this file writes
//! no index arithmetic of its own.

use irc_ir::DType;
use irc_kir::{
    self as kir, CacheHint, Expr, Func, IndexWidth, Intrinsic, Manifest, Module, Space, Stmt, Ty,
    manifest_of,
};
mod decls;
mod hopper;
mod intrinsic;

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

/// An emitted CUDA C++ file and how to launch it.
#[derive(Clone, Debug)]
pub struct CudaModule {
    /// One self-contained `.cu` file (`extern "C"` kernels, no includes beyond CUDA's own
    /// `cuda_fp16.h` / `cuda_bf16.h`).
    pub source: String,
    pub manifest: Manifest,
}

/// Emits CUDA C++ and the launch manifest for a verified kernel IR module.
pub fn emit(m: &Module) -> CudaModule {
    emit_with_twins(m, &[])
}

/// [`emit`] for a module where kernel `i` is the earlier kernel `twins[i]` but for its name and
/// origins (`irc_lower::Planned::twins`): the code of a kernel that [`irc_kir::shares_code`]
/// with its twin is written once and copied (any other twin is emitted on its own), so the text
/// is the same as [`emit`]'s.
pub fn emit_with_twins(m: &Module, twins: &[Option<usize>]) -> CudaModule {
    let manifest = manifest_of(m);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "// irc {}: CUDA C++ for graph @{}.\n// Self-contained: compiles with nvcc or NVRTC alone. Kernels are extern \"C\"; run them as the\n// launch manifest below says (buffers, then launches in order, each kernel's parameters being\n// the device pointers of the buffers it names).",
        env!("CARGO_PKG_VERSION"),
        m.name
    );
    out.push_str("// BEGIN IRC MANIFEST\n");
    for line in manifest.to_json().lines() {
        let _ = writeln!(out, "// {line}");
    }
    out.push_str("// END IRC MANIFEST\n\n");
    out.push_str(PRELUDE);
    // Constant arrays. An initialiser must be a constant expression (NVRTC rejects
    // `__longlong_as_double(...)` there: "dynamic initialization is not supported"), so an array
    // holding NaN or ±inf is stored as the bits of its values and reinterpreted where it is read.
    let mut bits: HashMap<&str, DType> = HashMap::new();
    for c in &m.constants {
        let (cty, vals): (&str, Vec<String>) = match c.dtype {
            d if d.is_float() => {
                let storage = if d == DType::F64 {
                    DType::F64
                } else {
                    DType::F32
                };
                // Round to the stored type first: 1e300 in an f32 array is +inf, as the spec
                // and the interpreter say, not the literal `1e300f`.
                let vals: Vec<f64> = c
                    .values
                    .iter()
                    .map(|&v| {
                        if storage == DType::F64 {
                            v
                        } else {
                            f64::from(v as f32)
                        }
                    })
                    .collect();
                if vals.iter().all(|v| v.is_finite()) {
                    let cty = if storage == DType::F64 {
                        "double"
                    } else {
                        "float"
                    };
                    (cty, vals.iter().map(|&v| float_lit(v, storage)).collect())
                } else if storage == DType::F64 {
                    bits.insert(&c.name, DType::F64);
                    let vals = vals.iter().map(|v| format!("0x{:016x}ULL", v.to_bits()));
                    ("unsigned long long", vals.collect())
                } else {
                    bits.insert(&c.name, DType::F32);
                    let vals = vals
                        .iter()
                        .map(|&v| format!("0x{:08x}u", (v as f32).to_bits()));
                    ("unsigned int", vals.collect())
                }
            }
            _ => (
                "long long",
                c.values
                    .iter()
                    .map(|&v| format!("{}LL", v as i64))
                    .collect(),
            ),
        };
        let _ = writeln!(
            out,
            "__device__ const {cty} c_{}[{}] = {{{}}};",
            c.name,
            vals.len().max(1),
            vals.join(", ")
        );
    }
    if !m.constants.is_empty() {
        out.push('\n');
    }
    // Kernels are emitted independently, in parallel.
    use rayon::prelude::*;
    // The code of each kernel another is a twin of, written once (kernel `i`'s twin is
    // earlier, so is in this table when `i` is reached).
    let twin_of = |i: usize| {
        twins
            .get(i)
            .copied()
            .flatten()
            .filter(|&j| j < i && irc_kir::shares_code(&m.kernels[i], &m.kernels[j]))
    };
    let mut shared: Vec<usize> = (0..m.kernels.len()).filter_map(twin_of).collect();
    shared.sort_unstable();
    shared.dedup();
    let code: HashMap<usize, (String, String)> = shared
        .par_iter()
        .map(|&j| (j, kernel_code(&m.kernels[j], &bits)))
        .collect();
    // The comment lines of every kernel, then the text's size where it is known (a twin's, a
    // shared kernel's): reserved at once, so the text is not copied as it grows.
    let heads: Vec<String> = m
        .kernels
        .par_iter()
        .map(|k| {
            let mut head = String::new();
            kernel_head(&mut head, k);
            head
        })
        .collect();
    let shared_of = |i: usize| twin_of(i).or(code.contains_key(&i).then_some(i));
    let known: usize = (0..m.kernels.len())
        .filter_map(|i| {
            let (sig, rest) = &code[&shared_of(i)?];
            Some(heads[i].len() + sig.len() + m.kernels[i].name.len() + rest.len())
        })
        .sum();
    out.reserve(known);
    // The other kernels are emitted a slice at a time, in parallel (so that their code never
    // holds more than a slice's text beside the output).
    for (s, slice) in m.kernels.chunks(256).enumerate() {
        let own: Vec<Option<(String, String)>> = slice
            .par_iter()
            .enumerate()
            .map(|(n, k)| match shared_of(s * 256 + n) {
                Some(_) => None,
                None => Some(kernel_code(k, &bits)),
            })
            .collect();
        for (n, (k, own)) in slice.iter().zip(own).enumerate() {
            let i = s * 256 + n;
            let (sig, rest) = match (&own, shared_of(i)) {
                (Some((sig, rest)), _) => (sig, rest),
                (None, Some(j)) => (&code[&j].0, &code[&j].1),
                (None, None) => continue,
            };
            out.push_str(&heads[i]);
            out.push_str(sig);
            out.push_str(&k.name);
            out.push_str(rest);
        }
    }
    CudaModule {
        source: out,
        manifest,
    }
}

const PRELUDE: &str = r#"#include <cuda_fp16.h>
#include <cuda_bf16.h>

// Conversions, as the graph IR's `cast`: floats round to nearest even (16-bit floats through
// f32, as the reference interpreter), float to integer truncates and saturates with NaN -> 0.
__device__ __forceinline__ float irc_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float irc_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ float irc_f32(T x) { return (float)x; }
__device__ __forceinline__ double irc_f64(__half x) { return (double)__half2float(x); }
__device__ __forceinline__ double irc_f64(__nv_bfloat16 x) { return (double)__bfloat162float(x); }
template <typename T> __device__ __forceinline__ double irc_f64(T x) { return (double)x; }
template <typename T> __device__ __forceinline__ __half irc_f16(T x) { return __float2half_rn(irc_f32(x)); }
template <typename T> __device__ __forceinline__ __nv_bfloat16 irc_bf16(T x) { return __float2bfloat16_rn(irc_f32(x)); }
__device__ __forceinline__ long long irc_i64(float x) { return __float2ll_rz(x); }
__device__ __forceinline__ long long irc_i64(double x) { return __double2ll_rz(x); }
__device__ __forceinline__ long long irc_i64(__half x) { return __float2ll_rz(__half2float(x)); }
__device__ __forceinline__ long long irc_i64(__nv_bfloat16 x) { return __float2ll_rz(__bfloat162float(x)); }
template <typename T> __device__ __forceinline__ long long irc_i64(T x) { return (long long)x; }
__device__ __forceinline__ int irc_i32(float x) { return __float2int_rz(x); }
__device__ __forceinline__ int irc_i32(double x) { return __double2int_rz(x); }
__device__ __forceinline__ int irc_i32(__half x) { return __float2int_rz(__half2float(x)); }
__device__ __forceinline__ int irc_i32(__nv_bfloat16 x) { return __float2int_rz(__bfloat162float(x)); }
template <typename T> __device__ __forceinline__ int irc_i32(T x) { return (int)x; }
__device__ __forceinline__ bool irc_i1(__half x) { return __half2float(x) != 0.0f; }
__device__ __forceinline__ bool irc_i1(__nv_bfloat16 x) { return __bfloat162float(x) != 0.0f; }
template <typename T> __device__ __forceinline__ bool irc_i1(T x) { return x != (T)0; }

// Math on f32/f64 (and integers where defined), matching the reference interpreter (f32
// max/min up to the sign of a zero result: `max.NaN.f32(+0, -0)` is +0).
template <typename T> __device__ __forceinline__ T irc_max(T a, T b) { return (a != a || b != b) ? (a != a ? a : b) : (a > b ? a : b); }
template <typename T> __device__ __forceinline__ T irc_min(T a, T b) { return (a != a || b != b) ? (a != a ? a : b) : (a < b ? a : b); }
// f32: one sm_80 instruction that returns NaN when either operand is NaN.
__device__ __forceinline__ float irc_max(float a, float b) { float r; asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ float irc_min(float a, float b) { float r; asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ long long irc_max(long long a, long long b) { return a > b ? a : b; }
__device__ __forceinline__ long long irc_min(long long a, long long b) { return a < b ? a : b; }
__device__ __forceinline__ long long irc_abs(long long x) { return x < 0 ? -x : x; }
__device__ __forceinline__ long long irc_relu(long long x) { return x > 0 ? x : 0; }
__device__ __forceinline__ float irc_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double irc_abs(double x) { return fabs(x); }
__device__ __forceinline__ float irc_exp(float x) { return expf(x); }
// 2^x by the SFU alone (ex2.approx.ftz: about 2 ulp, subnormal results flushed to zero).
__device__ __forceinline__ float irc_exp2(float x) { float r; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }
__device__ __forceinline__ float irc_maxnum(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double irc_maxnum(double a, double b) { return fmax(a, b); }
__device__ __forceinline__ double irc_exp(double x) { return exp(x); }
__device__ __forceinline__ double irc_exp2(double x) { return exp2(x); }
// Negation; of integers as `not` then `add 1` in asm, which NVVM cannot turn back into `neg`:
// ptxas 13.0 drops one negation when it folds three negated integers into sm_90's VIMNMX3, and
// keeps inversions (bench/gpu/NOTES.md, session 29).
template <typename T> __device__ __forceinline__ T irc_neg(T x) { return -x; }
__device__ __forceinline__ int irc_neg(int x) { int r; asm("not.b32 %0, %1; add.s32 %0, %0, 1;" : "=r"(r) : "r"(x)); return r; }
__device__ __forceinline__ long long irc_neg(long long x) { long long r; asm("not.b64 %0, %1; add.s64 %0, %0, 1;" : "=l"(r) : "l"(x)); return r; }
__device__ __forceinline__ float irc_rcp(float x) { float r; asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }
__device__ __forceinline__ double irc_rcp(double x) { return 1.0 / x; }
__device__ __forceinline__ float irc_log(float x) { return logf(x); }
__device__ __forceinline__ double irc_log(double x) { return log(x); }
__device__ __forceinline__ float irc_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double irc_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float irc_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double irc_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float irc_erf(float x) { return erff(x); }
__device__ __forceinline__ double irc_erf(double x) { return erf(x); }
__device__ __forceinline__ float irc_sin(float x) { return sinf(x); }
__device__ __forceinline__ double irc_sin(double x) { return sin(x); }
__device__ __forceinline__ float irc_cos(float x) { return cosf(x); }
__device__ __forceinline__ double irc_cos(double x) { return cos(x); }
__device__ __forceinline__ float irc_floor(float x) { return floorf(x); }
__device__ __forceinline__ double irc_floor(double x) { return floor(x); }
__device__ __forceinline__ float irc_ceil(float x) { return ceilf(x); }
__device__ __forceinline__ double irc_ceil(double x) { return ceil(x); }
// Halves to even: rint in the default rounding mode (cvt.rni).
__device__ __forceinline__ float irc_round(float x) { return rintf(x); }
__device__ __forceinline__ double irc_round(double x) { return rint(x); }
__device__ __forceinline__ float irc_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double irc_pow(double a, double b) { return pow(a, b); }
// An f32 rounded to TF32 (to nearest, ties away), still an f32: mma.m16n8k8.tf32's operands.
__device__ __forceinline__ float irc_tf32(float x) { unsigned r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)); return __uint_as_float(r); }
template <typename T> __device__ __forceinline__ T irc_rsqrt(T x) { return (T)1 / irc_sqrt(x); }
template <typename T> __device__ __forceinline__ T irc_recip(T x) { return (T)1 / x; }
template <typename T> __device__ __forceinline__ T irc_sigmoid(T x) { return (T)1 / ((T)1 + irc_exp(-x)); }
template <typename T> __device__ __forceinline__ T irc_silu(T x) { return x / ((T)1 + irc_exp(-x)); }
template <typename T> __device__ __forceinline__ T irc_relu(T x) { return x != x ? x : irc_max(x, (T)0); }
template <typename T> __device__ __forceinline__ T irc_gelu(T x) {
  return x * (T)0.5 * ((T)1 + irc_erf(x * (T)0.70710678118654752440));
}

// Two 16-bit values in one 32-bit register, the first in the low half (mma fragments).
__device__ __forceinline__ unsigned irc_pack(__half lo, __half hi) {
  return (unsigned)__half_as_ushort(lo) | ((unsigned)__half_as_ushort(hi) << 16);
}
__device__ __forceinline__ unsigned irc_pack(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return (unsigned)__bfloat16_as_ushort(lo) | ((unsigned)__bfloat16_as_ushort(hi) << 16);
}
// Two f32 values rounded to nearest into one packed 16-bit pair (one cvt for both; volatile:
// packed before the wgmma.fence that precedes the instructions reading them).
__device__ __forceinline__ unsigned irc_pack_f16(float lo, float hi) {
  unsigned r; asm volatile("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}
__device__ __forceinline__ unsigned irc_pack_bf16(float lo, float hi) {
  unsigned r; asm volatile("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}

// A wgmma shared-memory matrix descriptor: start address, leading and stride byte offsets
// (16-byte units, 14 bits each), 128-byte swizzle (layout type 1 in bits 62-63).
__device__ __forceinline__ unsigned long long irc_wgmma_desc(const void* p, unsigned lbo, unsigned sbo) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  return (unsigned long long)((a & 0x3FFFFu) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3FFFu) << 16)
       | ((unsigned long long)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}
// A descriptor `units` 16-byte units further on: the start address (bits 0-13, a shared address
// over 16) plus `units` in the low word alone, which ptxas folds into one add. No carry leaves
// the field: the sum is the descriptor of an address inside shared memory (< 256 KiB).
__device__ __forceinline__ unsigned long long irc_wgmma_desc_add(unsigned long long d, unsigned units) {
  return (d & 0xFFFFFFFF00000000ull) | (unsigned long long)((unsigned)d + units);
}

// The low and high 16-bit halves of a 32-bit register (ldmatrix results).
__device__ __forceinline__ __half irc_lo_f16(unsigned r) { return __ushort_as_half((unsigned short)(r & 0xffffu)); }
__device__ __forceinline__ __half irc_hi_f16(unsigned r) { return __ushort_as_half((unsigned short)(r >> 16)); }
__device__ __forceinline__ __nv_bfloat16 irc_lo_bf16(unsigned r) { return __ushort_as_bfloat16((unsigned short)(r & 0xffffu)); }
__device__ __forceinline__ __nv_bfloat16 irc_hi_bf16(unsigned r) { return __ushort_as_bfloat16((unsigned short)(r >> 16)); }

// Block-wide reduction: every thread of the block passes its value and gets the result.
// Blocks are a multiple of 32 threads.
struct irc_sum_op { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; } };
struct irc_max_op { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return irc_max(a, b); } };
struct irc_min_op { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return irc_min(a, b); } };
template <typename T, typename F> __device__ __forceinline__ T irc_warp_reduce(T v, F f) {
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// The same over each group of W consecutive lanes (W a power of two below 32).
template <int W, typename T, typename F> __device__ __forceinline__ T irc_lanes_reduce(T v, F f) {
  for (int o = W / 2; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <typename T, typename F> __device__ __forceinline__ T irc_block_reduce(T v, F f) {
  __shared__ T scratch[32];
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = scratch[0];
  for (int w = 1; w < warps; ++w) r = f(r, scratch[w]);
  return r;
}

"#;

fn c_type(d: DType) -> &'static str {
    match d {
        DType::F16 => "__half",
        DType::BF16 => "__nv_bfloat16",
        DType::F32 => "float",
        DType::F64 => "double",
        DType::I32 => "int",
        DType::I64 => "long long",
        DType::I1 => "bool",
    }
}

/// The element type in global memory (`i1` is a byte).
fn c_storage_type(d: DType) -> &'static str {
    if d == DType::I1 {
        "unsigned char"
    } else {
        c_type(d)
    }
}

fn float_lit(v: f64, d: DType) -> String {
    let bits = if v.is_nan() {
        Some("0x7ff8000000000000LL")
    } else if v.is_infinite() {
        Some("0x7ff0000000000000LL")
    } else {
        None
    };
    let body = match bits {
        Some(b) => {
            let sign = if v < 0.0 { "-" } else { "" };
            format!("{sign}__longlong_as_double({b})")
        }
        None => format!("{v:?}"),
    };
    if d == DType::F32 && bits.is_none() {
        format!("{body}f")
    } else {
        body
    }
}

struct KernelEmitter<'k> {
    k: &'k kir::Kernel,
    /// Constant arrays stored as bits, with the float type they hold.
    bits: &'k HashMap<&'k str, DType>,
    tensors: HashMap<&'k str, &'k kir::TensorDecl>,
    /// The accumulators each `wgmma.wait_group` completes.
    fences: kir::WaitFences,
    /// The packed `a` registers of the coming `wgmma.rs` statements whose `a` is f32,
    /// computed before their `wgmma.fence` ([`KernelEmitter::prepack`]), in order.
    prepacked: std::collections::VecDeque<Vec<String>>,
    packs: usize,
    /// Each tensor's offset terms (by the declaration's address, which outlives the emitter),
    /// by coordinate rank (`None`: the layout has none).
    terms: std::cell::RefCell<TermCache>,
    out: String,
}

/// Offset terms by (tensor declaration address, coordinate rank).
type TermCache = HashMap<(usize, usize), Option<Vec<kir::OffsetTerm>>>;

/// A kernel's comment lines: its name, grid and block, and origins.
fn kernel_head(out: &mut String, k: &kir::Kernel) {
    let _ = writeln!(
        out,
        "// kernel @{}: grid ({}, {}, {}), block ({}, {}, {})",
        k.name, k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1], k.block[2]
    );
    for o in &k.origins {
        let _ = writeln!(out, "//   from: {}  ({})", o.op.replace('\n', " "), o.loc);
    }
}

/// A kernel's code without its comment lines, in two parts: before and after its name (which
/// it reads nowhere else).
fn kernel_code(k: &kir::Kernel, bits: &HashMap<&str, DType>) -> (String, String) {
    let mut rest = String::new();
    let sig = emit_kernel(&mut rest, k, bits);
    (sig, rest)
}

/// Writes the kernel's code after its name (parameters and body) to `out`; returns the code
/// before its name.
fn emit_kernel<'k>(
    out: &mut String,
    k: &'k kir::Kernel,
    bits: &'k HashMap<&'k str, DType>,
) -> String {
    let written = kir::written_tensors(&k.body);
    let tensors: HashMap<&str, &kir::TensorDecl> =
        k.tensors.iter().map(|t| (t.name.as_str(), t)).collect();
    let written_params: HashSet<&str> = k
        .tensors
        .iter()
        .filter(|t| written.contains(t.name.as_str()))
        .filter_map(|t| {
            if let Space::Global(p) = &t.space {
                Some(p.as_str())
            } else {
                None
            }
        })
        .collect();
    let params: Vec<String> = k
        .params
        .iter()
        .map(|p| {
            let constness = if written_params.contains(p.name.as_str()) {
                ""
            } else {
                "const "
            };
            format!(
                "{constness}{}* __restrict__ p_{}",
                c_storage_type(p.dtype),
                p.name
            )
        })
        .collect();
    let threads = k.block.iter().map(|&b| u64::from(b)).product::<u64>();
    // Tensor-core kernels hold large fragments: with no occupancy target ptxas may use every
    // register it needs rather than spill to fit two blocks. Other kernels keep the default,
    // which favours occupancy (they are memory-bound).
    // A cooperative kernel's blocks must all be resident, and a kernel may ask for an
    // occupancy: registers for its blocks per SM.
    let bounds = if kir::min_blocks_per_sm(k) > 1 {
        format!("{threads}, {}", kir::min_blocks_per_sm(k))
    } else if has_mma(&k.body) {
        format!("{threads}, 1")
    } else {
        threads.to_string()
    };
    let sig = format!("extern \"C\" __global__ void __launch_bounds__({bounds}) ");
    let _ = writeln!(out, "({}) {{", params.join(", "));
    decls::declare_tensors(out, k);
    let mut e = KernelEmitter {
        k,
        bits,
        tensors,
        fences: kir::wait_fences(&k.body),
        prepacked: Default::default(),
        packs: 0,
        terms: Default::default(),
        out: String::new(),
    };
    e.block(&k.body, 1);
    out.push_str(&e.out);
    out.push_str("}\n\n");
    sig
}

fn has_mma(body: &[Stmt]) -> bool {
    let mut found = false;
    kir::walk(body, &mut |s| {
        found |= matches!(
            s,
            Stmt::Intrinsic {
                op: Intrinsic::MmaM16n8k16
                    | Intrinsic::MmaM16n8k8Tf32
                    | Intrinsic::Wgmma(_)
                    | Intrinsic::WgmmaRs(_),
                ..
            }
        )
    });
    found
}

impl KernelEmitter<'_> {
    fn idx_type(&self) -> &'static str {
        match self.k.index {
            IndexWidth::I32 => "int",
            IndexWidth::I64 => "long long",
        }
    }

    fn ty(&self, t: Ty) -> &'static str {
        match t {
            Ty::Idx => self.idx_type(),
            Ty::Elem(d) => c_type(d),
        }
    }

    fn block(&mut self, body: &[Stmt], depth: usize) {
        for (i, s) in body.iter().enumerate() {
            if let Stmt::Intrinsic {
                op: Intrinsic::WgmmaFence,
                ..
            } = s
            {
                self.prepack(&body[i + 1..], depth);
            }
            self.stmt(s, depth);
        }
    }

    /// Register accumulators through an empty asm each, which the compiler cannot move work
    /// on them across.
    fn fence(&mut self, accs: &[String], pad: &str) {
        for t in accs {
            let n = self.tensors[t.as_str()].layout.cosize().unwrap_or(0);
            let _ = writeln!(
                self.out,
                "{pad}#pragma unroll\n{pad}for (int f = 0; f < {n}; ++f) asm volatile(\"\" : \"+f\"(t_{t}[f]) :: \"memory\");"
            );
        }
    }

    fn stmt(&mut self, s: &Stmt, depth: usize) {
        let pad = "  ".repeat(depth);
        match s {
            Stmt::Let { var, ty, value } => {
                let v = self.expr(value);
                let _ = writeln!(self.out, "{pad}const {} v_{var} = {v};", self.ty(*ty));
            }
            Stmt::Var { var, ty, init } => {
                let v = self.expr(init);
                let _ = writeln!(self.out, "{pad}{} v_{var} = {v};", self.ty(*ty));
            }
            Stmt::Assign { var, value } => {
                let v = self.expr(value);
                let _ = writeln!(self.out, "{pad}v_{var} = {v};");
            }
            Stmt::Store {
                tensor,
                coord,
                value,
            } => {
                let t = self.tensors[tensor.as_str()];
                let place = self.place(t, coord);
                let v = self.expr(value);
                let v = if t.dtype == DType::I1 && matches!(t.space, Space::Global(_)) {
                    format!("(unsigned char)({v})")
                } else {
                    v
                };
                let _ = writeln!(self.out, "{pad}{place} = {v};");
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                unroll,
                body,
            } => {
                if *unroll {
                    let _ = writeln!(self.out, "{pad}#pragma unroll");
                }
                let (s0, e0, st) = (self.expr(start), self.expr(end), self.expr(step));
                let _ = writeln!(
                    self.out,
                    "{pad}for ({} v_{var} = {s0}; v_{var} < {e0}; v_{var} += {st}) {{",
                    self.idx_type()
                );
                self.block(body, depth + 1);
                let _ = writeln!(self.out, "{pad}}}");
            }
            Stmt::If { cond, body, orelse } => {
                let c = self.expr(cond);
                let _ = writeln!(self.out, "{pad}if ({c}) {{");
                self.block(body, depth + 1);
                if !orelse.is_empty() {
                    let _ = writeln!(self.out, "{pad}}} else {{");
                    self.block(orelse, depth + 1);
                }
                let _ = writeln!(self.out, "{pad}}}");
            }
            Stmt::Copy {
                width,
                dst,
                src,
                hint,
            } => {
                let td = self.tensors[dst.tensor.as_str()];
                let bytes = u64::from(*width) * td.dtype.size_bytes();
                let vt = match bytes {
                    16 => "uint4",
                    8 => "uint2",
                    _ => "unsigned",
                };
                let d = self.place(td, &dst.coord(0));
                let s = self.place(self.tensors[src.tensor.as_str()], &src.coord(0));
                // A hinted load through CUDA's cache-operator intrinsic (`__ldcs`: PTX's
                // `ld.global.cs`, the load `CacheHint::ptx_load` names).
                let load = match hint {
                    CacheHint::Normal => format!("*reinterpret_cast<const {vt}*>(&{s})"),
                    CacheHint::EvictFirst => {
                        format!("__ldcs(reinterpret_cast<const {vt}*>(&{s}))")
                    }
                };
                let _ = writeln!(self.out, "{pad}*reinterpret_cast<{vt}*>(&{d}) = {load};");
            }
            Stmt::Sync => {
                let _ = writeln!(self.out, "{pad}__syncthreads();");
            }
            Stmt::Intrinsic {
                op: Intrinsic::WgmmaWait,
                args,
            } => {
                // The work on accumulators no product has in flight stays before the wait; the
                // accumulators it completes are read only after it. Each passes through an
                // empty asm the compiler cannot move it across.
                let (idle, done) = (self.fences.idle_at(s).to_vec(), self.fences.of(s).to_vec());
                self.fence(&idle, &pad);
                self.intrinsic(Intrinsic::WgmmaWait, args, &pad);
                self.fence(&done, &pad);
            }
            Stmt::Intrinsic { op, args } => self.intrinsic(*op, args, &pad),
            Stmt::BlockReduce { var, ty, op, value } => {
                let v = self.expr(value);
                let _ = writeln!(
                    self.out,
                    "{pad}const {} v_{var} = irc_block_reduce({v}, irc_{}_op());",
                    self.ty(*ty),
                    op.name()
                );
            }
            Stmt::WarpReduce {
                var,
                ty,
                op,
                width,
                value,
            } => {
                let v = self.expr(value);
                let f = if *width == 32 {
                    "irc_warp_reduce".to_string()
                } else {
                    format!("irc_lanes_reduce<{width}>")
                };
                let _ = writeln!(
                    self.out,
                    "{pad}const {} v_{var} = {f}({v}, irc_{}_op());",
                    self.ty(*ty),
                    op.name()
                );
            }
        }
    }

    /// `base[offset]` of a tensor at a coordinate, the offset from the tensor's layout (plus
    /// its base offset).
    fn place(&self, t: &kir::TensorDecl, coord: &[Expr]) -> String {
        let off = self.offset(t, coord);
        self.element(t, &off)
    }

    /// The element offset of `coord` in `t`.
    fn offset(&self, t: &kir::TensorDecl, coord: &[Expr]) -> Expr {
        // A tensor's offset terms depend on its layout and the coordinate's rank only: computed
        // once per kernel (unrolled tensor-core code reads one tensor hundreds of times).
        let key = (std::ptr::from_ref(t) as usize, coord.len());
        let mut terms = self.terms.borrow_mut();
        let off = match terms.get(&key) {
            Some(Some(ts)) => t.offset_with(ts, coord),
            Some(None) => Expr::Int(0),
            None => {
                let ts = kir::offset_terms(&t.layout, coord.len()).ok();
                let off = ts
                    .as_ref()
                    .map_or(Expr::Int(0), |ts| t.offset_with(ts, coord));
                terms.insert(key, ts);
                off
            }
        };
        drop(terms);
        off
    }

    /// The element of `t` at offset `off`, as an lvalue.
    fn element(&self, t: &kir::TensorDecl, off: &Expr) -> String {
        let off = self.expr(off);
        match &t.space {
            Space::Global(p) => format!("p_{p}[{off}]"),
            Space::Const(c) => match self.bits.get(c.as_str()) {
                Some(DType::F64) => format!("__longlong_as_double((long long)c_{c}[{off}])"),
                Some(_) => format!("__uint_as_float(c_{c}[{off}])"),
                None => format!("c_{c}[{off}]"),
            },
            Space::Shared | Space::Registers => format!("t_{}[{off}]", t.name),
            Space::View(base) => format!("t_{base}[{off}]"),
        }
    }

    fn expr(&self, e: &Expr) -> String {
        match e {
            Expr::Int(i) => match self.k.index {
                IndexWidth::I64 if *i == i64::MIN => "(-9223372036854775807LL - 1)".to_string(),
                IndexWidth::I64 => format!("{i}LL"),
                IndexWidth::I32 if *i > i64::from(i32::MAX) || *i < i64::from(i32::MIN) => {
                    if *i == i64::MIN {
                        "(-9223372036854775807LL - 1)".to_string()
                    } else {
                        format!("{i}LL")
                    }
                }
                IndexWidth::I32 => i.to_string(),
            },
            Expr::Float(x) => float_lit(*x, DType::F64),
            Expr::Var(v) => format!("v_{v}"),
            Expr::Builtin(b) => {
                let s = match b {
                    kir::Builtin::TidX => "threadIdx.x",
                    kir::Builtin::BidX => "blockIdx.x",
                    kir::Builtin::BidY => "blockIdx.y",
                    kir::Builtin::BidZ => "blockIdx.z",
                    kir::Builtin::NtidX => "blockDim.x",
                    kir::Builtin::NctaidX => "gridDim.x",
                    kir::Builtin::NctaidY => "gridDim.y",
                    kir::Builtin::NctaidZ => "gridDim.z",
                };
                format!("(({}){s})", self.idx_type())
            }
            Expr::Load { tensor, coord } => {
                let t = self.tensors[tensor.as_str()];
                let place = self.place(t, coord);
                match (&t.space, t.dtype) {
                    (Space::Global(_), DType::I1) => format!("({place} != 0)"),
                    (Space::Const(_), d) => format!("irc_{}({place})", d.name()),
                    _ => place,
                }
            }
            Expr::Idx(op, a, b) => format!("({} {} {})", self.expr(a), op.symbol(), self.expr(b)),
            Expr::Call(f, args) => {
                let a: Vec<String> = args.iter().map(|x| self.expr(x)).collect();
                match f {
                    Func::Add => format!("({} + {})", a[0], a[1]),
                    Func::Sub => format!("({} - {})", a[0], a[1]),
                    Func::Mul => format!("({} * {})", a[0], a[1]),
                    Func::Div => format!("({} / {})", a[0], a[1]),
                    Func::Neg => format!("irc_neg({})", a[0]),
                    Func::Select => format!("({} ? {} : {})", a[0], a[1], a[2]),
                    // C++ comparisons are IEEE's: false with a NaN operand, except `!=`.
                    Func::Eq => format!("({} == {})", a[0], a[1]),
                    Func::Ne => format!("({} != {})", a[0], a[1]),
                    Func::Lt => format!("({} < {})", a[0], a[1]),
                    Func::Le => format!("({} <= {})", a[0], a[1]),
                    Func::Gt => format!("({} > {})", a[0], a[1]),
                    Func::Ge => format!("({} >= {})", a[0], a[1]),
                    Func::Index => format!("(({}){})", self.idx_type(), a[0]),
                    Func::Cast(d) => format!("irc_{}({})", d.name(), a[0]),
                    other => format!("irc_{}({})", other.name(), a.join(", ")),
                }
            }
        }
    }
}
