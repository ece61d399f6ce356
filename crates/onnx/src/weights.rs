//! The weights side file: safetensors, one tensor per weight parameter, named as the
//! parameter. Bytes in, bytes out; the driver does the file IO.

use half::{bf16, f16};
use irc_interp::{Data, Tensor};
use irc_ir::{DType, TensorType};
use safetensors::{Dtype, SafeTensors, tensor::TensorView};

/// A weights file could not be written or read.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("weights file: {0}")]
pub struct WeightsError(pub String);

fn st_dtype(d: DType) -> Dtype {
    match d {
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::I1 => Dtype::BOOL,
    }
}

/// Little-endian bytes of a tensor's elements.
pub fn le_bytes(d: &Data) -> Vec<u8> {
    match d {
        Data::F16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        Data::BF16(v) => v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        Data::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Data::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Data::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Data::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Data::I1(v) => v.iter().map(|&b| u8::from(b)).collect(),
    }
}

/// Serializes named tensors as a safetensors file.
pub fn to_safetensors(weights: &[(String, Tensor)]) -> Result<Vec<u8>, WeightsError> {
    let bytes: Vec<Vec<u8>> = weights.iter().map(|(_, t)| le_bytes(&t.data)).collect();
    let views = weights
        .iter()
        .zip(&bytes)
        .map(|((name, t), b)| {
            let shape: Vec<usize> = t.ty.shape.iter().map(|&d| d as usize).collect();
            TensorView::new(st_dtype(t.ty.dtype), shape, b)
                .map(|v| (name.clone(), v))
                .map_err(|e| WeightsError(format!("{name}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    safetensors::serialize(views, None).map_err(|e| WeightsError(e.to_string()))
}

fn chunks<const N: usize, T>(b: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    b.chunks_exact(N)
        .map(|c| f(c.try_into().unwrap_or([0; N])))
        .collect()
}

/// Reads a safetensors file: every tensor, by name.
pub fn from_safetensors(bytes: &[u8]) -> Result<Vec<(String, Tensor)>, WeightsError> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| WeightsError(e.to_string()))?;
    let mut out = Vec::new();
    for (name, view) in st.tensors() {
        let b = view.data();
        let (dtype, data) = match view.dtype() {
            Dtype::F16 => (
                DType::F16,
                Data::F16(chunks(b, |c| f16::from_bits(u16::from_le_bytes(c)))),
            ),
            Dtype::BF16 => (
                DType::BF16,
                Data::BF16(chunks(b, |c| bf16::from_bits(u16::from_le_bytes(c)))),
            ),
            Dtype::F32 => (DType::F32, Data::F32(chunks(b, f32::from_le_bytes))),
            Dtype::F64 => (DType::F64, Data::F64(chunks(b, f64::from_le_bytes))),
            Dtype::I32 => (DType::I32, Data::I32(chunks(b, i32::from_le_bytes))),
            Dtype::I64 => (DType::I64, Data::I64(chunks(b, i64::from_le_bytes))),
            Dtype::BOOL => (DType::I1, Data::I1(b.iter().map(|&x| x != 0).collect())),
            other => {
                return Err(WeightsError(format!(
                    "{name}: dtype {other:?} is not supported"
                )));
            }
        };
        let shape: Vec<u64> = view.shape().iter().map(|&d| d as u64).collect();
        let t = Tensor::new(TensorType::new(shape, dtype), data)
            .map_err(|e| WeightsError(format!("{name}: {e}")))?;
        out.push((name, t));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_dtype() {
        let ts: Vec<(String, Tensor)> = [
            Data::F16(vec![f16::from_f32(1.5), f16::from_f32(-2.0)]),
            Data::BF16(vec![bf16::from_f32(0.25), bf16::from_f32(3.0)]),
            Data::F32(vec![1.0, f32::NAN]),
            Data::F64(vec![-1e300, 2.0]),
            Data::I32(vec![i32::MIN, 7]),
            Data::I64(vec![i64::MAX, -1]),
            Data::I1(vec![true, false]),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            let ty = TensorType::new([2], d.dtype());
            (format!("w{i}"), Tensor::new(ty, d).unwrap())
        })
        .collect();
        let bytes = to_safetensors(&ts).unwrap();
        let back = from_safetensors(&bytes).unwrap();
        assert_eq!(back.len(), ts.len());
        for ((n, a), (m, b)) in ts.iter().zip(&back) {
            assert_eq!(n, m);
            assert_eq!(a.ty, b.ty);
            assert_eq!(le_bytes(&a.data), le_bytes(&b.data));
        }
        assert!(from_safetensors(&bytes[..bytes.len() / 2]).is_err());
    }
}
