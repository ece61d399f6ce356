//! The GPU: a context on one device, modules loaded from PTX, a manifest's buffers and its
//! launch sequence.
//!
//! Buffers are plain `cuMemAlloc` allocations owned by [`Program`] and freed when it drops;
//! launches go straight to `cuLaunchKernel` (`cuLaunchCooperativeKernel` where the manifest
//! says so) on the context's stream with the buffers' device pointers as the kernels'
//! parameters, so a timed launch sequence carries no bookkeeping of the host's. Every copy and
//! fill goes on that same stream (a non-blocking one, which the legacy default stream of
//! `cuMemcpyHtoD` does not order against), so kernels see their inputs landed.

use crate::RuntimeError;
use crate::nvrtc::Ptx;
use cudarc::driver::sys::{self, CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, DriverError, result};
use irc_kir::{BufferKind, Manifest};
use serde::Serialize;
use std::ffi::c_void;
use std::sync::Arc;

/// What the runtime read off the device.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub sm_count: u32,
    pub l2_bytes: u64,
    pub total_memory_bytes: u64,
    /// The most dynamic shared memory one block may opt in to.
    pub max_shared_per_block_optin: u32,
}

/// A context on one GPU and a stream of its own.
pub struct Gpu {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    info: DeviceInfo,
}

pub(crate) fn driver(what: impl Into<String>) -> impl FnOnce(DriverError) -> RuntimeError {
    let what = what.into();
    move |e| RuntimeError::Driver {
        what,
        error: format!("{e:?}"),
    }
}

