//! Kernel IR to an MLIR module, built op by op with melior.
//!
//! The module is `gpu.container_module`: one `gpu.module @kernels` holding a `gpu.func` per kernel
//! IR kernel (plus `memref.global`s for constants, shared tensors and block-reduction scratch),
//! and a host `func.func` named after the graph that allocates the temporaries and calls
//! `gpu.launch_func` in the order of the launch manifest. `spec/mlir.md` states how each kernel
//! IR construct maps; `irc-emit-cuda` is the reference semantics this file follows.
//!
//! Every memref index is [`kir::offset_expr`] of the tensor's layout: this file writes no index
//! arithmetic of its own.
//!
//! # Values and blocks
//!
//! melior ties a `Value` to a borrow of the block that defines it, which makes a recursive
//! emitter over nested regions impossible to express with scoped borrows. The emitter therefore
//! keeps raw handles (`MlirValue`, `MlirBlock`) and turns them back into melior values at use.
//! This is sound because every block is appended to a region before anything is emitted into
//! it, every region is moved into an operation that is appended to its parent block, and the
//! whole tree is owned by the module, which outlives the emitter.

use crate::MlirError;
use irc_ir::DType;
use irc_kir::manifest::BufferKind;
use irc_kir::{
    self as kir, Builtin, Expr, Func, IdxOp, IndexWidth, Intrinsic, ReduceOp, Space, Stmt,
    TensorDecl, Ty,
};
use melior::{
    Context,
    dialect::{
        arith::{self, CmpfPredicate, CmpiPredicate},
        func, memref, scf,
    },
    ir::{
        Attribute, AttributeLike, Block, BlockLike, BlockRef, Identifier, Location, Module,
        Operation, OperationRef, Region, RegionLike, Type, TypeLike, Value, ValueLike,
        attribute::{
            ArrayAttribute, DenseElementsAttribute, DenseI32ArrayAttribute, DenseI64ArrayAttribute,
            DictionaryAttribute, FloatAttribute, IntegerAttribute, StringAttribute, TypeAttribute,
        },
        operation::{OperationBuilder, OperationMutLike},
        r#type::{FunctionType, IntegerType, MemRefType, RankedTensorType},
    },
};
use mlir_sys::{MlirBlock, MlirValue};
use std::collections::HashMap;

mod fragments;
mod hopper;
mod kernel;
mod reduce;
mod scalar;

/// The name of the `gpu.module` every kernel lives in.
pub const GPU_MODULE: &str = "kernels";

/// NVVM's address space for shared (workgroup) memory.
const SHARED_SPACE: i64 = 3;

/// `unroll` loops of at most this many iterations are unrolled (`affine.for`).
const MAX_UNROLL: i64 = 128;

