//! The Hopper statements (TMA loads, mbarriers, wgmma, register reallocation, named barriers),
//! the sm_80 asynchronous copies (`cp.async`), and dynamic shared memory.
//!
//! Every statement with only addresses, indices and immediates is written as `llvm.inline_asm`
//! of the PTX the kernel IR's table gives ([`irc_kir::intrinsic::ptx`]): the CUDA emitter writes
//! the same string, so the instruction exists once. `wgmma` builds its matrix descriptors here,
//! as the CUDA emitter's `irc_wgmma_desc` does.

use super::*;
use melior::ir::r#type::IntegerType as IntTy;

impl<'c, 'k> KernelEmitter<'c, 'k> {
    /// The kernel's dynamic shared memory as bytes (`gpu.dynamic_shared_memory`), hoisted.
    fn dynamic_shared_base(&mut self) -> R<MlirValue> {
        let key = CacheKey::Global("__dynamic_shared__".into());
        if let Some(&v) = self.cache.get(&key) {
            return Ok(v);
        }
        let ty = Type::parse(self.ctx(), "memref<?xi8, #gpu.address_space<workgroup>>")
            .ok_or_else(|| self.unsupported("the dynamic shared memory type"))?;
        let op = OperationBuilder::new("gpu.dynamic_shared_memory", self.loc)
            .add_results(&[ty])
            .build();
        let v = self.prologue(op, "gpu.dynamic_shared_memory")?;
        self.cache.insert(key, v);
        Ok(v)
    }

    /// A shared tensor placed at byte `offset` of dynamic shared memory (`memref.view`).
    pub(super) fn dynamic_shared_tensor(&mut self, t: &TensorDecl, offset: u64) -> R<MlirValue> {
        let base = self.dynamic_shared_base()?;
        let n = cosize(self.k, t)?;
        let ty = Type::parse(
            self.ctx(),
            &format!(
                "memref<{n}x{}, #gpu.address_space<workgroup>>",
                self.e.elem_type(t.dtype)
            ),
        )
        .ok_or_else(|| self.unsupported("a dynamic shared tensor type"))?;
        let off = self.index_const(offset as i64)?;
        let op = OperationBuilder::new("memref.view", self.loc)
            .add_operands(&[self.v(base), self.v(off)])
            .add_results(&[ty])
            .build();
        self.prologue(op, "memref.view")
    }

    /// The address of a tensor's element as an integer of `bits` (32: a shared address, 64: a
    /// generic one).
    pub(super) fn address(&mut self, f: &kir::Frag, bits: u32) -> R<MlirValue> {
        let (memref, index, decl) = self.place(&f.tensor, &f.at)?;
        self.address_of(memref, index, decl.dtype, bits)
    }

    /// The address of element `index` (of `dtype`) of `memref`, as an integer of `bits`.
    pub(super) fn address_of(
        &mut self,
        memref: MlirValue,
        index: MlirValue,
        dtype: DType,
        bits: u32,
    ) -> R<MlirValue> {
        let idx = Type::index(self.ctx());
        let op = OperationBuilder::new("memref.extract_aligned_pointer_as_index", self.loc)
            .add_operands(&[self.v(memref)])
            .add_results(&[idx])
            .build();
        let base = self.push(op, "memref.extract_aligned_pointer_as_index")?;
        let size = self.index_const(dtype.size_bytes() as i64)?;
        let bytes = self.push(
            Ok(arith::muli(self.v(index), self.v(size), self.loc)),
            "arith.muli",
        )?;
        let at = self.push(
            Ok(arith::addi(self.v(base), self.v(bytes), self.loc)),
            "arith.addi",
        )?;
        let ty: Type = IntTy::new(self.ctx(), bits).into();
        self.push(
            Ok(arith::index_cast(self.v(at), ty, self.loc)),
            "arith.index_cast",
        )
    }

    /// An index expression as an `i32` operand.
    fn i32_operand(&mut self, e: &Expr) -> R<MlirValue> {
        let (x, _) = self.expr(e)?;
        let i32t: Type = IntTy::new(self.ctx(), 32).into();
        if self.idx_width() == 32 {
            return Ok(x);
        }
        self.push(Ok(arith::trunci(self.v(x), i32t, self.loc)), "arith.trunci")
    }

