//! The one error type of the layout algebra.
//!
//! Every operation returns `Result<_, LayoutError>`; nothing in this module panics on user input.
//! Arithmetic is checked (an overflow is [`LayoutError::Overflow`]), nesting is capped
//! ([`MAX_DEPTH`]), and a divisibility failure names the operation, the modes and the numbers.

use thiserror::Error;

/// The deepest nesting of tuples and expressions accepted anywhere (parser and operations).
pub const MAX_DEPTH: usize = 64;

/// The largest number of cells `render_table`/`render_svg` will draw.
pub const MAX_RENDER_CELLS: i64 = 1 << 16;

/// Why a layout operation, parse or evaluation failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LayoutError {
    /// The expression text is malformed at byte `offset`.
    #[error("{message}")]
    Parse { offset: usize, message: String },
    /// An operation failed inside the call `func(...)` written at byte `offset`.
    #[error("{}", call_message(func, source))]
    InCall {
        func: String,
        offset: usize,
        #[source]
        source: Box<LayoutError>,
    },
    /// A divisibility condition of the algebra did not hold (`what` names modes and numbers).
    #[error("{op}: {what}")]
    Divisibility { op: &'static str, what: String },
    /// A checked integer operation overflowed `i64`.
    #[error("{op}: integer overflow")]
    Overflow { op: &'static str },
    /// Shapes, strides, coordinates or profiles whose tuple structures do not match.
    #[error("{op}: {what}")]
    Incongruent { op: &'static str, what: String },
    /// A value outside the domain of the operation (a zero shape, a coordinate past the end, ...).
    #[error("{op}: {what}")]
    Domain { op: &'static str, what: String },
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("nesting deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// An argument of the wrong kind or count for an expression-language function.
    #[error("{0}")]
    Argument(String),
}

impl LayoutError {
    /// The byte offset in the expression text this error points at, when it has one.
    pub fn offset(&self) -> Option<usize> {
        match self {
            LayoutError::Parse { offset, .. } | LayoutError::InCall { offset, .. } => Some(*offset),
            _ => None,
        }
    }

    pub(crate) fn domain(op: &'static str, what: impl Into<String>) -> Self {
        LayoutError::Domain {
            op,
            what: what.into(),
        }
    }

    pub(crate) fn incongruent(op: &'static str, what: impl Into<String>) -> Self {
        LayoutError::Incongruent {
            op,
            what: what.into(),
        }
    }

    pub(crate) fn divisibility(op: &'static str, what: impl Into<String>) -> Self {
        LayoutError::Divisibility {
            op,
            what: what.into(),
        }
    }
}

/// `func: message`, without repeating `func` when the message already starts with it.
fn call_message(func: &str, source: &LayoutError) -> String {
    let message = source.to_string();
    if message.starts_with(&format!("{func}:")) {
        message
    } else {
        format!("{func}: {message}")
    }
}

/// Shorthand for results of this module.
pub type Result<T, E = LayoutError> = std::result::Result<T, E>;

/// `a * b`, or an overflow error naming `op`.
pub(crate) fn mul(op: &'static str, a: i64, b: i64) -> Result<i64> {
    a.checked_mul(b).ok_or(LayoutError::Overflow { op })
}

/// `a + b`, or an overflow error naming `op`.
pub(crate) fn add(op: &'static str, a: i64, b: i64) -> Result<i64> {
    a.checked_add(b).ok_or(LayoutError::Overflow { op })
}

/// `ceil(a / b)` for `a >= 0`, `b > 0`.
pub(crate) fn ceil_div(a: i64, b: i64) -> i64 {
    a / b + i64::from(a % b != 0)
}