/// Builds the MLIR module for a kernel IR module. The caller verifies it.
pub fn build_module<'c>(ctx: &'c Context, m: &kir::Module) -> Result<Module<'c>, MlirError> {
    kir::verify_module(m).map_err(|e| MlirError::KernelIr(e.to_string()))?;
    let unknown = Location::unknown(ctx);
    let graph_loc = Location::name(ctx, &format!("graph @{}", m.name), unknown);
    let module = Module::new(graph_loc);
    let e = Emitter { ctx };
    // `gpu.container_module` on the builtin module.
    let mut module = module;
    module
        .as_operation_mut()
        .set_attribute("gpu.container_module", Attribute::unit(ctx));

    let param_sizes = param_sizes(m)?;

    // gpu.module @kernels { globals; gpu.func ... }
    let gm_region = Region::new();
    let gm_block = gm_region.append_block(Block::new(&[])).to_raw();
    let gpu_module = OperationBuilder::new("gpu.module", graph_loc)
        .add_attributes(&[(
            Identifier::new(ctx, "sym_name"),
            StringAttribute::new(ctx, GPU_MODULE).into(),
        )])
        .add_regions([gm_region])
        .build()
        .map_err(|err| build_err("gpu.module", err))?;
    module.body().append_operation(gpu_module);

    for c in &m.constants {
        let storage = const_storage(c.dtype);
        let st = e.elem_type(storage);
        let n = c.values.len().max(1);
        let mut vals: Vec<Attribute> = c
            .values
            .iter()
            .map(|&v| e.scalar_attr(storage, v))
            .collect();
        if vals.is_empty() {
            vals.push(e.scalar_attr(storage, 0.0));
        }
        let tensor_ty = RankedTensorType::new(&[n as u64], st, None);
        let dense = DenseElementsAttribute::new(tensor_ty.into(), &vals)
            .map_err(|err| build_err("dense constant", err))?;
        let op = memref::global(
            ctx,
            &const_symbol(&c.name),
            Some("private"),
            MemRefType::new(st, &[n as i64], None, None),
            Some(dense.into()),
            true,
            None,
            graph_loc,
        );
        e.append(gm_block, op);
    }

    let mut reduce_types: Vec<DType> = Vec::new();
    for k in &m.kernels {
        collect_reduce_types(&k.body, &mut reduce_types);
    }
    // Shared globals 16-byte aligned: LLVM merges adjacent scalar accesses to them into
    // 16-byte vector ones (the block reduction's 32 partials), which fault at `ld.shared.v4`
    // where ptxas places a 4-aligned global off a 16-byte boundary (beside another shared
    // global: a cooperative split kernel's arrival slot).
    let align16 = || IntegerAttribute::new(IntegerType::new(ctx, 64).into(), 16);
    for &d in &reduce_types {
        let op = memref::global(
            ctx,
            &reduce_symbol(d),
            Some("private"),
            e.shared_memref(d, 32),
            None,
            false,
            Some(align16()),
            graph_loc,
        );
        e.append(gm_block, op);
    }

    for k in &m.kernels {
        let kloc = kernel_location(ctx, k);
        // Dynamic shared memory needs no globals (`kir::smem`).
        let dynamic = kir::dynamic_shared(k).is_some();
        for t in &k.tensors {
            if t.space == Space::Shared && !dynamic {
                let size = cosize(k, t)?;
                let op = memref::global(
                    ctx,
                    &shared_symbol(k, t),
                    Some("private"),
                    e.shared_memref(t.dtype, size),
                    None,
                    false,
                    Some(align16()),
                    kloc,
                );
                e.append(gm_block, op);
            }
        }
        let sizes = &param_sizes[k.name.as_str()];
        let func = KernelEmitter::emit(ctx, m, k, sizes, kloc)?;
        e.append(gm_block, func);
    }

    e.host_function(m, module.body().to_raw(), graph_loc)?;
    Ok(module)
}

/// Element counts of each kernel parameter's memref: the buffer bound to it (a kernel launched
/// with buffers of different sizes for one parameter cannot have one static memref type).
fn param_sizes(m: &kir::Module) -> Result<HashMap<&str, Vec<i64>>, MlirError> {
    let buffers: HashMap<&str, &kir::BufferDecl> =
        m.buffers.iter().map(|b| (b.name.as_str(), b)).collect();
    let mut out = HashMap::new();
    for k in &m.kernels {
        let mut sizes: Vec<Option<i64>> = vec![None; k.params.len()];
        for l in m.launches.iter().filter(|l| l.kernel == k.name) {
            for (i, a) in l.args.iter().enumerate() {
                let n = buffers[a.as_str()].elements() as i64;
                match sizes[i] {
                    Some(s) if s != n => {
                        return Err(MlirError::Unsupported {
                            kernel: k.name.clone(),
                            reason: format!(
                                "parameter %{} is bound to buffers of {s} and {n} elements",
                                k.params[i].name
                            ),
                        });
                    }
                    _ => sizes[i] = Some(n),
                }
            }
        }
        let mut resolved = Vec::new();
        for (i, p) in k.params.iter().enumerate() {
            let n = match sizes[i] {
                Some(n) => n,
                // Never launched: as large as the tensors viewing it reach.
                None => {
                    let mut n = 1;
                    for t in &k.tensors {
                        if t.space == Space::Global(p.name.clone()) {
                            n = n.max(cosize(k, t)?);
                        }
                    }
                    n
                }
            };
            resolved.push(n);
        }
        out.insert(k.name.as_str(), resolved);
    }
    Ok(out)
}

fn cosize(k: &kir::Kernel, t: &TensorDecl) -> Result<i64, MlirError> {
    t.layout
        .cosize()
        .map(|c| c.max(1))
        .map_err(|err| MlirError::Unsupported {
            kernel: k.name.clone(),
            reason: format!("tensor %{}: {err}", t.name),
        })
}

fn collect_reduce_types(body: &[Stmt], into: &mut Vec<DType>) {
    for s in body {
        match s {
            Stmt::BlockReduce {
                ty: Ty::Elem(d), ..
            } if !into.contains(d) => into.push(*d),
            Stmt::For { body, .. } => collect_reduce_types(body, into),
            Stmt::If { body, orelse, .. } => {
                collect_reduce_types(body, into);
                collect_reduce_types(orelse, into);
            }
            _ => {}
        }
    }
}

