//! Host tensors: a type and the elements, stored in the tensor's own dtype.

use half::{bf16, f16};
use irc_ir::{DType, TensorType};

/// Elements in row-major order, in the tensor's dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    I1(Vec<bool>),
}

/// Applies a generic expression to the vector inside any [`Data`], rebuilding the same variant.
macro_rules! map_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            Data::F16($v) => Data::F16($body),
            Data::BF16($v) => Data::BF16($body),
            Data::F32($v) => Data::F32($body),
            Data::F64($v) => Data::F64($body),
            Data::I32($v) => Data::I32($body),
            Data::I64($v) => Data::I64($body),
            Data::I1($v) => Data::I1($body),
        }
    };
}
pub(crate) use map_data;

impl Data {
    pub fn dtype(&self) -> DType {
        match self {
            Data::F16(_) => DType::F16,
            Data::BF16(_) => DType::BF16,
            Data::F32(_) => DType::F32,
            Data::F64(_) => DType::F64,
            Data::I32(_) => DType::I32,
            Data::I64(_) => DType::I64,
            Data::I1(_) => DType::I1,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Data::F16(v) => v.len(),
            Data::BF16(v) => v.len(),
            Data::F32(v) => v.len(),
            Data::F64(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::I64(v) => v.len(),
            Data::I1(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every element widened to f32 (exact for 16-bit floats, rounded for f64 and large ints).
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            Data::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            Data::BF16(v) => v.iter().map(|x| x.to_f32()).collect(),
            Data::F32(v) => v.clone(),
            Data::F64(v) => v.iter().map(|&x| x as f32).collect(),
            Data::I32(v) => v.iter().map(|&x| x as f32).collect(),
            Data::I64(v) => v.iter().map(|&x| x as f32).collect(),
            Data::I1(v) => v.iter().map(|&x| f32::from(u8::from(x))).collect(),
        }
    }

    /// Every element as f64 (exact except for i64 beyond 2^53).
    pub fn to_f64(&self) -> Vec<f64> {
        match self {
            Data::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            Data::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
            Data::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Data::F64(v) => v.clone(),
            Data::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Data::I64(v) => v.iter().map(|&x| x as f64).collect(),
            Data::I1(v) => v.iter().map(|&x| f64::from(u8::from(x))).collect(),
        }
    }

    /// Every element as i64: floats truncate toward zero (saturating; NaN is 0).
    pub fn to_i64(&self) -> Vec<i64> {
        match self {
            Data::I32(v) => v.iter().map(|&x| i64::from(x)).collect(),
            Data::I64(v) => v.clone(),
            Data::I1(v) => v.iter().map(|&x| i64::from(x)).collect(),
            other => other.to_f64().into_iter().map(|x| x as i64).collect(),
        }
    }

    /// Every element as a boolean: nonzero is true (NaN too).
    pub fn to_bool(&self) -> Vec<bool> {
        match self {
            Data::I1(v) => v.clone(),
            Data::I32(_) | Data::I64(_) => self.to_i64().into_iter().map(|x| x != 0).collect(),
            other => other.to_f64().into_iter().map(|x| x != 0.0).collect(),
        }
    }

    /// f32 values rounded (to nearest even) into `dtype`.
    pub fn from_f32(dtype: DType, v: Vec<f32>) -> Data {
        match dtype {
            DType::F16 => Data::F16(v.into_iter().map(f16::from_f32).collect()),
            DType::BF16 => Data::BF16(v.into_iter().map(bf16::from_f32).collect()),
            DType::F32 => Data::F32(v),
            _ => Data::from_f64(dtype, v.into_iter().map(f64::from).collect()),
        }
    }

    /// f64 values rounded (to nearest even) or truncated (integers) into `dtype`.
    pub fn from_f64(dtype: DType, v: Vec<f64>) -> Data {
        match dtype {
            DType::F16 => Data::F16(v.into_iter().map(f16::from_f64).collect()),
            DType::BF16 => Data::BF16(v.into_iter().map(bf16::from_f64).collect()),
            DType::F32 => Data::F32(v.into_iter().map(|x| x as f32).collect()),
            DType::F64 => Data::F64(v),
            DType::I32 => Data::I32(v.into_iter().map(|x| x as i32).collect()),
            DType::I64 => Data::I64(v.into_iter().map(|x| x as i64).collect()),
            DType::I1 => Data::I1(v.into_iter().map(|x| x != 0.0).collect()),
        }
    }

    /// i64 values into `dtype` (integers wrap, as C casts do).
    pub fn from_i64(dtype: DType, v: Vec<i64>) -> Data {
        match dtype {
            DType::I32 => Data::I32(v.into_iter().map(|x| x as i32).collect()),
            DType::I64 => Data::I64(v),
            DType::I1 => Data::I1(v.into_iter().map(|x| x != 0).collect()),
            float => Data::from_f64(float, v.into_iter().map(|x| x as f64).collect()),
        }
    }
}

/// A tensor on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub ty: TensorType,
    pub data: Data,
}

impl Tensor {
    /// A tensor from data of the right dtype and length.
    pub fn new(ty: TensorType, data: Data) -> Result<Tensor, crate::InterpError> {
        if data.dtype() != ty.dtype || data.len() as u64 != ty.numel() {
            return Err(crate::InterpError::BadInput(format!(
                "{} elements of {} do not make a {ty}",
                data.len(),
                data.dtype()
            )));
        }
        Ok(Tensor { ty, data })
    }

    pub fn numel(&self) -> usize {
        self.data.len()
    }
}