impl Gpu {
    /// Opens device `ordinal` (libcuda is loaded here; its absence or no device is an error).
    pub fn new(ordinal: usize) -> Result<Gpu, RuntimeError> {
        // SAFETY: only dlopens candidate names.
        if !unsafe { sys::is_culib_present() } {
            return Err(RuntimeError::NoDevice(
                "the CUDA driver library (libcuda.so) is not installed".into(),
            ));
        }
        let count = CudaContext::device_count().map_err(driver("cuDeviceGetCount"))?;
        if count <= 0 || ordinal >= count as usize {
            return Err(RuntimeError::NoDevice(format!(
                "device {ordinal} requested, {count} present"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(driver("creating a context"))?;
        let attr = |a| ctx.attribute(a).map_err(driver("cuDeviceGetAttribute"));
        let info = DeviceInfo {
            ordinal,
            name: ctx.name().map_err(driver("cuDeviceGetName"))?,
            compute_capability: ctx
                .compute_capability()
                .map_err(driver("compute capability"))?,
            sm_count: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            l2_bytes: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64,
            total_memory_bytes: ctx.total_mem().map_err(driver("cuDeviceTotalMem"))? as u64,
            max_shared_per_block_optin: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )? as u32,
        };
        // A stream of its own, not the legacy default stream: a CUDA graph can capture it.
        let stream = ctx.new_stream().map_err(driver("cuStreamCreate"))?;
        Ok(Gpu { ctx, stream, info })
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The architecture name of this device, `sm_90a` for compute capability 9.0 (the `a`
    /// features are what irc's Hopper kernels use), `sm_80` for 8.0.
    pub fn arch_name(&self) -> String {
        let (maj, min) = self.info.compute_capability;
        let suffix = if maj >= 9 { "a" } else { "" };
        format!("sm_{maj}{min}{suffix}")
    }

    /// A cooperative launch's blocks must all be resident at once: a clear error before any
    /// launch when this device holds fewer (the lowering sized the grid for the target's SM
    /// count, `irc_target::Target::sms`).
    fn check_resident(
        &self,
        l: &irc_kir::manifest::Launch,
        f: &CudaFunction,
    ) -> Result<(), RuntimeError> {
        let threads: u32 = l.block.iter().product();
        let mut per_sm: std::ffi::c_int = 0;
        self.bind()?;
        // SAFETY: the function is live in this context; the result is written to `per_sm`.
        unsafe {
            sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(
                &mut per_sm,
                f.cu_function(),
                threads as std::ffi::c_int,
                l.shared_bytes as usize,
            )
        }
        .result()
        .map_err(driver(format!("the occupancy of `{}`", l.kernel)))?;
        let blocks: u64 = l.grid.iter().map(|&g| u64::from(g)).product();
        let fits = per_sm.max(0) as u64 * u64::from(self.info.sm_count);
        if blocks > fits {
            return Err(RuntimeError::Launch(format!(
                "kernel `{}` is a cooperative launch of {blocks} blocks, all resident at once, but this device holds {fits} ({} SMs x {per_sm}): it was compiled for a GPU with more SMs",
                l.kernel, self.info.sm_count
            )));
        }
        Ok(())
    }

    /// Loads `ptx`, resolves every kernel the manifest launches and allocates its buffers.
    pub fn load(&self, ptx: &Ptx, manifest: &Manifest) -> Result<Program<'_>, RuntimeError> {
        manifest.check()?;
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx.text.clone()))
            .map_err(driver("cuModuleLoadData (PTX JIT)"))?;
        let mut functions: Vec<CudaFunction> = Vec::with_capacity(manifest.launches.len());
        for l in &manifest.launches {
            let f = module
                .load_function(&l.kernel)
                .map_err(driver(format!("kernel `{}` in the module", l.kernel)))?;
            if l.shared_bytes > 48 * 1024 {
                if l.shared_bytes > self.info.max_shared_per_block_optin {
                    return Err(RuntimeError::Launch(format!(
                        "kernel `{}` asks for {} bytes of dynamic shared memory; the device allows {}",
                        l.kernel, l.shared_bytes, self.info.max_shared_per_block_optin
                    )));
                }
                f.set_attribute(
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    l.shared_bytes as i32,
                )
                .map_err(driver(format!(
                    "raising `{}`'s shared memory limit",
                    l.kernel
                )))?;
            }
            if l.cooperative {
                self.check_resident(l, &f)?;
            }
            functions.push(f);
        }
        let mut buffers = Vec::with_capacity(manifest.buffers.len());
        for b in &manifest.buffers {
            buffers.push(DeviceBuffer::new(self, b.bytes.max(1) as usize, &b.name)?);
        }
        for (b, d) in manifest.buffers.iter().zip(&buffers) {
            if b.kind == BufferKind::Zeroed {
                d.fill(0)?;
            }
        }
        for b in manifest.buffers.iter().enumerate() {
            if let (id, Some(map)) = (b.0, &b.1.tensor_map) {
                let dtype = manifest.dtype(map.of).unwrap_or(irc_ir::DType::F32);
                let encoded = crate::tma::encode(map, dtype, buffers[map.of].ptr)?;
                // The buffer holds 128 bytes (checked by `Manifest::check`).
                buffers[id].upload(&encoded, &format!("copying tensor map `{}`", b.1.name))?;
            }
        }
        Ok(Program {
            gpu: self,
            manifest: manifest.clone(),
            functions,
            buffers,
        })
    }

    pub(crate) fn bind(&self) -> Result<(), RuntimeError> {
        self.ctx
            .bind_to_thread()
            .map_err(driver("binding the context"))
    }
}

/// One `cuMemAlloc` allocation, freed on drop.
pub(crate) struct DeviceBuffer<'g> {
    gpu: &'g Gpu,
    pub(crate) ptr: sys::CUdeviceptr,
    pub(crate) bytes: usize,
}

impl<'g> DeviceBuffer<'g> {
    pub(crate) fn new(gpu: &'g Gpu, bytes: usize, what: &str) -> Result<Self, RuntimeError> {
        gpu.bind()?;
        // SAFETY: the context is current; the pointer is freed once, on drop.
        let ptr = unsafe { result::malloc_sync(bytes) }
            .map_err(driver(format!("allocating {bytes} bytes for `{what}`")))?;
        Ok(DeviceBuffer { gpu, ptr, bytes })
    }