/// The dtype a constant array is stored as (the CUDA backend's `__device__` arrays): 64-bit
/// floats as `f64`, other floats as `f32`, integers and `i1` as `i64`.
fn const_storage(d: DType) -> DType {
    match d {
        DType::F64 => DType::F64,
        d if d.is_float() => DType::F32,
        _ => DType::I64,
    }
}

fn const_symbol(name: &str) -> String {
    format!("c_{name}")
}

fn shared_symbol(k: &kir::Kernel, t: &TensorDecl) -> String {
    format!("{}_{}", k.name, t.name)
}

fn reduce_symbol(d: DType) -> String {
    format!("irc_reduce_{}", d.name())
}

/// `loc(fused["%s = matmul %q, %kt"("attention.ir":5:3), ...])`: the graph ops a kernel computes.
fn kernel_location<'c>(ctx: &'c Context, k: &kir::Kernel) -> Location<'c> {
    let locs: Vec<Location> = k
        .origins
        .iter()
        .map(|o| {
            let child = file_line_col(ctx, &o.loc).unwrap_or_else(|| Location::unknown(ctx));
            Location::name(ctx, &o.op.replace('\n', " "), child)
        })
        .collect();
    match locs.len() {
        0 => Location::name(ctx, &format!("kernel @{}", k.name), Location::unknown(ctx)),
        1 => locs[0],
        _ => Location::fused(ctx, &locs, Attribute::unit(ctx)),
    }
}

/// `file:line:col` as a location.
fn file_line_col<'c>(ctx: &'c Context, loc: &str) -> Option<Location<'c>> {
    let mut parts = loc.rsplitn(3, ':');
    let col = parts.next()?.parse().ok()?;
    let line = parts.next()?.parse().ok()?;
    let file = parts.next()?;
    Some(Location::new(ctx, file, line, col))
}

fn build_err(op: &str, err: melior::Error) -> MlirError {
    MlirError::Build {
        op: op.to_string(),
        message: err.to_string(),
    }
}

/// Context-wide helpers shared by the module, kernel and host emitters.
#[derive(Clone, Copy)]
struct Emitter<'c> {
    ctx: &'c Context,
}

