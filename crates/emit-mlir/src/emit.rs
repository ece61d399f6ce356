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

/// The name of the `gpu.module` every kernel lives in.
pub const GPU_MODULE: &str = "kernels";

/// NVVM's address space for shared (workgroup) memory.
const SHARED_SPACE: i64 = 3;

/// `unroll` loops of at most this many iterations are unrolled (`affine.for`).
const MAX_UNROLL: i64 = 64;

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
    for &d in &reduce_types {
        let op = memref::global(
            ctx,
            &reduce_symbol(d),
            Some("private"),
            e.shared_memref(d, 32),
            None,
            false,
            None,
            graph_loc,
        );
        e.append(gm_block, op);
    }

    for k in &m.kernels {
        let kloc = kernel_location(ctx, k);
        for t in &k.tensors {
            if t.space == Space::Shared {
                let size = cosize(k, t)?;
                let op = memref::global(
                    ctx,
                    &shared_symbol(k, t),
                    Some("private"),
                    e.shared_memref(t.dtype, size),
                    None,
                    false,
                    None,
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
            .filter(|b| b.kind != BufferKind::Temp)
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
        for b in m.buffers.iter().filter(|b| b.kind == BufferKind::Temp) {
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
                            &[0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, n_args, 0],
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

impl<'c, 'k> KernelEmitter<'c, 'k> {
    fn emit(
        ctx: &'c Context,
        m: &'k kir::Module,
        k: &'k kir::Kernel,
        sizes: &[i64],
        loc: Location<'c>,
    ) -> R<Operation<'c>> {
        let e = Emitter { ctx };
        let param_types: Vec<Type> = k
            .params
            .iter()
            .zip(sizes)
            .map(|(p, &n)| e.global_memref(p.dtype, n).into())
            .collect();
        let region = Region::new();
        let args: Vec<(Type, Location)> = param_types
            .iter()
            .zip(&k.params)
            .map(|(&t, p)| (t, Location::name(ctx, &format!("%{}", p.name), loc)))
            .collect();
        let entry = region.append_block(Block::new(&args)).to_raw();
        let mut ke = KernelEmitter {
            e,
            k,
            loc,
            entry,
            prologue_len: 0,
            block: entry,
            vars: HashMap::new(),
            tensors: HashMap::new(),
            cache: HashMap::new(),
        };
        // SAFETY: as in the module doc.
        let entry_ref: BlockRef<'c, 'c> = unsafe { BlockRef::from_raw(entry) };
        let params: HashMap<&str, MlirValue> = k
            .params
            .iter()
            .enumerate()
            .map(|(i, p)| {
                entry_ref
                    .argument(i)
                    .map(|a| (p.name.as_str(), a.to_raw()))
                    .map_err(|err| build_err("gpu.func", err))
            })
            .collect::<R<_>>()?;
        for t in &k.tensors {
            let memref = match &t.space {
                // Views share their base's storage: set after every base is.
                Space::View(_) => continue,
                Space::Global(p) => params[p.as_str()],
                Space::Const(c) => {
                    let storage = const_storage(t.dtype);
                    let n = m
                        .constants
                        .iter()
                        .find(|x| &x.name == c)
                        .map_or(1, |x| x.values.len().max(1)) as i64;
                    let ty = MemRefType::new(e.elem_type(storage), &[n], None, None);
                    ke.get_global(&const_symbol(c), ty)?
                }
                Space::Shared => {
                    let ty = e.shared_memref(t.dtype, cosize(k, t)?);
                    ke.get_global(&shared_symbol(k, t), ty)?
                }
                Space::Registers => {
                    let ty = MemRefType::new(e.elem_type(t.dtype), &[cosize(k, t)?], None, None);
                    ke.alloca(ty)?
                }
            };
            ke.tensors
                .insert(t.name.as_str(), TensorInfo { decl: t, memref });
        }
        for t in &k.tensors {
            if let Space::View(base) = &t.space {
                let Some(b) = ke.tensors.get(base.as_str()) else {
                    return Err(ke.unsupported(format!("view %{} of undefined %{base}", t.name)));
                };
                let memref = b.memref;
                ke.tensors
                    .insert(t.name.as_str(), TensorInfo { decl: t, memref });
            }
        }
        let mut mutables = Vec::new();
        collect_mutables(&k.body, &mut mutables);
        for (v, ty) in mutables {
            let t = ke.ty(ty);
            let a = ke.alloca(MemRefType::new(t, &[1], None, None))?;
            ke.vars.insert(v.to_string(), Binding::Mutable(a, ty));
        }
        ke.block(&k.body)?;
        ke.push0(
            OperationBuilder::new("gpu.return", loc).build(),
            "gpu.return",
        )?;

        let written = irc_kir::written_tensors(&k.body);
        let arg_attrs: Vec<Attribute> = k
            .params
            .iter()
            .map(|p| {
                let stored = k.tensors.iter().any(|t| {
                    t.space == Space::Global(p.name.clone()) && written.contains(t.name.as_str())
                });
                let mut attrs = vec![(e.id("llvm.noalias"), Attribute::unit(ctx))];
                if !stored {
                    attrs.push((e.id("llvm.readonly"), Attribute::unit(ctx)));
                }
                DictionaryAttribute::new(ctx, &attrs).into()
            })
            .collect();
        let func_ty = FunctionType::new(ctx, &param_types, &[]);
        let b = k.block.map(|x| x as i32);
        OperationBuilder::new("gpu.func", loc)
            .add_attributes(&[
                (e.id("sym_name"), StringAttribute::new(ctx, &k.name).into()),
                (
                    e.id("function_type"),
                    TypeAttribute::new(func_ty.into()).into(),
                ),
                (
                    e.id("arg_attrs"),
                    ArrayAttribute::new(ctx, &arg_attrs).into(),
                ),
                (
                    e.id("known_block_size"),
                    DenseI32ArrayAttribute::new(ctx, &b).into(),
                ),
                (e.id("gpu.kernel"), Attribute::unit(ctx)),
                // `.minnctapersm 1`: ptxas may use registers up to the block's share of the
                // register file rather than spill to reach a higher occupancy.
                (
                    e.id("nvvm.minctasm"),
                    IntegerAttribute::new(IntegerType::new(ctx, 32).into(), 1).into(),
                ),
                (
                    e.id("workgroup_attributions"),
                    IntegerAttribute::new(IntegerType::new(ctx, 64).into(), 0).into(),
                ),
            ])
            .add_regions([region])
            .build()
            .map_err(|err| build_err("gpu.func", err))
    }

    fn ctx(&self) -> &'c Context {
        self.e.ctx
    }

    fn unsupported(&self, reason: impl Into<String>) -> MlirError {
        MlirError::Unsupported {
            kernel: self.k.name.clone(),
            reason: reason.into(),
        }
    }

    fn idx_width(&self) -> u32 {
        match self.k.index {
            IndexWidth::I32 => 32,
            IndexWidth::I64 => 64,
        }
    }

    fn ty(&self, t: Ty) -> Type<'c> {
        match t {
            Ty::Idx => IntegerType::new(self.ctx(), self.idx_width()).into(),
            Ty::Elem(d) => self.e.elem_type(d),
        }
    }

    /// Appends `op` at the insertion point; its results.
    fn push(&mut self, op: Result<Operation<'c>, melior::Error>, name: &str) -> R<MlirValue> {
        let op = op.map_err(|err| build_err(name, err))?;
        let r = self.e.append(self.block, op);
        r.result(0)
            .map(|v| v.to_raw())
            .map_err(|err| build_err(name, err))
    }

    /// Appends an op without results.
    fn push0(&mut self, op: Result<Operation<'c>, melior::Error>, name: &str) -> R<()> {
        let op = op.map_err(|err| build_err(name, err))?;
        self.e.append(self.block, op);
        Ok(())
    }

    /// Inserts `op` at the end of the entry block's prologue; its result.
    fn prologue(&mut self, op: Result<Operation<'c>, melior::Error>, name: &str) -> R<MlirValue> {
        let op = op.map_err(|err| build_err(name, err))?;
        // SAFETY: as in the module doc.
        let entry: BlockRef<'c, 'c> = unsafe { BlockRef::from_raw(self.entry) };
        let r = entry.insert_operation(self.prologue_len, op);
        self.prologue_len += 1;
        r.result(0)
            .map(|v| v.to_raw())
            .map_err(|err| build_err(name, err))
    }

    fn alloca(&mut self, ty: MemRefType<'c>) -> R<MlirValue> {
        let op = OperationBuilder::new("memref.alloca", self.loc)
            .add_attributes(&[(
                self.e.id("operandSegmentSizes"),
                DenseI32ArrayAttribute::new(self.ctx(), &[0, 0]).into(),
            )])
            .add_results(&[ty.into()])
            .build();
        self.prologue(op, "memref.alloca")
    }

    fn get_global(&mut self, name: &str, ty: MemRefType<'c>) -> R<MlirValue> {
        let key = CacheKey::Global(name.to_string());
        if let Some(&v) = self.cache.get(&key) {
            return Ok(v);
        }
        let op = memref::get_global(self.ctx(), name, ty, self.loc);
        let v = self.prologue(Ok(op), "memref.get_global")?;
        self.cache.insert(key, v);
        Ok(v)
    }

    fn v(&self, raw: MlirValue) -> Value<'c, 'c> {
        // SAFETY: as in the module doc.
        unsafe { Value::from_raw(raw) }
    }

    fn type_of(&self, raw: MlirValue) -> Type<'c> {
        self.v(raw).r#type()
    }

    // ----- constants -------------------------------------------------------------------------

    /// An integer constant of `bits` width (1, 8, 32, 64), hoisted into the prologue.
    fn int_const(&mut self, bits: u32, v: i64) -> R<MlirValue> {
        let tag: &'static str = match bits {
            1 => "i1",
            8 => "i8",
            32 => "i32",
            64 => "i64",
            _ => "index",
        };
        let key = CacheKey::Int(tag, v);
        if let Some(&c) = self.cache.get(&key) {
            return Ok(c);
        }
        let t: Type = if tag == "index" {
            Type::index(self.ctx())
        } else {
            IntegerType::new(self.ctx(), bits).into()
        };
        let op = arith::constant(self.ctx(), IntegerAttribute::new(t, v).into(), self.loc);
        let c = self.prologue(Ok(op), "arith.constant")?;
        self.cache.insert(key, c);
        Ok(c)
    }

    fn index_const(&mut self, v: i64) -> R<MlirValue> {
        self.int_const(0, v)
    }

    fn idx_const(&mut self, v: i64) -> R<MlirValue> {
        if self.k.index == IndexWidth::I32 && i32::try_from(v).is_err() {
            return Err(self.unsupported(format!(
                "index literal {v} does not fit the kernel's 32-bit index type"
            )));
        }
        self.int_const(self.idx_width(), v)
    }

    /// A constant of dtype `d` whose value is `v` rounded to `d` as the CUDA backend's
    /// conversions do (through `f32` for 16-bit floats; truncating, saturating, NaN to 0 for
    /// integers; non-zero for `i1`).
    fn elem_const(&mut self, d: DType, v: f64) -> R<MlirValue> {
        let exact = match d {
            DType::F64 => v,
            DType::F32 => f64::from(v as f32),
            DType::F16 => f64::from(half::f16::from_f32(v as f32)),
            DType::BF16 => f64::from(half::bf16::from_f32(v as f32)),
            DType::I32 => return self.int_const(32, i64::from(v as i32)),
            DType::I64 => return self.int_const(64, v as i64),
            DType::I1 => return self.int_const(1, i64::from(v != 0.0)),
        };
        let key = CacheKey::Float(d.name(), exact.to_bits());
        if let Some(&c) = self.cache.get(&key) {
            return Ok(c);
        }
        let op = arith::constant(self.ctx(), self.e.scalar_attr(d, exact), self.loc);
        let c = self.prologue(Ok(op), "arith.constant")?;
        self.cache.insert(key, c);
        Ok(c)
    }

    // ----- statements ------------------------------------------------------------------------

    fn block(&mut self, body: &[Stmt]) -> R<()> {
        for s in body {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> R<()> {
        match s {
            Stmt::Let { var, ty, value } => {
                let (v, _) = self.expr(value)?;
                self.vars.insert(var.clone(), Binding::Value(v, *ty));
            }
            Stmt::Var {
                var, init: value, ..
            }
            | Stmt::Assign { var, value } => {
                let (v, _) = self.expr(value)?;
                let Some(Binding::Mutable(slot, _)) = self.vars.get(var).copied() else {
                    return Err(self.unsupported(format!("%{var} is not a mutable variable")));
                };
                let zero = self.index_const(0)?;
                let op = memref::store(self.v(v), self.v(slot), &[self.v(zero)], self.loc);
                self.push0(Ok(op), "memref.store")?;
            }
            Stmt::Store {
                tensor,
                coord,
                value,
            } => {
                let (v, _) = self.expr(value)?;
                let (memref, index, decl) = self.place(tensor, coord)?;
                let v = if decl.dtype == DType::I1 && matches!(decl.space, Space::Global(_)) {
                    let i8t = IntegerType::new(self.ctx(), 8).into();
                    self.push(Ok(arith::extui(self.v(v), i8t, self.loc)), "arith.extui")?
                } else {
                    v
                };
                let op = memref::store(self.v(v), self.v(memref), &[self.v(index)], self.loc);
                self.push0(Ok(op), "memref.store")?;
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                unroll,
                body,
            } => {
                // `unroll` loops with constant bounds are `affine.for`, which the PTX pipeline
                // unrolls fully (as `#pragma unroll` for the CUDA backend): register tensors are
                // indexed by their variables, and only constant indices keep them in registers.
                if let (true, Expr::Int(a), Expr::Int(b), Expr::Int(st)) =
                    (*unroll, start, end, step)
                    && *st > 0
                    && (b - a) / st <= MAX_UNROLL
                {
                    return self.affine_for(var, *a, *b, *st, body);
                }
                let (lb, _) = self.expr(start)?;
                let (ub, _) = self.expr(end)?;
                let (st, _) = self.expr(step)?;
                let region = Region::new();
                let idx_ty = self.ty(Ty::Idx);
                let inner = region
                    .append_block(Block::new(&[(idx_ty, self.loc)]))
                    .to_raw();
                // SAFETY: as in the module doc.
                let inner_ref: BlockRef<'c, 'c> = unsafe { BlockRef::from_raw(inner) };
                let iv = inner_ref
                    .argument(0)
                    .map_err(|err| build_err("scf.for", err))?
                    .to_raw();
                self.vars.insert(var.clone(), Binding::Value(iv, Ty::Idx));
                let outer = self.block;
                self.block = inner;
                self.block(body)?;
                self.push0(Ok(scf::r#yield(&[], self.loc)), "scf.yield")?;
                self.block = outer;
                let op = scf::r#for(self.v(lb), self.v(ub), self.v(st), region, self.loc);
                self.push0(Ok(op), "scf.for")?;
            }
            Stmt::If { cond, body, orelse } => {
                let (c, _) = self.expr(cond)?;
                self.scf_if_else(c, body, orelse)?;
            }
            Stmt::Copy { width, dst, src } => self.copy(*width, dst, src)?,
            Stmt::Intrinsic { op, args } => {
                let f = |i: usize| match args.get(i) {
                    Some(kir::Arg::Frag(f)) => Ok(f),
                    _ => Err(MlirError::KernelIr(format!("{} operand {i}", op.name()))),
                };
                match op {
                    Intrinsic::LdmatrixX4 => self.ldmatrix(false, f(0)?, f(1)?)?,
                    Intrinsic::LdmatrixX4Trans => self.ldmatrix(true, f(0)?, f(1)?)?,
                    Intrinsic::MmaM16n8k16 => self.mma(f(0)?, f(1)?, f(2)?)?,
                }
            }
            Stmt::WarpReduce { var, ty, op, value } => {
                let (v, _) = self.expr(value)?;
                let Ty::Elem(d) = *ty else {
                    return Err(self.unsupported("warp_reduce of an index"));
                };
                let r = self.warp_reduce(v, d, *op)?;
                self.vars.insert(var.clone(), Binding::Value(r, *ty));
            }
            Stmt::Sync => self.barrier()?,
            Stmt::BlockReduce { var, ty, op, value } => {
                let (v, _) = self.expr(value)?;
                let Ty::Elem(d) = *ty else {
                    return Err(self.unsupported("block_reduce of an index"));
                };
                let r = self.block_reduce(v, d, *op)?;
                self.vars.insert(var.clone(), Binding::Value(r, *ty));
            }
        }
        Ok(())
    }

    /// `affine.for %i = a to b step s` over `index`, the kernel IR variable being its
    /// `arith.index_cast` to the index type.
    fn affine_for(&mut self, var: &str, a: i64, b: i64, st: i64, body: &[Stmt]) -> R<()> {
        let ctx = self.ctx();
        let map = |v: i64| -> Attribute<'c> {
            let m = melior::ir::AffineMap::constant(ctx, v);
            // SAFETY: plain FFI constructor of a uniqued attribute in `ctx`.
            unsafe { Attribute::from_raw(mlir_sys::mlirAffineMapAttrGet(m.to_raw())) }
        };
        let region = Region::new();
        let inner = region
            .append_block(Block::new(&[(Type::index(ctx), self.loc)]))
            .to_raw();
        // SAFETY: as in the module doc.
        let inner_ref: BlockRef<'c, 'c> = unsafe { BlockRef::from_raw(inner) };
        let iv = inner_ref
            .argument(0)
            .map_err(|err| build_err("affine.for", err))?
            .to_raw();
        let outer = self.block;
        self.block = inner;
        let idx_ty = self.ty(Ty::Idx);
        let i = self.push(
            Ok(arith::index_cast(self.v(iv), idx_ty, self.loc)),
            "arith.index_cast",
        )?;
        self.vars
            .insert(var.to_string(), Binding::Value(i, Ty::Idx));
        self.block(body)?;
        self.push0(
            OperationBuilder::new("affine.yield", self.loc).build(),
            "affine.yield",
        )?;
        self.block = outer;
        let op = OperationBuilder::new("affine.for", self.loc)
            .add_attributes(&[
                (self.e.id("lowerBoundMap"), map(a)),
                (self.e.id("upperBoundMap"), map(b)),
                (
                    self.e.id("step"),
                    IntegerAttribute::new(Type::index(ctx), st).into(),
                ),
                (
                    self.e.id("operandSegmentSizes"),
                    DenseI32ArrayAttribute::new(ctx, &[0, 0, 0]).into(),
                ),
            ])
            .add_regions([region])
            .build();
        self.push0(op, "affine.for")
    }

    fn barrier(&mut self) -> R<()> {
        self.push0(
            OperationBuilder::new("gpu.barrier", self.loc).build(),
            "gpu.barrier",
        )
    }

    /// `scf.if %c { then }` with no results and no else.
    fn scf_if(&mut self, c: MlirValue, then: impl FnOnce(&mut Self) -> R<()>) -> R<()> {
        let region = Region::new();
        let inner = region.append_block(Block::new(&[])).to_raw();
        let outer = self.block;
        self.block = inner;
        then(self)?;
        self.push0(Ok(scf::r#yield(&[], self.loc)), "scf.yield")?;
        self.block = outer;
        let op = scf::r#if(self.v(c), &[], region, Region::new(), self.loc);
        self.push0(Ok(op), "scf.if")
    }

    /// `scf.if %c { body } else { orelse }` (no else region when `orelse` is empty).
    fn scf_if_else(&mut self, c: MlirValue, body: &[Stmt], orelse: &[Stmt]) -> R<()> {
        if orelse.is_empty() {
            return self.scf_if(c, |this| this.block(body));
        }
        let outer = self.block;
        let mut regions = Vec::new();
        for stmts in [body, orelse] {
            let region = Region::new();
            self.block = region.append_block(Block::new(&[])).to_raw();
            self.block(stmts)?;
            self.push0(Ok(scf::r#yield(&[], self.loc)), "scf.yield")?;
            regions.push(region);
        }
        self.block = outer;
        let else_region = regions.pop().unwrap_or_default();
        let then_region = regions.pop().unwrap_or_default();
        let op = scf::r#if(self.v(c), &[], then_region, else_region, self.loc);
        self.push0(Ok(op), "scf.if")
    }

    /// The CUDA prelude's `irc_warp_reduce`: the butterfly over the warp's 32 lanes.
    fn warp_reduce(&mut self, v: MlirValue, d: DType, op: ReduceOp) -> R<MlirValue> {
        let mut v = v;
        for o in [16, 8, 4, 2, 1] {
            let other = self.shfl_xor(v, d, o)?;
            v = self.reduce_op(op, d, v, other)?;
        }
        Ok(v)
    }

    /// `vector<shape x elem>`.
    fn vector_type(&self, shape: &[i64], elem: Type<'c>) -> Type<'c> {
        // SAFETY: plain FFI constructor of a uniqued type; `shape` outlives the call.
        unsafe {
            Type::from_raw(mlir_sys::mlirVectorTypeGet(
                shape.len() as isize,
                shape.as_ptr(),
                elem.to_raw(),
            ))
        }
    }

    /// `copy.N`: the N elements of mode 0 as one `vector.load` and one `vector.store`, aligned
    /// to their size (mode 0 is `N:1` and every other stride a multiple of N).
    fn copy(&mut self, width: u32, dst: &kir::Frag, src: &kir::Frag) -> R<()> {
        let (sm, si, sd) = self.place(&src.tensor, &src.coord(0))?;
        let (dm, di, dd) = self.place(&dst.tensor, &dst.coord(0))?;
        if sd.dtype != dd.dtype || sd.dtype == DType::I1 {
            return Err(self.unsupported(format!(
                "copy of {} into {} (a vector copy moves 16-, 32- or 64-bit elements)",
                sd.dtype, dd.dtype
            )));
        }
        let vty = self.vector_type(&[i64::from(width)], self.e.elem_type(sd.dtype));
        let align = i64::from(width) * sd.dtype.size_bytes() as i64;
        let i64t = IntegerType::new(self.ctx(), 64).into();
        let align_attr: Attribute = IntegerAttribute::new(i64t, align).into();
        let load = OperationBuilder::new("vector.load", self.loc)
            .add_operands(&[self.v(sm), self.v(si)])
            .add_attributes(&[(self.e.id("alignment"), align_attr)])
            .add_results(&[vty])
            .build();
        let v = self.push(load, "vector.load")?;
        let store = OperationBuilder::new("vector.store", self.loc)
            .add_operands(&[self.v(v), self.v(dm), self.v(di)])
            .add_attributes(&[(self.e.id("alignment"), align_attr)])
            .build();
        self.push0(store, "vector.store")
    }

    fn load_at(&mut self, tensor: &str, coord: Vec<Expr>) -> R<MlirValue> {
        let (v, _) = self.expr(&Expr::Load {
            tensor: tensor.to_string(),
            coord,
        })?;
        Ok(v)
    }

    /// `mma.m16n8k16`: `d += a * b` on one warp's fragments (a: 8 values, b: 4, d: 4, in the
    /// PTX fragment order). f16 through `nvgpu.mma.sync`; bf16 through the NVVM intrinsic, as
    /// MLIR 22's `nvgpu.mma.sync` does not lower bf16 operands.
    fn mma(&mut self, d: &kir::Frag, a: &kir::Frag, b: &kir::Frag) -> R<()> {
        let Some(ab) = self.tensors.get(a.tensor.as_str()).map(|t| t.decl.dtype) else {
            return Err(self.unsupported(format!("undefined tensor %{}", a.tensor)));
        };
        let mut av = Vec::new();
        for v in 0..8 {
            av.push(self.load_at(&a.tensor, a.coord(v))?);
        }
        let mut bv = Vec::new();
        let mut cv = Vec::new();
        for v in 0..4 {
            bv.push(self.load_at(&b.tensor, b.coord(v))?);
            cv.push(self.load_at(&d.tensor, d.coord(v))?);
        }
        let f32t = self.e.elem_type(DType::F32);
        let mut out = Vec::new();
        match ab {
            DType::F16 => {
                let f16t = self.e.elem_type(DType::F16);
                let va = self.vector_from_elements(&av, self.vector_type(&[4, 2], f16t))?;
                let vb = self.vector_from_elements(&bv, self.vector_type(&[2, 2], f16t))?;
                let vc = self.vector_from_elements(&cv, self.vector_type(&[2, 2], f32t))?;
                let i64t: Type = IntegerType::new(self.ctx(), 64).into();
                let shape: Vec<Attribute> = [16, 8, 16]
                    .iter()
                    .map(|&n| IntegerAttribute::new(i64t, n).into())
                    .collect();
                let op = OperationBuilder::new("nvgpu.mma.sync", self.loc)
                    .add_operands(&[self.v(va), self.v(vb), self.v(vc)])
                    .add_attributes(&[(
                        self.e.id("mmaShape"),
                        ArrayAttribute::new(self.ctx(), &shape).into(),
                    )])
                    .add_results(&[self.vector_type(&[2, 2], f32t)])
                    .build();
                let r = self.push(op, "nvgpu.mma.sync")?;
                for v in 0..4 {
                    let op = OperationBuilder::new("vector.extract", self.loc)
                        .add_operands(&[self.v(r)])
                        .add_attributes(&[(
                            self.e.id("static_position"),
                            DenseI64ArrayAttribute::new(self.ctx(), &[v / 2, v % 2]).into(),
                        )])
                        .add_results(&[f32t])
                        .build();
                    out.push(self.push(op, "vector.extract")?);
                }
            }
            DType::BF16 => {
                let mut args = Vec::new();
                for pair in av.chunks(2).chain(bv.chunks(2)) {
                    args.push(self.pack_bf16(pair[0], pair[1])?);
                }
                args.extend(&cv);
                let st = melior::dialect::llvm::r#type::r#struct(self.ctx(), &[f32t; 4], false);
                let s = self.intrinsic("llvm.nvvm.mma.m16n8k16.row.col.bf16", &args, st)?;
                for v in 0..4 {
                    let op = melior::dialect::llvm::extract_value(
                        self.ctx(),
                        self.v(s),
                        DenseI64ArrayAttribute::new(self.ctx(), &[v]),
                        f32t,
                        self.loc,
                    );
                    out.push(self.push(Ok(op), "llvm.extractvalue")?);
                }
            }
            other => return Err(self.unsupported(format!("mma of {other}"))),
        }
        for (v, x) in out.into_iter().enumerate() {
            let (memref, index, _) = self.place(&d.tensor, &d.coord(v as i64))?;
            let op = memref::store(self.v(x), self.v(memref), &[self.v(index)], self.loc);
            self.push0(Ok(op), "memref.store")?;
        }
        Ok(())
    }

    /// `ldmatrix.x4[.trans]` as `nvgpu.ldmatrix` from the shared row this thread provides
    /// (`src` at its full coordinate); register j (row j of the `vector<4x2>`) holds values 2j
    /// and 2j + 1 of the destination fragment.
    fn ldmatrix(&mut self, trans: bool, dst: &kir::Frag, src: &kir::Frag) -> R<()> {
        let (sm, si, sd) = self.place(&src.tensor, &src.at)?;
        if !matches!(sd.dtype, DType::F16 | DType::BF16) {
            return Err(self.unsupported(format!("ldmatrix of {}", sd.dtype)));
        }
        let et = self.e.elem_type(sd.dtype);
        let vty = self.vector_type(&[4, 2], et);
        let op = OperationBuilder::new("nvgpu.ldmatrix", self.loc)
            .add_operands(&[self.v(sm), self.v(si)])
            .add_attributes(&[
                (
                    self.e.id("transpose"),
                    melior::ir::attribute::BoolAttribute::new(self.ctx(), trans).into(),
                ),
                (
                    self.e.id("numTiles"),
                    IntegerAttribute::new(IntegerType::new(self.ctx(), 32).into(), 4).into(),
                ),
            ])
            .add_results(&[vty])
            .build();
        let r = self.push(op, "nvgpu.ldmatrix")?;
        for v in 0..8 {
            let op = OperationBuilder::new("vector.extract", self.loc)
                .add_operands(&[self.v(r)])
                .add_attributes(&[(
                    self.e.id("static_position"),
                    DenseI64ArrayAttribute::new(self.ctx(), &[v / 2, v % 2]).into(),
                )])
                .add_results(&[et])
                .build();
            let x = self.push(op, "vector.extract")?;
            let (memref, index, _) = self.place(&dst.tensor, &dst.coord(v))?;
            let op = memref::store(self.v(x), self.v(memref), &[self.v(index)], self.loc);
            self.push0(Ok(op), "memref.store")?;
        }
        Ok(())
    }

    fn vector_from_elements(&mut self, elems: &[MlirValue], ty: Type<'c>) -> R<MlirValue> {
        let operands: Vec<Value> = elems.iter().map(|&x| self.v(x)).collect();
        let op = OperationBuilder::new("vector.from_elements", self.loc)
            .add_operands(&operands)
            .add_results(&[ty])
            .build();
        self.push(op, "vector.from_elements")
    }

    /// `irc_pack(lo, hi)` of two bf16 values: `lo` in the low 16 bits of an `i32`.
    fn pack_bf16(&mut self, lo: MlirValue, hi: MlirValue) -> R<MlirValue> {
        let i16t: Type = IntegerType::new(self.ctx(), 16).into();
        let i32t: Type = IntegerType::new(self.ctx(), 32).into();
        let mut halves = Vec::new();
        for x in [lo, hi] {
            let b = self.push(
                Ok(arith::bitcast(self.v(x), i16t, self.loc)),
                "arith.bitcast",
            )?;
            halves.push(self.push(Ok(arith::extui(self.v(b), i32t, self.loc)), "arith.extui")?);
        }
        let c16 = self.int_const(32, 16)?;
        let hi = self.push(
            Ok(arith::shli(self.v(halves[1]), self.v(c16), self.loc)),
            "arith.shli",
        )?;
        self.push(
            Ok(arith::ori(self.v(hi), self.v(halves[0]), self.loc)),
            "arith.ori",
        )
    }

    /// The CUDA backend's `irc_block_reduce`, step for step so that sums round identically:
    /// a butterfly over each warp (`shfl.sync.bfly`), one value per warp through shared memory,
    /// then every thread folds the warps' values in order.
    fn block_reduce(&mut self, v: MlirValue, d: DType, op: ReduceOp) -> R<MlirValue> {
        let mut v = v;
        for o in [16, 8, 4, 2, 1] {
            let other = self.shfl_xor(v, d, o)?;
            v = self.reduce_op(op, d, v, other)?;
        }
        let tid = self.sreg("tid.x")?;
        let c31 = self.int_const(32, 31)?;
        let c5 = self.int_const(32, 5)?;
        let lane = self.push(
            Ok(arith::andi(self.v(tid), self.v(c31), self.loc)),
            "arith.andi",
        )?;
        let warp = self.push(
            Ok(arith::shrui(self.v(tid), self.v(c5), self.loc)),
            "arith.shrui",
        )?;
        let scratch_ty = self.e.shared_memref(d, 32);
        let scratch = self.get_global(&reduce_symbol(d), scratch_ty)?;
        self.barrier()?;
        let zero = self.int_const(32, 0)?;
        let is0 = self.push(
            Ok(arith::cmpi(
                self.ctx(),
                CmpiPredicate::Eq,
                self.v(lane),
                self.v(zero),
                self.loc,
            )),
            "arith.cmpi",
        )?;
        self.scf_if(is0, |this| {
            let w = this.push(
                Ok(arith::index_cast(
                    this.v(warp),
                    Type::index(this.ctx()),
                    this.loc,
                )),
                "arith.index_cast",
            )?;
            let op = memref::store(this.v(v), this.v(scratch), &[this.v(w)], this.loc);
            this.push0(Ok(op), "memref.store")
        })?;
        self.barrier()?;
        let warps = (i64::from(self.k.block[0]) + 31) / 32;
        let i0 = self.index_const(0)?;
        let mut r = self.push(
            Ok(memref::load(self.v(scratch), &[self.v(i0)], self.loc)),
            "memref.load",
        )?;
        for w in 1..warps {
            let iw = self.index_const(w)?;
            let x = self.push(
                Ok(memref::load(self.v(scratch), &[self.v(iw)], self.loc)),
                "memref.load",
            )?;
            r = self.reduce_op(op, d, r, x)?;
        }
        Ok(r)
    }

    fn reduce_op(&mut self, op: ReduceOp, d: DType, a: MlirValue, b: MlirValue) -> R<MlirValue> {
        let f = match op {
            ReduceOp::Sum => Func::Add,
            ReduceOp::Max => Func::Max,
            ReduceOp::Min => Func::Min,
        };
        self.call(f, d, &[a, b])
    }

    /// `__shfl_xor_sync(0xffffffff, v, o)`; 64-bit values as two 32-bit shuffles, as CUDA does.
    fn shfl_xor(&mut self, v: MlirValue, d: DType, o: i64) -> R<MlirValue> {
        let i32t: Type = IntegerType::new(self.ctx(), 32).into();
        let i64t: Type = IntegerType::new(self.ctx(), 64).into();
        match d {
            DType::F32 => self.shfl32(v, "f32", o),
            DType::I32 => self.shfl32(v, "i32", o),
            DType::F64 | DType::I64 => {
                let x = if d == DType::F64 {
                    self.push(
                        Ok(arith::bitcast(self.v(v), i64t, self.loc)),
                        "arith.bitcast",
                    )?
                } else {
                    v
                };
                let c32 = self.int_const(64, 32)?;
                let lo = self.push(Ok(arith::trunci(self.v(x), i32t, self.loc)), "arith.trunci")?;
                let hi = self.push(
                    Ok(arith::shrui(self.v(x), self.v(c32), self.loc)),
                    "arith.shrui",
                )?;
                let hi = self.push(
                    Ok(arith::trunci(self.v(hi), i32t, self.loc)),
                    "arith.trunci",
                )?;
                let lo = self.shfl32(lo, "i32", o)?;
                let hi = self.shfl32(hi, "i32", o)?;
                let lo = self.push(Ok(arith::extui(self.v(lo), i64t, self.loc)), "arith.extui")?;
                let hi = self.push(Ok(arith::extui(self.v(hi), i64t, self.loc)), "arith.extui")?;
                let hi = self.push(
                    Ok(arith::shli(self.v(hi), self.v(c32), self.loc)),
                    "arith.shli",
                )?;
                let x = self.push(
                    Ok(arith::ori(self.v(hi), self.v(lo), self.loc)),
                    "arith.ori",
                )?;
                if d == DType::F64 {
                    let f64t = self.e.elem_type(DType::F64);
                    self.push(
                        Ok(arith::bitcast(self.v(x), f64t, self.loc)),
                        "arith.bitcast",
                    )
                } else {
                    Ok(x)
                }
            }
            _ => Err(self.unsupported(format!("block_reduce of {d}"))),
        }
    }

    /// `llvm.nvvm.shfl.sync.bfly.{f32,i32}(0xffffffff, v, o, 31)`.
    fn shfl32(&mut self, v: MlirValue, kind: &str, o: i64) -> R<MlirValue> {
        let mask = self.int_const(32, -1)?;
        let off = self.int_const(32, o)?;
        let clamp = self.int_const(32, 31)?;
        let ty = self.type_of(v);
        self.intrinsic(
            &format!("llvm.nvvm.shfl.sync.bfly.{kind}"),
            &[mask, v, off, clamp],
            ty,
        )
    }

    /// IEEE square root (`sqrt.rn`), as CUDA's `sqrtf`/`sqrt` compile. Not `math.sqrt`: the
    /// GPU-to-NVVM conversion turns it into libdevice's `__nv_sqrtf`, which is the approximate
    /// `sqrt.approx` unless `__CUDA_PREC_SQRT` is reflected, and it rejects `llvm.intr.sqrt`.
    fn sqrt_rn(&mut self, d: DType, x: MlirValue) -> R<MlirValue> {
        let ty = self.type_of(x);
        let name = if d == DType::F64 {
            "llvm.nvvm.sqrt.rn.d"
        } else {
            "llvm.nvvm.sqrt.rn.f"
        };
        self.intrinsic(name, &[x], ty)
    }

    /// `llvm.call_intrinsic "NAME"(args) : (...) -> ty`: an NVVM intrinsic the dialects do not
    /// model without enum attributes.
    fn intrinsic(&mut self, name: &str, args: &[MlirValue], ty: Type<'c>) -> R<MlirValue> {
        let operands: Vec<Value> = args.iter().map(|&a| self.v(a)).collect();
        let op = OperationBuilder::new("llvm.call_intrinsic", self.loc)
            .add_operands(&operands)
            .add_attributes(&[
                (
                    self.e.id("intrin"),
                    StringAttribute::new(self.ctx(), name).into(),
                ),
                (
                    self.e.id("op_bundle_sizes"),
                    DenseI32ArrayAttribute::new(self.ctx(), &[]).into(),
                ),
                (
                    self.e.id("operandSegmentSizes"),
                    DenseI32ArrayAttribute::new(self.ctx(), &[args.len() as i32, 0]).into(),
                ),
            ])
            .add_results(&[ty])
            .build();
        self.push(op, "llvm.call_intrinsic")
    }

    /// A thread or block coordinate as a 32-bit integer (`nvvm.read.ptx.sreg.*`), hoisted.
    fn sreg(&mut self, name: &'static str) -> R<MlirValue> {
        let key = CacheKey::Sreg(name);
        if let Some(&v) = self.cache.get(&key) {
            return Ok(v);
        }
        let op = OperationBuilder::new(&format!("nvvm.read.ptx.sreg.{name}"), self.loc)
            .add_results(&[IntegerType::new(self.ctx(), 32).into()])
            .build();
        let v = self.prologue(op, "nvvm.read.ptx.sreg")?;
        self.cache.insert(key, v);
        Ok(v)
    }

    // ----- expressions -----------------------------------------------------------------------

    fn expr(&mut self, e: &Expr) -> R<(MlirValue, Ty)> {
        match e {
            Expr::Int(i) => Ok((self.idx_const(*i)?, Ty::Idx)),
            Expr::Float(_) => Err(self.unsupported("a float literal outside a cast")),
            Expr::Var(v) => match self.vars.get(v).copied() {
                Some(Binding::Value(x, t)) => Ok((x, t)),
                Some(Binding::Mutable(slot, t)) => {
                    let zero = self.index_const(0)?;
                    let x = self.push(
                        Ok(memref::load(self.v(slot), &[self.v(zero)], self.loc)),
                        "memref.load",
                    )?;
                    Ok((x, t))
                }
                None => Err(self.unsupported(format!("%{v} is used before it is defined"))),
            },
            Expr::Builtin(b) => {
                let name = match b {
                    Builtin::TidX => "tid.x",
                    Builtin::BidX => "ctaid.x",
                    Builtin::BidY => "ctaid.y",
                    Builtin::BidZ => "ctaid.z",
                    Builtin::NtidX => "ntid.x",
                    Builtin::NctaidX => "nctaid.x",
                    Builtin::NctaidY => "nctaid.y",
                    Builtin::NctaidZ => "nctaid.z",
                };
                let v = self.sreg(name)?;
                let v = if self.k.index == IndexWidth::I64 {
                    let key = CacheKey::SregIdx(b.name());
                    match self.cache.get(&key) {
                        Some(&w) => w,
                        None => {
                            let i64t = IntegerType::new(self.ctx(), 64).into();
                            let w = self.prologue(
                                Ok(arith::extui(self.v(v), i64t, self.loc)),
                                "arith.extui",
                            )?;
                            self.cache.insert(key, w);
                            w
                        }
                    }
                } else {
                    v
                };
                Ok((v, Ty::Idx))
            }
            Expr::Load { tensor, coord } => {
                let (memref, index, decl) = self.place(tensor, coord)?;
                let x = self.push(
                    Ok(memref::load(self.v(memref), &[self.v(index)], self.loc)),
                    "memref.load",
                )?;
                let d = decl.dtype;
                let x = match &decl.space {
                    Space::Global(_) if d == DType::I1 => {
                        let zero = self.int_const(8, 0)?;
                        self.push(
                            Ok(arith::cmpi(
                                self.ctx(),
                                CmpiPredicate::Ne,
                                self.v(x),
                                self.v(zero),
                                self.loc,
                            )),
                            "arith.cmpi",
                        )?
                    }
                    Space::Const(_) => self.convert(x, const_storage(d), d)?,
                    _ => x,
                };
                Ok((x, Ty::Elem(d)))
            }
            Expr::Idx(op, a, b) => {
                let (x, _) = self.expr(a)?;
                let (y, _) = self.expr(b)?;
                let (x, y) = (self.v(x), self.v(y));
                let loc = self.loc;
                let ctx = self.ctx();
                let (r, t) = match op {
                    IdxOp::Add => (arith::addi(x, y, loc), Ty::Idx),
                    IdxOp::Sub => (arith::subi(x, y, loc), Ty::Idx),
                    IdxOp::Mul => (arith::muli(x, y, loc), Ty::Idx),
                    IdxOp::Div => (arith::divsi(x, y, loc), Ty::Idx),
                    IdxOp::Rem => (arith::remsi(x, y, loc), Ty::Idx),
                    IdxOp::Lt => (
                        arith::cmpi(ctx, CmpiPredicate::Slt, x, y, loc),
                        Ty::Elem(DType::I1),
                    ),
                    IdxOp::Le => (
                        arith::cmpi(ctx, CmpiPredicate::Sle, x, y, loc),
                        Ty::Elem(DType::I1),
                    ),
                    IdxOp::Eq => (
                        arith::cmpi(ctx, CmpiPredicate::Eq, x, y, loc),
                        Ty::Elem(DType::I1),
                    ),
                    IdxOp::And => (arith::andi(x, y, loc), Ty::Elem(DType::I1)),
                };
                Ok((self.push(Ok(r), "arith")?, t))
            }
            Expr::Call(Func::Cast(d), args) => {
                if let [Expr::Float(v)] = args.as_slice() {
                    return Ok((self.elem_const(*d, *v)?, Ty::Elem(*d)));
                }
                let [a] = args.as_slice() else {
                    return Err(self.unsupported("a cast takes one argument"));
                };
                let (x, t) = self.expr(a)?;
                let from = match t {
                    Ty::Elem(f) => f,
                    Ty::Idx => match self.k.index {
                        IndexWidth::I32 => DType::I32,
                        IndexWidth::I64 => DType::I64,
                    },
                };
                Ok((self.convert(x, from, *d)?, Ty::Elem(*d)))
            }
            Expr::Call(f, args) => {
                let mut vals = Vec::with_capacity(args.len());
                let mut tys = Vec::with_capacity(args.len());
                for a in args {
                    let (x, t) = self.expr(a)?;
                    vals.push(x);
                    tys.push(t);
                }
                // The result type: the value operands' (select's are the last two).
                let t = *tys.last().unwrap_or(&Ty::Idx);
                let Ty::Elem(d) = t else {
                    return Err(self.unsupported(format!("{} of an index", f.name())));
                };
                Ok((self.call(*f, d, &vals)?, t))
            }
        }
    }

    /// The memref, `index`-typed offset and declaration of `tensor[coord]`; the offset is
    /// [`kir::offset_expr`] of the tensor's layout.
    fn place(&mut self, tensor: &str, coord: &[Expr]) -> R<(MlirValue, MlirValue, &'k TensorDecl)> {
        let Some(info) = self.tensors.get(tensor) else {
            return Err(self.unsupported(format!("undefined tensor %{tensor}")));
        };
        let (memref, decl) = (info.memref, info.decl);
        let off = kir::offset_expr(&decl.layout, coord)
            .map_err(|err| self.unsupported(format!("tensor %{tensor}: {err}")))?;
        let (x, _) = self.expr(&off)?;
        let index = self.push(
            Ok(arith::index_cast(
                self.v(x),
                Type::index(self.ctx()),
                self.loc,
            )),
            "arith.index_cast",
        )?;
        Ok((memref, index, decl))
    }
}

impl<'c> KernelEmitter<'c, '_> {
    fn un(&mut self, name: &str, x: MlirValue) -> R<MlirValue> {
        let t = self.type_of(x);
        let op = OperationBuilder::new(name, self.loc)
            .add_operands(&[self.v(x)])
            .add_results(&[t])
            .build();
        self.push(op, name)
    }

    fn bin(&mut self, name: &str, x: MlirValue, y: MlirValue) -> R<MlirValue> {
        let t = self.type_of(x);
        let op = OperationBuilder::new(name, self.loc)
            .add_operands(&[self.v(x), self.v(y)])
            .add_results(&[t])
            .build();
        self.push(op, name)
    }

    fn cmpf(&mut self, p: CmpfPredicate, x: MlirValue, y: MlirValue) -> R<MlirValue> {
        let op = arith::cmpf(self.ctx(), p, self.v(x), self.v(y), self.loc);
        self.push(Ok(op), "arith.cmpf")
    }

    fn cmpi(&mut self, p: CmpiPredicate, x: MlirValue, y: MlirValue) -> R<MlirValue> {
        let op = arith::cmpi(self.ctx(), p, self.v(x), self.v(y), self.loc);
        self.push(Ok(op), "arith.cmpi")
    }

    fn select(&mut self, c: MlirValue, a: MlirValue, b: MlirValue) -> R<MlirValue> {
        let op = arith::select(self.v(c), self.v(a), self.v(b), self.loc);
        self.push(Ok(op), "arith.select")
    }

    /// `irc_max`/`irc_min` on floats: NaN if either is NaN (the first NaN), else `a > b ? a : b`
    /// (`<` for min), exactly as the CUDA prelude, signed zeros included.
    fn fmax_min(&mut self, max: bool, a: MlirValue, b: MlirValue) -> R<MlirValue> {
        let p = if max {
            CmpfPredicate::Ogt
        } else {
            CmpfPredicate::Olt
        };
        let gt = self.cmpf(p, a, b)?;
        let r = self.select(gt, a, b)?;
        let b_nan = self.cmpf(CmpfPredicate::Uno, b, b)?;
        let r = self.select(b_nan, b, r)?;
        let a_nan = self.cmpf(CmpfPredicate::Uno, a, a)?;
        self.select(a_nan, a, r)
    }

    /// `1 / (1 + exp(-x))`'s shared part: `1 + exp(-x)`.
    fn one_plus_exp_neg(&mut self, d: DType, x: MlirValue) -> R<MlirValue> {
        let n = self.un("arith.negf", x)?;
        let e = self.un("math.exp", n)?;
        let one = self.elem_const(d, 1.0)?;
        self.bin("arith.addf", one, e)
    }

    /// A kernel IR function on values of dtype `d` (f32, f64, or i32/i64 where defined).
    fn call(&mut self, f: Func, d: DType, a: &[MlirValue]) -> R<MlirValue> {
        let float = d.is_float();
        let arg = |i: usize| a.get(i).copied();
        let (Some(x), y) = (arg(0), arg(1)) else {
            return Err(self.unsupported(format!("{} without arguments", f.name())));
        };
        let kernel = self.k.name.clone();
        let need_y = || {
            y.ok_or_else(|| MlirError::Unsupported {
                kernel: kernel.clone(),
                reason: format!("{} takes two arguments", f.name()),
            })
        };
        match (f, float) {
            (Func::Add, true) => self.bin("arith.addf", x, need_y()?),
            (Func::Add, false) => self.bin("arith.addi", x, need_y()?),
            (Func::Sub, true) => self.bin("arith.subf", x, need_y()?),
            (Func::Sub, false) => self.bin("arith.subi", x, need_y()?),
            (Func::Mul, true) => self.bin("arith.mulf", x, need_y()?),
            (Func::Mul, false) => self.bin("arith.muli", x, need_y()?),
            (Func::Div, true) => self.bin("arith.divf", x, need_y()?),
            (Func::Max, true) => self.fmax_min(true, x, need_y()?),
            (Func::Min, true) => self.fmax_min(false, x, need_y()?),
            (Func::Max, false) => self.bin("arith.maxsi", x, need_y()?),
            (Func::Min, false) => self.bin("arith.minsi", x, need_y()?),
            (Func::Pow, true) => self.bin("math.powf", x, need_y()?),
            (Func::Select, _) => {
                let (Some(t), Some(e)) = (arg(1), arg(2)) else {
                    return Err(self.unsupported("select takes three arguments"));
                };
                self.select(x, t, e)
            }
            (Func::Neg, true) => self.un("arith.negf", x),
            (Func::Neg, false) => {
                let zero = self.elem_const(d, 0.0)?;
                self.bin("arith.subi", zero, x)
            }
            (Func::Abs, true) => self.un("math.absf", x),
            (Func::Abs, false) => {
                // `x < 0 ? -x : x` (`math.absi` has no NVVM lowering).
                let zero = self.elem_const(d, 0.0)?;
                let neg = self.cmpi(CmpiPredicate::Slt, x, zero)?;
                let minus = self.bin("arith.subi", zero, x)?;
                self.select(neg, minus, x)
            }
            (Func::Exp, true) => self.un("math.exp", x),
            (Func::Log, true) => self.un("math.log", x),
            (Func::Tanh, true) => self.un("math.tanh", x),
            (Func::Sqrt, true) => self.sqrt_rn(d, x),
            (Func::Rsqrt, true) => {
                let s = self.sqrt_rn(d, x)?;
                let one = self.elem_const(d, 1.0)?;
                self.bin("arith.divf", one, s)
            }
            (Func::Recip, true) => {
                let one = self.elem_const(d, 1.0)?;
                self.bin("arith.divf", one, x)
            }
            (Func::Sigmoid, true) => {
                let den = self.one_plus_exp_neg(d, x)?;
                let one = self.elem_const(d, 1.0)?;
                self.bin("arith.divf", one, den)
            }
            (Func::Silu, true) => {
                let den = self.one_plus_exp_neg(d, x)?;
                self.bin("arith.divf", x, den)
            }
            (Func::Relu, true) => {
                let zero = self.elem_const(d, 0.0)?;
                let m = self.fmax_min(true, x, zero)?;
                let nan = self.cmpf(CmpfPredicate::Uno, x, x)?;
                self.select(nan, x, m)
            }
            (Func::Relu, false) => {
                let zero = self.elem_const(d, 0.0)?;
                let pos = self.cmpi(CmpiPredicate::Sgt, x, zero)?;
                self.select(pos, x, zero)
            }
            (Func::Gelu, true) => {
                // x * 0.5 * (1 + erf(x * 0.70710678118654752440)), left to right.
                let half = self.elem_const(d, 0.5)?;
                let one = self.elem_const(d, 1.0)?;
                let inv_sqrt2 = self.elem_const(d, std::f64::consts::FRAC_1_SQRT_2)?;
                let xh = self.bin("arith.mulf", x, half)?;
                let xs = self.bin("arith.mulf", x, inv_sqrt2)?;
                let e = self.un("math.erf", xs)?;
                let s = self.bin("arith.addf", one, e)?;
                self.bin("arith.mulf", xh, s)
            }
            (f, _) => Err(self.unsupported(format!("{} is not defined on {d}", f.name()))),
        }
    }

    /// The CUDA prelude's conversions (`irc_f32`, `irc_f16`, `irc_i32`, ...): floats round to
    /// nearest even, 16-bit floats through f32; float to integer truncates and saturates with
    /// NaN to 0; to `i1` is "not zero" (NaN is true); `i1` converts as 0 or 1.
    fn convert(&mut self, x: MlirValue, from: DType, to: DType) -> R<MlirValue> {
        use DType::*;
        if from == to {
            return Ok(x);
        }
        let t = self.e.elem_type(to);
        let loc = self.loc;
        match to {
            F32 | F64 => match from {
                F16 | BF16 => self.push(Ok(arith::extf(self.v(x), t, loc)), "arith.extf"),
                F32 if to == F64 => self.push(Ok(arith::extf(self.v(x), t, loc)), "arith.extf"),
                F64 => self.push(Ok(arith::truncf(self.v(x), t, loc)), "arith.truncf"),
                I32 | I64 => self.push(Ok(arith::sitofp(self.v(x), t, loc)), "arith.sitofp"),
                I1 => self.push(Ok(arith::uitofp(self.v(x), t, loc)), "arith.uitofp"),
                _ => Err(self.unsupported(format!("conversion from {from} to {to}"))),
            },
            F16 | BF16 => {
                let f = self.convert(x, from, F32)?;
                self.push(Ok(arith::truncf(self.v(f), t, loc)), "arith.truncf")
            }
            I32 | I64 => match from {
                F16 | BF16 => {
                    let f = self.convert(x, from, F32)?;
                    self.float_to_int(f, F32, to)
                }
                F32 | F64 => self.float_to_int(x, from, to),
                I32 => self.push(Ok(arith::extsi(self.v(x), t, loc)), "arith.extsi"),
                I64 => self.push(Ok(arith::trunci(self.v(x), t, loc)), "arith.trunci"),
                I1 => self.push(Ok(arith::extui(self.v(x), t, loc)), "arith.extui"),
            },
            I1 => match from {
                F16 | BF16 => {
                    let f = self.convert(x, from, F32)?;
                    let zero = self.elem_const(F32, 0.0)?;
                    self.cmpf(CmpfPredicate::Une, f, zero)
                }
                F32 | F64 => {
                    let zero = self.elem_const(from, 0.0)?;
                    self.cmpf(CmpfPredicate::Une, x, zero)
                }
                _ => {
                    let zero = self.elem_const(from, 0.0)?;
                    self.cmpi(CmpiPredicate::Ne, x, zero)
                }
            },
        }
    }

    /// `__float2int_rz` and friends: truncation toward zero, saturating, NaN to 0. Written out
    /// because `arith.fptosi` of an out-of-range value is poison.
    fn float_to_int(&mut self, x: MlirValue, from: DType, to: DType) -> R<MlirValue> {
        let bits = if to == DType::I32 { 32 } else { 64 };
        let t = self.e.elem_type(to);
        let (min, max) = if bits == 32 {
            (i64::from(i32::MIN), i64::from(i32::MAX))
        } else {
            (i64::MIN, i64::MAX)
        };
        // -2^(bits-1) and 2^(bits-1) are exact in f32 and f64.
        let lo = self.elem_const(from, min as f64)?;
        let hi = self.elem_const(from, -(min as f64))?;
        let r = self.push(Ok(arith::fptosi(self.v(x), t, self.loc)), "arith.fptosi")?;
        let imax = self.int_const(bits, max)?;
        let imin = self.int_const(bits, min)?;
        let zero = self.int_const(bits, 0)?;
        let too_big = self.cmpf(CmpfPredicate::Oge, x, hi)?;
        let r = self.select(too_big, imax, r)?;
        let too_small = self.cmpf(CmpfPredicate::Olt, x, lo)?;
        let r = self.select(too_small, imin, r)?;
        let nan = self.cmpf(CmpfPredicate::Uno, x, x)?;
        self.select(nan, zero, r)
    }
}

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
