//! The scalar functions of kernel IR expressions (`Expr::Call`), their text names and the
//! graph ops they compute.

use irc_ir::DType;

/// Scalar functions on element values. Math is defined on `f32`, `f64` and (where it makes
/// sense) integers; 16-bit floats are converted to `f32` first by an explicit cast.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Func {
    Neg,
    Abs,
    Exp,
    /// `2^x`.
    Exp2,
    Log,
    Sqrt,
    Rsqrt,
    Tanh,
    Sigmoid,
    Relu,
    Gelu,
    Silu,
    Recip,
    /// `1/x` approximate: on f32 the SFU's `rcp.approx.ftz.f32` (about 1 ulp, subnormals
    /// flushed); the math of values rounded to 16 bits next.
    Rcp,
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    /// IEEE maxNum: the larger value, a NaN operand ignored (PTX `max.f32`); floats only. For
    /// reductions whose NaNs reach the result another way (an online softmax's row max).
    MaxNum,
    Pow,
    Erf,
    Sin,
    Cos,
    Floor,
    Ceil,
    /// To the nearest integer, halves to even (PTX `cvt.rni`).
    Round,
    /// Comparisons, giving `i1`: IEEE on floats (false with a NaN operand, except `ne`).
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// `select(cond, a, b)`.
    Select,
    /// `idx(x)`: an integer element as an index (a gather's index, once it is in range).
    Index,
    /// `tf32(x)`: an f32 rounded to TF32 (10 mantissa bits, to nearest, ties away from zero:
    /// PTX `cvt.rna.tf32.f32`), still an f32; the operands of `mma.m16n8k8.tf32`.
    Tf32,
    /// Conversion to a dtype: `f32(x)`. Float to integer truncates and saturates, NaN is 0.
    Cast(DType),
}

impl Func {
    pub const NAMED: [Func; 37] = [
        Func::Neg,
        Func::Abs,
        Func::Exp,
        Func::Exp2,
        Func::Log,
        Func::Sqrt,
        Func::Rsqrt,
        Func::Tanh,
        Func::Sigmoid,
        Func::Relu,
        Func::Gelu,
        Func::Silu,
        Func::Recip,
        Func::Rcp,
        Func::Add,
        Func::Sub,
        Func::Mul,
        Func::Div,
        Func::Max,
        Func::Min,
        Func::MaxNum,
        Func::Pow,
        Func::Erf,
        Func::Sin,
        Func::Cos,
        Func::Floor,
        Func::Ceil,
        Func::Round,
        Func::Eq,
        Func::Ne,
        Func::Lt,
        Func::Le,
        Func::Gt,
        Func::Ge,
        Func::Select,
        Func::Index,
        Func::Tf32,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Func::Neg => "neg",
            Func::Abs => "abs",
            Func::Exp => "exp",
            Func::Exp2 => "exp2",
            Func::Log => "log",
            Func::Sqrt => "sqrt",
            Func::Rsqrt => "rsqrt",
            Func::Tanh => "tanh",
            Func::Sigmoid => "sigmoid",
            Func::Relu => "relu",
            Func::Gelu => "gelu",
            Func::Silu => "silu",
            Func::Recip => "recip",
            Func::Rcp => "rcp",
            Func::Add => "add",
            Func::Sub => "sub",
            Func::Mul => "mul",
            Func::Div => "div",
            Func::Max => "max",
            Func::Min => "min",
            Func::MaxNum => "maxnum",
            Func::Pow => "pow",
            Func::Erf => "erf",
            Func::Sin => "sin",
            Func::Cos => "cos",
            Func::Floor => "floor",
            Func::Ceil => "ceil",
            Func::Round => "round",
            Func::Eq => "eq",
            Func::Ne => "ne",
            Func::Lt => "lt",
            Func::Le => "le",
            Func::Gt => "gt",
            Func::Ge => "ge",
            Func::Select => "select",
            Func::Index => "idx",
            Func::Tf32 => "tf32",
            Func::Cast(d) => d.name(),
        }
    }

    pub fn from_name(name: &str) -> Option<Func> {
        if let Ok(d) = name.parse::<DType>() {
            return Some(Func::Cast(d));
        }
        Func::NAMED.into_iter().find(|f| f.name() == name)
    }

    pub fn arity(self) -> usize {
        match self {
            Func::Add
            | Func::Sub
            | Func::Mul
            | Func::Div
            | Func::Max
            | Func::Min
            | Func::MaxNum
            | Func::Pow => 2,
            f if f.is_compare() => 2,
            Func::Select => 3,
            _ => 1,
        }
    }

    /// Whether the function is a comparison (two values of one type, an `i1` result).
    pub fn is_compare(self) -> bool {
        matches!(
            self,
            Func::Eq | Func::Ne | Func::Lt | Func::Le | Func::Gt | Func::Ge
        )
    }

    /// Whether the function is defined on integers (beside floats).
    pub fn int_ok(self) -> bool {
        matches!(
            self,
            Func::Neg
                | Func::Abs
                | Func::Relu
                | Func::Add
                | Func::Sub
                | Func::Mul
                | Func::Max
                | Func::Min
                | Func::Eq
                | Func::Ne
                | Func::Lt
                | Func::Le
                | Func::Gt
                | Func::Ge
        )
    }

    /// The function for a graph op of the same name, if any.
    pub fn from_op(op: irc_ir::OpKind) -> Option<Func> {
        Func::from_name(op.name())
            .filter(|f| !matches!(f, Func::Cast(_) | Func::Select | Func::Index))
    }
}
