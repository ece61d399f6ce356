//! Thread-value layouts of the GPU's matrix and copy instructions, as data.
//!
//! A [`TvLayout`] maps `(thread, value)` to the column-major index `m + M*n` of an element of an
//! `M x N` tile. Each atom's doc names the PTX ISA fragment figure it encodes; the tests in
//! `crates/layout/tests/atoms.rs` recompute every `(thread, value) -> (row, col)` from the
//! formulas under those figures and compare.
//!
//! Conventions (as CuTe's): the `mma` B operand tile is `N x K` (both operands K-major, "TN");
//! `ldmatrix` tiles stack the `x1/x2/x4` 8x8 matrices along rows (matrix `j` is rows `8j..8j+8`);
//! wgmma shared-memory atoms are in units of elements of the given bit width.

use std::fmt;

use super::core::Layout;
use super::error::{LayoutError, Result, mul};
use super::int_tuple::IntTuple;
use super::swizzle::{ComposedLayout, Swizzle};
use super::tiling::raked_product;
use super::{algebra, composition};

/// `(thread, value) -> m + M*n` over an `M x N` tile.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TvLayout {
    layout: Layout,
    tile: (i64, i64),
}

impl TvLayout {
    /// A TV layout; `layout` must have rank 2 and non-negative strides, and map into the tile.
    ///
    /// @post every `(t, v)` maps to an index in `[0, m*n)`.
    pub fn new(layout: Layout, m: i64, n: i64) -> Result<Self> {
        if layout.rank() != 2 || m < 1 || n < 1 {
            return Err(LayoutError::domain(
                "tv",
                format!(
                    "needs a rank-2 (thread,value) layout and a tile of positive sizes, got {layout} over ({m},{n})"
                ),
            ));
        }
        if layout.stride().flatten().iter().any(|&d| d < 0) {
            return Err(LayoutError::domain(
                "tv",
                format!("{layout} has a negative stride"),
            ));
        }
        let cells = mul("tv", m, n)?;
        if layout.cosize()? > cells {
            return Err(LayoutError::domain(
                "tv",
                format!("{layout} reaches past the {m}x{n} tile"),
            ));
        }
        Ok(TvLayout {
            layout,
            tile: (m, n),
        })
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The tile `(M, N)`.
    pub fn tile(&self) -> (i64, i64) {
        self.tile
    }

    /// Number of threads: `size(mode 0)`.
    pub fn threads(&self) -> Result<i64> {
        self.layout.mode(0)?.size()
    }

    /// Number of values per thread: `size(mode 1)`.
    pub fn values(&self) -> Result<i64> {
        self.layout.mode(1)?.size()
    }

    /// `(row, col)` in the tile of value `v` of thread `t`.
    pub fn coord(&self, t: i64, v: i64) -> Result<(i64, i64)> {
        let idx = self.layout.crd2idx(&IntTuple::ints(&[t, v]))?;
        Ok((idx % self.tile.0, idx / self.tile.0))
    }
}

impl fmt::Display for TvLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tv({},({},{}))", self.layout, self.tile.0, self.tile.1)
    }
}

/// A layout from nested integer lists, for the constant atoms below.
fn lay(shape: IntTuple, stride: IntTuple) -> Result<Layout> {
    Layout::new(shape, stride)
}

fn t(items: Vec<IntTuple>) -> IntTuple {
    IntTuple::Tuple(items)
}

fn i(v: i64) -> IntTuple {
    IntTuple::Int(v)
}

/// `mma.sync.aligned.m16n8k16` A fragment (f16 or bf16; PTX ISA "Matrix Fragments for
/// mma.m16n8k16 with floating point type", figure for A): 32 threads x 8 values over the 16x16
/// `M x K` tile. Thread `(t%4, t/4)`, value bits `(col+1, row+8, col+8)`.
pub fn mma_m16n8k16_a() -> Result<TvLayout> {
    let l = lay(
        t(vec![t(vec![i(4), i(8)]), t(vec![i(2), i(2), i(2)])]),
        t(vec![t(vec![i(32), i(1)]), t(vec![i(16), i(8), i(128)])]),
    )?;
    TvLayout::new(l, 16, 16)
}

