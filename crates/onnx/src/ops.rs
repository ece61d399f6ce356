//! The one table of supported ONNX ops ([`OPS`]): each `ai.onnx` op irc imports, the opset it
//! is read from, and the function that maps it to irc ops (one op, or a decomposition). The
//! handlers live in [`crate::ops::handlers`]; `spec/onnx.md`'s coverage table is generated
//! from this table and the node-test results.

mod attention;
mod composed;
mod conv;
mod deconv;
mod dft;
mod einsum;
mod grid;
mod index;
mod math;
mod norm;
mod pad;
mod pick;
mod pool;
mod resize;
mod rnn;
mod rotary;
mod scan;
mod shape;
mod trig;

/// Every handler, for the table.
mod handlers {
    pub use super::attention::*;
    pub use super::composed::*;
    pub use super::conv::*;
    pub use super::deconv::*;
    pub use super::dft::*;
    pub use super::einsum::*;
    pub use super::grid::*;
    pub use super::index::*;
    pub use super::math::*;
    pub use super::norm::*;
    pub use super::pad::*;
    pub use super::pick::*;
    pub use super::pool::*;
    pub use super::resize::*;
    pub use super::rnn::*;
    pub use super::rotary::*;
    pub use super::scan::*;
    pub use super::shape::*;
    pub use super::trig::*;
}

use crate::ctx::{Ctx, R, Val};
use crate::proto::{AttributeProto, NodeProto, TensorProto};

/// One node being imported: its proto and its resolved inputs (`None` for an omitted optional
/// input, written `""` in ONNX).
pub struct Node<'a> {
    pub proto: &'a NodeProto,
    pub ins: Vec<Option<Val>>,
}

