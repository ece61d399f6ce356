//! The expression language of `irc layout`: values, the function table, and evaluation.

use std::fmt;

use super::algebra::{
    ceil_div_tuple, coalesce, coalesce_profile, complement_default, complement_shape, filter,
    filter_profile, left_inverse, nullspace, right_inverse, shape_div,
};
use super::atoms::{
    Major, TvLayout, gmma_smem_atom, ldmatrix, mma_m16n8k8_tf32_a, mma_m16n8k8_tf32_b,
    mma_m16n8k16_a, mma_m16n8k16_b, mma_m16n8k16_c, tiled_copy_tv, wgmma_m64nk16_d,
};
use super::bank::{IndexMap, bank_conflicts};
use super::core::{Coord, Layout};
use super::error::{LayoutError, Result};
use super::int_tuple::IntTuple;
use super::modes::{
    dice, domain_distribute, group_modes, make_identity_layout, make_layout_like,
    make_ordered_layout,
};
use super::parse::{Ast, parse_expr};
use super::recast::{
    downcast, downcast_composed, max_alignment, max_common_layout, max_common_vector,
    recast_composed, recast_layout, upcast, upcast_composed,
};
use super::swizzle::{ComposedLayout, Outer, Swizzle};
use super::tiling::{
    Tiler, blocked_product, composition_tiler, flat_divide, flat_product, logical_divide,
    logical_product, raked_product, tile_to_shape, tiled_divide, tiled_product, zipped_divide,
    zipped_product,
};

/// The result of evaluating an expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// An integer (`size`, `cosize`, `L(i)`, ...).
    Int(i64),
    /// An integer tuple (`shape`, `stride`, `idx2crd`, ...).
    Tuple(IntTuple),
    /// A layout `shape:stride`.
    Layout(Layout),
    /// A swizzle function `Sw<B,M,S>`.
    Swizzle(Swizzle),
    /// A composed layout `Sw<B,M,S> o [offset o] L` or `A o [offset o] L`.
    Composed(ComposedLayout),
    /// A thread-value layout over a tile, `tv(L,(M,N))`.
    Tv(TvLayout),
    /// A tiler `[T0,T1,...]`.
    Tiler(Tiler),
    /// Several results, `(a,b,...)` (e.g. `slice_and_offset`, `bank_conflicts`).
    List(Vec<Value>),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Tuple(t) => write!(f, "{t}"),
            Value::Layout(l) => write!(f, "{l}"),
            Value::Swizzle(s) => write!(f, "{s}"),
            Value::Composed(c) => write!(f, "{c}"),
            Value::Tv(tv) => write!(f, "{tv}"),
            Value::Tiler(t) => write!(f, "{t}"),
            Value::List(vs) => {
                f.write_str("(")?;
                for (i, v) in vs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str(")")
            }
        }
    }
}

/// Evaluate one expression of the `irc layout` language (see the module docs for the grammar).
///
/// A bare tuple literal at the top level is the compact column-major layout of that shape.
pub fn eval_expr(src: &str) -> Result<Value> {
    eval(&parse_expr(src)?)
}

/// Parse CuTe notation for a layout (`(4,(2,3)):(1,(8,16))`, or a bare shape for the compact
/// column-major layout).
pub fn parse_layout(src: &str) -> Result<Layout> {
    match eval_expr(src)? {
        Value::Layout(l) => Ok(l),
        Value::Int(n) => Layout::int(n, 1),
        other => Err(LayoutError::Argument(format!("`{other}` is not a layout"))),
    }
}

fn eval(ast: &Ast) -> Result<Value> {
    match ast {
        Ast::Int { value, .. } => Ok(Value::Int(*value)),
        Ast::Lit { shape, stride, at } => lit_layout(shape, stride.as_ref())
            .map(Value::Layout)
            .map_err(|e| located("layout", *at, e)),
        Ast::All { at } => Err(LayoutError::Parse {
            offset: *at,
            message: "`_` is only allowed inside coordinates and tilers".into(),
        }),
        Ast::Tiler { .. } => Ok(Value::Tiler(tiler(ast)?)),
        Ast::Swizzle {
            bits,
            base,
            shift,
            then,
            at,
        } => swizzle_value(*bits, *base, *shift, then.as_ref(), *at),
        Ast::Compose {
            outer,
            offset,
            inner,
            at,
        } => compose_value(outer, *offset, inner).map_err(|e| located("o", *at, e)),
        Ast::Apply { target, args, at } => {
            let target = eval(target)?;
            apply(&target, args).map_err(|e| located("apply", *at, e))
        }
        Ast::Call { name, args, at } => call(name, args, *at),
    }
}