/// `mma.sync.aligned.m16n8k16` B fragment (f16 or bf16): 32 threads x 4 values over the `N x K`
/// = 8x16 tile. Thread `(t%4 -> k*2, t/4 -> n)`, value bits `(k+1, k+8)`.
pub fn mma_m16n8k16_b() -> Result<TvLayout> {
    let l = lay(
        t(vec![t(vec![i(4), i(8)]), t(vec![i(2), i(2)])]),
        t(vec![t(vec![i(16), i(1)]), t(vec![i(8), i(64)])]),
    )?;
    TvLayout::new(l, 8, 16)
}

/// `mma.sync.aligned.m16n8k16` C/D fragment (f32 accumulate): 32 threads x 4 values over the
/// `M x N` = 16x8 tile. Thread `(t%4 -> n*2, t/4 -> m)`, value bits `(n+1, m+8)`.
pub fn mma_m16n8k16_c() -> Result<TvLayout> {
    let l = lay(
        t(vec![t(vec![i(4), i(8)]), t(vec![i(2), i(2)])]),
        t(vec![t(vec![i(32), i(1)]), t(vec![i(16), i(8)])]),
    )?;
    TvLayout::new(l, 16, 8)
}

/// `mma.sync.aligned.m16n8k8` A fragment for `.tf32` (PTX ISA "Matrix Fragments for
/// mma.m16n8k8" with `.tf32`): 32 threads x 4 values over the 16x8 `M x K` tile. Thread
/// `(t%4 -> k, t/4 -> m)`, value bits `(m+8, k+4)`.
pub fn mma_m16n8k8_tf32_a() -> Result<TvLayout> {
    let l = lay(
        t(vec![t(vec![i(4), i(8)]), t(vec![i(2), i(2)])]),
        t(vec![t(vec![i(16), i(1)]), t(vec![i(8), i(64)])]),
    )?;
    TvLayout::new(l, 16, 8)
}

/// `mma.sync.aligned.m16n8k8` B fragment for `.tf32`: 32 threads x 2 values over the 8x8
/// `N x K` tile. Thread `(t%4 -> k, t/4 -> n)`, value bit `k+4`. (The C/D fragment is
/// [`mma_m16n8k16_c`]'s.)
pub fn mma_m16n8k8_tf32_b() -> Result<TvLayout> {
    let l = lay(
        t(vec![t(vec![i(4), i(8)]), i(2)]),
        t(vec![t(vec![i(8), i(1)]), i(32)]),
    )?;
    TvLayout::new(l, 8, 8)
}

/// The destination fragment of `ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].b16`: 32 threads x
/// (2 x matrices) 16-bit values over the `8*matrices x 8` tile as stored in shared memory.
/// Without `.trans` thread `t` gets row `t/4`, columns `2*(t%4)+{0,1}` of each matrix; with
/// `.trans` it gets column `t/4`, rows `2*(t%4)+{0,1}`.
pub fn ldmatrix(matrices: i64, trans: bool) -> Result<TvLayout> {
    if ![1, 2, 4].contains(&matrices) {
        return Err(LayoutError::domain(
            "ldmatrix",
            format!("x{matrices}: only x1, x2 and x4 exist"),
        ));
    }
    let rows = 8 * matrices;
    let (thr, v0) = if trans {
        (t(vec![i(2), i(rows)]), i(1))
    } else {
        (t(vec![i(2 * rows), i(1)]), i(rows))
    };
    let (vs, vd) = if matrices == 1 {
        (i(2), v0)
    } else {
        (t(vec![i(2), i(matrices)]), t(vec![v0, i(8)]))
    };
    TvLayout::new(
        lay(t(vec![t(vec![i(4), i(8)]), vs]), t(vec![thr, vd]))?,
        rows,
        8,
    )
}