impl Node<'_> {
    /// Input `i`, required.
    pub fn x(&self, i: usize) -> R<Val> {
        self.ins
            .get(i)
            .cloned()
            .flatten()
            .ok_or_else(|| format!("input {i} is required"))
    }

    /// Input `i`, optional.
    pub fn opt(&self, i: usize) -> Option<Val> {
        self.ins.get(i).cloned().flatten()
    }

    pub fn n_in(&self) -> usize {
        self.ins.len()
    }

    pub fn n_out(&self) -> usize {
        self.proto.output.len()
    }

    fn attr(&self, name: &str) -> Option<&AttributeProto> {
        self.proto.attribute.iter().find(|a| a.name == name)
    }

    pub fn has(&self, name: &str) -> bool {
        self.attr(name).is_some()
    }

    pub fn int(&self, name: &str, default: i64) -> i64 {
        self.attr(name).map_or(default, |a| a.i)
    }

    pub fn float(&self, name: &str, default: f32) -> f32 {
        self.attr(name).map_or(default, |a| a.f)
    }

    pub fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.attr(name).map(|a| a.ints.clone())
    }

    pub fn floats(&self, name: &str) -> Option<Vec<f32>> {
        self.attr(name).map(|a| a.floats.clone())
    }

    pub fn string(&self, name: &str) -> Option<String> {
        self.attr(name)
            .map(|a| String::from_utf8_lossy(&a.s).into_owned())
    }

    pub fn strings(&self, name: &str) -> Option<Vec<String>> {
        self.attr(name).map(|a| {
            a.strings
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorProto> {
        self.attr(name).and_then(|a| a.t.as_ref())
    }

    /// Whether output `i` is asked for (present and named): an unnamed output is never bound.
    pub fn wants(&self, i: usize) -> bool {
        self.proto.output.get(i).is_some_and(|o| !o.is_empty())
    }
}

/// Maps one node to its output values.
pub type Handler = fn(&mut Ctx, &Node) -> R<Vec<Val>>;

/// A row of the table.
pub struct OnnxOp {
    pub name: &'static str,
    pub handler: Handler,
    /// How it maps, for the coverage table.
    pub note: &'static str,
}

macro_rules! table {
    ($( $name:literal => $h:expr, $note:literal; )*) => {
        /// Every supported ONNX op, in alphabetical order.
        pub const OPS: &[OnnxOp] = &[$( OnnxOp { name: $name, handler: $h, note: $note } ),*];
    };
}

use handlers as h;

#[rustfmt::skip]
table! {
    "Abs" => h::abs, "abs";
    "Acos" => h::acos, "2 · atan(sqrt((1 - x) / (1 + x))), atan as for Atan";
    "Acosh" => h::acosh, "log1p(d + sqrt(d · (2 + d))), d = x - 1 (log1p as log(u) · y / (u - 1)); log(x) + ln 2 past 2^28";
    "Add" => h::add, "add";
    "And" => h::and, "select(a, b, false)";
    "ArgMax" => h::argmax, "reduce_max, eq, iota, select, reduce_min";
    "ArgMin" => h::argmin, "reduce_min, eq, iota, select, reduce_min";
    "Asin" => h::asin, "atan(x / sqrt((1 - x)(1 + x))), atan as for Atan";
    "Asinh" => h::asinh, "sign · log1p(a + a² / (1 + sqrt(1 + a²))), a = abs(x) (log1p as log(u) · y / (u - 1)); log(a) + ln 2 past 2^28";
    "Atan" => h::atan, "of a = abs(x), or π/2 - atan(1/a) past 1: two half-angle steps t / (1 + sqrt(1 + t²)), an odd series to t¹⁵; sign";
    "Atanh" => h::atanh, "sign · log1p(2a / (1 - a)) / 2, a = abs(x) (log1p as log(u) · y / (u - 1))";
    "Attention" => h::attention, "matmul, mul (scale), tanh (softcap), select or add (mask), select over iota comparisons (causal, window), softmax, matmul: the chain the planner fuses; reshape and transpose for 3-D inputs, broadcast for grouped-query heads, concat of the cache";
    "AveragePool" => h::average_pool, "pad (concat of zeros), a strided slice per kernel tap, add, div (by the window's count where padding or ceil_mode makes it vary)";
    "BatchNormalization" => h::batchnorm, "(x - mean) · rsqrt(var + eps) · scale + bias (training_mode=1: the batch's statistics by reduce_mean, and the running statistics' updates)";
    "Cast" => h::cast, "cast";
    "CastLike" => h::cast_like, "cast";
    "Ceil" => h::ceil, "ceil";
    "Celu" => h::celu, "max(0, x) + min(0, alpha · (exp(x / alpha) - 1))";
    "Clip" => h::clip, "max, min";
    "Compress" => h::compress, "gather of the known condition's true indices";
    "Concat" => h::concat, "concat";
    "Constant" => h::constant, "known tensor";
    "ConstantOfShape" => h::constant_of_shape, "known tensor (broadcast constant)";
    "Conv" => h::conv, "pad (concat of zeros), a strided slice per kernel offset, concat, one batched matmul per group, add (a patch embedding: reshape, transpose)";
    "ConvTranspose" => h::conv_transpose, "the input spread by the strides (concat with zeros, reshape, slice) and padded, then Conv's im2col and batched matmul with the weights regrouped and flipped (slices of step -1)";
    "Cos" => h::cos, "cos";
    "Cosh" => h::cosh, "(exp(a/2) / 2) · exp(a/2) + exp(-a) / 2, a = abs(x)";
    "CumSum" => h::cumsum, "broadcast, select by two iotas' comparison, reduce_sum (blocks of about √n past 1024 elements)";
    "DFT" => h::dft, "transpose, slice, matmul with known cosine and sine tables, concat (forward, inverse, one-sided, inverse one-sided)";
    "DepthToSpace" => h::depth_to_space, "reshape, transpose, reshape";
    "Div" => h::div, "div (integers: through f64, truncated)";
    "Dropout" => h::dropout, "identity (inference)";
    "Einsum" => h::einsum, "reduce_sum, transpose, reshape, broadcast, a batched matmul per operand pair (a repeated label: a strided slice, the diagonal)";
    "Elu" => h::elu, "select(x < 0, alpha · (exp(x) - 1), x)";
    "Equal" => h::equal, "eq";
    "Erf" => h::erf, "erf";
    "Exp" => h::exp, "exp";
    "Expand" => h::expand, "broadcast";
    "EyeLike" => h::eye_like, "iota, eq, cast";
    "Flatten" => h::flatten, "reshape";
    "Floor" => h::floor, "floor";
    "GRU" => h::gru, "unrolled over the sequence: one matmul of X with W per direction, per step a matmul of the state with R (and of the reset-gated state with Rh), slices, sigmoid, tanh (or the activations named), mul, add; concat of the steps (known sequence_lens: select by a known mask, gather for the reverse direction)";
    "Gather" => h::gather, "gather";
    "GatherElements" => h::gather_elements, "iota, mul, add, select, gather of the flattened data";
    "GatherND" => h::gather_nd, "gather of the data flattened over the indexed dims (flat offsets folded where the indices are known; else slice, mul, add, select)";
    "Gelu" => h::gelu, "gelu (approximate='tanh': its tanh formula)";
    "Gemm" => h::gemm, "matmul (transpose flags), mul, add";
    "GlobalAveragePool" => h::global_avg_pool, "reduce_mean over spatial axes";
    "GlobalMaxPool" => h::global_max_pool, "reduce_max over spatial axes";
    "Greater" => h::greater, "gt";
    "GreaterOrEqual" => h::greater_or_equal, "ge";
    "GridSample" => h::grid_sample, "per spatial axis: the grid's coordinate unnormalized, rounded (nearest), clamped or reflected (padding_mode), floor and the taps' weights (linear, cubic), tap indices clamped (zeros: weight 0 outside); a gather of [N · spatial, C] rows per combination of taps, mul, add, transpose";
    "GroupNormalization" => h::group_norm, "reshape to [N, G, C/G · spatial], layernorm, reshape, mul, add (per-channel or per-group scale and bias)";
    "HardSigmoid" => h::hard_sigmoid, "max(0, min(1, alpha · x + beta))";
    "HardSwish" => h::hard_swish, "x · hardsigmoid(x)";
    "Hardmax" => h::hardmax, "reduce_max, eq, iota, select, reduce_min (the first maximum), eq, select";
    "Identity" => h::identity, "the operand itself";
    "InstanceNormalization" => h::instance_norm, "reduce_mean, rsqrt, mul, add";
    "IsInf" => h::is_inf, "eq against ±inf";
    "IsNaN" => h::is_nan, "ne(x, x)";
    "LRN" => h::lrn, "mul (squares), concat with zeros along the channels, add of size slices, mul, add, pow, div";
    "LSTM" => h::lstm, "unrolled over the sequence: one matmul of X with W per direction, per step a matmul of the state with R, slices, sigmoid, tanh (or the activations named), peephole mul, add; concat of the steps (known sequence_lens: select by a known mask, gather for the reverse direction)";
    "LayerNormalization" => h::layernorm, "layernorm (first output only)";
    "LeakyRelu" => h::leaky_relu, "select(x < 0, alpha · x, x)";
    "Less" => h::less, "lt";
    "LessOrEqual" => h::less_or_equal, "le";
    "Log" => h::log, "log";
    "LogSoftmax" => h::log_softmax, "log_softmax";
    "LpNormalization" => h::lp_normalization, "abs or mul, reduce_sum, sqrt, div, select (0 where the norm is 0)";
    "LpPool" => h::lp_pool, "abs, mul or pow, pad (concat of zeros), a strided slice per kernel tap, add, sqrt or pow";
    "MatMul" => h::matmul, "matmul";
    "Max" => h::max, "max (variadic)";
    "MaxPool" => h::max_pool, "pad (concat of -inf), a strided slice per kernel tap, max (first output only)";
    "Mean" => h::mean, "add, div (variadic)";
    "MeanVarianceNormalization" => h::mean_variance_normalization, "reduce_mean of x and of x², sub, sqrt, add 1e-9, div";
    "Min" => h::min, "min (variadic)";
    "Mish" => h::mish, "x · tanh(log(1 + exp(x)))";
    "Mod" => h::modulo, "a - b · trunc(a / b) in f64 (fmod=1), shifted by b to b's sign (fmod=0); select at infinite b";
    "Mul" => h::mul, "mul";
    "Neg" => h::neg, "neg";
    "NonZero" => h::non_zero, "known tensor (of a known input only)";
    "Not" => h::not, "eq(x, false)";
    "OneHot" => h::one_hot, "iota, eq, select";
    "Or" => h::or, "select(a, true, b)";
    "PRelu" => h::prelu, "select(x < 0, slope · x, x)";
    "Pad" => h::pad, "concat with a broadcast constant, an edge slice broadcast, a reversed slice (reflect) or the far end's slice (wrap); slice for negative pads";
    "Pow" => h::pow, "pow (exponent cast to the base's dtype)";
    "RMSNormalization" => h::rmsnorm, "rmsnorm";
    "RNN" => h::rnn, "unrolled over the sequence: one matmul of X with W per direction, per step a matmul of the state with R, add, tanh (or the activation named); concat of the steps (known sequence_lens: select by a known mask, gather for the reverse direction)";
    "Range" => h::range, "known tensor (folded)";
    "Reciprocal" => h::reciprocal, "recip";
    "ReduceL1" => h::reduce_l1, "abs, reduce_sum";
    "ReduceL2" => h::reduce_l2, "mul, reduce_sum, sqrt";
    "ReduceLogSum" => h::reduce_log_sum, "reduce_sum, log";
    "ReduceLogSumExp" => h::reduce_log_sum_exp, "reduce_max, exp, reduce_sum, log";
    "ReduceMax" => h::reduce_max, "reduce_max";
    "ReduceMean" => h::reduce_mean, "reduce_mean";
    "ReduceMin" => h::reduce_min, "reduce_min";
    "ReduceProd" => h::reduce_prod, "a tree of mul over halves (slices) of each reduced axis, concat of an odd one out; reshape";
    "ReduceSum" => h::reduce_sum, "reduce_sum";
    "ReduceSumSquare" => h::reduce_sum_square, "mul, reduce_sum";
    "Relu" => h::relu, "relu";
    "Reshape" => h::reshape, "reshape";
    "Resize" => h::resize, "nearest: broadcast and reshape (integer upsampling), strided slice (integer downsampling) or gather; linear: two gathers, sub, mul, add per axis";
    "ReverseSequence" => h::reverse_sequence, "gather of known indices over the time and batch axes (sequence_lens known)";
    "RotaryEmbedding" => h::rotary_embedding, "gather of the cos and sin caches by position_ids, slices of the rotated halves (strided: interleaved), mul, sub, add, concat; reshape for 3-D inputs";
    "Round" => h::round, "round (halves to even)";
    "ScatterElements" => h::scatter_elements, "gather of the updates, select against the data (indices known at import; at run time: an eq of every update with every element, reduce_max or the reduction)";
    "ScatterND" => h::scatter_nd, "gather of the updates, select against the data (indices known at import; at run time: an eq of every update with every row, reduce_max or the reduction)";
    "Selu" => h::selu, "gamma · select(x <= 0, alpha · (exp(x) - 1), x)";
    "Shape" => h::shape, "known tensor (static shapes)";
    "Shrink" => h::shrink, "lt, gt, add, sub, select";
    "Sigmoid" => h::sigmoid, "sigmoid";
    "Sign" => h::sign, "select, gt, lt";
    "Sin" => h::sin, "sin";
    "Sinh" => h::sinh, "of a = abs(x): odd Taylor series to a¹³ below 1/2, else (exp(a/2) / 2) · exp(a/2) - exp(-a) / 2; sign";
    "Size" => h::size, "known tensor";
    "Slice" => h::slice, "slice";
    "Softmax" => h::softmax, "softmax";
    "Softplus" => h::softplus, "log(exp(x) + 1)";
    "Softsign" => h::softsign, "x / (1 + |x|)";
    "SpaceToDepth" => h::space_to_depth, "reshape, transpose, reshape";
    "Split" => h::split, "slice per output";
    "Sqrt" => h::sqrt, "sqrt";
    "Squeeze" => h::squeeze, "reshape";
    "Sub" => h::sub, "sub";
    "Sum" => h::sum, "add (variadic)";
    "SwiGLU" => h::swiglu, "silu(A) · B (alpha = 1), else A · sigmoid(alpha · A) · B";
    "Swish" => h::swish, "silu (alpha = 1), else x · sigmoid(alpha · x)";
    "Tan" => h::tan, "sin / cos";
    "Tanh" => h::tanh, "tanh";
    "ThresholdedRelu" => h::thresholded_relu, "select(x > alpha, x, 0)";
    "Tile" => h::tile, "reshape, broadcast, reshape";
    "TopK" => h::top_k, "ranks by comparing every pair along the axis (gt or lt, eq and iota for ties, reduce_sum), then select and reduce_max per output position (K known; axis at most 4096)";
    "Transpose" => h::transpose, "transpose";
    "Trilu" => h::trilu, "iota, compare, select";
    "Unsqueeze" => h::unsqueeze, "reshape";
    "Where" => h::where_, "select";
    "Xor" => h::xor, "ne";
}

/// The table row of an ONNX op, if supported.
pub fn lookup(name: &str) -> Option<&'static OnnxOp> {
    OPS.iter().find(|o| o.name == name)
}

/// Imports one node: looks its op up in [`OPS`] and runs its handler.
pub fn import_node(
    cx: &mut Ctx,
    index: usize,
    proto: &NodeProto,
    ins: Vec<Option<Val>>,
) -> R<Vec<Val>> {
    let Some(row) = lookup(&proto.op_type) else {
        return Err(format!(
            "op '{}' is not supported by irc's importer (spec/onnx.md lists the supported ops)",
            proto.op_type
        ));
    };
    cx.set_node(&proto.name, index);
    let node = Node { proto, ins };
    let outs = (row.handler)(cx, &node)?;
    if outs.len() < proto.output.iter().filter(|o| !o.is_empty()).count() {
        return Err(format!(
            "irc produces {} output(s) for {}, the node asks for {}",
            outs.len(),
            proto.op_type,
            proto.output.len()
        ));
    }
    Ok(outs)
}