/// Wrap an error from the call at `at`, unless it already carries a location.
fn located(func: &str, at: usize, e: LayoutError) -> LayoutError {
    if e.offset().is_some() {
        e
    } else {
        LayoutError::InCall {
            func: func.to_string(),
            offset: at,
            source: Box::new(e),
        }
    }
}

fn lit_layout(shape: &Coord, stride: Option<&Coord>) -> Result<Layout> {
    let shape = coord_tuple(shape)?;
    match stride {
        Some(d) => Layout::new(shape, coord_tuple(d)?),
        None => Layout::compact(shape),
    }
}

/// A coordinate without `_` as an integer tuple.
fn coord_tuple(c: &Coord) -> Result<IntTuple> {
    match c {
        Coord::Int(v) => Ok(IntTuple::Int(*v)),
        Coord::Basis(v, p) => Ok(IntTuple::Basis(*v, p.clone())),
        Coord::All => Err(LayoutError::Argument(
            "`_` is only allowed in coordinates".into(),
        )),
        Coord::Tuple(t) => Ok(IntTuple::Tuple(
            t.iter().map(coord_tuple).collect::<Result<_>>()?,
        )),
    }
}

fn swizzle_value(
    bits: i64,
    base: i64,
    shift: i64,
    then: Option<&(i64, Box<Ast>)>,
    at: usize,
) -> Result<Value> {
    let sw = Swizzle::new(bits, base, shift).map_err(|e| located("Sw", at, e))?;
    let Some((offset, inner)) = then else {
        return Ok(Value::Swizzle(sw));
    };
    match eval(inner)? {
        Value::Layout(layout) => Ok(Value::Composed(ComposedLayout::swizzled(
            sw, *offset, layout,
        ))),
        Value::Int(n) => Ok(Value::Composed(ComposedLayout::swizzled(
            sw,
            *offset,
            Layout::int(n, 1)?,
        ))),
        other => Err(located(
            "Sw",
            at,
            LayoutError::Argument(format!("`{other}` cannot be swizzled; expected a layout")),
        )),
    }
}

/// `outer o offset o inner` with a layout outside (a swizzle outside is parsed as `Sw<..> o ..`).
fn compose_value(outer: &Ast, offset: i64, inner: &Ast) -> Result<Value> {
    let outer = match eval(outer)? {
        Value::Swizzle(s) => Outer::Swizzle(s),
        other => Outer::Layout(as_layout(other)?),
    };
    Ok(Value::Composed(ComposedLayout {
        outer,
        offset,
        layout: layout_arg(inner)?,
    }))
}

/// A value that is an integer or a coordinate.
fn int_or_tuple(t: IntTuple) -> Value {
    match t {
        IntTuple::Int(v) => Value::Int(v),
        other => Value::Tuple(other),
    }
}

/// `target(args)`: evaluation at a coordinate, or slicing when the coordinate has a `_`.
fn apply(target: &Value, args: &[Ast]) -> Result<Value> {
    let crd = match args {
        [one] => coord_arg(one)?,
        _ => Coord::Tuple(args.iter().map(coord_arg).collect::<Result<_>>()?),
    };
    match (target, crd.has_all()) {
        (Value::Layout(l), false) => Ok(int_or_tuple(l.crd2val(&crd.zeroed())?)),
        (Value::Layout(l), true) => Ok(Value::Layout(l.slice_and_offset(&crd)?.0)),
        (Value::Composed(c), false) => Ok(Value::Int(c.crd2idx(&crd.zeroed())?)),
        (Value::Composed(c), true) => {
            let (layout, off) = c.layout.slice_and_offset(&crd)?;
            let offset = c
                .offset
                .checked_add(off)
                .ok_or(LayoutError::Overflow { op: "slice" })?;
            Ok(Value::Composed(ComposedLayout {
                offset,
                ..c.with_layout(layout)
            }))
        }
        (Value::Swizzle(s), false) => Ok(Value::Int(s.apply(int_of(&crd)?))),
        (Value::Tv(tv), false) => Ok(Value::Int(tv.layout().crd2idx(&crd.zeroed())?)),
        (other, _) => Err(LayoutError::Argument(format!(
            "`{other}` cannot be applied to a coordinate"
        ))),
    }
}