/// The `wgmma.mma_async.m64nNk16` f32 accumulator fragment (PTX ISA "Register Fragments and
/// Shared Memory Matrix Layouts", WGMMA `.m64nNk16` D): 128 threads x N/2 values over the 64xN
/// tile. Warp `w` owns rows `16w..16w+16`; within a warp each 8-column slice is laid out as the
/// `mma.m16n8` C fragment.
pub fn wgmma_m64nk16_d(n: i64) -> Result<TvLayout> {
    if !(8..=256).contains(&n) || n % 8 != 0 {
        return Err(LayoutError::domain(
            "wgmma",
            format!("N = {n}: wgmma.m64nNk16 needs N a multiple of 8 in [8, 256]"),
        ));
    }
    let shape = t(vec![
        t(vec![i(4), i(8), i(4)]),
        t(vec![i(2), i(2), i(n / 8)]),
    ]);
    let stride = t(vec![
        t(vec![i(128), i(1), i(16)]),
        t(vec![i(64), i(8), i(512)]),
    ]);
    TvLayout::new(lay(shape, stride)?, 64, n)
}

/// Which dimension of a wgmma shared-memory operand is contiguous.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Major {
    K,
    Mn,
}

/// The canonical wgmma shared-memory layout atom (CuTe's `GMMA::Layout_{K,MN}_{INTER,SW32,SW64,SW128}_Atom`)
/// in units of `elem_bits`-bit elements: 8 rows of `swizzle_bytes` (16 for no swizzle), swizzled by
/// the PTX 32/64/128-byte modes, which XOR address bits `[4, 4+log2(bytes/16))` with bits `[7, ...)`.
///
/// @post the atom is a bijection onto `[0, 8 * swizzle_bytes * 8 / elem_bits)`.
pub fn gmma_smem_atom(major: Major, swizzle_bytes: i64, elem_bits: i64) -> Result<ComposedLayout> {
    let bits = match swizzle_bytes {
        0 | 16 => 0,
        32 => 1,
        64 => 2,
        128 => 3,
        _ => {
            return Err(LayoutError::domain(
                "gmma",
                format!(
                    "swizzle of {swizzle_bytes} bytes: only 0 (interleave), 32, 64 and 128 exist"
                ),
            ));
        }
    };
    let base = match elem_bits {
        8 => 4,
        16 => 3,
        32 => 2,
        _ => {
            return Err(LayoutError::domain(
                "gmma",
                format!("{elem_bits}-bit elements: only 8, 16 and 32 are supported"),
            ));
        }
    };
    let width = (16 << bits) * 8 / elem_bits;
    let layout = match major {
        Major::K => Layout::flat(&[8, width], &[width, 1])?,
        Major::Mn => Layout::flat(&[width, 8], &[1, width])?,
    };
    Ok(ComposedLayout {
        outer: super::swizzle::Outer::Swizzle(Swizzle::new(bits, base, 3)?),
        offset: 0,
        layout,
    })
}

/// The TV layout of a tiled copy: `thr` arranges thread ids over the tile, `val` arranges each
/// thread's values (e.g. 8 f16 for a 16-byte `cp.async`), as CuTe's `make_tiled_copy(atom, thr, val)`.
///
/// The tile is `product_each(shape(raked_product(thr, val)))` and the TV layout is
/// `right_inverse(raked_product(thr, val)) o (size(thr), size(val))`.
/// @post value `v` of thread `t` is element `(thr^-1(t) * shape(val) + val^-1(v))` of the tile.
pub fn tiled_copy_tv(thr: &Layout, val: &Layout) -> Result<TvLayout> {
    let mn = raked_product(thr, val)?;
    if mn.rank() != 2 {
        return Err(LayoutError::domain(
            "tiled_copy",
            format!("thread and value layouts must be rank 2, got {thr} and {val}"),
        ));
    }
    let (m, n) = (mn.mode(0)?.size()?, mn.mode(1)?.size()?);
    let shape = Layout::compact(IntTuple::ints(&[thr.size()?, val.size()?]))?;
    let tv = composition(&algebra::right_inverse(&mn)?, &shape)?;
    TvLayout::new(tv, m, n)
}
