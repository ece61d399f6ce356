//! MLIR emission of irc's kernel IR, and its in-process lowering to PTX.
//!
//! MLIR is a second *emitter* of the kernel IR (`irc_kir`), not a second lowering:
//! the kernels, their parameters and the launch manifest are the CUDA backend's, so the PTX
//! this crate produces runs with the same [`Manifest`](irc_kir::Manifest).
//!
//! - [`emit_mlir`]: the module as text (`irc --emit=mlir`): a `gpu.container_module` with one
//!   `gpu.module` of `gpu.func` kernels (`arith`, `math`, `memref`, `scf`, `affine`, `vector`,
//!   `gpu`, `nvgpu`, `nvvm` and `llvm` intrinsic ops) and a host `func.func` that allocates the
//!   temporaries and calls `gpu.launch_func` in launch order. Every kernel's location is the graph ops it computes,
//!   with their source locations. The module is verified before it is printed.
//! - [`compile_to_ptx`]: the same module through the pass pipeline of [`pipeline`] (`unroll`
//!   loops fully unrolled, NVGPU/vector/SCF/GPU to NVVM with bare-pointer kernel parameters, the
//!   NVVM target, module to binary as PTX),
//!   run by MLIR's pass manager in this process. Math functions come from libdevice, which
//!   [`find_cuda_toolkit`] locates.
//!
//! `spec/mlir.md` says how each kernel IR construct maps to MLIR.
//!
//! API Boundary: no IO beyond reading environment variables and probing for libdevice in
//! [`find_cuda_toolkit`]; results are strings.

mod emit;

use irc_kir as kir;
use melior::{
    Context,
    dialect::DialectRegistry,
    ir::{
        Attribute, AttributeLike, Module,
        operation::{OperationLike, OperationPrintingFlags, WalkOrder, WalkResult},
    },
    pass::PassManager,
    utility::{
        parse_pass_pipeline, register_all_dialects, register_all_llvm_translations,
        register_all_passes,
    },
};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Once;

pub use emit::GPU_MODULE;

/// Why MLIR could not be emitted or lowered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MlirError {
    /// The kernel IR module does not verify (a bug upstream of this crate).
    #[error("internal error: {0}")]
    KernelIr(String),
    /// A kernel IR construct this emitter cannot express.
    #[error("cannot emit MLIR for kernel @{kernel}: {reason}")]
    Unsupported { kernel: String, reason: String },
    /// melior refused to build an operation (a bug in this crate).
    #[error("internal error: building `{op}` failed: {message}")]
    Build { op: String, message: String },
    /// The emitted module does not verify (a bug in this crate); MLIR's diagnostics, with the
    /// offending operation printed.
    #[error("internal error: the emitted MLIR module does not verify:\n{diagnostics}")]
    Verify { diagnostics: String },
    /// A bad option of the PTX pipeline (e.g. a toolkit path MLIR's option parser cannot carry).
    #[error("{0}")]
    Options(String),
    /// The pass pipeline failed; MLIR's diagnostics.
    #[error("the MLIR pass pipeline failed:\n{diagnostics}")]
    Pipeline { diagnostics: String },
    /// The PTX calls libdevice functions but no libdevice was linked.
    #[error(
        "the kernels call libdevice ({functions}) but no CUDA toolkit with \
         nvvm/libdevice/libdevice.10.bc was found; set IRC_CUDA_TOOLKIT to one (the \
         `nvidia-cuda-nvcc` wheel's `nvidia/cu13` directory is one)"
    )]
    NoLibdevice { functions: String },
}

/// Options of the PTX pipeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtxOptions {
    /// The NVVM chip, `sm_90a` by default.
    pub chip: String,
    /// PTX ISA features; `+ptx80` (PTX 8.0) loads on every driver from CUDA 12.0 on, the H100
    /// machines' CUDA 13.0 included.
    pub features: String,
    /// LLVM optimization level of the NVPTX backend.
    pub opt_level: u8,
    /// A CUDA toolkit root holding `nvvm/libdevice/libdevice.10.bc`, linked for math functions.
    pub toolkit: Option<PathBuf>,
}

impl PtxOptions {
    pub fn new(chip: &str) -> PtxOptions {
        PtxOptions {
            chip: chip.to_string(),
            features: "+ptx80".to_string(),
            opt_level: 3,
            toolkit: find_cuda_toolkit(),
        }
    }
}

