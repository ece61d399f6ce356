//! The kernel IR's intrinsics as inline PTX: the rows of the table whose operands are
//! addresses, indices and immediates (`irc_kir::intrinsic::ptx`, written once for both
//! emitters), and the register-fragment instructions each emitter builds from its own values:
//! `ldmatrix`, `mma.sync`, `mul.x2`, and the Hopper `wgmma` (`hopper.rs`).

use super::*;

impl KernelEmitter<'_> {
    /// One intrinsic of the kernel IR's table, as inline PTX.
    pub(super) fn intrinsic(&mut self, op: Intrinsic, args: &[kir::Arg], pad: &str) {
        let frag = |i: usize| match &args[i] {
            kir::Arg::Frag(f) => f.clone(),
            kir::Arg::Expr(_) => kir::Frag {
                tensor: String::new(),
                at: vec![],
            },
        };
        match op {
            Intrinsic::LdmatrixX4 | Intrinsic::LdmatrixX4Trans => {
                let (dst, src) = (frag(0), frag(1));
                let ts = self.tensors[src.tensor.as_str()];
                let addr = self.place(ts, &src.at);
                let td = self.tensors[dst.tensor.as_str()];
                let t = if op == Intrinsic::LdmatrixX4Trans {
                    ".trans"
                } else {
                    ""
                };
                let _ = writeln!(self.out, "{pad}{{");
                let _ = writeln!(self.out, "{pad}  unsigned r0, r1, r2, r3;");
                let _ = writeln!(
                    self.out,
                    "{pad}  asm volatile(\"ldmatrix.sync.aligned.m8n8.x4{t}.shared.b16 {{%0,%1,%2,%3}}, [%4];\" : \"=r\"(r0), \"=r\"(r1), \"=r\"(r2), \"=r\"(r3) : \"r\"((unsigned)__cvta_generic_to_shared(&{addr})));"
                );
                let dt = td.dtype.name();
                for j in 0..4i64 {
                    let lo = self.place(td, &dst.coord(2 * j));
                    let hi = self.place(td, &dst.coord(2 * j + 1));
                    let _ = writeln!(
                        self.out,
                        "{pad}  {lo} = irc_lo_{dt}(r{j}); {hi} = irc_hi_{dt}(r{j});"
                    );
                }
                let _ = writeln!(self.out, "{pad}}}");
            }
            Intrinsic::Mul2 => {
                // One packed instruction; the packs and halves are register moves ptxas folds.
                let (d, a, b) = (frag(0), frag(1), frag(2));
                let td = self.tensors[d.tensor.as_str()];
                let dt = td.dtype.name();
                let (pa, pb) = (self.pair("irc_pack", &a, 0), self.pair("irc_pack", &b, 0));
                let (lo, hi) = (self.place(td, &d.coord(0)), self.place(td, &d.coord(1)));
                let _ = writeln!(
                    self.out,
                    "{pad}{{ unsigned r; asm(\"fma.rn.{dt}x2 %0, %1, %2, %3;\" : \"=r\"(r) : \"r\"({pa}), \"r\"({pb}), \"r\"(0x80008000u)); {lo} = irc_lo_{dt}(r); {hi} = irc_hi_{dt}(r); }}"
                );
            }
            Intrinsic::MbarrierInit
            | Intrinsic::MbarrierExpectTx
            | Intrinsic::MbarrierArrive
            | Intrinsic::MbarrierWait
            | Intrinsic::FenceBarrierInit
            | Intrinsic::TmaLoad2d
            | Intrinsic::TmaLoad3d
            | Intrinsic::TmaLoad4d
            | Intrinsic::TmaLoad5d
            | Intrinsic::WgmmaFence
            | Intrinsic::WgmmaCommit
            | Intrinsic::WgmmaWait
            | Intrinsic::SetMaxNregInc
            | Intrinsic::SetMaxNregDec
            | Intrinsic::BarSync
            | Intrinsic::BarArrive
            | Intrinsic::CpAsync16
            | Intrinsic::CpAsync8
            | Intrinsic::CpAsync4
            | Intrinsic::CpAsyncCommit
            | Intrinsic::CpAsyncWait
            | Intrinsic::AtomicArrive
            | Intrinsic::FenceGpu
            | Intrinsic::FenceProxyAsync
            | Intrinsic::CounterWait => {
                let Some(ptx) = kir::intrinsic::ptx(op) else {
                    return;
                };
                // Operands in the table's order: shared addresses as 32-bit "r", a tensor
                // map's or a global source's generic address as "l", indices as "r",
                // immediates as "n".
                let mut ins = vec![];
                for ((_, kind), a) in op.info().args.iter().zip(args) {
                    ins.push(match (kind, a) {
                        (
                            kir::ArgKind::TensorMap
                            | kir::ArgKind::GlobalIn
                            | kir::ArgKind::GlobalAtomic,
                            kir::Arg::Frag(f),
                        ) => {
                            let addr = self.place(self.tensors[f.tensor.as_str()], &f.at);
                            format!("\"l\"((unsigned long long)&{addr})")
                        }
                        (_, kir::Arg::Frag(f)) => {
                            let addr = self.place(self.tensors[f.tensor.as_str()], &f.at);
                            format!("\"r\"((unsigned)__cvta_generic_to_shared(&{addr}))")
                        }
                        (kir::ArgKind::Imm, kir::Arg::Expr(e)) => {
                            format!("\"n\"({})", self.expr(e))
                        }
                        (_, kir::Arg::Expr(e)) => format!("\"r\"((unsigned)({}))", self.expr(e)),
                    });
                }
                let asm = ptx.replace('\n', "\\n");
                // Every one orders memory (barriers, async copies, fences).
                let clobber = " : \"memory\"";
                if ins.is_empty() {
                    let _ = writeln!(self.out, "{pad}asm volatile(\"{asm}\" ::: \"memory\");");
                } else {
                    let _ = writeln!(
                        self.out,
                        "{pad}asm volatile(\"{asm}\" :: {}{clobber});",
                        ins.join(", ")
                    );
                }
            }
            Intrinsic::Wgmma(n) => self.wgmma(n, false, args, pad),
            Intrinsic::WgmmaRs(n) => self.wgmma(n, true, args, pad),
            Intrinsic::MmaM16n8k16 | Intrinsic::MmaM16n8k8Tf32 => {
                let (d, a, b) = (&frag(0), &frag(1), &frag(2));
                let at = |f: &kir::Frag, v: i64| {
                    self.place(self.tensors[f.tensor.as_str()], &f.coord(v))
                };
                // The shape and types, and the 32-bit registers of a (4) and b (2): 16-bit
                // values packed in pairs, or f32 values holding TF32 as their bits.
                let (shape, regs): (String, Vec<String>) = if op == Intrinsic::MmaM16n8k8Tf32 {
                    let regs = (0..4).map(|v| at(a, v)).chain((0..2).map(|v| at(b, v)));
                    (
                        "m16n8k8.row.col.f32.tf32.tf32.f32".into(),
                        regs.map(|r| format!("__float_as_uint({r})")).collect(),
                    )
                } else {
                    let ab = if self.tensors[a.tensor.as_str()].dtype == DType::BF16 {
                        "bf16"
                    } else {
                        "f16"
                    };
                    let pairs = [(a, 0), (a, 1), (a, 2), (a, 3), (b, 0), (b, 1)];
                    (
                        format!("m16n8k16.row.col.f32.{ab}.{ab}.f32"),
                        pairs
                            .iter()
                            .map(|&(f, p)| self.pair("irc_pack", f, p))
                            .collect(),
                    )
                };
                let rd: Vec<String> = (0..4).map(|v| format!("\"+f\"({})", at(d, v))).collect();
                let ins: Vec<String> = regs.iter().map(|r| format!("\"r\"({r})")).collect();
                let _ = writeln!(
                    self.out,
                    "{pad}asm volatile(\"mma.sync.aligned.{shape} {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};\" : {} : {});",
                    rd.join(", "),
                    ins.join(", ")
                );
            }
        }
    }

    /// Values `2p` and `2p + 1` of fragment `f` packed into one 32-bit register by `pack`
    /// (`irc_pack` for 16-bit values, `irc_pack_f16`/`irc_pack_bf16` rounding f32 ones).
    pub(super) fn pair(&self, pack: &str, f: &kir::Frag, p: i64) -> String {
        let t = self.tensors[f.tensor.as_str()];
        format!(
            "{pack}({}, {})",
            self.place(t, &f.coord(2 * p)),
            self.place(t, &f.coord(2 * p + 1))
        )
    }
}