    /// `llvm.inline_asm has_side_effects asm, constraints operands`, with result `ty`.
    pub(super) fn inline_asm(
        &mut self,
        asm: &str,
        constraints: &str,
        operands: &[MlirValue],
        ty: Option<Type<'c>>,
    ) -> R<Option<MlirValue>> {
        let ops: Vec<Value> = operands.iter().map(|&v| self.v(v)).collect();
        let mut b = OperationBuilder::new("llvm.inline_asm", self.loc)
            .add_operands(&ops)
            .add_attributes(&[
                (
                    self.e.id("asm_string"),
                    StringAttribute::new(self.ctx(), asm).into(),
                ),
                (
                    self.e.id("constraints"),
                    StringAttribute::new(self.ctx(), constraints).into(),
                ),
                (self.e.id("has_side_effects"), Attribute::unit(self.ctx())),
            ]);
        if let Some(t) = ty {
            b = b.add_results(&[t]);
            return self.push(b.build(), "llvm.inline_asm").map(Some);
        }
        self.push0(b.build(), "llvm.inline_asm")?;
        Ok(None)
    }

    /// A table intrinsic of addresses, indices and immediates: its PTX as inline assembly
    /// (LLVM names operand i `$i`).
    fn ptx_intrinsic(&mut self, op: Intrinsic, args: &[kir::Arg]) -> R<()> {
        let Some(ptx) = kir::intrinsic::ptx(op) else {
            return Err(self.unsupported(format!("`{}` has no PTX template", op.name())));
        };
        let mut operands = vec![];
        let mut constraints = vec![];
        let mut asm = ptx.to_string();
        for (i, ((_, kind), a)) in op.info().args.iter().zip(args).enumerate() {
            match (kind, a) {
                (
                    kir::ArgKind::TensorMap | kir::ArgKind::GlobalIn | kir::ArgKind::GlobalAtomic,
                    kir::Arg::Frag(f),
                ) => {
                    operands.push(self.address(f, 64)?);
                    constraints.push("l");
                }
                (_, kir::Arg::Frag(f)) => {
                    operands.push(self.address(f, 32)?);
                    constraints.push("r");
                }
                (kir::ArgKind::Imm, kir::Arg::Expr(Expr::Int(v))) => {
                    // An immediate goes into the text.
                    asm = asm.replace(&format!("%{i}"), &v.to_string());
                    continue;
                }
                (_, kir::Arg::Expr(e)) => {
                    operands.push(self.i32_operand(e)?);
                    constraints.push("r");
                }
            }
            asm = asm.replace(&format!("%{i}"), &format!("${}", operands.len() - 1));
        }
        let mut c = constraints.join(",");
        c.push_str(if c.is_empty() {
            "~{memory}"
        } else {
            ",~{memory}"
        });
        self.inline_asm(&asm, &c, &operands, None)?;
        Ok(())
    }

    /// Accumulators through an empty asm beside a `wgmma.wait` (`kir::WaitFences`), so that
    /// no work on them moves across it.
    pub(super) fn fence_accumulators(&mut self, accs: &[String]) -> R<()> {
        for t in accs {
            let n = cosize(self.k, self.tensors[t.as_str()].decl)?;
            let frag = kir::Frag {
                tensor: t.clone(),
                at: vec![],
            };
            let mut vals = vec![];
            for v in 0..n {
                vals.push(self.load_at(t, vec![Expr::Int(v)])?);
            }
            let out = self.tied_asm("", &vals, &[], "")?;
            for (v, x) in out.into_iter().enumerate() {
                let (memref, index, _) = self.place(&frag.tensor, &[Expr::Int(v as i64)])?;
                let op = memref::store(self.v(x), self.v(memref), &[self.v(index)], self.loc);
                self.push0(Ok(op), "memref.store")?;
            }
        }
        Ok(())
    }

