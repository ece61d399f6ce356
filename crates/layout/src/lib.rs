//! CuTe-style layout algebra: pure math from which every index an emitter writes is computed.
//!
//! A [`Layout`] is a pair of congruent hierarchical integer tuples, `shape:stride`, read as a
//! function from coordinates to integers: `(4,(2,3)):(1,(8,16))` maps `(i,(j,k))` to
//! `i + 8j + 16k`. A stride may also be a scaled basis element `v@i` (CuTe's `E<i>` times `v`):
//! then the layout maps to coordinates, `(4,8):(1@0,1@1)` being the identity on `(4,8)` (CuTe's
//! coordinate layouts, which TMA partitioning uses). The functions are ported from C++ CuTe's
//! `layout.hpp` (the current CUTLASS release), each a small free function whose doc states its
//! post-condition:
//!
//! - **Building and taking apart** ([`core`], [`modes`]): [`IntTuple`], [`Layout`] with rank,
//!   depth, size, cosize, modes, flatten, `crd2idx`/`idx2crd`, evaluation (to an integer or a
//!   coordinate), slicing with `_`, `make_layout` ([`Layout::concat`]), append, prepend,
//!   [`make_identity_layout`], [`make_ordered_layout`], [`make_layout_like`], [`group_modes`],
//!   [`dice`], [`domain_distribute`].
//! - **The algebra** ([`algebra`], [`tiling`]): [`coalesce`] (whole and by profile), [`filter`],
//!   [`composition`] (with a layout or by mode with a [`Tiler`]), [`complement`],
//!   [`right_inverse`], [`left_inverse`], [`nullspace`], [`shape_div`], [`ceil_div_tuple`], the
//!   logical/zipped/tiled/flat divides and products, [`blocked_product`], [`raked_product`],
//!   [`tile_to_shape`].
//! - **Vector widths** ([`recast`]): [`upcast`], [`downcast`], [`recast_layout`],
//!   [`max_common_vector`], [`max_common_layout`], [`max_alignment`].
//! - **Composed layouts** ([`swizzle`]): [`Swizzle`] `Sw<B,M,S>` and [`ComposedLayout`]
//!   `A o offset o L` with `A` a swizzle or a layout.
//! - **Atoms as layouts** ([`atoms`]): the thread-value layouts of `mma.sync.m16n8k16`, `ldmatrix`,
//!   the wgmma accumulator and shared-memory atoms, and tiled copies such as 16-byte `cp.async`.
//! - **Bank conflicts** ([`bank`]): wavefronts per warp access of a shared-memory layout.
//! - **Text form and the `irc layout` language** (`parse`, [`expr`]): [`eval_expr`],
//!   [`parse_layout`], [`render_table`], [`render_svg`].
//!
//! Errors are [`LayoutError`]s: divisibility failures name the condition and the numbers;
//! arithmetic is checked; nesting is capped at [`MAX_DEPTH`]. Nothing here panics on any input.
//!
//! # Text form
//!
//! CuTe notation without spaces: an integer tuple is `n` or `(t0,t1,...)` (a one-element tuple is
//! `(4)`, distinct from `4`); a layout is `shape:stride`; a bare shape means the compact
//! column-major layout (size-1 modes get stride 0, as CuTe's `make_layout`), `(4,8)` =
//! `(4,8):(1,4)`. A stride leaf `v@i@j` is `v * E<j,i>` (innermost mode first, as CuTe prints it).
//! A composed layout is `Sw<3,3,3> o (8,64):(64,1)` or `(4,5):(1,4) o 2 o (3,5):(1,4)` (an offset
//! of 0 is not printed). Printing and parsing round-trip.
//!
//! # The expression language (`irc layout EXPR`)
//!
//! ```text
//! expr    := primary ( "(" [expr ("," expr)*] ")"            L(i), L(i,j), L(_,2): evaluate, slice
//!                    | "o" [INT "o"] primary )*              A o [offset o] B: a composed layout
//! primary := leaf [":" lit] | lit [":" lit]                  integers and layout literals
//!          | NAME [ "(" [expr ("," expr)*] ")" ]            a function of FUNCTIONS
//!          | "[" expr ("," expr)* "]"                       a tiler, one layout (or _) per mode
//!          | "_"                                            all of a mode (coordinates, tilers)
//!          | "Sw<" INT "," INT "," INT ">" [ "o" [INT "o"] primary ]
//! lit     := leaf | "_" | "(" [lit ("," lit)*] ")"
//! leaf    := ["-"] INT ("@" INT)*                            an integer or a scaled basis element
//! ```
//!
//! An integer where a layout is expected is `n:1` (as a tiler `n` in CuTe's `composition`); a
//! tuple literal where a coordinate, profile or shape is expected is read as that tuple. The
//! functions are those of [`FUNCTIONS`] by their CuTe names (`size`, `coalesce`, `composition`,
//! `logical_divide`, `upcast`, `max_common_vector`, ...). A thread-value layout is written
//! `tv(L, (M,N))` (`L` maps `(thread, value)` to the column-major index `m + M*n` of an `M x N`
//! tile), or named by an atom (`mma_m16n8k16_a`, `ldmatrix_x4_trans`, `wgmma_m64nk16_d(64)`,
//! `tiled_copy_tv(thr, val)`); [`render_table`] and [`render_svg`] draw it as the grid of
//! `T<t>V<v>` cells.
//!
//! # Agreement with C++ CuTe, and the divergences
//!
//! `tests/cute_cases.rs` checks every case of CUTLASS's `test/unit/cute/core/*.cpp`, the
//! static cases of the cute_ir dialect's LIT tests, pycute's tests and cases of our own (563 in
//! all) against what the C++ CuTe prints for them (`tests/cute/oracle.py` compiles each with g++
//! against the CUTLASS headers); `tests/pycute_diff.rs` checks 6000 random expressions against
//! pycute, accepting a disagreement only where irc equals the recorded C++ answer. The intended
//! divergences, all of them:
//!
//! | case | C++ CuTe | irc | why |
//! |---|---|---|---|
//! | run-time (dynamic) integers | C++ results with dynamic integers can keep size-1 modes and strides that static integers drop (`coalesce(1:1)` is `1:1` dynamic, `1:0` static; `composition((128,24,5):(1,128,3072),64:2)` is `(64,1,1):(2,128,3072)` dynamic, `64:2` static) | every integer is static: the static result | irc has no run-time values; the static answer is the canonical one |
//! | `left_inverse((4):(-1))` | `(-1,4):(0,1)`, a negative shape | error | shapes are at least 1 in irc |
//! | `composition(L, Sw<..> o L2)` | moves the swizzle outward | error | only plain layouts compose on the right of a layout |
//! | products of layouts with basis strides (`logical_product((4,3):(1@0,1@1),(2,5))`) | compile error (the cute_ir dialect returns a layout) | error | we follow C++; `complement` needs integer strides |
//! | divides of basis layouts, size-1 rest modes | stride `0` (the cute_ir dialect prints `3@1`) | `0` | we follow C++ |
//! | a coordinate outside the shape (`(4,8):(1,4)(40)`), incongruent literals, sizes < 1 | evaluated / accepted unchecked | error | typed errors instead of extrapolation |
//! | composed layouts print `A o 0 o B` | always prints the offset | omits an offset of 0 | shorter; both forms parse |
//! | a tuple literal as a tiler (`logical_divide(L,(3,4))`) | a shape tiler: by mode | the compact layout `(3,4):(1,3)` | write `[3,4]` for by-mode; a tuple literal is a layout everywhere in the language |
//! | composed layouts whose offset is a coordinate (`A o (2,1) o B`) | supported | not expressible | not implemented yet |
//! | `cosize(Sw<..> o L)` | (pycute: the swizzle's period) | the true codomain size | pycute's value is not the codomain size |
//! | pycute (not C++) | pycute zeroes or keeps size-1 strides differently, stops `right_inverse` at stride 0, skips the shape divisibility check, keeps modes a tiler does not reach | C++'s answers | pycute is older and looser than C++ CuTe (`tests/pycute_diff.rs`, `DIVERGENCES` and `tests/cute/pycute_vs_cpp.tsv`) |

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
    complement_shape, composition, filter, filter_profile, left_inverse, nullspace, right_inverse,
    shape_div,
};
pub use atoms::{
    Major, TvLayout, gmma_smem_atom, ldmatrix, mma_m16n8k8_tf32_a, mma_m16n8k8_tf32_b,
    mma_m16n8k16_a, mma_m16n8k16_b, mma_m16n8k16_c, tiled_copy_tv, wgmma_m64nk16_d,
};
pub use bank::{IndexMap, WarpAccess, bank_conflicts};
pub use core::{Coord, Layout, compact_strides};
pub use error::{LayoutError, MAX_DEPTH, MAX_RENDER_CELLS, Result};
pub use expr::{FUNCTIONS, Function, Value, eval_expr, parse_layout};
pub use int_tuple::IntTuple;
pub use modes::{
    dice, domain_distribute, group_modes, make_identity_layout, make_layout_like,
    make_ordered_layout,
};
pub use recast::{
    downcast, downcast_composed, max_alignment, max_common_layout, max_common_vector,
    recast_composed, recast_layout, upcast, upcast_composed,
};
pub use render::{render_svg, render_table};
pub use swizzle::{ComposedLayout, Outer, Swizzle};
pub use tiling::{
    Tiler, blocked_product, composition_tiler, flat_divide, flat_product, logical_divide,
    logical_product, raked_product, tile_to_shape, tiled_divide, tiled_product, zipped_divide,
    zipped_product,
};
