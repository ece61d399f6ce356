//! Tensor-core fragments: `mma.m16n8k16` and `ldmatrix` (the kernel IR's intrinsics), vector
//! packing.

use super::*;

impl<'c, 'k> KernelEmitter<'c, 'k> {
    /// `mma.m16n8k16`: `d += a * b` on one warp's fragments (a: 8 values, b: 4, d: 4, in the
    /// PTX fragment order). f16 through `nvgpu.mma.sync`; bf16 through the NVVM intrinsic, as
    /// MLIR 22's `nvgpu.mma.sync` does not lower bf16 operands.
    pub(super) fn mma(&mut self, d: &kir::Frag, a: &kir::Frag, b: &kir::Frag) -> R<()> {
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
                    args.push(self.pack16(pair[0], pair[1])?);
                }
                args.extend(&cv);
                out = self.mma_intrinsic("llvm.nvvm.mma.m16n8k16.row.col.bf16", &args)?;
            }
            other => return Err(self.unsupported(format!("mma of {other}"))),
        }
        self.store_fragment(d, out)
    }

    /// `llvm.call_intrinsic` of an NVVM mma returning `{f32, f32, f32, f32}`, as its four values.
    fn mma_intrinsic(&mut self, name: &str, args: &[MlirValue]) -> R<Vec<MlirValue>> {
        let f32t = self.e.elem_type(DType::F32);
        let st = melior::dialect::llvm::r#type::r#struct(self.ctx(), &[f32t; 4], false);
        let s = self.intrinsic(name, args, st)?;
        self.struct_values(s, 4, f32t)
    }

    /// Stores `values` as values 0, 1, ... of the fragment `d`.
    fn store_fragment(&mut self, d: &kir::Frag, values: Vec<MlirValue>) -> R<()> {
        for (v, x) in values.into_iter().enumerate() {
            let (memref, index, _) = self.place(&d.tensor, &d.coord(v as i64))?;
            let op = memref::store(self.v(x), self.v(memref), &[self.v(index)], self.loc);
            self.push0(Ok(op), "memref.store")?;
        }
        Ok(())
    }

    /// `mma.m16n8k8.tf32` as `llvm.nvvm.mma.m16n8k8.row.col.tf32`: a and b's f32 values (TF32
    /// already) as their bits, the accumulator as four f32s.
    pub(super) fn mma_tf32(&mut self, d: &kir::Frag, a: &kir::Frag, b: &kir::Frag) -> R<()> {
        let i32t: Type = IntegerType::new(self.ctx(), 32).into();
        let mut args = Vec::new();
        for (f, n) in [(a, 4), (b, 2)] {
            for v in 0..n {
                let x = self.load_at(&f.tensor, f.coord(v))?;
                args.push(self.push(
                    Ok(arith::bitcast(self.v(x), i32t, self.loc)),
                    "arith.bitcast",
                )?);
            }
        }
        for v in 0..4 {
            args.push(self.load_at(&d.tensor, d.coord(v))?);
        }
        let out = self.mma_intrinsic("llvm.nvvm.mma.m16n8k8.row.col.tf32", &args)?;
        self.store_fragment(d, out)
    }

    /// `ldmatrix.x4[.trans]` as `nvgpu.ldmatrix` from the shared row this thread provides
    /// (`src` at its full coordinate); register j (row j of the `vector<4x2>`) holds values 2j
    /// and 2j + 1 of the destination fragment.
    pub(super) fn ldmatrix(&mut self, trans: bool, dst: &kir::Frag, src: &kir::Frag) -> R<()> {
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
            self.extract_to(r, &[v / 2, v % 2], et, dst, v)?;
        }
        Ok(())
    }

    /// `vector.extract` of `r` at `at` (of element type `et`), stored to value `v` of the
    /// fragment `dst`.
    fn extract_to(
        &mut self,
        r: MlirValue,
        at: &[i64],
        et: Type<'c>,
        dst: &kir::Frag,
        v: i64,
    ) -> R<()> {
        let op = OperationBuilder::new("vector.extract", self.loc)
            .add_operands(&[self.v(r)])
            .add_attributes(&[(
                self.e.id("static_position"),
                DenseI64ArrayAttribute::new(self.ctx(), at).into(),
            )])
            .add_results(&[et])
            .build();
        let x = self.push(op, "vector.extract")?;
        let (memref, index, _) = self.place(&dst.tensor, &dst.coord(v))?;
        let op = memref::store(self.v(x), self.v(memref), &[self.v(index)], self.loc);
        self.push0(Ok(op), "memref.store")
    }

    pub(super) fn vector_from_elements(
        &mut self,
        elems: &[MlirValue],
        ty: Type<'c>,
    ) -> R<MlirValue> {
        let operands: Vec<Value> = elems.iter().map(|&x| self.v(x)).collect();
        let op = OperationBuilder::new("vector.from_elements", self.loc)
            .add_operands(&operands)
            .add_results(&[ty])
            .build();
        self.push(op, "vector.from_elements")
    }

    /// `mul.x2`: the two values of `a` times those of `b` as one `vector<2xT>` multiply (one
    /// `fma.rn.{f16,bf16}x2` in PTX), stored to `dst`'s two values.
    pub(super) fn mul2(&mut self, dst: &kir::Frag, a: &kir::Frag, b: &kir::Frag) -> R<()> {
        let pair = |s: &mut Self, f: &kir::Frag| -> R<MlirValue> {
            let x = s.load_at(&f.tensor, f.coord(0))?;
            let y = s.load_at(&f.tensor, f.coord(1))?;
            let ty = s.type_of(x);
            let vty = s.vector_type(&[2], ty);
            s.vector_from_elements(&[x, y], vty)
        };
        let (va, vb) = (pair(self, a)?, pair(self, b)?);
        let r = self.bin("arith.mulf", va, vb)?;
        let et = {
            let (_, _, d) = self.place(&dst.tensor, &dst.coord(0))?;
            self.e.elem_type(d.dtype)
        };
        for v in 0..2 {
            self.extract_to(r, &[v], et, dst, v)?;
        }
        Ok(())
    }

    /// `irc_pack(lo, hi)` of two 16-bit values (f16 or bf16): `lo` in the low 16 bits of an `i32`.
    pub(super) fn pack16(&mut self, lo: MlirValue, hi: MlirValue) -> R<MlirValue> {
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
}