impl Default for PtxOptions {
    fn default() -> PtxOptions {
        PtxOptions::new("sm_90a")
    }
}

/// The lowering stages, in order: each is a textual pass pipeline anchored where it runs.
pub fn pipeline(opts: &PtxOptions) -> Result<Vec<String>, MlirError> {
    let mut binary = "gpu-module-to-binary{format=isa".to_string();
    if let Some(tk) = &opts.toolkit {
        let tk = tk.to_string_lossy();
        if tk.contains(|c: char| c.is_whitespace() || "{},'\"".contains(c)) {
            return Err(MlirError::Options(format!(
                "the CUDA toolkit path `{tk}` contains a character MLIR's pass options cannot carry"
            )));
        }
        binary.push_str(&format!(" toolkit={tk}"));
    }
    binary.push('}');
    for (what, v) in [("chip", &opts.chip), ("features", &opts.features)] {
        if v.is_empty()
            || !v
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+_-".contains(c))
        {
            return Err(MlirError::Options(format!("bad NVVM {what} `{v}`")));
        }
    }
    // `affine-loop-unroll` fully unrolls innermost loops; nests of `unroll` loops need one run
    // per level. Only the kernel IR's `unroll` loops are `affine.for` (up to 128 iterations).
    let unroll = "affine-loop-unroll{unroll-factor=-1}";
    Ok(vec![
        // The kernel IR's `unroll` loops (`affine.for`), fully unrolled, then lowered.
        format!(
            "gpu.module(gpu.func({}),lower-affine)",
            [unroll; UNROLL_DEPTH].join(",")
        ),
        // Kernels: tensor-core and vector ops to NVVM/LLVM, structured control flow to
        // blocks, then everything else to the NVVM/LLVM dialects; memref kernel parameters become bare pointers (one `.param .u64` each).
        "gpu.module(convert-nvgpu-to-nvvm,convert-vector-to-llvm,convert-scf-to-cf,\
         convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=true},\
         canonicalize,cse,reconcile-unrealized-casts)"
            .to_string(),
        format!(
            "nvvm-attach-target{{chip={} features={} O={}}}",
            opts.chip, opts.features, opts.opt_level
        ),
        binary,
    ])
}

/// The deepest nest of `unroll` loops the pipeline unrolls completely.
const UNROLL_DEPTH: usize = 4;

static REGISTER_PASSES: Once = Once::new();

/// A context with every dialect and LLVM translation registered, and a handler collecting
/// diagnostics (instead of printing them to stderr).
fn context() -> (Context, Rc<RefCell<Vec<String>>>) {
    REGISTER_PASSES.call_once(register_all_passes);
    let registry = DialectRegistry::new();
    register_all_dialects(&registry);
    let ctx = Context::new();
    ctx.append_dialect_registry(&registry);
    ctx.load_all_available_dialects();
    register_all_llvm_translations(&ctx);
    let diags = Rc::new(RefCell::new(Vec::new()));
    let sink = diags.clone();
    ctx.attach_diagnostic_handler(move |d| {
        let mut text = format!("{}: {d}", d.location());
        for i in 0..d.note_count() {
            if let Ok(n) = d.note(i) {
                text.push_str(&format!("\n  note: {n}"));
            }
        }
        sink.borrow_mut().push(text);
        true
    });
    (ctx, diags)
}

fn build_verified<'c>(
    ctx: &'c Context,
    diags: &Rc<RefCell<Vec<String>>>,
    m: &kir::Module,
) -> Result<Module<'c>, MlirError> {
    let module = emit::build_module(ctx, m)?;
    verify(&module, diags)?;
    Ok(module)
}

/// MLIR's verifier on the whole module; its diagnostics (each with the offending operation
/// printed) on failure.
fn verify(module: &Module, diags: &Rc<RefCell<Vec<String>>>) -> Result<(), MlirError> {
    if module.as_operation().verify() {
        return Ok(());
    }
    let mut diagnostics = diags.borrow_mut().join("\n");
    if diagnostics.is_empty() {
        diagnostics = "(MLIR gave no diagnostic)".into();
    }
    Err(MlirError::Verify { diagnostics })
}

/// Printing flags of `--emit=mlir`: custom form with locations, so MLIR's round trip of the
/// text is the text itself.
fn print(module: &Module) -> Result<String, MlirError> {
    module
        .as_operation()
        .to_string_with_flags(OperationPrintingFlags::new().enable_debug_info(true, false))
        .map_err(|e| MlirError::Build {
            op: "module printing".into(),
            message: e.to_string(),
        })
}

