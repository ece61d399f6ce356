//! The op table: every op of the graph IR declared once, with its name, a one-sentence meaning,
//! its arity, the dtypes it accepts and its attributes.
//!
//! Everything else — the parser's op lookup, the verifier's arity and attribute checks, the
//! generated reference in `spec/graph-ir.md` — reads this table.

use std::fmt;

/// How many operands an op takes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Arity {
    pub min: usize,
    pub max: usize,
}

impl fmt::Display for Arity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else if self.max == usize::MAX {
            write!(f, "{} or more", self.min)
        } else {
            write!(f, "{} to {}", self.min, self.max)
        }
    }
}

const fn exactly(n: usize) -> Arity {
    Arity { min: n, max: n }
}

const fn between(min: usize, max: usize) -> Arity {
    Arity { min, max }
}

const fn at_least(min: usize) -> Arity {
    Arity {
        min,
        max: usize::MAX,
    }
}

/// Which element types an op's operands may have. All operands of one op share a dtype, except
/// `select`'s condition (`i1`) and `gather`'s indices (`i32` or `i64`): the rule applies to the
/// others.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DTypes {
    /// Every dtype, `i1` included.
    Any,
    /// Floats and integers, not `i1`.
    Numeric,
    /// `f16`, `bf16`, `f32`, `f64`.
    Float,
}

impl DTypes {
    pub fn admits(self, d: crate::DType) -> bool {
        match self {
            DTypes::Any => true,
            DTypes::Numeric => d != crate::DType::I1,
            DTypes::Float => d.is_float(),
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            DTypes::Any => "any dtype",
            DTypes::Numeric => "float or integer dtypes (not i1)",
            DTypes::Float => "float dtypes (f16, bf16, f32, f64)",
        }
    }
}

/// The type an attribute's value must have.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AttrKind {
    Bool,
    Int,
    /// A float; an integer literal is accepted and read as a float.
    Float,
    DType,
    /// An array of integers.
    Ints,
    /// A number or boolean, or a (nested) array of them: a constant's value.
    Value,
}

impl AttrKind {
    pub fn describe(self) -> &'static str {
        match self {
            AttrKind::Bool => "a boolean",
            AttrKind::Int => "an integer",
            AttrKind::Float => "a number",
            AttrKind::DType => "a dtype",
            AttrKind::Ints => "an array of integers",
            AttrKind::Value => "a number, a boolean, or an array of them",
        }
    }
}

/// One attribute an op accepts.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AttrSpec {
    pub name: &'static str,
    pub kind: AttrKind,
    pub required: bool,
    /// What the attribute means, and its default when optional.
    pub doc: &'static str,
}

const fn req(name: &'static str, kind: AttrKind, doc: &'static str) -> AttrSpec {
    AttrSpec {
        name,
        kind,
        required: true,
        doc,
    }
}

const fn opt(name: &'static str, kind: AttrKind, doc: &'static str) -> AttrSpec {
    AttrSpec {
        name,
        kind,
        required: false,
        doc,
    }
}

/// Groups of ops that share their typing rule.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Category {
    Matmul,
    /// Transpose, reshape, broadcast: a change of layout, never a kernel of its own.
    View,
    Constant,
    Cast,
    Unary,
    /// Elementwise with numpy broadcasting.
    Binary,
    Reduction,
    /// Softmax and the norms: decomposed into primitives by [`crate::decompose`].
    Composite,
    /// Elementwise comparisons with numpy broadcasting; the result is `i1`.
    Compare,
    /// `select %cond, %a, %b`: elementwise choice with numpy broadcasting of all three.
    Select,
    /// `iota`: index values along one axis; no operands, the result type is written.
    Iota,
    /// `slice`: a static strided window (a view when every step is 1).
    Slice,
    /// `concat`: variadic joining along one axis.
    Concat,
    /// `gather`: data-dependent reads along one axis, indexed by an integer tensor.
    Gather,
}

/// Everything the table says about one op.
#[derive(Debug)]
pub struct OpInfo {
    pub name: &'static str,
    pub category: Category,
    pub arity: Arity,
    /// The operand names, for documentation (`[x, w, b]`).
    pub operands: &'static [&'static str],
    pub dtypes: DTypes,
    pub attrs: &'static [AttrSpec],
    /// One sentence: what the op computes.
    pub summary: &'static str,
}

impl OpInfo {
    pub fn attr(&self, name: &str) -> Option<&AttrSpec> {
        self.attrs.iter().find(|a| a.name == name)
    }
}

