//! Tensor types: a static shape and an element type.

use crate::DType;
use std::fmt;

/// Largest number of elements a tensor may have (2^48). Larger sizes are rejected as absurd:
/// no device holds them, and keeping counts below this keeps all size arithmetic in `u64`
/// free of overflow.
pub const MAX_ELEMENTS: u64 = 1 << 48;

/// Largest rank a tensor may have.
pub const MAX_RANK: usize = 16;

/// A ranked tensor type with a static shape, `tensor<2x3xf32>`; rank 0 is `tensor<f32>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub shape: Vec<u64>,
    pub dtype: DType,
}

/// Why a shape is not a valid tensor shape.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("dimension {index} is 0; dimensions must be positive")]
    ZeroDim { index: usize },
    #[error("rank {rank} exceeds the maximum rank {MAX_RANK}")]
    RankTooLarge { rank: usize },
    #[error("tensor has more than 2^48 elements")]
    TooManyElements,
}

impl TensorType {
    pub fn new(shape: impl Into<Vec<u64>>, dtype: DType) -> Self {
        TensorType {
            shape: shape.into(),
            dtype,
        }
    }

    pub fn scalar(dtype: DType) -> Self {
        TensorType::new(Vec::new(), dtype)
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements. Only meaningful for a type that passed [`TensorType::check`];
    /// saturates otherwise.
    pub fn numel(&self) -> u64 {
        self.shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .unwrap_or(u64::MAX)
    }

    /// Bytes the tensor occupies when materialized.
    pub fn size_bytes(&self) -> u64 {
        self.numel().saturating_mul(self.dtype.size_bytes())
    }

    /// Checks the invariants every tensor type in a verified graph satisfies: positive
    /// dimensions, rank at most [`MAX_RANK`], at most [`MAX_ELEMENTS`] elements.
    pub fn check(&self) -> Result<(), ShapeError> {
        check_shape(&self.shape)
    }

    pub fn with_shape(&self, shape: Vec<u64>) -> TensorType {
        TensorType::new(shape, self.dtype)
    }

    pub fn with_dtype(&self, dtype: DType) -> TensorType {
        TensorType::new(self.shape.clone(), dtype)
    }
}

/// See [`TensorType::check`].
pub fn check_shape(shape: &[u64]) -> Result<(), ShapeError> {
    if shape.len() > MAX_RANK {
        return Err(ShapeError::RankTooLarge { rank: shape.len() });
    }
    if let Some(index) = shape.iter().position(|&d| d == 0) {
        return Err(ShapeError::ZeroDim { index });
    }
    let mut n: u64 = 1;
    for &d in shape {
        n = n.checked_mul(d).ok_or(ShapeError::TooManyElements)?;
        if n > MAX_ELEMENTS {
            return Err(ShapeError::TooManyElements);
        }
    }
    Ok(())
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tensor<")?;
        for d in &self.shape {
            write!(f, "{d}x")?;
        }
        write!(f, "{}>", self.dtype)
    }
}
