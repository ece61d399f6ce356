//! Warp and block reductions: butterflies of `shfl.sync.bfly`, one value per warp through
//! shared memory.

use super::*;

impl<'c, 'k> KernelEmitter<'c, 'k> {
    /// The CUDA backend's `irc_block_reduce`, step for step so that sums round identically:
    /// a butterfly over each warp (`shfl.sync.bfly`), one value per warp through shared memory,
    /// then every thread folds the warps' values in order.
    pub(super) fn block_reduce(&mut self, v: MlirValue, d: DType, op: ReduceOp) -> R<MlirValue> {
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

    pub(super) fn reduce_op(
        &mut self,
        op: ReduceOp,
        d: DType,
        a: MlirValue,
        b: MlirValue,
    ) -> R<MlirValue> {
        let f = match op {
            ReduceOp::Sum => Func::Add,
            ReduceOp::Max => Func::Max,
            ReduceOp::Min => Func::Min,
        };
        self.call(f, d, &[a, b])
    }

    /// `__shfl_xor_sync(0xffffffff, v, o)`; 64-bit values as two 32-bit shuffles, as CUDA does.
    pub(super) fn shfl_xor(&mut self, v: MlirValue, d: DType, o: i64) -> R<MlirValue> {
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
    pub(super) fn shfl32(&mut self, v: MlirValue, kind: &str, o: i64) -> R<MlirValue> {
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
}