macro_rules! define_ops {
    ($( $variant:ident = $name:literal, $cat:ident, $arity:expr, [$($operand:literal),*],
        $dtypes:ident, [$($attr:expr),* $(,)?], $summary:literal; )*) => {
        /// An op of the graph IR.
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum OpKind { $($variant),* }

        /// Every op, in table order.
        pub const ALL_OPS: &[OpKind] = &[$(OpKind::$variant),*];

        impl OpKind {
            /// This op's row of the table.
            pub fn info(self) -> &'static OpInfo {
                match self {
                    $(OpKind::$variant => const { &OpInfo {
                        name: $name,
                        category: Category::$cat,
                        arity: $arity,
                        operands: &[$($operand),*],
                        dtypes: DTypes::$dtypes,
                        attrs: &[$($attr),*],
                        summary: $summary,
                    } },)*
                }
            }
        }
    };
}

const REDUCE_AXES: AttrSpec = opt(
    "axes",
    AttrKind::Ints,
    "the axes to reduce, negative values counting from the end; default: all axes",
);
const KEEPDIMS: AttrSpec = opt(
    "keepdims",
    AttrKind::Bool,
    "keep each reduced axis as a dimension of size 1; default false",
);
const AXIS: AttrSpec = opt(
    "axis",
    AttrKind::Int,
    "the axis normalized over, negative values counting from the end; default -1",
);

