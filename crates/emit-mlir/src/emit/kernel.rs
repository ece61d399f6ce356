//! A kernel's body: statements, loops, branches, copies and the values they read.

use super::*;

impl<'c, 'k> KernelEmitter<'c, 'k> {
    pub(super) fn emit(
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
            prepacked: Default::default(),
            fences: kir::wait_fences(&k.body),
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
        let dynamic = kir::dynamic_shared(k);
        let mut copied = std::collections::HashSet::new();
        kir::walk(&k.body, &mut |s| {
            if let Stmt::Copy { dst, src, .. } = s {
                copied.insert(dst.tensor.as_str());
                copied.insert(src.tensor.as_str());
            }
        });
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
                Space::Shared => match dynamic.as_ref().and_then(|d| {
                    d.offsets
                        .iter()
                        .find(|(n, _)| n == &t.name)
                        .map(|(_, o)| *o)
                }) {
                    Some(offset) => ke.dynamic_shared_tensor(t, offset)?,
                    None => {
                        let ty = e.shared_memref(t.dtype, cosize(k, t)?);
                        ke.get_global(&shared_symbol(k, t), ty)?
                    }
                },
                Space::Registers => {
                    let ty = MemRefType::new(e.elem_type(t.dtype), &[cosize(k, t)?], None, None);
                    ke.alloca_aligned(ty, copied.contains(t.name.as_str()).then_some(16))?
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
                // register file rather than spill to reach a higher occupancy; a cooperative
                // kernel's blocks must all be resident, and a kernel may ask for an occupancy
                // (`kir::min_blocks_per_sm`).
                (
                    e.id("nvvm.minctasm"),
                    IntegerAttribute::new(
                        IntegerType::new(ctx, 32).into(),
                        i64::from(kir::min_blocks_per_sm(k)),
                    )
                    .into(),
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

    pub(super) fn ctx(&self) -> &'c Context {
        self.e.ctx
    }

    pub(super) fn unsupported(&self, reason: impl Into<String>) -> MlirError {
        MlirError::Unsupported {
            kernel: self.k.name.clone(),
            reason: reason.into(),
        }
    }

    pub(super) fn idx_width(&self) -> u32 {
        match self.k.index {
            IndexWidth::I32 => 32,
            IndexWidth::I64 => 64,
        }
    }

    pub(super) fn ty(&self, t: Ty) -> Type<'c> {
        match t {
            Ty::Idx => IntegerType::new(self.ctx(), self.idx_width()).into(),
            Ty::Elem(d) => self.e.elem_type(d),
        }
    }

    /// Appends `op` at the insertion point; its results.
    pub(super) fn push(
        &mut self,
        op: Result<Operation<'c>, melior::Error>,
        name: &str,
    ) -> R<MlirValue> {
        let op = op.map_err(|err| build_err(name, err))?;
        let r = self.e.append(self.block, op);
        r.result(0)
            .map(|v| v.to_raw())
            .map_err(|err| build_err(name, err))
    }

    /// Appends an op without results.
    pub(super) fn push0(&mut self, op: Result<Operation<'c>, melior::Error>, name: &str) -> R<()> {
        let op = op.map_err(|err| build_err(name, err))?;
        self.e.append(self.block, op);
        Ok(())
    }

    /// Inserts `op` at the end of the entry block's prologue; its result.
    pub(super) fn prologue(
        &mut self,
        op: Result<Operation<'c>, melior::Error>,
        name: &str,
    ) -> R<MlirValue> {
        let op = op.map_err(|err| build_err(name, err))?;
        // SAFETY: as in the module doc.
        let entry: BlockRef<'c, 'c> = unsafe { BlockRef::from_raw(self.entry) };
        let r = entry.insert_operation(self.prologue_len, op);
        self.prologue_len += 1;
        r.result(0)
            .map(|v| v.to_raw())
            .map_err(|err| build_err(name, err))
    }

    pub(super) fn alloca(&mut self, ty: MemRefType<'c>) -> R<MlirValue> {
        self.alloca_aligned(ty, None)
    }

    /// `memref.alloca`, with an `alignment` in bytes where given (a register tensor that a
    /// vector copy reads or writes is 16-byte aligned).
    pub(super) fn alloca_aligned(
        &mut self,
        ty: MemRefType<'c>,
        align: Option<i64>,
    ) -> R<MlirValue> {
        let i64t = IntegerType::new(self.ctx(), 64).into();
        let mut attrs = vec![(
            self.e.id("operandSegmentSizes"),
            DenseI32ArrayAttribute::new(self.ctx(), &[0, 0]).into(),
        )];
        if let Some(a) = align {
            attrs.push((
                self.e.id("alignment"),
                IntegerAttribute::new(i64t, a).into(),
            ));
        }
        let op = OperationBuilder::new("memref.alloca", self.loc)
            .add_attributes(&attrs)
            .add_results(&[ty.into()])
            .build();
        self.prologue(op, "memref.alloca")
    }

    pub(super) fn get_global(&mut self, name: &str, ty: MemRefType<'c>) -> R<MlirValue> {
        let key = CacheKey::Global(name.to_string());
        if let Some(&v) = self.cache.get(&key) {
            return Ok(v);
        }
        let op = memref::get_global(self.ctx(), name, ty, self.loc);
        let v = self.prologue(Ok(op), "memref.get_global")?;
        self.cache.insert(key, v);
        Ok(v)
    }

    pub(super) fn v(&self, raw: MlirValue) -> Value<'c, 'c> {
        // SAFETY: as in the module doc.
        unsafe { Value::from_raw(raw) }
    }

    pub(super) fn type_of(&self, raw: MlirValue) -> Type<'c> {
        self.v(raw).r#type()
    }

