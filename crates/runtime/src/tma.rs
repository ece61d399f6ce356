//! TMA tensor maps: the 128-byte descriptors a manifest's `tensor_map` buffers hold, encoded
//! by the driver (`cuTensorMapEncodeTiled`) from the mapped buffer's device address.

use crate::RuntimeError;
use crate::device::driver;
use cudarc::driver::sys;
use irc_ir::DType;
use irc_kir::manifest::TensorMap;

/// The descriptor's 128 bytes for `map` over the buffer at `base` of element type `dtype`.
pub(crate) fn encode(
    map: &TensorMap,
    dtype: DType,
    base: sys::CUdeviceptr,
) -> Result<[u8; 128], RuntimeError> {
    use sys::CUtensorMapDataType as D;
    let data_type = match dtype {
        DType::F16 => D::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        DType::BF16 => D::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        DType::F32 => D::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        DType::F64 => D::CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
        DType::I32 => D::CU_TENSOR_MAP_DATA_TYPE_INT32,
        DType::I64 => D::CU_TENSOR_MAP_DATA_TYPE_INT64,
        DType::I1 => D::CU_TENSOR_MAP_DATA_TYPE_UINT8,
    };
    use sys::CUtensorMapSwizzle as S;
    let swizzle = match map.swizzle {
        0 => S::CU_TENSOR_MAP_SWIZZLE_NONE,
        32 => S::CU_TENSOR_MAP_SWIZZLE_32B,
        64 => S::CU_TENSOR_MAP_SWIZZLE_64B,
        128 => S::CU_TENSOR_MAP_SWIZZLE_128B,
        other => {
            return Err(RuntimeError::Launch(format!(
                "tensor map swizzle of {other} bytes (0, 32, 64 or 128)"
            )));
        }
    };
    let rank = map.dims.len();
    let element_strides = vec![1u32; rank];
    let mut out = sys::CUtensorMap { opaque: [0; 16] };
    // SAFETY: every array has `rank` entries (`strides` has `rank - 1`, as the driver reads),
    // `out` is a 128-byte aligned `CUtensorMap`, and `base` is a live device allocation.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut out,
            data_type,
            rank as u32,
            base as *mut std::ffi::c_void,
            map.dims.as_ptr(),
            map.strides.as_ptr(),
            map.box_dims.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()
    .map_err(driver(format!(
        "cuTensorMapEncodeTiled (dims {:?}, byte strides {:?}, box {:?}, swizzle {})",
        map.dims, map.strides, map.box_dims, map.swizzle
    )))?;
    let mut bytes = [0u8; 128];
    for (i, w) in out.opaque.iter().enumerate() {
        bytes[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
    }
    Ok(bytes)
}
