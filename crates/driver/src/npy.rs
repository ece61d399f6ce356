//! `.npy` files in and out. bf16, which numpy cannot name, travels as float32: exact on
//! output, rounded to nearest even on input.

use anyhow::{Context, Result, bail};
use half::f16;
use irc_interp::{Data, Tensor};
use irc_ir::{DType, TensorType};
use npyz::WriterBuilder;
use std::path::Path;

/// The numpy type string a dtype is stored as.
fn typestr(d: DType) -> &'static str {
    match d {
        DType::F16 => "<f2",
        DType::BF16 | DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::I1 => "|b1",
    }
}

/// Reads `path` as a tensor of type `ty`, checking dtype and shape.
pub fn read(path: &Path, ty: &TensorType) -> Result<Tensor> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let npy = npyz::NpyFile::new(&bytes[..])
        .with_context(|| format!("{} is not a valid .npy file", path.display()))?;
    let found = match npy.dtype() {
        npyz::DType::Plain(ts) => ts.to_string(),
        other => other.descr(),
    };
    let want = typestr(ty.dtype);
    let same = found == want
        || (want == "|b1" && found == "<b1")
        || (want.ends_with("f2") && found == "=f2");
    if !same {
        let note = if ty.dtype == DType::BF16 {
            " (bf16 inputs are given as float32)"
        } else {
            ""
        };
        bail!(
            "{}: dtype {found} does not match {ty}: expected {want}{note}",
            path.display()
        );
    }
    if npy.shape() != ty.shape.as_slice() {
        bail!(
            "{}: shape {:?} does not match {ty}",
            path.display(),
            npy.shape()
        );
    }
    if npy.order() == npyz::Order::Fortran {
        bail!(
            "{}: Fortran-order arrays are not supported; save a C-contiguous array",
            path.display()
        );
    }
    let bad = |e: std::io::Error| anyhow::anyhow!("{}: {e}", path.display());
    let data = match ty.dtype {
        DType::F16 => Data::F16(npy.into_vec::<f16>().map_err(bad)?),
        DType::BF16 => Data::from_f32(DType::BF16, npy.into_vec::<f32>().map_err(bad)?),
        DType::F32 => Data::F32(npy.into_vec::<f32>().map_err(bad)?),
        DType::F64 => Data::F64(npy.into_vec::<f64>().map_err(bad)?),
        DType::I32 => Data::I32(npy.into_vec::<i32>().map_err(bad)?),
        DType::I64 => Data::I64(npy.into_vec::<i64>().map_err(bad)?),
        DType::I1 => Data::I1(npy.into_vec::<bool>().map_err(bad)?),
    };
    Ok(Tensor::new(ty.clone(), data)?)
}

fn write_vec<T: npyz::AutoSerialize + Clone>(path: &Path, shape: &[u64], v: &[T]) -> Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(std::io::BufWriter::new(file))
        .begin_nd()?;
    w.extend(v.iter().cloned())?;
    w.finish()?;
    Ok(())
}

/// Writes `t` to `path` (bf16 as float32).
pub fn write(path: &Path, t: &Tensor) -> Result<()> {
    let shape = &t.ty.shape;
    match &t.data {
        Data::F16(v) => write_vec(path, shape, v),
        Data::BF16(_) => write_vec(path, shape, &t.data.to_f32()),
        Data::F32(v) => write_vec(path, shape, v),
        Data::F64(v) => write_vec(path, shape, v),
        Data::I32(v) => write_vec(path, shape, v),
        Data::I64(v) => write_vec(path, shape, v),
        Data::I1(v) => write_vec(path, shape, v),
    }
}
