//! ONNX tensors and types to irc's: `TensorProto` → host [`Tensor`], `ValueInfoProto` →
//! [`TensorType`], element types by `TensorProto.DataType`.

use crate::ImportError;
use crate::external::{ExternalData, external_ref};
use crate::proto::{DimValue, TensorProto, ValueInfoProto};
use half::{bf16, f16};
use irc_interp::{Data, Tensor};
use irc_ir::{DType, TensorType};
use prost::Message;
use std::collections::BTreeMap;

/// `TensorProto.DataType` codes irc has a dtype for.
pub fn dtype_of(code: i32) -> Result<DType, String> {
    Ok(match code {
        1 => DType::F32,
        6 => DType::I32,
        7 => DType::I64,
        9 => DType::I1,
        10 => DType::F16,
        11 => DType::F64,
        16 => DType::BF16,
        other => {
            return Err(format!(
                "element type {} is not supported (irc has f16, bf16, f32, f64, i32, i64 and bool)",
                type_name(other)
            ));
        }
    })
}

/// The `TensorProto.DataType` code of an irc dtype.
pub fn code_of(d: DType) -> i64 {
    match d {
        DType::F32 => 1,
        DType::I32 => 6,
        DType::I64 => 7,
        DType::I1 => 9,
        DType::F16 => 10,
        DType::F64 => 11,
        DType::BF16 => 16,
    }
}

fn type_name(code: i32) -> String {
    let n = match code {
        0 => "UNDEFINED",
        2 => "UINT8",
        3 => "INT8",
        4 => "UINT16",
        5 => "INT16",
        8 => "STRING",
        12 => "UINT32",
        13 => "UINT64",
        14 => "COMPLEX64",
        15 => "COMPLEX128",
        17..=26 => "a float8/int4/float4 type",
        _ => return format!("code {code}"),
    };
    format!("{n} ({code})")
}

/// A shape from ONNX dims: every dim positive (irc tensors have no zero-sized dims).
fn shape_of(dims: &[i64]) -> Result<Vec<u64>, String> {
    let shape = dims
        .iter()
        .map(|&d| u64::try_from(d).ok().filter(|&d| d > 0))
        .collect::<Option<Vec<u64>>>()
        .ok_or_else(|| {
            format!("shape {dims:?} has a zero-sized or negative dim, which irc does not support")
        })?;
    irc_ir::types::check_shape(&shape).map_err(|e| format!("shape {dims:?}: {e}"))?;
    Ok(shape)
}

/// Little-endian fixed-size elements of `raw_data` (or of external data: `what` names them).
fn raw<const N: usize, T>(
    raw: &[u8],
    n: usize,
    what: &str,
    f: impl Fn([u8; N]) -> T,
) -> Result<Vec<T>, String> {
    if raw.len() != n * N {
        return Err(format!(
            "{what} holds {} bytes, but {n} elements of {N} bytes need {}",
            raw.len(),
            n * N
        ));
    }
    Ok(raw
        .chunks_exact(N)
        .map(|c| f(c.try_into().unwrap_or([0; N])))
        .collect())
}

fn counted<T: Clone>(v: &[T], n: usize, field: &str) -> Result<Vec<T>, String> {
    if v.len() != n {
        return Err(format!(
            "{field} holds {} values, the shape needs {n}",
            v.len()
        ));
    }
    Ok(v.to_vec())
}