    /// Copies `bytes` (at most the buffer's size) to the start of the buffer, in order with the
    /// stream's work, and waits for the copy. Not `cuMemcpyHtoD`: that copy runs on the legacy
    /// default stream, which the context's non-blocking stream does not wait for, and from
    /// pageable memory it may return before its DMA lands: a kernel could read the buffer first
    /// (inputs seen half-written when several processes share the GPU).
    pub(crate) fn upload(&self, bytes: &[u8], what: &str) -> Result<(), RuntimeError> {
        assert!(bytes.len() <= self.bytes, "an upload past the buffer's end");
        if bytes.is_empty() {
            return Ok(());
        }
        self.gpu.bind()?;
        // SAFETY: `ptr` holds at least `bytes.len()` bytes; the stream belongs to the current
        // context; `bytes` outlives the copy, which the synchronization below completes.
        unsafe { result::memcpy_htod_async(self.ptr, bytes, self.gpu.stream.cu_stream()) }
            .map_err(driver(what))?;
        self.gpu.stream.synchronize().map_err(driver(what))
    }

    /// Copies the start of the buffer into `out` after the stream's earlier work, and waits.
    pub(crate) fn download(&self, out: &mut [u8], what: &str) -> Result<(), RuntimeError> {
        assert!(out.len() <= self.bytes, "a download past the buffer's end");
        if out.is_empty() {
            return Ok(());
        }
        self.gpu.bind()?;
        // SAFETY: as `upload`; `out` is not touched until the synchronization below.
        unsafe { result::memcpy_dtoh_async(out, self.ptr, self.gpu.stream.cu_stream()) }
            .map_err(driver(what))?;
        self.gpu.stream.synchronize().map_err(driver(what))
    }

    pub(crate) fn fill(&self, byte: u8) -> Result<(), RuntimeError> {
        // SAFETY: `ptr` holds `bytes` bytes; the stream belongs to the current context.
        unsafe { result::memset_d8_async(self.ptr, byte, self.bytes, self.gpu.stream.cu_stream()) }
            .map_err(driver("cuMemsetD8Async"))
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        if self.gpu.bind().is_ok() {
            // SAFETY: allocated by `new`, freed once; work using it was synchronized by its owner.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// A tensor's bytes on the host: little-endian elements, row-major (`i1` one byte each).
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub dtype: String,
    pub shape: Vec<u64>,
    pub bytes: Vec<u8>,
}

/// A loaded module with a manifest's buffers allocated: copy in, launch, copy out.
pub struct Program<'g> {
    gpu: &'g Gpu,
    manifest: Manifest,
    functions: Vec<CudaFunction>,
    buffers: Vec<DeviceBuffer<'g>>,
}

impl<'g> Program<'g> {
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    pub fn gpu(&self) -> &'g Gpu {
        self.gpu
    }

    /// Copies the graph's inputs in, in parameter order, checking dtype, shape and size.
    pub fn write_inputs(&mut self, inputs: &[HostTensor]) -> Result<(), RuntimeError> {
        let m = &self.manifest;
        if inputs.len() != m.inputs.len() {
            return Err(RuntimeError::Input(format!(
                "{} inputs given, graph @{} takes {}",
                inputs.len(),
                m.graph,
                m.inputs.len()
            )));
        }
        for (i, (t, &id)) in inputs.iter().zip(&m.inputs).enumerate() {
            let b = &m.buffers[id];
            if t.dtype != b.dtype || t.shape != b.shape || t.bytes.len() as u64 != b.bytes {
                return Err(RuntimeError::Input(format!(
                    "input {i} (`{}`): got {} {:?} ({} bytes), the manifest wants {} {:?} ({} bytes)",
                    b.name,
                    t.dtype,
                    t.shape,
                    t.bytes.len(),
                    b.dtype,
                    b.shape,
                    b.bytes
                )));
            }
        }
        for (t, &id) in inputs.iter().zip(&m.inputs) {
            // The buffer holds `t.bytes.len()` bytes (checked above).
            let what = format!("copying input `{}` to the device", m.buffers[id].name);
            self.buffers[id].upload(&t.bytes, &what)?;
        }
        Ok(())
    }

