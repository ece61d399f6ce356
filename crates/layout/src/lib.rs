//! CuTe-style layout algebra: pure math from which every index an emitter writes is computed.
//!
//! A [`Layout`] is a pair of congruent hierarchical integer tuples, `shape:stride`, read as a
//! function from coordinates to integers: `(4,(2,3)):(1,(8,16))` maps `(i,(j,k))` to
//! `i + 8j + 16k`. This module provides, as small free functions whose docs state their
//! post-conditions (as CuTe's `layout.hpp` does):
//!
//! - **Building and taking apart** ([`core`]): [`IntTuple`], [`Layout`] with rank, depth, size,
//!   cosize, modes, flatten, `crd2idx`/`idx2crd`, evaluation, slicing with `_` and its offset,
//!   `make_layout` ([`Layout::concat`]), append and prepend.
//! - **The algebra** ([`algebra`], [`tiling`]): [`coalesce`] (whole and by profile), [`filter`],
//!   [`composition`] (with a layout or by mode with a [`Tiler`]), [`complement`],
//!   [`right_inverse`], [`left_inverse`], the logical/zipped/tiled/flat divides and products,
//!   [`blocked_product`] and [`raked_product`].
//! - **Swizzles** ([`swizzle`]): [`Swizzle`] `Sw<B,M,S>` and [`ComposedLayout`] `Sw<B,M,S> o L`.
//! - **Atoms as layouts** ([`atoms`]): the thread-value layouts of `mma.sync.m16n8k16`, `ldmatrix`,
//!   the wgmma accumulator and shared-memory atoms, and tiled copies such as 16-byte `cp.async`.
//! - **Bank conflicts** ([`bank`]): wavefronts per warp access of a shared-memory layout.
//! - **Text form and the `irc layout` language** (`parse`, [`expr`]): [`eval_expr`],
//!   [`parse_layout`], [`render_table`], [`render_svg`].
//!
//! Errors are [`LayoutError`]s: divisibility failures name the modes and numbers; arithmetic is
//! checked; nesting is capped at [`MAX_DEPTH`]. Nothing here panics on any input.
//!
//! # Text form
//!
//! CuTe notation without spaces: an integer tuple is `n` or `(t0,t1,...)` (a one-element tuple is
//! `(4)`, distinct from `4`); a layout is `shape:stride`; a bare shape means the compact
//! column-major layout, `(4,8)` = `(4,8):(1,4)`. A swizzled layout is `Sw<3,3,3> o (8,64):(64,1)`
//! (with an offset, `Sw<3,3,3> o 16 o (8,64):(64,1)`). Printing and parsing round-trip.
//!
//! # The expression language (`irc layout EXPR`)
//!
//! ```text
//! expr  := primary ( "(" [expr ("," expr)*] ")" )*    postfix: L(i), L(i,j), L(_,2) slices
//! primary := INT [":" lit] | lit [":" lit]             integers and layout literals
//!          | NAME [ "(" [expr ("," expr)*] ")" ]        a function of FUNCTIONS
//!          | "[" expr ("," expr)* "]"                   a tiler, one layout (or _) per mode
//!          | "_"                                        all of a mode (in coordinates and tilers)
//!          | "Sw<" INT "," INT "," INT ">" [ "o" [INT "o"] primary ]
//! lit   := INT | "-" INT | "_" | "(" [lit ("," lit)*] ")"
//! ```
//!
//! An integer where a layout is expected is `n:1` (as CuTe's tilers); a tuple literal where a
//! coordinate, profile or tile is expected is read as that tuple. The functions are those of
//! [`FUNCTIONS`] by their CuTe names (`size`, `cosize`, `coalesce`, `composition`,
//! `logical_divide`, ...). A thread-value layout is written `tv(L, (M,N))` (`L` maps
//! `(thread, value)` to the column-major index `m + M*n` of an `M x N` tile), or named by an atom
//! (`mma_m16n8k16_a`, `ldmatrix_x4_trans`, `wgmma_m64nk16_d(64)`, `tiled_copy_tv(thr, val)`);
//! [`render_table`] and [`render_svg`] draw it as the grid of `T<t>V<v>` cells.
//!
//! Differences from pycute (which we test against) follow the C++ CuTe and are noted on the
//! functions: [`right_inverse`] skips stride-0 modes, by-mode [`composition_tiler`] drops the modes
//! a tiler does not reach, [`composition`] checks the shape divisibility condition, [`complement`]
//! rejects layouts whose modes interleave, and the cosize of a swizzled layout is its true codomain.

pub mod algebra;
pub mod atoms;
pub mod bank;
pub mod core;
pub mod error;
pub mod expr;
pub mod int_tuple;
pub mod modes;
mod parse;
pub mod recast;
pub mod render;
pub mod swizzle;
pub mod tiling;

pub use algebra::{
    ceil_div_tuple, coalesce, coalesce_profile, coalesce_x, complement, complement_default,
    complement_shape, composition, filter, filter_profile, left_inverse, nullspace,
    right_inverse, shape_div,
};
pub use modes::{
    dice, domain_distribute, group_modes, make_identity_layout, make_layout_like,
    make_ordered_layout,
};
pub use recast::{
    downcast, max_alignment, max_common_layout, max_common_vector, recast_layout, upcast,
};
pub use atoms::{
    Major, TvLayout, gmma_smem_atom, ldmatrix, mma_m16n8k16_a, mma_m16n8k16_b, mma_m16n8k16_c,
    tiled_copy_tv, wgmma_m64nk16_d,
};
pub use bank::{IndexMap, WarpAccess, bank_conflicts};
pub use core::{Coord, Layout, compact_strides};
pub use error::{LayoutError, MAX_DEPTH, MAX_RENDER_CELLS, Result};
pub use expr::{FUNCTIONS, Function, Value, eval_expr, parse_layout};
pub use int_tuple::IntTuple;
pub use render::{render_svg, render_table};
pub use swizzle::{ComposedLayout, Outer, Swizzle};
pub use tiling::{
    Tiler, blocked_product, composition_tiler, flat_divide, flat_product, logical_divide,
    logical_product, raked_product, tile_to_shape, tiled_divide, tiled_product, zipped_divide,
    zipped_product,
};
