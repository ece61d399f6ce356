//! The launch manifest: how a host runs an emitted CUDA file.
//!
//! `irc --emit=cuda` writes the kernels to a `.cu` file and this manifest (JSON) beside it, and
//! embeds the same JSON in the file's leading comment. A host (irc's runtime, or anyone else's)
//! compiles the file, allocates one device buffer per [`Buffer`], copies the graph's inputs into
//! the buffers named by [`Manifest::inputs`], launches every entry of [`Manifest::launches`] in
//! order (each kernel's parameters are the device pointers of the buffers named by
//! [`Launch::args`], in that order; kernels take no other parameters), and reads the results
//! from the buffers named by [`Manifest::outputs`]. A buffer with a [`TensorMap`] holds a TMA
//! descriptor of another buffer: the host encodes it once the buffers are allocated.
//!
//! The format is versioned: [`Manifest::FORMAT`] and [`Manifest::VERSION`] are written into
//! every manifest and checked on reading.

use irc_ir::DType;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// A whole launch sequence for one graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`Manifest::FORMAT`].
    pub format: String,
    /// Always [`Manifest::VERSION`] for manifests this crate writes.
    pub version: u32,
    /// The graph's name (without `@`).
    pub graph: String,
    /// Floating-point operations the graph performs (a multiply-add counts 2), for TFLOP/s.
    pub flops: u64,
    /// The fewest bytes any implementation must move: every input read once, every output
    /// written once.
    pub min_bytes: u64,
    /// Every device buffer; a buffer's id is its index here.
    pub buffers: Vec<Buffer>,
    /// Buffer ids of the graph's parameters, in order.
    pub inputs: Vec<usize>,
    /// Buffer ids of the graph's results, in order (a result may name an input buffer, and two
    /// results may name the same buffer).
    pub outputs: Vec<usize>,
    /// Kernel launches, in the order they must run (on one stream).
    pub launches: Vec<Launch>,
}

/// One device buffer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Buffer {
    /// A readable name (the graph value's name).
    pub name: String,
    /// Element type (`f16`, `bf16`, `f32`, `f64`, `i32`, `i64`, `i1`; `i1` is one byte per
    /// element, 0 or 1).
    pub dtype: String,
    /// Logical shape, row-major and contiguous in the buffer.
    pub shape: Vec<u64>,
    /// Size in bytes (elements × element size; at least 1 is allocated).
    pub bytes: u64,
    pub kind: BufferKind,
    /// Set on a 128-byte buffer the host must fill, after allocating every buffer and before
    /// the first launch, with the TMA descriptor (`CUtensorMap`, `cuTensorMapEncodeTiled`)
    /// this describes. It is not poisoned or copied like other temps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_map: Option<TensorMap>,
}

/// A TMA tensor map, as `cuTensorMapEncodeTiled` takes it: interleave none, L2 promotion
/// 128 bytes, out-of-bounds elements filled with zeros.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorMap {
    /// The buffer it maps (its base address and element type).
    pub of: usize,
    /// Extents, innermost first, in elements.
    pub dims: Vec<u64>,
    /// Byte strides of dimensions 1...
    pub strides: Vec<u64>,
    /// Box extents, innermost first.
    pub box_dims: Vec<u32>,
    /// Swizzle in bytes: 0, 32, 64 or 128.
    pub swizzle: u32,
}

/// What a buffer holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BufferKind {
    /// A graph parameter, copied in by the host.
    Input,
    /// A graph result, copied out by the host.
    Output,
    /// An intermediate between kernels.
    Temp,
    /// A temp the host fills with zeros once, after allocating it and before the first launch
    /// (never poisoned); every kernel leaves it zero when it ends (a template's arrival
    /// counters, which the last block to arrive resets).
    Zeroed,
}

/// One kernel launch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// The `extern "C"` kernel's name in the emitted file.
    pub kernel: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory in bytes.
    pub shared_bytes: u32,
    /// Buffer ids passed as the kernel's pointer parameters, in order.
    pub args: Vec<usize>,
    /// Launched by `cuLaunchCooperativeKernel`: its blocks wait for each other
    /// ([`crate::cooperative`]), so all of them must be resident at once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cooperative: bool,
}

impl Manifest {
    pub const FORMAT: &'static str = "irc-launch-manifest";
    pub const VERSION: u32 = 1;