    /// Inline assembly whose first `vals.len()` operands are f32 registers read and written
    /// (`=f` outputs tied to the inputs), followed by `extra` operands of the given
    /// constraints; the new register values.
    fn tied_asm(
        &mut self,
        asm: &str,
        vals: &[MlirValue],
        extra: &[MlirValue],
        extra_constraints: &str,
    ) -> R<Vec<MlirValue>> {
        let n = vals.len();
        let f32t = self.e.elem_type(DType::F32);
        let mut c: Vec<String> = (0..n).map(|_| "=f".to_string()).collect();
        if !extra_constraints.is_empty() {
            c.extend(extra_constraints.split(',').map(str::to_string));
        }
        c.extend((0..n).map(|i| i.to_string()));
        let mut operands: Vec<MlirValue> = extra.to_vec();
        operands.extend(vals);
        let st = melior::dialect::llvm::r#type::r#struct(self.ctx(), &vec![f32t; n], false);
        let Some(s) = self.inline_asm(asm, &c.join(","), &operands, Some(st))? else {
            return Ok(vec![]);
        };
        self.struct_values(s, n, f32t)
    }

    /// The `n` fields (each of type `ty`) of an LLVM struct value (`llvm.extractvalue`).
    pub(super) fn struct_values(
        &mut self,
        s: MlirValue,
        n: usize,
        ty: Type<'c>,
    ) -> R<Vec<MlirValue>> {
        (0..n)
            .map(|v| {
                let op = melior::dialect::llvm::extract_value(
                    self.ctx(),
                    self.v(s),
                    DenseI64ArrayAttribute::new(self.ctx(), &[v as i64]),
                    ty,
                    self.loc,
                );
                self.push(Ok(op), "llvm.extractvalue")
            })
            .collect()
    }

    /// A wgmma matrix descriptor of the shared operand at `f`: start address, leading and
    /// stride byte offsets (16-byte units, 14 bits each) and the 128-byte swizzle (type 1 in
    /// bits 62-63), as an i64.
    fn wgmma_desc(&mut self, f: &kir::Frag, lbo: i64, sbo: i64) -> R<MlirValue> {
        let a = self.address(f, 64)?;
        let c = |s: &mut Self, v: i64| s.int_const(64, v);
        let mask = c(self, 0x3FFFF)?;
        let four = c(self, 4)?;
        let a = self.push(
            Ok(arith::andi(self.v(a), self.v(mask), self.loc)),
            "arith.andi",
        )?;
        let a = self.push(
            Ok(arith::shrui(self.v(a), self.v(four), self.loc)),
            "arith.shrui",
        )?;
        let fixed = (((lbo >> 4) & 0x3FFF) << 16) | (((sbo >> 4) & 0x3FFF) << 32) | (1i64 << 62);
        let fixed = c(self, fixed)?;
        self.push(
            Ok(arith::ori(self.v(a), self.v(fixed), self.loc)),
            "arith.ori",
        )
    }