fn int_of(c: &Coord) -> Result<i64> {
    match c {
        Coord::Int(v) => Ok(*v),
        _ => Err(LayoutError::Argument("expected an integer".into())),
    }
}

/// An argument read as a coordinate: a tuple literal (which may hold `_`), `_`, or any expression
/// that evaluates to an integer or a tuple.
fn coord_arg(ast: &Ast) -> Result<Coord> {
    match ast {
        Ast::Lit {
            shape,
            stride: None,
            ..
        } => Ok(shape.clone()),
        Ast::All { .. } => Ok(Coord::All),
        _ => match eval(ast)? {
            Value::Int(v) => Ok(Coord::Int(v)),
            Value::Tuple(t) => Ok(Coord::from(&t)),
            other => Err(LayoutError::Argument(format!(
                "`{other}` is not a coordinate"
            ))),
        },
    }
}

/// An argument read as an integer tuple (a coordinate without `_`).
fn tuple_arg(ast: &Ast) -> Result<IntTuple> {
    coord_tuple(&coord_arg(ast)?)
}

fn int_arg(ast: &Ast) -> Result<i64> {
    match eval(ast)? {
        Value::Int(v) => Ok(v),
        other => Err(LayoutError::Argument(format!(
            "`{other}` is not an integer"
        ))),
    }
}

/// An argument read as a layout; an integer `n` is `n:1` and a tuple is its compact layout.
fn layout_arg(ast: &Ast) -> Result<Layout> {
    as_layout(eval(ast)?)
}

fn as_layout(v: Value) -> Result<Layout> {
    match v {
        Value::Layout(l) => Ok(l),
        Value::Int(n) => Layout::int(n, 1),
        Value::Tuple(t) => Layout::compact(t),
        other => Err(LayoutError::Argument(format!("`{other}` is not a layout"))),
    }
}

/// An argument read as a tiler: `[..]` by mode, `_`, or a layout (integers are `n:1`).
fn tiler(ast: &Ast) -> Result<Tiler> {
    match ast {
        Ast::All { .. } => Ok(Tiler::All),
        Ast::Tiler { items, .. } => Ok(Tiler::Modes(
            items.iter().map(tiler).collect::<Result<_>>()?,
        )),
        _ => Ok(Tiler::Layout(layout_arg(ast)?)),
    }
}

/// Arguments checked against a function's arity.
struct Args<'a> {
    name: &'a str,
    args: &'a [Ast],
}

impl Args<'_> {
    fn arity(&self, min: usize, max: usize) -> Result<()> {
        let n = self.args.len();
        if (min..=max).contains(&n) {
            return Ok(());
        }
        let want = if min == max {
            format!("{min}")
        } else {
            format!("{min} to {max}")
        };
        Err(LayoutError::Argument(format!(
            "{} takes {want} argument(s), got {n}",
            self.name
        )))
    }

    fn get(&self, i: usize) -> &Ast {
        &self.args[i]
    }
}

type Builtin = fn(&Args) -> Result<Value>;

/// One function of the expression language.
pub struct Function {
    pub name: &'static str,
    pub signature: &'static str,
    pub summary: &'static str,
    run: Builtin,
}

macro_rules! f {
    ($name:literal, $sig:literal, $summary:literal, $run:expr) => {
        Function {
            name: $name,
            signature: $sig,
            summary: $summary,
            run: $run,
        }
    };
}