/// A `TensorProto` as a host tensor: its data inline (raw_data or the typed fields), or in an
/// external file whose bytes `external` reads (an error without one).
pub fn from_proto(t: &TensorProto, external: Option<&ExternalData>) -> Result<Tensor, String> {
    let ext = external_ref(t)?;
    let ext_bytes = match (&ext, external) {
        (None, _) => None,
        (Some(r), Some(x)) => Some(x.read(r).map_err(|e| format!("external data {r}: {e}"))?),
        (Some(r), None) => {
            return Err(format!(
                "its data is in an external file {r}, and this import reads no files (import the model from its file, with the data files beside it)"
            ));
        }
    };
    let dtype = dtype_of(t.data_type)?;
    if t.dims == [0] && matches!(dtype, DType::I64 | DType::I32) {
        // An empty list of integers: the shape of a scalar (`ConstantOfShape([])`), no axes.
        // It stays on the host; `Ctx` refuses to write it into the graph.
        let data = if dtype == DType::I64 {
            Data::I64(Vec::new())
        } else {
            Data::I32(Vec::new())
        };
        return Ok(Tensor {
            ty: TensorType::new([0], dtype),
            data,
        });
    }
    let shape = shape_of(&t.dims)?;
    let n = shape.iter().product::<u64>() as usize;
    let (r, what) = match (&ext_bytes, &ext) {
        (Some(b), Some(e)) => (b.as_slice(), format!("external data {e}")),
        _ => (t.raw_data.as_slice(), "raw_data".to_string()),
    };
    let use_raw = !r.is_empty() || ext.is_some();
    let data = match dtype {
        DType::F32 if use_raw => Data::F32(raw(r, n, &what, f32::from_le_bytes)?),
        DType::F32 => Data::F32(counted(&t.float_data, n, "float_data")?),
        DType::F64 if use_raw => Data::F64(raw(r, n, &what, f64::from_le_bytes)?),
        DType::F64 => Data::F64(counted(&t.double_data, n, "double_data")?),
        DType::I64 if use_raw => Data::I64(raw(r, n, &what, i64::from_le_bytes)?),
        DType::I64 => Data::I64(counted(&t.int64_data, n, "int64_data")?),
        DType::I32 if use_raw => Data::I32(raw(r, n, &what, i32::from_le_bytes)?),
        DType::I32 => Data::I32(counted(&t.int32_data, n, "int32_data")?),
        DType::I1 if use_raw => Data::I1(raw(r, n, &what, |[b]: [u8; 1]| b != 0)?),
        DType::I1 => Data::I1(
            counted(&t.int32_data, n, "int32_data")?
                .iter()
                .map(|&b| b != 0)
                .collect(),
        ),
        DType::F16 if use_raw => {
            Data::F16(raw(r, n, &what, |b| f16::from_bits(u16::from_le_bytes(b)))?)
        }
        DType::F16 => Data::F16(
            counted(&t.int32_data, n, "int32_data")?
                .iter()
                .map(|&b| f16::from_bits(b as u16))
                .collect(),
        ),
        DType::BF16 if use_raw => Data::BF16(raw(r, n, &what, |b| {
            bf16::from_bits(u16::from_le_bytes(b))
        })?),
        DType::BF16 => Data::BF16(
            counted(&t.int32_data, n, "int32_data")?
                .iter()
                .map(|&b| bf16::from_bits(b as u16))
                .collect(),
        ),
    };
    Tensor::new(TensorType::new(shape, dtype), data).map_err(|e| e.to_string())
}

/// Decodes a serialized `TensorProto` (the `input_0.pb` files of ONNX's backend tests).
pub fn decode_tensor(bytes: &[u8]) -> Result<Tensor, ImportError> {
    let t = TensorProto::decode(bytes).map_err(|e| ImportError::Decode(e.to_string()))?;
    from_proto(&t, None).map_err(|message| ImportError::Value {
        what: "tensor",
        name: t.name.clone(),
        message,
    })
}

/// The static type of a graph input, dynamic dims fixed by `dims` (by their `dim_param` name).
pub fn value_type(v: &ValueInfoProto, dims: &BTreeMap<String, u64>) -> Result<TensorType, String> {
    let tt = v
        .r#type
        .as_ref()
        .and_then(|t| t.tensor_type.as_ref())
        .ok_or_else(|| {
            "is not a tensor (sequence, map and optional values are not supported)".to_string()
        })?;
    let dtype = dtype_of(tt.elem_type)?;
    let Some(shape) = &tt.shape else {
        return Err("has no shape (unknown rank); irc needs static shapes".into());
    };
    let mut out = Vec::with_capacity(shape.dim.len());
    for (axis, d) in shape.dim.iter().enumerate() {
        let size = match &d.value {
            Some(DimValue::DimValue(s)) if *s > 0 => *s as u64,
            Some(DimValue::DimValue(s)) => {
                return Err(format!(
                    "axis {axis} has size {s}; irc tensors have positive dims"
                ));
            }
            Some(DimValue::DimParam(p)) => *dims.get(p).ok_or_else(|| {
                format!("axis {axis} is the dynamic dim '{p}'; give it a size with --dim {p}=N")
            })?,
            None => {
                return Err(format!(
                    "axis {axis} has no size (neither a value nor a name); irc needs static shapes"
                ));
            }
        };
        out.push(size);
    }
    irc_ir::types::check_shape(&out).map_err(|e| e.to_string())?;
    Ok(TensorType::new(out, dtype))
}