    /// The manifest as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a manifest always serializes")
    }

    /// Reads a manifest, checking its format tag, version and buffer references.
    pub fn from_json(text: &str) -> Result<Manifest, ManifestError> {
        let m: Manifest =
            serde_json::from_str(text).map_err(|e| ManifestError(format!("invalid JSON: {e}")))?;
        m.check()?;
        Ok(m)
    }

    /// Checks the invariants a host relies on.
    pub fn check(&self) -> Result<(), ManifestError> {
        if self.format != Self::FORMAT {
            return Err(ManifestError(format!(
                "format is `{}`, expected `{}`",
                self.format,
                Self::FORMAT
            )));
        }
        if self.version != Self::VERSION {
            return Err(ManifestError(format!(
                "version {} is not supported (this irc reads version {})",
                self.version,
                Self::VERSION
            )));
        }
        let n = self.buffers.len();
        for b in &self.buffers {
            let dt: DType = b.dtype.parse().map_err(|_| {
                ManifestError(format!("buffer `{}`: unknown dtype `{}`", b.name, b.dtype))
            })?;
            let elems = b.shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
            if elems.and_then(|e| e.checked_mul(dt.size_bytes())) != Some(b.bytes) {
                return Err(ManifestError(format!(
                    "buffer `{}`: {} bytes do not match shape {:?} of {}",
                    b.name, b.bytes, b.shape, b.dtype
                )));
            }
        }
        let check_id = |what: &str, id: usize| {
            if id < n {
                Ok(())
            } else {
                Err(ManifestError(format!(
                    "{what} names buffer {id}, but there are {n}"
                )))
            }
        };
        for b in &self.buffers {
            if let Some(t) = &b.tensor_map {
                check_id(&format!("tensor map `{}`", b.name), t.of)?;
                if b.bytes != 128 || self.buffers[t.of].tensor_map.is_some() {
                    return Err(ManifestError(format!(
                        "tensor map `{}` must be 128 bytes and map a data buffer",
                        b.name
                    )));
                }
            }
        }
        for &i in &self.inputs {
            check_id("inputs", i)?;
        }
        for &o in &self.outputs {
            check_id("outputs", o)?;
        }
        for l in &self.launches {
            for &a in &l.args {
                check_id(&format!("launch of `{}`", l.kernel), a)?;
            }
            if l.grid.contains(&0) || l.block.contains(&0) {
                return Err(ManifestError(format!(
                    "launch of `{}` has an empty grid or block",
                    l.kernel
                )));
            }
        }
        Ok(())
    }

    /// The element type of a buffer (checked by [`Manifest::check`]).
    pub fn dtype(&self, id: usize) -> Option<DType> {
        self.buffers.get(id)?.dtype.parse().ok()
    }
}

/// A manifest that cannot be used.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("launch manifest: {0}")]
pub struct ManifestError(pub String);

/// The launch manifest of a kernel IR module.
pub fn manifest_of(m: &crate::Module) -> Manifest {
    let id: HashMap<&str, usize> = m
        .buffers
        .iter()
        .enumerate()
        .map(|(i, b)| (b.name.as_str(), i))
        .collect();
    let kernels: HashMap<&str, &crate::Kernel> =
        m.kernels.iter().map(|k| (k.name.as_str(), k)).collect();
    Manifest {
        format: Manifest::FORMAT.to_string(),
        version: Manifest::VERSION,
        graph: m.name.clone(),
        flops: m.flops,
        min_bytes: m.min_bytes,
        buffers: m
            .buffers
            .iter()
            .map(|b| Buffer {
                name: b.name.clone(),
                dtype: b.dtype.name().to_string(),
                shape: b.shape.clone(),
                bytes: b.elements() * b.dtype.size_bytes(),
                kind: b.kind,
                tensor_map: b.tensor_map.as_ref().map(|t| TensorMap {
                    of: id[t.of.as_str()],
                    dims: t.dims.clone(),
                    strides: t.strides.clone(),
                    box_dims: t.box_dims.clone(),
                    swizzle: t.swizzle,
                }),
            })
            .collect(),
        inputs: m
            .buffers
            .iter()
            .enumerate()
            .filter(|(_, b)| b.kind == BufferKind::Input)
            .map(|(i, _)| i)
            .collect(),
        outputs: m.results.iter().map(|r| id[r.as_str()]).collect(),
        launches: m
            .launches
            .iter()
            .map(|l| {
                let k = kernels[l.kernel.as_str()];
                Launch {
                    kernel: l.kernel.clone(),
                    grid: k.grid,
                    block: k.block,
                    shared_bytes: crate::smem::dynamic_shared(k).map_or(0, |d| d.bytes as u32),
                    args: l.args.iter().map(|a| id[a.as_str()]).collect(),
                    cooperative: crate::cooperative(k),
                }
            })
            .collect(),
    }
}