/// Every function of the expression language, by its CuTe name.
#[rustfmt::skip]
pub static FUNCTIONS: &[Function] = &[
    f!("size",            "size(x)",                 "size of the domain (product of the shape)",               |a| unary(a, size)),
    f!("cosize",          "cosize(x)",               "size of the codomain, L(size-1)+1",                       |a| unary(a, cosize)),
    f!("rank",            "rank(x)",                 "number of top-level modes",                               |a| unary(a, |v| shape_of(v).map(|s| Value::Int(s.rank() as i64)))),
    f!("depth",           "depth(x)",                "nesting depth of the shape",                              |a| unary(a, |v| shape_of(v).map(|s| Value::Int(s.depth() as i64)))),
    f!("shape",           "shape(L)",                "the shape as a tuple",                                    |a| unary(a, |v| shape_of(v).map(Value::Tuple))),
    f!("stride",          "stride(L)",               "the stride as a tuple",                                   |a| layout1(a, |l| Ok(Value::Tuple(l.stride().clone())))),
    f!("get",             "get(L, i, ...)",          "mode i (then mode j of that, ...), pycute's L[i]",       get),
    f!("flatten",         "flatten(L)",              "remove all nesting",                                      flatten_fn),
    f!("coalesce",        "coalesce(L[, profile])",  "merge modes keeping the function (by mode with a profile)", |a| profiled(a, coalesce, coalesce_profile)),
    f!("filter",          "filter(L[, profile])",    "drop stride-0 and size-1 modes, then coalesce",          |a| profiled(a, filter, filter_profile)),
    f!("composition",     "composition(A, B)",       "A o B; B a layout, integer or tiler; A may be a swizzle", compose),
    f!("complement",      "complement(L[, n])",      "the layout of what L misses, up to n (an integer or shape)", complement_fn),
    f!("right_inverse",   "right_inverse(L)",        "R with L(R(i)) == i",                                     |a| layout1(a, |l| right_inverse(l).map(Value::Layout))),
    f!("left_inverse",    "left_inverse(L)",         "R with R(L(i)) == i",                                     |a| layout1(a, |l| left_inverse(l).map(Value::Layout))),
    f!("logical_divide",  "logical_divide(A, T)",    "((tile, rest), ...) by mode",                             |a| divide(a, logical_divide)),
    f!("zipped_divide",   "zipped_divide(A, T)",     "((tiles), (rests))",                                       |a| divide(a, zipped_divide)),
    f!("tiled_divide",    "tiled_divide(A, T)",      "((tiles), rest0, rest1, ...)",                             |a| divide(a, tiled_divide)),
    f!("flat_divide",     "flat_divide(A, T)",       "(tile0, tile1, ..., rest0, rest1, ...)",                   |a| divide(a, flat_divide)),
    f!("logical_product", "logical_product(A, T)",   "(A, complement(A) o B) by mode",                          |a| product(a, logical_product)),
    f!("zipped_product",  "zipped_product(A, T)",    "((blocks), (products))",                                   |a| product(a, zipped_product)),
    f!("tiled_product",   "tiled_product(A, T)",     "((blocks), product0, product1, ...)",                      |a| product(a, tiled_product)),
    f!("flat_product",    "flat_product(A, T)",      "(block0, ..., product0, ...)",                             |a| product(a, flat_product)),
    f!("blocked_product", "blocked_product(A, B)",   "mode i = (A_i, product_i): B's elements as blocks",        |a| layout2(a, blocked_product)),
    f!("raked_product",   "raked_product(A, B)",     "mode i = (product_i, A_i): blocks interleaved",            |a| layout2(a, raked_product)),
    f!("make_layout",     "make_layout(L, ...)",     "the layout whose modes are the arguments",                 make_layout),
    f!("make_layout_like","make_layout_like(L)",     "a compact layout with L's shape and stride order",          |a| layout1(a, |l| make_layout_like(l).map(Value::Layout))),
    f!("nullspace",       "nullspace(L)",            "the layout of the coordinates L maps to 0",                 |a| layout1(a, |l| nullspace(l).map(Value::Layout))),
    f!("upcast",          "upcast(L, n)",            "L over elements n times wider",                              |a| cast(a, upcast, upcast_composed)),
    f!("downcast",        "downcast(L, n)",          "L over elements n times narrower",                           |a| cast(a, downcast, downcast_composed)),
    f!("recast_layout",   "recast_layout(L, old_bits, new_bits)", "L read as new_bits-bit elements instead of old_bits", recast_fn),
    f!("max_common_vector","max_common_vector(A, B)", "how many contiguous elements A and B agree on",            |a| layout2v(a, |x, y| max_common_vector(x, y).map(Value::Int))),
    f!("max_common_layout","max_common_layout(A, B)", "the layout of the contiguous elements A and B agree on",   |a| layout2(a, max_common_layout)),
    f!("max_alignment",   "max_alignment(L)",        "the largest n with upcast(L, n) defined",                   |a| layout1(a, |l| max_alignment(l).map(Value::Int))),
    f!("shape_div",       "shape_div(a, b)",         "CuTe's shape division of integer tuples",                  |a| tuple2(a, shape_div)),
    f!("ceil_div",        "ceil_div(a, b)",          "CuTe's rounding-up division of integer tuples",            |a| tuple2(a, ceil_div_tuple)),
    f!("tile_to_shape",   "tile_to_shape(L, shape[, order])", "repeat L (blocked) up to the shape",               tile_to_shape_fn),
    f!("dice",            "dice(crd, L)",            "the modes of L at the integer positions of crd",           |a| { a.arity(2, 2)?; dice(&coord_arg(a.get(0))?, &layout_arg(a.get(1))?).map(Value::Layout) }),
    f!("group_modes",     "group_modes(L, b, e)",    "modes b..e of L grouped into one",                         group_fn),
    f!("make_identity_layout","make_identity_layout(shape)", "shape:(1@0,1@1,...), mapping coordinates to themselves", |a| { a.arity(1, 1)?; make_identity_layout(&tuple_arg(a.get(0))?).map(Value::Layout) }),
    f!("make_ordered_layout","make_ordered_layout(shape, order)", "compact layout of shape, modes in the given order", |a| tuple2v(a, |s, o| make_ordered_layout(s, o).map(Value::Layout))),
    f!("make_composed_layout","make_composed_layout(A, offset, B)", "A o offset o B (A a layout or swizzle)",   composed_fn),
    f!("domain_distribute","domain_distribute(shape, n)", "n elements spread over the modes of shape",          |a| { a.arity(2, 2)?; domain_distribute(&tuple_arg(a.get(0))?, int_arg(a.get(1))?).map(Value::Layout) }),
    f!("append",          "append(L, X)",            "L with X as a new last mode",                              |a| layout2(a, |l, x| l.append(x))),
    f!("prepend",         "prepend(L, X)",           "L with X as a new first mode",                             |a| layout2(a, |l, x| l.prepend(x))),
    f!("crd2idx",         "crd2idx(crd, L)",         "L(crd)",                                                   crd2idx),
    f!("idx2crd",         "idx2crd(i, L)",           "the natural coordinate of index i in L's shape",          idx2crd),
    f!("slice_and_offset","slice_and_offset(crd, L)","(L(crd) with _ kept, offset of the fixed part)",           slice_and_offset),
    f!("tv",              "tv(L, (M,N))",            "a thread-value layout over an M x N tile",                 tv),
    f!("mma_m16n8k16_a",  "mma_m16n8k16_a",          "mma.m16n8k16 f16/bf16 A fragment over 16x16 (M,K)",        |a| atom(a, mma_m16n8k16_a)),
    f!("mma_m16n8k16_b",  "mma_m16n8k16_b",          "mma.m16n8k16 f16/bf16 B fragment over 8x16 (N,K)",         |a| atom(a, mma_m16n8k16_b)),
    f!("mma_m16n8k16_c",  "mma_m16n8k16_c",          "mma.m16n8k16 f32 C/D fragment over 16x8 (M,N)",            |a| atom(a, mma_m16n8k16_c)),
    f!("mma_m16n8k8_tf32_a", "mma_m16n8k8_tf32_a",    "mma.m16n8k8 tf32 A fragment over 16x8 (M,K)",              |a| atom(a, mma_m16n8k8_tf32_a)),
    f!("mma_m16n8k8_tf32_b", "mma_m16n8k8_tf32_b",    "mma.m16n8k8 tf32 B fragment over 8x8 (N,K)",               |a| atom(a, mma_m16n8k8_tf32_b)),
    f!("ldmatrix_x1",     "ldmatrix_x1",             "ldmatrix .x1 fragment over 8x8",                           |a| atom(a, || ldmatrix(1, false))),
    f!("ldmatrix_x2",     "ldmatrix_x2",             "ldmatrix .x2 fragment over 16x8",                          |a| atom(a, || ldmatrix(2, false))),
    f!("ldmatrix_x4",     "ldmatrix_x4",             "ldmatrix .x4 fragment over 32x8",                          |a| atom(a, || ldmatrix(4, false))),
    f!("ldmatrix_x1_trans","ldmatrix_x1_trans",      "ldmatrix .x1.trans fragment over 8x8",                     |a| atom(a, || ldmatrix(1, true))),
    f!("ldmatrix_x2_trans","ldmatrix_x2_trans",      "ldmatrix .x2.trans fragment over 16x8",                    |a| atom(a, || ldmatrix(2, true))),
    f!("ldmatrix_x4_trans","ldmatrix_x4_trans",      "ldmatrix .x4.trans fragment over 32x8",                    |a| atom(a, || ldmatrix(4, true))),
    f!("wgmma_m64nk16_d", "wgmma_m64nk16_d(N)",      "wgmma.m64nNk16 f32 accumulator over 64xN",                 |a| { a.arity(1, 1)?; wgmma_m64nk16_d(int_arg(a.get(0))?).map(Value::Tv) }),
    f!("gmma_k_atom",     "gmma_k_atom(bytes, bits)", "K-major wgmma smem atom, swizzle 0/32/64/128 bytes",      |a| gmma(a, Major::K)),
    f!("gmma_mn_atom",    "gmma_mn_atom(bytes, bits)","MN-major wgmma smem atom, swizzle 0/32/64/128 bytes",     |a| gmma(a, Major::Mn)),
    f!("tiled_copy_tv",   "tiled_copy_tv(thr, val)", "TV layout of a tiled copy (e.g. 16-byte cp.async)",        |a| layout2v(a, |t, v| tiled_copy_tv(t, v).map(Value::Tv))),
    f!("bank_conflicts",  "bank_conflicts(S, lanes, elem_bytes, access_bytes)", "extra wavefronts of each warp access", bank_fn),
];