    /// Fills every output and temporary buffer that is not also an input with 0xFF bytes (NaN
    /// for every float type), so an element no kernel writes shows up in the results. Zeroed
    /// buffers (arrival counters) keep their zeros.
    pub fn poison_outputs(&self) -> Result<(), RuntimeError> {
        self.gpu.bind()?;
        for (id, b) in self.manifest.buffers.iter().enumerate() {
            if !matches!(b.kind, BufferKind::Input | BufferKind::Zeroed)
                && b.tensor_map.is_none()
                && !self.manifest.inputs.contains(&id)
            {
                self.buffers[id].fill(0xFF)?;
            }
        }
        self.sync()
    }

    /// Enqueues the whole launch sequence on the stream (no synchronization).
    pub fn enqueue(&self) -> Result<(), RuntimeError> {
        self.gpu.bind()?;
        let stream = self.gpu.stream.cu_stream();
        for (l, f) in self.manifest.launches.iter().zip(&self.functions) {
            let mut ptrs: Vec<sys::CUdeviceptr> =
                l.args.iter().map(|&a| self.buffers[a].ptr).collect();
            let mut params: Vec<*mut c_void> = ptrs
                .iter_mut()
                .map(|p| p as *mut sys::CUdeviceptr as *mut c_void)
                .collect();
            // SAFETY: the function is live in this context; each parameter points at a device
            // pointer that outlives the call (cuLaunchKernel copies parameters at enqueue).
            // A cooperative launch fails (rather than hangs) when its blocks cannot all be
            // resident at once.
            let launch = if l.cooperative {
                result::launch_cooperative_kernel
            } else {
                result::launch_kernel
            };
            unsafe {
                launch(
                    f.cu_function(),
                    (l.grid[0], l.grid[1], l.grid[2]),
                    (l.block[0], l.block[1], l.block[2]),
                    l.shared_bytes,
                    stream,
                    &mut params,
                )
            }
            .map_err(driver(format!(
                "launching `{}` grid {:?} block {:?} shared {}{}",
                l.kernel,
                l.grid,
                l.block,
                l.shared_bytes,
                if l.cooperative {
                    " cooperatively (every block resident at once)"
                } else {
                    ""
                }
            )))?;
        }
        Ok(())
    }

    /// The launch sequence captured into an instantiated CUDA graph (the stream's capture).
    pub fn capture(&self) -> Result<cudarc::driver::CudaGraph, RuntimeError> {
        let stream = &self.gpu.stream;
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(driver("cuStreamBeginCapture"))?;
        let enqueued = self.enqueue();
        let graph = stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .map_err(driver("cuStreamEndCapture"));
        enqueued?;
        graph?.ok_or_else(|| RuntimeError::Input("the captured launch sequence is empty".into()))
    }

    /// Waits for the stream; a kernel fault surfaces here.
    pub fn sync(&self) -> Result<(), RuntimeError> {
        self.gpu
            .stream
            .synchronize()
            .map_err(driver("synchronizing (a kernel may have faulted)"))
    }

    /// Runs the launch sequence once and waits for it.
    pub fn launch(&self) -> Result<(), RuntimeError> {
        self.enqueue()?;
        self.sync()
    }

    /// Copies the graph's results out, in `return` order.
    pub fn read_outputs(&self) -> Result<Vec<HostTensor>, RuntimeError> {
        let m = &self.manifest;
        let mut out = Vec::with_capacity(m.outputs.len());
        for &id in &m.outputs {
            let b = &m.buffers[id];
            let mut bytes = vec![0u8; b.bytes as usize];
            let what = format!("copying output `{}` to the host", b.name);
            self.buffers[id].download(&mut bytes, &what)?;
            out.push(HostTensor {
                dtype: b.dtype.clone(),
                shape: b.shape.clone(),
                bytes,
            });
        }
        Ok(out)
    }

    /// Copies inputs in, poisons the outputs, runs once and copies the results out.
    pub fn run(&mut self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, RuntimeError> {
        self.write_inputs(inputs)?;
        self.poison_outputs()?;
        self.launch()?;
        self.read_outputs()
    }
}
