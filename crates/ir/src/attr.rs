//! Attribute values: the compile-time data an op carries (`{perm = [0, 2, 1]}`).

use crate::DType;
use crate::span::{Span, quote};
use std::collections::BTreeMap;
use std::fmt;

/// One attribute value. Equality is structural, floats compared bit for bit (as the kernel
/// IR's literals; every NaN is `nan` in the text, so NaNs are equal): a `nan` constant equals
/// itself, and `0.0` is not `-0.0`.
#[derive(Clone, Debug)]
pub enum Attr {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    DType(DType),
    Array(Vec<Attr>),
}

impl PartialEq for Attr {
    fn eq(&self, other: &Attr) -> bool {
        match (self, other) {
            (Attr::Int(a), Attr::Int(b)) => a == b,
            (Attr::Float(a), Attr::Float(b)) => {
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
            }
            (Attr::Bool(a), Attr::Bool(b)) => a == b,
            (Attr::Str(a), Attr::Str(b)) => a == b,
            (Attr::DType(a), Attr::DType(b)) => a == b,
            (Attr::Array(a), Attr::Array(b)) => a == b,
            _ => false,
        }
    }
}

impl Attr {
    pub fn as_int(&self) -> Option<i64> {
        match *self {
            Attr::Int(i) => Some(i),
            _ => None,
        }
    }

    /// A float, or an integer read as a float.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Attr::Float(x) => Some(x),
            Attr::Int(i) => Some(i as f64),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Attr::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_dtype(&self) -> Option<DType> {
        match *self {
            Attr::DType(d) => Some(d),
            _ => None,
        }
    }

    /// An array of integers.
    pub fn as_ints(&self) -> Option<Vec<i64>> {
        match self {
            Attr::Array(items) => items.iter().map(Attr::as_int).collect(),
            _ => None,
        }
    }

    /// The kind of value, for error messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Attr::Int(_) => "integer",
            Attr::Float(_) => "float",
            Attr::Bool(_) => "boolean",
            Attr::Str(_) => "string",
            Attr::DType(_) => "dtype",
            Attr::Array(_) => "array",
        }
    }
}

/// Writes a float so that it reads back as the same `f64` and never as an integer
/// (`1.0`, `0.125`, `1e-5`, `inf`, `-inf`, `nan`).
pub fn format_float(x: f64) -> String {
    if x.is_nan() {
        "nan".to_string()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.to_string()
    } else {
        // `{:?}` is the shortest representation that round-trips and always has a `.` or `e`.
        format!("{x:?}")
    }
}

impl fmt::Display for Attr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attr::Int(i) => write!(f, "{i}"),
            Attr::Float(x) => f.write_str(&format_float(*x)),
            Attr::Bool(b) => write!(f, "{b}"),
            Attr::Str(s) => f.write_str(&quote(s)),
            Attr::DType(d) => write!(f, "{d}"),
            Attr::Array(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// An op's attributes, ordered by name so that printing is deterministic.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attrs {
    map: BTreeMap<String, Attr>,
}

impl Attrs {
    pub fn new() -> Attrs {
        Attrs::default()
    }

    /// Builder-style insertion.
    pub fn with(mut self, name: &str, value: Attr) -> Attrs {
        self.insert(name, value);
        self
    }

    pub fn insert(&mut self, name: &str, value: Attr) -> Option<Attr> {
        self.map.insert(name.to_string(), value)
    }

    pub fn get(&self, name: &str) -> Option<&Attr> {
        self.map.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Attr)> {
        self.map.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }
}

/// Where each attribute of a parsed statement was written, for error messages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttrSpans {
    pub spans: Vec<(String, Span)>,
}

impl AttrSpans {
    pub fn get(&self, name: &str) -> Option<Span> {
        self.spans.iter().find(|(n, _)| n == name).map(|(_, s)| *s)
    }
}