#[rustfmt::skip]
define_ops! {
    Matmul    = "matmul",    Matmul, exactly(2), ["a", "b"], Float,
        [opt("transpose_a", AttrKind::Bool, "use `a` with its last two dims swapped; default false"),
         opt("transpose_b", AttrKind::Bool, "use `b` with its last two dims swapped; default false")],
        "Matrix product as `torch.matmul`: batched over leading dims with broadcasting, 1-D operands promoted and squeezed, accumulated in f32 (f64 for f64), result in the operand dtype.";
    Transpose = "transpose", View, exactly(1), ["x"], Any,
        [req("perm", AttrKind::Ints, "a permutation of the axes; result axis i is input axis perm[i]")],
        "Permutes the axes as `torch.permute`.";
    Reshape   = "reshape",   View, exactly(1), ["x"], Any,
        [req("shape", AttrKind::Ints, "the new shape; at most one entry may be -1, inferred from the element count")],
        "Reinterprets the row-major elements under a new shape with the same element count, as `torch.reshape`.";
    Broadcast = "broadcast", View, exactly(1), ["x"], Any,
        [req("shape", AttrKind::Ints, "the target shape; numpy broadcasting from the input, -1 keeps the input's size")],
        "Expands size-1 (and missing leading) dims to a target shape, as `torch.broadcast_to`.";
    Constant  = "constant",  Constant, exactly(0), [], Any,
        [req("value", AttrKind::Value, "a scalar, splatted to the result shape, or a (nested) array with one value per element in row-major order")],
        "A tensor of the result type filled from the value attribute, rounded to the result dtype; the result type must be written.";
    Cast      = "cast",      Cast, exactly(1), ["x"], Any,
        [req("dtype", AttrKind::DType, "the result dtype")],
        "Converts elements to another dtype as `Tensor.to`: floats round to nearest even, float to integer truncates toward zero, nonzero to i1 is true.";
    Neg       = "neg",       Unary, exactly(1), ["x"], Numeric, [], "Negation, -x.";
    Abs       = "abs",       Unary, exactly(1), ["x"], Numeric, [], "Absolute value, |x|.";
    Exp       = "exp",       Unary, exactly(1), ["x"], Float, [], "Exponential, e^x.";
    Log       = "log",       Unary, exactly(1), ["x"], Float, [], "Natural logarithm, ln x (NaN below 0, -inf at 0).";
    Sqrt      = "sqrt",      Unary, exactly(1), ["x"], Float, [], "Square root (NaN below 0).";
    Rsqrt     = "rsqrt",     Unary, exactly(1), ["x"], Float, [], "Reciprocal square root, 1/sqrt(x).";
    Tanh      = "tanh",      Unary, exactly(1), ["x"], Float, [], "Hyperbolic tangent.";
    Sigmoid   = "sigmoid",   Unary, exactly(1), ["x"], Float, [], "Logistic sigmoid, 1/(1+e^-x).";
    Relu      = "relu",      Unary, exactly(1), ["x"], Numeric, [], "max(x, 0), NaN propagating.";
    Gelu      = "gelu",      Unary, exactly(1), ["x"], Float, [], "Gaussian error linear unit, x·Φ(x) with the exact erf form (PyTorch's approximate='none').";
    Silu      = "silu",      Unary, exactly(1), ["x"], Float, [], "x·sigmoid(x).";
    Recip     = "recip",     Unary, exactly(1), ["x"], Float, [], "Reciprocal, 1/x.";
    Add       = "add",       Binary, exactly(2), ["a", "b"], Numeric, [], "a + b.";
    Sub       = "sub",       Binary, exactly(2), ["a", "b"], Numeric, [], "a - b.";
    Mul       = "mul",       Binary, exactly(2), ["a", "b"], Numeric, [], "a · b.";
    Div       = "div",       Binary, exactly(2), ["a", "b"], Float, [], "True division a / b.";
    Max       = "max",       Binary, exactly(2), ["a", "b"], Numeric, [], "Elementwise maximum, NaN propagating (`torch.maximum`).";
    Min       = "min",       Binary, exactly(2), ["a", "b"], Numeric, [], "Elementwise minimum, NaN propagating (`torch.minimum`).";
    Pow       = "pow",       Binary, exactly(2), ["a", "b"], Float, [], "a raised to the power b (`torch.pow`).";
    ReduceSum = "reduce_sum", Reduction, exactly(1), ["x"], Numeric, [REDUCE_AXES, KEEPDIMS],
        "Sum over the axes, accumulated in f32 for 16-bit floats (f64 for f64, i64 for integers) and rounded to the input dtype.";
    ReduceMax = "reduce_max", Reduction, exactly(1), ["x"], Numeric, [REDUCE_AXES, KEEPDIMS],
        "Maximum over the axes, NaN propagating.";
    ReduceMin = "reduce_min", Reduction, exactly(1), ["x"], Numeric, [REDUCE_AXES, KEEPDIMS],
        "Minimum over the axes, NaN propagating.";
    ReduceMean = "reduce_mean", Reduction, exactly(1), ["x"], Float, [REDUCE_AXES, KEEPDIMS],
        "Arithmetic mean over the axes, accumulated as reduce_sum.";
    Softmax   = "softmax",   Composite, exactly(1), ["x"], Float, [AXIS],
        "exp(x - max) / sum(exp(x - max)) along the axis, computed in f32 (f64 for f64) and rounded once.";
    LogSoftmax = "log_softmax", Composite, exactly(1), ["x"], Float, [AXIS],
        "x - max - log(sum(exp(x - max))) along the axis (`torch.log_softmax`), computed in f32 (f64 for f64) and rounded once.";
    Rmsnorm   = "rmsnorm",   Composite, between(1, 2), ["x", "w"], Float,
        [AXIS, opt("eps", AttrKind::Float, "added to the mean square; default the dtype's machine epsilon, as torch.nn.RMSNorm")],
        "x · rsqrt(mean(x², axis) + eps), times w (shaped like the axis) when given, computed in f32 (f64 for f64) and rounded once.";
    Layernorm = "layernorm", Composite, between(1, 3), ["x", "w", "b"], Float,
        [AXIS, opt("eps", AttrKind::Float, "added to the variance; default 1e-5")],
        "(x - mean) · rsqrt(var + eps) along the axis (biased variance), times w and plus b (shaped like the axis) when given, computed in f32 (f64 for f64) and rounded once.";
    Erf       = "erf",       Unary, exactly(1), ["x"], Float, [], "Gauss error function, erf(x) (`torch.erf`).";
    Sin       = "sin",       Unary, exactly(1), ["x"], Float, [], "Sine of x in radians (`torch.sin`).";
    Cos       = "cos",       Unary, exactly(1), ["x"], Float, [], "Cosine of x in radians (`torch.cos`).";
    Floor     = "floor",     Unary, exactly(1), ["x"], Float, [], "The largest integer not above x (`torch.floor`).";
    Ceil      = "ceil",      Unary, exactly(1), ["x"], Float, [], "The smallest integer not below x (`torch.ceil`).";
    Round     = "round",     Unary, exactly(1), ["x"], Float, [], "The nearest integer, halves to even (`torch.round`, ONNX Round).";
    Eq        = "eq",        Compare, exactly(2), ["a", "b"], Any, [], "a == b, as i1 (NaN compares unequal).";
    Ne        = "ne",        Compare, exactly(2), ["a", "b"], Any, [], "a != b, as i1 (true where either is NaN).";
    Lt        = "lt",        Compare, exactly(2), ["a", "b"], Any, [], "a < b, as i1 (false where either is NaN; false < true).";
    Le        = "le",        Compare, exactly(2), ["a", "b"], Any, [], "a <= b, as i1 (false where either is NaN).";
    Gt        = "gt",        Compare, exactly(2), ["a", "b"], Any, [], "a > b, as i1 (false where either is NaN).";
    Ge        = "ge",        Compare, exactly(2), ["a", "b"], Any, [], "a >= b, as i1 (false where either is NaN).";
    Select    = "select",    Select, exactly(3), ["cond", "a", "b"], Any, [],
        "a where cond is true, else b (`torch.where`); cond is i1, a and b share the result dtype, all three broadcast as numpy does.";
    Iota      = "iota",      Iota, exactly(0), [], Numeric,
        [opt("axis", AttrKind::Int, "the axis whose index each element holds, negative values counting from the end; default 0")],
        "Each element is its own index along the axis (`torch.arange` broadcast to the result type), which must be written and not i1.";
    Slice     = "slice",     Slice, exactly(1), ["x"], Any,
        [req("starts", AttrKind::Ints, "the first index per sliced axis; negative values count from the end, then clamped as Python slicing does"),
         req("ends", AttrKind::Ints, "the end (exclusive) per sliced axis, read as `starts`"),
         opt("axes", AttrKind::Ints, "the sliced axes, negative values counting from the end; default 0, 1, ... (one per entry of starts)"),
         opt("steps", AttrKind::Ints, "the stride per sliced axis, nonzero, negative walking backwards; default all 1")],
        "The window `x[starts:ends:steps]` along each listed axis, as Python and numpy slicing (out-of-range bounds clamp; an empty result is an error since tensors have no zero dims).";
    Concat    = "concat",    Concat, at_least(1), ["xs"], Any,
        [req("axis", AttrKind::Int, "the axis joined along, negative values counting from the end")],
        "Joins the operands along the axis (`torch.cat`); every other dim must agree.";
    Gather    = "gather",    Gather, exactly(2), ["x", "indices"], Any,
        [opt("axis", AttrKind::Int, "the axis indexed, negative values counting from the end; default 0")],
        "Picks entries of x along the axis at the i32/i64 indices (`numpy.take`, ONNX Gather): the result shape is x.shape[:axis] + indices.shape + x.shape[axis+1:]; an index in [-n, 0) counts from the end, and one outside [-n, n) is a run-time error, never a read out of bounds.";
}

