//! Scalar expressions: index arithmetic, the element functions with the interpreter's numerics
//! (NaN-propagating max/min, activations, IEEE square roots), conversions with saturation.

use super::*;

impl<'c, 'k> KernelEmitter<'c, 'k> {
    /// IEEE square root (`sqrt.rn`), as CUDA's `sqrtf`/`sqrt` compile. Not `math.sqrt`: the
    /// GPU-to-NVVM conversion turns it into libdevice's `__nv_sqrtf`, which is the approximate
    /// `sqrt.approx` unless `__CUDA_PREC_SQRT` is reflected, and it rejects `llvm.intr.sqrt`.
    pub(super) fn sqrt_rn(&mut self, d: DType, x: MlirValue) -> R<MlirValue> {
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
    pub(super) fn intrinsic(
        &mut self,
        name: &str,
        args: &[MlirValue],
        ty: Type<'c>,
    ) -> R<MlirValue> {
        let op = self.call_intrinsic_op(name, args, &[ty]);
        self.push(op, "llvm.call_intrinsic")
    }

    /// The `llvm.call_intrinsic` op of `name` with `results` (none: a void intrinsic).
    pub(super) fn call_intrinsic_op(
        &self,
        name: &str,
        args: &[MlirValue],
        results: &[Type<'c>],
    ) -> Result<Operation<'c>, melior::Error> {
        let operands: Vec<Value> = args.iter().map(|&a| self.v(a)).collect();
        OperationBuilder::new("llvm.call_intrinsic", self.loc)
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
            .add_results(results)
            .build()
    }

    /// A thread or block coordinate as a 32-bit integer (`nvvm.read.ptx.sreg.*`), hoisted.
    pub(super) fn sreg(&mut self, name: &'static str) -> R<MlirValue> {
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

    pub(super) fn expr(&mut self, e: &Expr) -> R<(MlirValue, Ty)> {
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
                    IdxOp::Xor => (arith::xori(x, y, loc), Ty::Idx),
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
                // An integer literal converted: a constant of the type itself, so that one
                // beyond a 32-bit index (an i64 reduction's identity) needs no index value.
                if let [Expr::Int(v)] = args.as_slice() {
                    let c = match d {
                        DType::I64 => self.int_const(64, *v)?,
                        DType::I32 => self.int_const(32, i64::from(*v as i32))?,
                        DType::I1 => self.int_const(1, i64::from(*v != 0))?,
                        _ => self.elem_const(*d, *v as f64)?,
                    };
                    return Ok((c, Ty::Elem(*d)));
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
                if f.is_compare() || *f == Func::Index {
                    return self.compare_or_index(*f, &vals, &tys);
                }
                // The result type: the value operands' (select's are the last two).
                let t = *tys.last().unwrap_or(&Ty::Idx);
                if *f == Func::Select && t == Ty::Idx && vals.len() == 3 {
                    return Ok((self.select(vals[0], vals[1], vals[2])?, t));
                }
                let Ty::Elem(d) = t else {
                    return Err(self.unsupported(format!("{} of an index", f.name())));
                };
                Ok((self.call(*f, d, &vals)?, t))
            }
        }
    }

    /// The memref, `index`-typed offset and declaration of `tensor[coord]`; the offset is
    /// [`kir::offset_expr`] of the tensor's layout plus its base offset.
    pub(super) fn place(
        &mut self,
        tensor: &str,
        coord: &[Expr],
    ) -> R<(MlirValue, MlirValue, &'k TensorDecl)> {
        let Some(info) = self.tensors.get(tensor) else {
            return Err(self.unsupported(format!("undefined tensor %{tensor}")));
        };
        let (memref, decl) = (info.memref, info.decl);
        let off = decl
            .offset_at(coord)
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

    pub(super) fn un(&mut self, name: &str, x: MlirValue) -> R<MlirValue> {
        let t = self.type_of(x);
        let op = OperationBuilder::new(name, self.loc)
            .add_operands(&[self.v(x)])
            .add_results(&[t])
            .build();
        self.push(op, name)
    }

    pub(super) fn bin(&mut self, name: &str, x: MlirValue, y: MlirValue) -> R<MlirValue> {
        let t = self.type_of(x);
        let op = OperationBuilder::new(name, self.loc)
            .add_operands(&[self.v(x), self.v(y)])
            .add_results(&[t])
            .build();
        self.push(op, name)
    }

    pub(super) fn cmpf(&mut self, p: CmpfPredicate, x: MlirValue, y: MlirValue) -> R<MlirValue> {
        let op = arith::cmpf(self.ctx(), p, self.v(x), self.v(y), self.loc);
        self.push(Ok(op), "arith.cmpf")
    }

    pub(super) fn cmpi(&mut self, p: CmpiPredicate, x: MlirValue, y: MlirValue) -> R<MlirValue> {
        let op = arith::cmpi(self.ctx(), p, self.v(x), self.v(y), self.loc);
        self.push(Ok(op), "arith.cmpi")
    }

    pub(super) fn select(&mut self, c: MlirValue, a: MlirValue, b: MlirValue) -> R<MlirValue> {
        let op = arith::select(self.v(c), self.v(a), self.v(b), self.loc);
        self.push(Ok(op), "arith.select")
    }

    /// `irc_max`/`irc_min` on floats: NaN if either is NaN (the first NaN), else `a > b ? a : b`
    /// (`<` for min), exactly as the CUDA prelude, signed zeros included.
    pub(super) fn fmax_min(&mut self, max: bool, a: MlirValue, b: MlirValue) -> R<MlirValue> {
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
    pub(super) fn one_plus_exp_neg(&mut self, d: DType, x: MlirValue) -> R<MlirValue> {
        let n = self.un("arith.negf", x)?;
        let e = self.un("math.exp", n)?;
        let one = self.elem_const(d, 1.0)?;
        self.bin("arith.addf", one, e)
    }

    /// A comparison (`arith.cmpf` with the ordered predicates, `une` for `ne`, as PyTorch: false
    /// with a NaN operand except `ne`; `arith.cmpi` signed on integers), or `idx(x)`, an integer
    /// element as an index.
    fn compare_or_index(&mut self, f: Func, vals: &[MlirValue], tys: &[Ty]) -> R<(MlirValue, Ty)> {
        let Some(&Ty::Elem(d)) = tys.first() else {
            return Err(self.unsupported(format!("{} of an index", f.name())));
        };
        let x = vals[0];
        if f == Func::Index {
            let to = match self.k.index {
                IndexWidth::I32 => DType::I32,
                IndexWidth::I64 => DType::I64,
            };
            return Ok((self.convert(x, d, to)?, Ty::Idx));
        }
        let Some(&y) = vals.get(1) else {
            return Err(self.unsupported(format!("{} takes two arguments", f.name())));
        };
        let r = if d.is_float() {
            let p = match f {
                Func::Eq => CmpfPredicate::Oeq,
                Func::Ne => CmpfPredicate::Une,
                Func::Lt => CmpfPredicate::Olt,
                Func::Le => CmpfPredicate::Ole,
                Func::Gt => CmpfPredicate::Ogt,
                _ => CmpfPredicate::Oge,
            };
            self.cmpf(p, x, y)?
        } else {
            let p = match f {
                Func::Eq => CmpiPredicate::Eq,
                Func::Ne => CmpiPredicate::Ne,
                Func::Lt => CmpiPredicate::Slt,
                Func::Le => CmpiPredicate::Sle,
                Func::Gt => CmpiPredicate::Sgt,
                _ => CmpiPredicate::Sge,
            };
            self.cmpi(p, x, y)?
        };
        Ok((r, Ty::Elem(DType::I1)))
    }

    /// A kernel IR function on values of dtype `d` (f32, f64, or i32/i64 where defined).
    pub(super) fn call(&mut self, f: Func, d: DType, a: &[MlirValue]) -> R<MlirValue> {
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
            (Func::MaxNum, true) => self.bin("arith.maxnumf", x, need_y()?),
            (Func::Min, false) => self.bin("arith.minsi", x, need_y()?),
            (Func::Pow, true) => self.bin("math.powf", x, need_y()?),
            (Func::Select, _) => {
                let (Some(t), Some(e)) = (arg(1), arg(2)) else {
                    return Err(self.unsupported("select takes three arguments"));
                };
                self.select(x, t, e)
            }
            (Func::Neg, true) => self.un("arith.negf", x),
            // `not` then `add 1`, opaque to LLVM (which would make it `neg` again): ptxas 13.0
            // drops one negation when it folds three negated integers into sm_90's `VIMNMX3`,
            // and keeps inversions (bench/gpu/NOTES.md, session 29).
            (Func::Neg, false) if matches!(d, DType::I32 | DType::I64) => {
                let (asm, constraints) = match d {
                    DType::I64 => ("not.b64 $0, $1; add.s64 $0, $0, 1;", "=l,l"),
                    _ => ("not.b32 $0, $1; add.s32 $0, $0, 1;", "=r,r"),
                };
                let t = self.e.elem_type(d);
                let r = self.inline_asm(asm, constraints, &[x], Some(t))?;
                r.ok_or_else(|| self.unsupported("integer negation result"))
            }
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
            // 2^x by the SFU alone, as the CUDA prelude's `irc_exp2`.
            (Func::Exp2, true) if d == DType::F32 => {
                let f32t = self.e.elem_type(DType::F32);
                let r = self.inline_asm("ex2.approx.ftz.f32 $0, $1;", "=f,f", &[x], Some(f32t))?;
                r.ok_or_else(|| self.unsupported("ex2.approx result"))
            }
            (Func::Exp2, true) => self.un("math.exp2", x),
            // `cvt.rna.tf32.f32`, as the CUDA prelude's `irc_tf32`.
            (Func::Tf32, true) if d == DType::F32 => {
                let i32t: Type = IntegerType::new(self.ctx(), 32).into();
                let r = self.inline_asm("cvt.rna.tf32.f32 $0, $1;", "=r,f", &[x], Some(i32t))?;
                let r = r.ok_or_else(|| self.unsupported("cvt.rna.tf32 result"))?;
                let f32t = self.e.elem_type(DType::F32);
                self.push(
                    Ok(arith::bitcast(self.v(r), f32t, self.loc)),
                    "arith.bitcast",
                )
            }
            (Func::Log, true) => self.un("math.log", x),
            (Func::Tanh, true) => self.un("math.tanh", x),
            (Func::Erf, true) => self.un("math.erf", x),
            (Func::Sin, true) => self.un("math.sin", x),
            (Func::Cos, true) => self.un("math.cos", x),
            (Func::Floor, true) => self.un("math.floor", x),
            (Func::Ceil, true) => self.un("math.ceil", x),
            (Func::Round, true) => self.un("math.roundeven", x),
            (Func::Sqrt, true) => self.sqrt_rn(d, x),
            (Func::Rsqrt, true) => {
                let s = self.sqrt_rn(d, x)?;
                let one = self.elem_const(d, 1.0)?;
                self.bin("arith.divf", one, s)
            }
            // The SFU's approximate reciprocal, as the CUDA prelude's `irc_rcp`.
            (Func::Rcp, true) if d == DType::F32 => {
                let f32t = self.e.elem_type(DType::F32);
                let r = self.inline_asm("rcp.approx.ftz.f32 $0, $1;", "=f,f", &[x], Some(f32t))?;
                r.ok_or_else(|| self.unsupported("rcp.approx result"))
            }
            (Func::Recip | Func::Rcp, true) => {
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
    pub(super) fn convert(&mut self, x: MlirValue, from: DType, to: DType) -> R<MlirValue> {
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
    pub(super) fn float_to_int(&mut self, x: MlirValue, from: DType, to: DType) -> R<MlirValue> {
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