/// The verified MLIR module of a kernel IR module, printed with locations.
pub fn emit_mlir(m: &kir::Module) -> Result<String, MlirError> {
    let (ctx, diags) = context();
    let module = build_verified(&ctx, &diags, m)?;
    print(&module)
}

/// PTX for `arch` (`sm_90a`, `sm_80`, ...) with the default options; the kernels' entry points
/// are named and parameterized as in the launch manifest (one `.u64` pointer per parameter).
pub fn compile_to_ptx(m: &kir::Module, arch: &str) -> Result<String, MlirError> {
    compile_to_ptx_with(m, &PtxOptions::new(arch))
}

/// [`compile_to_ptx`] with explicit options.
pub fn compile_to_ptx_with(m: &kir::Module, opts: &PtxOptions) -> Result<String, MlirError> {
    let stages = pipeline(opts)?;
    let (ctx, diags) = context();
    let mut module = build_verified(&ctx, &diags, m)?;
    // The kernels to the NVVM/LLVM dialects, then (after `extern_dynamic_shared`) to PTX.
    let (to_llvm, to_ptx) = stages.split_at(2);
    for part in [to_llvm, to_ptx] {
        let pm = PassManager::new(&ctx);
        let text = format!("builtin.module({})", part.join(","));
        parse_pass_pipeline(pm.as_operation_pass_manager(), &text)
            .map_err(|e| MlirError::Options(format!("bad pass pipeline `{text}`: {e}")))?;
        if pm.run(&mut module).is_err() {
            let mut diagnostics = diags.borrow_mut().join("\n");
            if diagnostics.is_empty() {
                diagnostics = "(MLIR gave no diagnostic)".into();
            }
            return Err(MlirError::Pipeline { diagnostics });
        }
        extern_dynamic_shared(&ctx, &module);
    }
    let ptx = binary_object(&module).ok_or_else(|| MlirError::Pipeline {
        diagnostics: "no gpu.binary with a PTX object after gpu-module-to-binary".into(),
    })?;
    let externs: Vec<&str> = ptx
        .lines()
        .filter_map(|l| l.strip_prefix(".extern .func"))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    if !externs.is_empty() {
        return Err(MlirError::NoLibdevice {
            functions: externs.join(", "),
        });
    }
    Ok(ptx)
}

/// Gives the dynamic shared memory global that `gpu.dynamic_shared_memory` lowers to
/// (`__dynamic_shmem__N`, an internal `[0 x i8]`) external linkage and 1024-byte alignment: as
/// an internal object of known size 0, LLVM's alias analysis may take a 16-byte access to it
/// and a store to it for different places (a 16-byte copy out of a staging tile then misses
/// the element stores just before it); as an external one of unknown size, it may not. The
/// alignment is what TMA's 128-byte-swizzled boxes need.
fn extern_dynamic_shared(ctx: &Context, module: &Module) {
    let (Some(external), Some(align)) = (
        Attribute::parse(ctx, "#llvm.linkage<external>"),
        Attribute::parse(ctx, "1024 : i64"),
    ) else {
        return;
    };
    module.as_operation().walk(WalkOrder::PreOrder, |op| {
        let name = op.name();
        if name.as_string_ref().as_str() == Ok("llvm.mlir.global")
            && let Ok(sym) = op.attribute("sym_name")
            && sym.to_string().contains("__dynamic_shmem__")
        {
            // SAFETY: sets attributes of a live op of the module, whose ownership the walk
            // does not take.
            unsafe {
                let raw = op.to_raw();
                for (key, value) in [("linkage", external), ("alignment", align)] {
                    let name = mlir_sys::MlirStringRef {
                        data: key.as_ptr() as *const _,
                        length: key.len(),
                    };
                    mlir_sys::mlirOperationSetInherentAttributeByName(raw, name, value.to_raw());
                }
            }
        }
        WalkResult::Advance
    });
}