impl OpKind {
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Looks an op up by its text-form name.
    pub fn from_name(name: &str) -> Option<OpKind> {
        ALL_OPS.iter().copied().find(|op| op.name() == name)
    }

    pub fn category(self) -> Category {
        self.info().category
    }

    /// Whether the result type is written rather than inferred (`constant`, `iota`): a
    /// rewriting pass must carry it with the op, since two such ops with the same attributes
    /// and no operands can still differ in type.
    pub fn type_is_written(self) -> bool {
        matches!(self.category(), Category::Constant | Category::Iota)
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The op reference of `spec/graph-ir.md`, generated from the table (Markdown).
pub fn reference_markdown() -> String {
    let mut out = String::new();
    for &op in ALL_OPS {
        let info = op.info();
        let operands = info.operands.iter().enumerate().map(|(i, o)| {
            if info.arity.max == usize::MAX && i + 1 == info.operands.len() {
                format!("%{o}...")
            } else if i >= info.arity.min {
                format!("[%{o}]")
            } else {
                format!("%{o}")
            }
        });
        let operands: Vec<String> = operands.collect();
        out.push_str(&format!("### `{}`\n\n{}\n\n", info.name, info.summary));
        out.push_str(&format!(
            "- form: `%r = {}{}{}`\n- category: {:?}; operands: {}; dtypes: {}\n",
            info.name,
            if operands.is_empty() {
                String::new()
            } else {
                format!(" {}", operands.join(", "))
            },
            if info.attrs.is_empty() {
                String::new()
            } else {
                " {...}".to_string()
            },
            info.category,
            info.arity,
            info.dtypes.describe(),
        ));
        for a in info.attrs {
            let req = if a.required { "required" } else { "optional" };
            out.push_str(&format!(
                "- `{}` ({}, {req}): {}\n",
                a.name,
                a.kind.describe(),
                a.doc
            ));
        }
        out.push('\n');
    }
    out
}