fn call(name: &str, args: &[Ast], at: usize) -> Result<Value> {
    let Some(f) = FUNCTIONS.iter().find(|f| f.name == name) else {
        let message = format!(
            "unknown function `{name}`; known: {}",
            FUNCTIONS
                .iter()
                .map(|f| f.name)
                .collect::<Vec<_>>()
                .join(", ")
        );
        return Err(LayoutError::Parse {
            offset: at,
            message,
        });
    };
    (f.run)(&Args { name, args }).map_err(|e| located(name, at, e))
}

fn unary(a: &Args, f: fn(Value) -> Result<Value>) -> Result<Value> {
    a.arity(1, 1)?;
    f(eval(a.get(0))?)
}

fn layout1(a: &Args, f: impl Fn(&Layout) -> Result<Value>) -> Result<Value> {
    a.arity(1, 1)?;
    f(&layout_arg(a.get(0))?)
}

fn layout2(a: &Args, f: impl Fn(&Layout, &Layout) -> Result<Layout>) -> Result<Value> {
    layout2v(a, |x, y| f(x, y).map(Value::Layout))
}

fn layout2v(a: &Args, f: impl Fn(&Layout, &Layout) -> Result<Value>) -> Result<Value> {
    a.arity(2, 2)?;
    f(&layout_arg(a.get(0))?, &layout_arg(a.get(1))?)
}