impl<'c> Emitter<'c> {
    fn id(&self, name: &str) -> Identifier<'c> {
        Identifier::new(self.ctx, name)
    }

    /// The MLIR type of a value of `d` in registers.
    fn elem_type(&self, d: DType) -> Type<'c> {
        match d {
            DType::F16 => Type::float16(self.ctx),
            DType::BF16 => Type::bfloat16(self.ctx),
            DType::F32 => Type::float32(self.ctx),
            DType::F64 => Type::float64(self.ctx),
            DType::I32 => IntegerType::new(self.ctx, 32).into(),
            DType::I64 => IntegerType::new(self.ctx, 64).into(),
            DType::I1 => IntegerType::new(self.ctx, 1).into(),
        }
    }

    /// The element type in global memory: `i1` is a byte.
    fn storage_type(&self, d: DType) -> Type<'c> {
        if d == DType::I1 {
            IntegerType::new(self.ctx, 8).into()
        } else {
            self.elem_type(d)
        }
    }

    fn global_memref(&self, d: DType, n: i64) -> MemRefType<'c> {
        MemRefType::new(self.storage_type(d), &[n], None, None)
    }

    fn shared_memref(&self, d: DType, n: i64) -> MemRefType<'c> {
        let space = IntegerAttribute::new(IntegerType::new(self.ctx, 64).into(), SHARED_SPACE);
        MemRefType::new(self.elem_type(d), &[n], None, Some(space.into()))
    }

    /// A typed constant attribute of `d` holding `v` (already exact in `d`).
    fn scalar_attr(&self, d: DType, v: f64) -> Attribute<'c> {
        let t = self.elem_type(d);
        match d {
            DType::F16 | DType::BF16 | DType::F32 | DType::F64 => {
                FloatAttribute::new(self.ctx, t, v).into()
            }
            DType::I1 => IntegerAttribute::new(t, i64::from(v != 0.0)).into(),
            _ => IntegerAttribute::new(t, v as i64).into(),
        }
    }

    fn append(&self, block: MlirBlock, op: Operation<'c>) -> OperationRef<'c, 'c> {
        // SAFETY: see the module doc: `block` is alive and owned by the module being built.
        let b: BlockRef<'c, 'c> = unsafe { BlockRef::from_raw(block) };
        b.append_operation(op)
    }

    fn host_function(
        &self,
        m: &kir::Module,
        module_block: MlirBlock,
        loc: Location<'c>,
    ) -> Result<(), MlirError> {
        let ctx = self.ctx;
        let args: Vec<&kir::BufferDecl> = m
            .buffers
            .iter()
            .filter(|b| !matches!(b.kind, BufferKind::Temp | BufferKind::Zeroed))
            .collect();
        let ty_of = |b: &kir::BufferDecl| self.global_memref(b.dtype, b.elements() as i64);
        let arg_types: Vec<Type> = args.iter().map(|b| ty_of(b).into()).collect();
        let arg_locs: Vec<(Type, Location)> = args
            .iter()
            .zip(&arg_types)
            .map(|(b, &t)| (t, Location::name(ctx, &format!("%{}", b.name), loc)))
            .collect();
        let region = Region::new();
        let body = region.append_block(Block::new(&arg_locs)).to_raw();
        // SAFETY: as in `append`.
        let body_ref: BlockRef<'c, 'c> = unsafe { BlockRef::from_raw(body) };
        let mut bufs: HashMap<&str, MlirValue> = HashMap::new();
        for (i, b) in args.iter().enumerate() {
            let v = body_ref
                .argument(i)
                .map_err(|err| build_err("func.func", err))?;
            bufs.insert(b.name.as_str(), v.to_raw());
        }
        let mut temps = Vec::new();
        let temp_kinds =
            |b: &&kir::BufferDecl| matches!(b.kind, BufferKind::Temp | BufferKind::Zeroed);
        for b in m.buffers.iter().filter(temp_kinds) {
            let bloc = Location::name(ctx, &format!("%{}", b.name), loc);
            let op = OperationBuilder::new("gpu.alloc", bloc)
                .add_attributes(&[(
                    self.id("operandSegmentSizes"),
                    DenseI32ArrayAttribute::new(ctx, &[0, 0, 0]).into(),
                )])
                .add_results(&[ty_of(b).into()])
                .build()
                .map_err(|err| build_err("gpu.alloc", err))?;
            let v = self
                .append(body, op)
                .result(0)
                .map_err(|err| build_err("gpu.alloc", err))?;
            if b.kind == BufferKind::Zeroed {
                // Zero-filled once, before the first launch (`BufferKind::Zeroed`).
                let zero = arith::constant(ctx, self.scalar_attr(b.dtype, 0.0), bloc);
                let z = self
                    .append(body, zero)
                    .result(0)
                    .map_err(|err| build_err("arith.constant", err))?;
                let op = OperationBuilder::new("gpu.memset", bloc)
                    .add_operands(&[v.into(), z.into()])
                    .build()
                    .map_err(|err| build_err("gpu.memset", err))?;
                self.append(body, op);
            }
            bufs.insert(b.name.as_str(), v.to_raw());
            temps.push((v.to_raw(), bloc));
        }
        let index = Type::index(ctx);
        let kernels: HashMap<&str, &kir::Kernel> =
            m.kernels.iter().map(|k| (k.name.as_str(), k)).collect();
        let mut consts: HashMap<u32, MlirValue> = HashMap::new();
        for l in &m.launches {
            let k = kernels[l.kernel.as_str()];
            let kloc = kernel_location(ctx, k);
            let mut dims = Vec::new();
            for &n in k.grid.iter().chain(k.block.iter()) {
                let v = match consts.get(&n) {
                    Some(&v) => v,
                    None => {
                        let op = arith::constant(
                            ctx,
                            IntegerAttribute::new(index, i64::from(n)).into(),
                            loc,
                        );
                        let v = self
                            .append(body, op)
                            .result(0)
                            .map_err(|err| build_err("arith.constant", err))?
                            .to_raw();
                        consts.insert(n, v);
                        v
                    }
                };
                dims.push(v);
            }
            let mut operands: Vec<Value> = dims
                .iter()
                // SAFETY: as in the module doc.
                .map(|&v| unsafe { Value::from_raw(v) })
                .collect();
            // Dynamic shared memory, in bytes (`kir::smem`).
            let dynamic = kir::dynamic_shared(k).map(|d| d.bytes);
            if let Some(bytes) = dynamic {
                let op = arith::constant(
                    ctx,
                    IntegerAttribute::new(IntegerType::new(ctx, 32).into(), bytes as i64).into(),
                    loc,
                );
                let v = self
                    .append(body, op)
                    .result(0)
                    .map_err(|err| build_err("arith.constant", err))?;
                operands.push(v.into());
            }
            // Each host buffer has the type of the parameter it is bound to (`param_sizes`).
            for a in &l.args {
                // SAFETY: as in the module doc.
                operands.push(unsafe { Value::from_raw(bufs[a.as_str()]) });
            }
            let kernel_ref = nested_symbol_ref(ctx, GPU_MODULE, &k.name);
            let n_args = l.args.len() as i32;
            let op = OperationBuilder::new("gpu.launch_func", kloc)
                .add_operands(&operands)
                .add_attributes(&[
                    (self.id("kernel"), kernel_ref),
                    (
                        self.id("operandSegmentSizes"),
                        DenseI32ArrayAttribute::new(
                            ctx,
                            &[
                                0,
                                1,
                                1,
                                1,
                                1,
                                1,
                                1,
                                0,
                                0,
                                0,
                                i32::from(dynamic.is_some()),
                                n_args,
                                0,
                            ],
                        )
                        .into(),
                    ),
                ])
                .build()
                .map_err(|err| build_err("gpu.launch_func", err))?;
            self.append(body, op);
        }
        for (v, bloc) in temps {
            let op = OperationBuilder::new("gpu.dealloc", bloc)
                // SAFETY: as in the module doc.
                .add_operands(&[unsafe { Value::from_raw(v) }])
                .build()
                .map_err(|err| build_err("gpu.dealloc", err))?;
            self.append(body, op);
        }
        self.append(body, func::r#return(&[], loc));
        let func_ty = FunctionType::new(ctx, &arg_types, &[]);
        let f = func::func(
            ctx,
            StringAttribute::new(ctx, &m.name),
            TypeAttribute::new(func_ty.into()),
            region,
            &[],
            loc,
        );
        self.append(module_block, f);
        Ok(())
    }
}