    // ----- constants -------------------------------------------------------------------------

    /// An integer constant of `bits` width (1, 8, 32, 64), hoisted into the prologue.
    pub(super) fn int_const(&mut self, bits: u32, v: i64) -> R<MlirValue> {
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

    pub(super) fn index_const(&mut self, v: i64) -> R<MlirValue> {
        self.int_const(0, v)
    }

    pub(super) fn idx_const(&mut self, v: i64) -> R<MlirValue> {
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
    pub(super) fn elem_const(&mut self, d: DType, v: f64) -> R<MlirValue> {
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

    pub(super) fn block(&mut self, body: &[Stmt]) -> R<()> {
        for (i, s) in body.iter().enumerate() {
            if let Stmt::Intrinsic {
                op: Intrinsic::WgmmaFence,
                ..
            } = s
            {
                self.prepack(&body[i + 1..])?;
            }
            self.stmt(s)?;
        }
        Ok(())
    }

    pub(super) fn stmt(&mut self, s: &Stmt) -> R<()> {
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
            Stmt::Copy {
                width,
                dst,
                src,
                hint,
            } => self.copy(*width, dst, src, *hint)?,
            Stmt::Intrinsic { op, args } => {
                let f = |i: usize| match args.get(i) {
                    Some(kir::Arg::Frag(f)) => Ok(f),
                    _ => Err(MlirError::KernelIr(format!("{} operand {i}", op.name()))),
                };
                match op {
                    Intrinsic::LdmatrixX4 => self.ldmatrix(false, f(0)?, f(1)?)?,
                    Intrinsic::LdmatrixX4Trans => self.ldmatrix(true, f(0)?, f(1)?)?,
                    Intrinsic::MmaM16n8k16 => self.mma(f(0)?, f(1)?, f(2)?)?,
                    Intrinsic::MmaM16n8k8Tf32 => self.mma_tf32(f(0)?, f(1)?, f(2)?)?,
                    Intrinsic::Mul2 => self.mul2(f(0)?, f(1)?, f(2)?)?,
                    Intrinsic::WgmmaWait => {
                        // The work on accumulators no product has in flight stays before the
                        // wait; those it completes are read only after it.
                        let idle = self.fences.idle_at(s).to_vec();
                        let done = self.fences.of(s).to_vec();
                        self.fence_accumulators(&idle)?;
                        self.hopper(*op, args)?;
                        self.fence_accumulators(&done)?;
                    }
                    other => self.hopper(*other, args)?,
                }
            }
            Stmt::WarpReduce {
                var,
                ty,
                op,
                width,
                value,
            } => {
                let (v, _) = self.expr(value)?;
                let Ty::Elem(d) = *ty else {
                    return Err(self.unsupported("warp_reduce of an index"));
                };
                let r = self.warp_reduce(v, d, *op, *width)?;
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
    pub(super) fn affine_for(
        &mut self,
        var: &str,
        a: i64,
        b: i64,
        st: i64,
        body: &[Stmt],
    ) -> R<()> {
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

    pub(super) fn barrier(&mut self) -> R<()> {
        self.push0(
            OperationBuilder::new("gpu.barrier", self.loc).build(),
            "gpu.barrier",
        )
    }

    /// `scf.if %c { then }` with no results and no else.
    pub(super) fn scf_if(&mut self, c: MlirValue, then: impl FnOnce(&mut Self) -> R<()>) -> R<()> {
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
    pub(super) fn scf_if_else(&mut self, c: MlirValue, body: &[Stmt], orelse: &[Stmt]) -> R<()> {
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

    /// The CUDA prelude's `irc_warp_reduce` (`width` 32) and `irc_lanes_reduce<width>`: the
    /// butterfly over each group of `width` consecutive lanes.
    pub(super) fn warp_reduce(
        &mut self,
        v: MlirValue,
        d: DType,
        op: ReduceOp,
        width: u32,
    ) -> R<MlirValue> {
        let mut v = v;
        for o in [16i64, 8, 4, 2, 1]
            .into_iter()
            .filter(|&o| o < i64::from(width))
        {
            let other = self.shfl_xor(v, d, o)?;
            v = self.reduce_op(op, d, v, other)?;
        }
        Ok(v)
    }

    /// `vector<shape x elem>`.
    pub(super) fn vector_type(&self, shape: &[i64], elem: Type<'c>) -> Type<'c> {
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
    pub(super) fn copy(
        &mut self,
        width: u32,
        dst: &kir::Frag,
        src: &kir::Frag,
        hint: kir::CacheHint,
    ) -> R<()> {
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
        let bytes = u32::try_from(align).unwrap_or(0);
        let v = match hint.ptx_load(bytes / 4) {
            Some(ptx) => {
                let addr = self.address_of(sm, si, sd.dtype, 64)?;
                self.hinted_load(&ptx, bytes / 4, addr, vty)?
            }
            None => {
                let load = OperationBuilder::new("vector.load", self.loc)
                    .add_operands(&[self.v(sm), self.v(si)])
                    .add_attributes(&[(self.e.id("alignment"), align_attr)])
                    .add_results(&[vty])
                    .build();
                self.push(load, "vector.load")?
            }
        };
        let store = OperationBuilder::new("vector.store", self.loc)
            .add_operands(&[self.v(v), self.v(dm), self.v(di)])
            .add_attributes(&[(self.e.id("alignment"), align_attr)])
            .build();
        self.push0(store, "vector.store")
    }

    /// A copy's hinted global load (`CacheHint::ptx_load` of `regs` 32-bit registers) from
    /// the 64-bit address `addr` as inline assembly, its registers as a vector of type `vty`.
    fn hinted_load(
        &mut self,
        ptx: &str,
        regs: u32,
        addr: MlirValue,
        vty: Type<'c>,
    ) -> R<MlirValue> {
        let mut asm = ptx.to_string();
        for i in (0..=regs).rev() {
            asm = asm.replace(&format!("%{i}"), &format!("${i}"));
        }
        let i32t: Type = IntegerType::new(self.ctx(), 32).into();
        let mut constraints: Vec<&str> = vec!["=r"; regs as usize];
        constraints.push("l");
        let words = if regs == 1 {
            let w = self.inline_asm(&asm, &constraints.join(","), &[addr], Some(i32t))?;
            vec![w.ok_or_else(|| self.unsupported("a hinted load's result"))?]
        } else {
            let st = melior::dialect::llvm::r#type::r#struct(
                self.ctx(),
                &vec![i32t; regs as usize],
                false,
            );
            let s = self.inline_asm(&asm, &constraints.join(","), &[addr], Some(st))?;
            let s = s.ok_or_else(|| self.unsupported("a hinted load's result"))?;
            self.struct_values(s, regs as usize, i32t)?
        };
        let wty = self.vector_type(&[i64::from(regs)], i32t);
        let w = self.vector_from_elements(&words, wty)?;
        let op = OperationBuilder::new("vector.bitcast", self.loc)
            .add_operands(&[self.v(w)])
            .add_results(&[vty])
            .build();
        self.push(op, "vector.bitcast")
    }

    pub(super) fn load_at(&mut self, tensor: &str, coord: Vec<Expr>) -> R<MlirValue> {
        let (v, _) = self.expr(&Expr::Load {
            tensor: tensor.to_string(),
            coord,
        })?;
        Ok(v)
    }
}