fn atom(a: &Args, f: impl Fn() -> Result<TvLayout>) -> Result<Value> {
    a.arity(0, 0)?;
    f().map(Value::Tv)
}

fn size(v: Value) -> Result<Value> {
    match v {
        Value::Composed(c) => c.size().map(Value::Int),
        Value::Tv(tv) => tv.layout().size().map(Value::Int),
        Value::Swizzle(s) => Ok(Value::Int(s.period())),
        other => as_layout(other)?.size().map(Value::Int),
    }
}

fn cosize(v: Value) -> Result<Value> {
    match v {
        Value::Composed(c) => c.cosize().map(Value::Int),
        Value::Tv(tv) => tv.layout().cosize().map(Value::Int),
        other => as_layout(other)?.cosize().map(Value::Int),
    }
}

fn shape_of(v: Value) -> Result<IntTuple> {
    match v {
        Value::Tuple(t) => Ok(t),
        Value::Tiler(Tiler::Modes(ts)) => ts
            .into_iter()
            .map(|t| match t {
                Tiler::Layout(l) => Ok(l.shape().clone()),
                other => shape_of(Value::Tiler(other)),
            })
            .collect::<Result<Vec<_>>>()
            .map(IntTuple::Tuple),
        Value::Composed(c) => Ok(c.layout.shape().clone()),
        Value::Tv(tv) => Ok(tv.layout().shape().clone()),
        other => Ok(as_layout(other)?.shape().clone()),
    }
}

fn get(a: &Args) -> Result<Value> {
    a.arity(2, 1 + super::MAX_DEPTH)?;
    let mut value = match a.get(0) {
        Ast::Lit { stride: None, .. } => Value::Tuple(tuple_arg(a.get(0))?),
        t @ Ast::Tiler { .. } => Value::Tiler(tiler(t)?),
        other => Value::Layout(layout_arg(other)?),
    };
    for ast in &a.args[1..] {
        let i = int_arg(ast)?;
        let i = usize::try_from(i).map_err(|_| LayoutError::domain("get", format!("mode {i}")))?;
        let missing = || LayoutError::domain("get", format!("mode {i} of a value without it"));
        value = match value {
            Value::Layout(l) => Value::Layout(l.mode(i)?),
            Value::Tuple(t) => int_or_tuple(t.mode(i).ok_or_else(missing)?.clone()),
            Value::Int(v) if i == 0 => Value::Int(v),
            Value::Tiler(Tiler::Modes(ts)) => match ts.get(i).ok_or_else(missing)? {
                Tiler::Layout(l) => Value::Layout(l.clone()),
                t => Value::Tiler(t.clone()),
            },
            _ => return Err(missing()),
        };
    }
    Ok(value)
}