    /// `wgmma.mma_async.m64nNk16`: `d += a * b`, the N/2 accumulator values tied in and out;
    /// `a` from shared memory through a descriptor, or (`rs`) in registers, its 8 values
    /// packed in pairs into 4 `b32` registers.
    fn wgmma(&mut self, n: u16, rs: bool, args: &[kir::Arg]) -> R<()> {
        let frag = |i: usize| match args.get(i) {
            Some(kir::Arg::Frag(f)) => Ok(f.clone()),
            _ => Err(MlirError::KernelIr(format!("wgmma operand {i}"))),
        };
        let imm = |i: usize| match args.get(i) {
            Some(kir::Arg::Expr(Expr::Int(v))) => Ok(*v),
            _ => Err(MlirError::KernelIr(format!(
                "wgmma operand {i} is not a literal"
            ))),
        };
        let (d, a, b) = (frag(0)?, frag(1)?, frag(2)?);
        let ab = match self.tensors.get(b.tensor.as_str()).map(|t| t.decl.dtype) {
            Some(DType::BF16) => "bf16",
            _ => "f16",
        };
        // `a`'s operands and their asm text, `b`'s descriptor offsets, the transpose flags.
        let values = i64::from(n) / 2;
        let (mut extra, a_text, (b_lbo, b_sbo), flags, acc_at) = if rs {
            let a_f32 =
                self.tensors.get(a.tensor.as_str()).map(|t| t.decl.dtype) == Some(DType::F32);
            let packed = match self.prepacked.pop_front().filter(|_| a_f32) {
                Some(packed) => packed,
                None => self.pack_a(&a, ab, a_f32)?,
            };
            let text: Vec<String> = (0..4).map(|i| format!("${}", values + i)).collect();
            let text = format!("{{{}}}", text.join(", "));
            (packed, text, (4, 5), imm(3)?.to_string(), 6)
        } else {
            let da = self.wgmma_desc(&a, imm(5)?, imm(6)?)?;
            let flags = format!("{}, {}", imm(3)?, imm(4)?);
            (vec![da], format!("${values}"), (7, 8), flags, 9)
        };
        let a_constraints = if rs { "r,r,r,r" } else { "l" };
        let db_at = values + extra.len() as i64;
        extra.push(self.wgmma_desc(&b, imm(b_lbo)?, imm(b_sbo)?)?);
        extra.push(match args.get(acc_at) {
            Some(kir::Arg::Expr(e)) => self.i32_operand(e)?,
            _ => return Err(MlirError::KernelIr(format!("wgmma operand {acc_at}"))),
        });
        let mut vals = vec![];
        for v in 0..values {
            vals.push(self.load_at(&d.tensor, d.coord(v))?);
        }
        // Operands: the outputs $0..$values-1, then `a`, descB, scale-d, then the tied inputs.
        let regs: Vec<String> = (0..values).map(|v| format!("${v}")).collect();
        let asm = format!(
            "{{\n.reg .pred p;\nsetp.ne.b32 p, ${}, 0;\nwgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab} {{{}}}, {a_text}, ${db_at}, p, 1, 1, {flags};\n}}\n",
            db_at + 1,
            regs.join(","),
        );
        let out = self.tied_asm(&asm, &vals, &extra, &format!("{a_constraints},l,r"))?;
        for (v, x) in out.into_iter().enumerate() {
            let (memref, index, _) = self.place(&d.tensor, &d.coord(v as i64))?;
            let op = memref::store(self.v(x), self.v(memref), &[self.v(index)], self.loc);
            self.push0(Ok(op), "memref.store")?;
        }
        Ok(())
    }

    /// The 4 `b32` registers of a `wgmma.rs` operand `a`: pairs of 16-bit values, or of f32
    /// values rounded to `ab` as they are packed (one cvt for both).
    fn pack_a(&mut self, a: &kir::Frag, ab: &str, a_f32: bool) -> R<Vec<MlirValue>> {
        let mut out = vec![];
        for p in 0..4 {
            let lo = self.load_at(&a.tensor, a.coord(2 * p))?;
            let hi = self.load_at(&a.tensor, a.coord(2 * p + 1))?;
            out.push(if a_f32 {
                let i32t: Type = melior::ir::r#type::IntegerType::new(self.ctx(), 32).into();
                let asm = format!("cvt.rn.{ab}x2.f32 $0, $1, $2;");
                let r = self.inline_asm(&asm, "=r,f,f", &[hi, lo], Some(i32t))?;
                r.ok_or_else(|| MlirError::KernelIr("cvt.rn.x2 result".into()))?
            } else {
                self.pack16(lo, hi)?
            });
        }
        Ok(out)
    }

    /// Before a `wgmma.fence`: the f32 `a` operands of the `wgmma.rs` statements up to the next
    /// `wgmma.wait` (or fence), packed (side-effecting asm, so they stay before the fence). Packing
    /// between the asynchronous instructions instead makes ptxas fence and serialize each one.
    pub(super) fn prepack(&mut self, rest: &[Stmt]) -> R<()> {
        for s in rest {
            let Stmt::Intrinsic { op, args } = s else {
                continue;
            };
            match op {
                Intrinsic::WgmmaWait | Intrinsic::WgmmaFence => break,
                Intrinsic::WgmmaRs(_) => {}
                _ => continue,
            }
            let (Some(kir::Arg::Frag(a)), Some(kir::Arg::Frag(b))) = (args.get(1), args.get(2))
            else {
                continue;
            };
            let dtype = |t: &str| self.tensors.get(t).map(|t| t.decl.dtype);
            if dtype(&a.tensor) != Some(DType::F32) {
                continue;
            }
            let ab = match dtype(&b.tensor) {
                Some(DType::BF16) => "bf16",
                _ => "f16",
            };
            let a = a.clone();
            let packed = self.pack_a(&a, ab, true)?;
            self.prepacked.push_back(packed);
        }
        Ok(())
    }