/// The object (PTX text) of the module's `gpu.binary`.
fn binary_object(module: &Module) -> Option<String> {
    let mut found = None;
    module.as_operation().walk(WalkOrder::PreOrder, |op| {
        if op.name().as_string_ref().as_str() == Ok("gpu.binary")
            && let Ok(objects) = op.attribute("objects")
        {
            // SAFETY: FFI accessors on attributes of a live module; the object attribute is
            // checked before its string is read, and the string is copied out at once.
            unsafe {
                let first = mlir_sys::mlirArrayAttrGetElement(objects.to_raw(), 0);
                if mlir_sys::mlirAttributeIsAGPUObjectAttr(first) {
                    let s = mlir_sys::mlirGPUObjectAttrGetObject(first);
                    let bytes = std::slice::from_raw_parts(s.data as *const u8, s.length);
                    found = Some(String::from_utf8_lossy(bytes).into_owned());
                }
            }
            return WalkResult::Interrupt;
        }
        WalkResult::Advance
    });
    found
}

/// A CUDA toolkit root holding `nvvm/libdevice/libdevice.10.bc`: `IRC_CUDA_TOOLKIT`, else the
/// directory above `IRC_PTXAS`'s `bin/`, else `CUDA_HOME`/`CUDA_PATH`, else `/usr/local/cuda`,
/// else the `nvidia-cuda-nvcc` wheel in `.venv-cuda` of the current directory.
pub fn find_cuda_toolkit() -> Option<PathBuf> {
    let has_libdevice = |p: &Path| {
        p.join("nvvm/libdevice/libdevice.10.bc")
            .is_file()
            .then(|| p.to_path_buf())
    };
    let env = |k: &str| std::env::var_os(k).map(PathBuf::from);
    if let Some(p) = env("IRC_CUDA_TOOLKIT") {
        return has_libdevice(&p);
    }
    if let Some(p) = env("IRC_PTXAS")
        && let Some(root) = p.parent().and_then(Path::parent)
        && let Some(found) = has_libdevice(root)
    {
        return Some(found);
    }
    for k in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(found) = env(k).as_deref().and_then(has_libdevice) {
            return Some(found);
        }
    }
    if let Some(found) = has_libdevice(Path::new("/usr/local/cuda")) {
        return Some(found);
    }
    let lib = Path::new(".venv-cuda/lib");
    let mut pythons: Vec<PathBuf> = std::fs::read_dir(lib)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    pythons.sort();
    pythons
        .iter()
        .find_map(|p| has_libdevice(&p.join("site-packages/nvidia/cu13")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use melior::ir::{
        BlockLike, Location, attribute::IntegerAttribute, operation::OperationBuilder,
        r#type::IntegerType,
    };

    /// A module that does not verify is an error naming the op, printed, not a panic.
    #[test]
    fn failed_verification_prints_the_offending_op() {
        let (ctx, diags) = context();
        let loc = Location::new(&ctx, "bad.ir", 3, 5);
        let module = Module::new(loc);
        let i32t = IntegerType::new(&ctx, 32).into();
        let i64t = IntegerType::new(&ctx, 64).into();
        let a = module
            .body()
            .append_operation(melior::dialect::arith::constant(
                &ctx,
                IntegerAttribute::new(i32t, 1).into(),
                loc,
            ));
        let a = a.result(0).unwrap().into();
        // arith.addi with an i64 result from i32 operands.
        let bad = OperationBuilder::new("arith.addi", loc)
            .add_operands(&[a, a])
            .add_results(&[i64t])
            .build()
            .unwrap();
        module.body().append_operation(bad);
        match verify(&module, &diags) {
            Err(MlirError::Verify { diagnostics }) => {
                assert!(diagnostics.contains("bad.ir\":3:5"), "{diagnostics}");
                assert!(diagnostics.contains("arith.addi"), "{diagnostics}");
                assert!(
                    diagnostics.contains("see current operation"),
                    "{diagnostics}"
                );
            }
            other => panic!("expected a verification error, got {other:?}"),
        }
    }

    #[test]
    fn pipeline_rejects_options_it_cannot_carry() {
        let mut opts = PtxOptions::new("sm_90a");
        opts.toolkit = Some(PathBuf::from("/tmp/a b"));
        assert!(matches!(pipeline(&opts), Err(MlirError::Options(_))));
        opts.toolkit = None;
        opts.chip = "sm_90a}".into();
        assert!(matches!(pipeline(&opts), Err(MlirError::Options(_))));
        opts.chip = "sm_80".into();
        let stages = pipeline(&opts).unwrap();
        assert_eq!(stages.len(), 4);
        assert!(stages[2].contains("chip=sm_80 features=+ptx80"));
    }
}