/// `flatten(t)` of a tuple literal is the tuple of its leaves; of a layout, the flat layout.
fn flatten_fn(a: &Args) -> Result<Value> {
    a.arity(1, 1)?;
    match a.get(0) {
        Ast::Lit { stride: None, .. } => {
            let t = tuple_arg(a.get(0))?;
            Ok(if t.is_tuple() {
                Value::Tuple(IntTuple::Tuple(t.leaves()))
            } else {
                int_or_tuple(t)
            })
        }
        other => Ok(Value::Layout(layout_arg(other)?.flatten())),
    }
}

fn profiled(
    a: &Args,
    whole: fn(&Layout) -> Result<Layout>,
    by: fn(&Layout, &IntTuple) -> Result<Layout>,
) -> Result<Value> {
    a.arity(1, 2)?;
    let l = layout_arg(a.get(0))?;
    match a.args.get(1) {
        None => whole(&l).map(Value::Layout),
        Some(p) => by(&l, &tuple_arg(p)?).map(Value::Layout),
    }
}

fn compose(a: &Args) -> Result<Value> {
    a.arity(2, 2)?;
    let rhs = tiler(a.get(1))?;
    match eval(a.get(0))? {
        Value::Swizzle(s) => Ok(Value::Composed(ComposedLayout::swizzled(
            s,
            0,
            tiler_layout(rhs)?,
        ))),
        Value::Composed(c) => Ok(Value::Composed(
            c.with_layout(composition_tiler(&c.layout, &rhs)?),
        )),
        lhs => composition_tiler(&as_layout(lhs)?, &rhs).map(Value::Layout),
    }
}

/// A tiler that must be a single layout (for `composition(Sw, L)`).
fn tiler_layout(t: Tiler) -> Result<Layout> {
    match t {
        Tiler::Layout(l) => Ok(l),
        other => Err(LayoutError::Argument(format!(
            "a swizzle composes with a layout, not `{other}`"
        ))),
    }
}

/// `complement(L)` (cotarget `cosize(filter(L))`) or `complement(L, n)`.
fn complement_fn(a: &Args) -> Result<Value> {
    a.arity(1, 2)?;
    let l = layout_arg(a.get(0))?;
    match a.args.get(1) {
        None => complement_default(&l).map(Value::Layout),
        Some(Ast::Lit {
            stride: Some(_), ..
        }) => complement_shape(&l, layout_arg(&a.args[1])?.shape()).map(Value::Layout),
        Some(n) => complement_shape(&l, &tuple_arg(n)?).map(Value::Layout),
    }
}

/// A divide of a layout or (through its inner layout) of a swizzled layout.
fn divide(a: &Args, op: fn(&Layout, &Tiler) -> Result<Layout>) -> Result<Value> {
    a.arity(2, 2)?;
    let t = tiler(a.get(1))?;
    match eval(a.get(0))? {
        Value::Composed(c) => Ok(Value::Composed(c.with_layout(op(&c.layout, &t)?))),
        other => op(&as_layout(other)?, &t).map(Value::Layout),
    }
}

fn product(a: &Args, op: fn(&Layout, &Tiler) -> Result<Layout>) -> Result<Value> {
    a.arity(2, 2)?;
    op(&layout_arg(a.get(0))?, &tiler(a.get(1))?).map(Value::Layout)
}

fn make_layout(a: &Args) -> Result<Value> {
    a.arity(1, usize::MAX)?;
    let modes = a.args.iter().map(layout_arg).collect::<Result<Vec<_>>>()?;
    Layout::concat(&modes).map(Value::Layout)
}

fn crd2idx(a: &Args) -> Result<Value> {
    a.arity(2, 2)?;
    let crd = tuple_arg(a.get(0))?;
    match eval(a.get(1))? {
        Value::Composed(c) => c.crd2idx(&crd).map(Value::Int),
        other => as_layout(other)?.crd2idx(&crd).map(Value::Int),
    }
}

