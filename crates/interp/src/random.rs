//! Seeded random inputs: standard normals for floats (rounded to the dtype), integers uniform in
//! [-8, 8], fair booleans. Each input draws from its own stream, derived from the seed and the
//! input's position, so giving one input from a file leaves the others unchanged.

use crate::tensor::{Data, Tensor};
use irc_ir::{DType, TensorType};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

pub fn random_tensor(ty: &TensorType, seed: u64, stream: u64) -> Tensor {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let n = ty.numel() as usize;
    let data = match ty.dtype {
        DType::I32 | DType::I64 => {
            Data::from_i64(ty.dtype, (0..n).map(|_| rng.random_range(-8..=8)).collect())
        }
        DType::I1 => Data::I1((0..n).map(|_| rng.random()).collect()),
        d => Data::from_f64(
            d,
            (0..n)
                .map(|_| rng.sample::<f64, _>(StandardNormal))
                .collect(),
        ),
    };
    Tensor {
        ty: ty.clone(),
        data,
    }
}
