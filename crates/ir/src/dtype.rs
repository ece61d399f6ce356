//! Element types.

use std::fmt;
use std::str::FromStr;

/// The element type of a tensor.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F16,
    BF16,
    F32,
    F64,
    I32,
    I64,
    /// Booleans, stored as one byte each.
    I1,
}

impl DType {
    /// `x` rounded to this float type as a `cast` rounds it (to nearest even, 16-bit types
    /// through f32); other types' values unchanged.
    pub fn round(self, x: f64) -> f64 {
        match self {
            DType::BF16 => half::bf16::from_f32(x as f32).to_f64(),
            DType::F16 => half::f16::from_f32(x as f32).to_f64(),
            DType::F32 => f64::from(x as f32),
            _ => x,
        }
    }

    /// Every dtype, in declaration order.
    pub const ALL: [DType; 7] = [
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::I1,
    ];

    /// The spelling used in the text form (`f16`, `bf16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::I1 => "i1",
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    /// Bytes one element occupies in memory.
    pub fn size_bytes(self) -> u64 {
        match self {
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::I1 => 1,
        }
    }

    /// Machine epsilon (PyTorch's `torch.finfo(dtype).eps`) of a float dtype.
    pub fn epsilon(self) -> Option<f64> {
        match self {
            DType::F16 => Some(0.0009765625),
            DType::BF16 => Some(0.0078125),
            DType::F32 => Some(f32::EPSILON as f64),
            DType::F64 => Some(f64::EPSILON),
            _ => None,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        DType::ALL.into_iter().find(|d| d.name() == s).ok_or(())
    }
}