    /// `bar.sync id, threads` as `nvvm.barrier`, which LLVM knows is convergent: as inline
    /// assembly, it could be duplicated into divergent code (a hang seen on a kernel with two
    /// arrival steps in a row, `bench/gpu/NOTES.md` run 75).
    fn named_barrier(&mut self, arrive: bool, args: &[kir::Arg]) -> R<()> {
        let (Some(kir::Arg::Expr(id)), Some(kir::Arg::Expr(n))) = (args.first(), args.get(1))
        else {
            return Err(self.unsupported("bar.sync/bar.arrive take an id and a thread count"));
        };
        let id = self.i32_operand(id)?;
        let n = self.i32_operand(n)?;
        let ops = [self.v(id), self.v(n)];
        if arrive {
            // The convergent LLVM intrinsic (the dialect's `nvvm.barrier.arrive` only lowers to
            // inline asm, which LLVM may duplicate into divergent code).
            let op = OperationBuilder::new("llvm.call_intrinsic", self.loc)
                .add_operands(&ops)
                .add_attributes(&[
                    (
                        self.e.id("intrin"),
                        StringAttribute::new(
                            self.ctx(),
                            "llvm.nvvm.barrier.cta.arrive.aligned.count",
                        )
                        .into(),
                    ),
                    (
                        self.e.id("op_bundle_sizes"),
                        DenseI32ArrayAttribute::new(self.ctx(), &[]).into(),
                    ),
                    (
                        self.e.id("operandSegmentSizes"),
                        DenseI32ArrayAttribute::new(self.ctx(), &[2, 0]).into(),
                    ),
                ])
                .build();
            return self.push0(op, "llvm.call_intrinsic");
        }
        let op = OperationBuilder::new("nvvm.barrier", self.loc)
            .add_operands(&ops)
            .add_attributes(&[(
                self.e.id("operandSegmentSizes"),
                DenseI32ArrayAttribute::new(self.ctx(), &[1, 1, 0]).into(),
            )])
            .build();
        self.push0(op, "nvvm.barrier")
    }

    /// One of the Hopper intrinsics.
    pub(super) fn hopper(&mut self, op: Intrinsic, args: &[kir::Arg]) -> R<()> {
        // The warpgroup-aligned instructions as LLVM's convergent intrinsics (inline assembly
        // is not convergent: LLVM could duplicate it into divergent code).
        let imm = |i: usize| match args.get(i) {
            Some(kir::Arg::Expr(Expr::Int(v))) => Ok(*v),
            _ => Err(MlirError::KernelIr(format!(
                "{} takes an immediate",
                op.name()
            ))),
        };
        match op {
            Intrinsic::Wgmma(n) => self.wgmma(n, false, args),
            Intrinsic::WgmmaRs(n) => self.wgmma(n, true, args),
            Intrinsic::BarSync => self.named_barrier(false, args),
            Intrinsic::BarArrive => self.named_barrier(true, args),
            Intrinsic::WgmmaFence => self.call_intrinsic("llvm.nvvm.wgmma.fence.sync.aligned", &[]),
            Intrinsic::WgmmaCommit => {
                self.call_intrinsic("llvm.nvvm.wgmma.commit_group.sync.aligned", &[])
            }
            Intrinsic::WgmmaWait => {
                let n = self.int_const(64, imm(0)?)?;
                self.call_intrinsic("llvm.nvvm.wgmma.wait_group.sync.aligned", &[n])
            }
            Intrinsic::SetMaxNregInc | Intrinsic::SetMaxNregDec => {
                let n = self.int_const(32, imm(0)?)?;
                let name = match op {
                    Intrinsic::SetMaxNregInc => "llvm.nvvm.setmaxnreg.inc.sync.aligned.u32",
                    _ => "llvm.nvvm.setmaxnreg.dec.sync.aligned.u32",
                };
                self.call_intrinsic(name, &[n])
            }
            _ => self.ptx_intrinsic(op, args),
        }
    }

    /// `llvm.call_intrinsic` of a void LLVM intrinsic.
    fn call_intrinsic(&mut self, name: &str, operands: &[MlirValue]) -> R<()> {
        let op = self.call_intrinsic_op(name, operands, &[]);
        self.push0(op, "llvm.call_intrinsic")
    }
}