/// `@outer::@inner`.
fn nested_symbol_ref<'c>(ctx: &'c Context, outer: &str, inner: &str) -> Attribute<'c> {
    let inner_ref = melior::ir::attribute::FlatSymbolRefAttribute::new(ctx, inner);
    let refs = [inner_ref.to_raw()];
    let outer = melior::StringRef::new(outer);
    // SAFETY: plain FFI constructor of a uniqued attribute in `ctx`; `refs` outlives the call.
    unsafe {
        Attribute::from_raw(mlir_sys::mlirSymbolRefAttrGet(
            ctx.to_raw(),
            outer.to_raw(),
            refs.len() as isize,
            refs.as_ptr(),
        ))
    }
}

/// How a kernel IR scalar variable is held.
#[derive(Clone, Copy)]
enum Binding {
    /// An SSA value (`%v : ty = ...`, loop variables, block reductions).
    Value(MlirValue, Ty),
    /// A mutable scalar: a one-element `memref.alloca` in the entry block.
    Mutable(MlirValue, Ty),
}

struct TensorInfo<'k> {
    decl: &'k TensorDecl,
    memref: MlirValue,
}

struct KernelEmitter<'c, 'k> {
    e: Emitter<'c>,
    k: &'k kir::Kernel,
    loc: Location<'c>,
    /// The entry block: allocas, shared-memory views, thread coordinates and constants go at its
    /// top (before `prologue_len` ops), where they dominate the whole body.
    entry: MlirBlock,
    prologue_len: usize,
    /// Where the next op goes.
    block: MlirBlock,
    vars: HashMap<String, Binding>,
    tensors: HashMap<&'k str, TensorInfo<'k>>,
    /// Constants and thread coordinates already in the prologue.
    cache: HashMap<CacheKey, MlirValue>,
    /// The packed `a` registers of the coming `wgmma.rs` statements whose `a` is f32,
    /// computed before their `wgmma.fence` (`prepack`), in order.
    prepacked: std::collections::VecDeque<Vec<MlirValue>>,
    /// The accumulators each `wgmma.wait_group` completes, and those idle when it starts.
    fences: kir::WaitFences,
}

#[derive(Clone, PartialEq, Eq, Hash)]
enum CacheKey {
    Int(&'static str, i64),
    Float(&'static str, u64),
    Sreg(&'static str),
    /// A coordinate widened to a 64-bit index.
    SregIdx(&'static str),
    Global(String),
}

type R<T> = Result<T, MlirError>;

fn collect_mutables<'k>(body: &'k [Stmt], into: &mut Vec<(&'k str, Ty)>) {
    for s in body {
        match s {
            Stmt::Var { var, ty, .. } => into.push((var.as_str(), *ty)),
            Stmt::For { body, .. } => collect_mutables(body, into),
            Stmt::If { body, orelse, .. } => {
                collect_mutables(body, into);
                collect_mutables(orelse, into);
            }
            _ => {}
        }
    }
}