fn idx2crd(a: &Args) -> Result<Value> {
    a.arity(2, 2)?;
    layout_arg(a.get(1))?
        .idx2crd(int_arg(a.get(0))?)
        .map(Value::Tuple)
}

fn slice_and_offset(a: &Args) -> Result<Value> {
    a.arity(2, 2)?;
    let (l, off) = layout_arg(a.get(1))?.slice_and_offset(&coord_arg(a.get(0))?)?;
    Ok(Value::List(vec![Value::Layout(l), Value::Int(off)]))
}

fn tv(a: &Args) -> Result<Value> {
    a.arity(2, 2)?;
    let tile = tuple_arg(a.get(1))?;
    match tile.flatten()[..] {
        [m, n] if tile.rank() == 2 => TvLayout::new(layout_arg(a.get(0))?, m, n).map(Value::Tv),
        _ => Err(LayoutError::Argument(format!(
            "the tile must be (M,N), got {tile}"
        ))),
    }
}

fn gmma(a: &Args, major: Major) -> Result<Value> {
    a.arity(2, 2)?;
    gmma_smem_atom(major, int_arg(a.get(0))?, int_arg(a.get(1))?).map(Value::Composed)
}

fn bank_fn(a: &Args) -> Result<Value> {
    a.arity(4, 4)?;
    let smem: Box<dyn IndexMap> = match eval(a.get(0))? {
        Value::Composed(c) => Box::new(c),
        other => Box::new(as_layout(other)?),
    };
    let lanes = layout_arg(a.get(1))?;
    let report = bank_conflicts(
        smem.as_ref(),
        &lanes,
        int_arg(a.get(2))?,
        int_arg(a.get(3))?,
    )?;
    Ok(Value::List(
        report.iter().map(|w| Value::Int(w.conflicts())).collect(),
    ))
}

/// `upcast`/`downcast` of a layout or a composed layout.
fn cast(
    a: &Args,
    f: fn(&Layout, i64) -> Result<Layout>,
    g: fn(&ComposedLayout, i64) -> Result<ComposedLayout>,
) -> Result<Value> {
    a.arity(2, 2)?;
    let n = int_arg(a.get(1))?;
    match eval(a.get(0))? {
        Value::Composed(c) => g(&c, n).map(Value::Composed),
        other => f(&as_layout(other)?, n).map(Value::Layout),
    }
}

fn tuple2(a: &Args, f: fn(&IntTuple, &IntTuple) -> Result<IntTuple>) -> Result<Value> {
    tuple2v(a, |x, y| f(x, y).map(int_or_tuple))
}

fn tuple2v(a: &Args, f: impl Fn(&IntTuple, &IntTuple) -> Result<Value>) -> Result<Value> {
    a.arity(2, 2)?;
    f(&tuple_arg(a.get(0))?, &tuple_arg(a.get(1))?)
}

fn recast_fn(a: &Args) -> Result<Value> {
    a.arity(3, 3)?;
    let (old, new) = (int_arg(a.get(1))?, int_arg(a.get(2))?);
    match eval(a.get(0))? {
        Value::Composed(c) => recast_composed(&c, old, new).map(Value::Composed),
        other => recast_layout(&as_layout(other)?, old, new).map(Value::Layout),
    }
}

fn tile_to_shape_fn(a: &Args) -> Result<Value> {
    a.arity(2, 3)?;
    let order = a.args.get(2).map(tuple_arg).transpose()?;
    tile_to_shape(
        &layout_arg(a.get(0))?,
        &tuple_arg(a.get(1))?,
        order.as_ref(),
    )
    .map(Value::Layout)
}

fn group_fn(a: &Args) -> Result<Value> {
    a.arity(3, 3)?;
    let idx = |i| {
        let v = int_arg(a.get(i))?;
        usize::try_from(v).map_err(|_| LayoutError::domain("group_modes", format!("mode {v}")))
    };
    group_modes(&layout_arg(a.get(0))?, idx(1)?, idx(2)?).map(Value::Layout)
}

fn composed_fn(a: &Args) -> Result<Value> {
    a.arity(3, 3)?;
    let outer = match eval(a.get(0))? {
        Value::Swizzle(s) => Outer::Swizzle(s),
        other => Outer::Layout(as_layout(other)?),
    };
    Ok(Value::Composed(ComposedLayout {
        outer,
        offset: int_arg(a.get(1))?,
        layout: layout_arg(a.get(2))?,
    }))
}
