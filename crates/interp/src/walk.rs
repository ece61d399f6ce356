//! Index walking: row-major iteration over a shape with several stride sets at once, and the
//! parallel gather and fill built on it.

use rayon::prelude::*;

/// Elements each parallel task handles.
pub const CHUNK: usize = 1 << 14;

/// Row-major strides of a contiguous tensor of `shape`.
pub fn contiguous_strides(shape: &[u64]) -> Vec<usize> {
    let mut strides = vec![0usize; shape.len()];
    let mut s = 1usize;
    for d in (0..shape.len()).rev() {
        strides[d] = s;
        s *= shape[d] as usize;
    }
    strides
}

/// Strides that read a contiguous tensor of `in_shape` broadcast (numpy rules, right-aligned)
/// to `out_shape`: stride 0 along broadcast dims.
pub fn broadcast_strides(in_shape: &[u64], out_shape: &[u64]) -> Vec<usize> {
    let inner = contiguous_strides(in_shape);
    let lead = out_shape.len() - in_shape.len();
    (0..out_shape.len())
        .map(|d| {
            if d < lead || in_shape[d - lead] == 1 {
                0
            } else {
                inner[d - lead]
            }
        })
        .collect()
}

/// Calls `f(k, offsets)` for the linear indices `start..start + len` of `shape`, where
/// `offsets[n]` is the index's dot product with `strides[n]`.
pub fn walk<const N: usize>(
    shape: &[u64],
    strides: [&[usize]; N],
    start: usize,
    len: usize,
    mut f: impl FnMut(usize, [usize; N]),
) {
    let rank = shape.len();
    let mut idx = vec![0usize; rank];
    let mut rem = start;
    for d in (0..rank).rev() {
        idx[d] = rem % shape[d] as usize;
        rem /= shape[d] as usize;
    }
    let mut offs = [0usize; N];
    for n in 0..N {
        offs[n] = (0..rank).map(|d| idx[d] * strides[n][d]).sum();
    }
    for k in 0..len {
        f(k, offs);
        let mut d = rank;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            for n in 0..N {
                offs[n] += strides[n][d];
            }
            if idx[d] < shape[d] as usize {
                break;
            }
            for n in 0..N {
                offs[n] -= strides[n][d] * shape[d] as usize;
            }
            idx[d] = 0;
        }
    }
}

/// `out[i] = f(i-th element's offsets)` over `shape`, in parallel.
pub fn par_map<T: Send, const N: usize>(
    shape: &[u64],
    strides: [&[usize]; N],
    f: impl Fn([usize; N]) -> T + Sync,
) -> Vec<T>
where
    T: Default + Clone,
{
    let n: usize = shape.iter().map(|&d| d as usize).product();
    let mut out = vec![T::default(); n];
    out.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(c, chunk)| {
            let len = chunk.len();
            walk(shape, strides, c * CHUNK, len, |k, offs| chunk[k] = f(offs));
        });
    out
}

/// Reads `src` at the offsets `strides` give for each index of `out_shape`.
pub fn gather<T: Copy + Send + Sync + Default>(
    src: &[T],
    out_shape: &[u64],
    strides: &[usize],
) -> Vec<T> {
    par_map(out_shape, [strides], |[o]| src[o])
}
