//! The Hopper `wgmma` statements: one inline-asm block per instruction with the accumulator's
//! values tied in and out, `b` (and `a` from shared memory) through matrix descriptors, or
//! `a` in registers (`wgmma.rs`): 16-bit pairs, or f32 values rounded pairwise as they are
//! packed, ahead of the `wgmma.fence` ([`KernelEmitter::prepack`]).

use super::*;

impl KernelEmitter<'_> {
    /// Before a `wgmma.fence`: the f32 `a` operands of the `wgmma.rs` statements up to the next
    /// `wgmma.wait` (or fence), rounded and packed into registers (volatile, so they stay
    /// before the fence). Packing between the asynchronous instructions instead makes ptxas
    /// fence and serialize each one.
    pub(super) fn prepack(&mut self, rest: &[Stmt], depth: usize) {
        let pad = "  ".repeat(depth);
        for s in rest {
            let Stmt::Intrinsic { op, args } = s else {
                continue;
            };
            match op {
                Intrinsic::WgmmaWait | Intrinsic::WgmmaFence => break,
                Intrinsic::WgmmaRs(_) => {}
                _ => continue,
            }
            let (Some(a), Some(b)) = (args[1].frag(), args[2].frag()) else {
                continue;
            };
            let (ta, tb) = (
                self.tensors[a.tensor.as_str()],
                self.tensors[b.tensor.as_str()],
            );
            if ta.dtype != DType::F32 {
                continue;
            }
            let ab = ab_name(tb.dtype);
            let mut names = vec![];
            for p in 0..4 {
                let name = format!("pk{}", self.packs);
                self.packs += 1;
                let packed = self.pair(&format!("irc_pack_{ab}"), a, p);
                let _ = writeln!(self.out, "{pad}const unsigned {name} = {packed};");
                names.push(name);
            }
            self.prepacked.push_back(names);
        }
    }

    /// `wgmma.mma_async.m64nNk16`: `a` from shared memory, or (`rs`) from registers. The
    /// operands of the asm: the N/2 accumulator values, then `a` (a descriptor, or 4 packed
    /// registers), `b`'s descriptor and the `acc` predicate's value.
    pub(super) fn wgmma(&mut self, n: u16, rs: bool, args: &[kir::Arg], pad: &str) {
        let (Some(d), Some(a), Some(b)) = (args[0].frag(), args[1].frag(), args[2].frag()) else {
            return;
        };
        let imm = |i: usize| match args.get(i) {
            Some(kir::Arg::Expr(Expr::Int(v))) => *v,
            _ => 0,
        };
        let acc = match args.get(if rs { 6 } else { 9 }) {
            Some(kir::Arg::Expr(e)) => self.expr(e),
            _ => "1".to_string(),
        };
        let (ta, tb, td) = (
            self.tensors[a.tensor.as_str()],
            self.tensors[b.tensor.as_str()],
            self.tensors[d.tensor.as_str()],
        );
        let ab = ab_name(tb.dtype);
        let values = i64::from(n) / 2;
        let outs: Vec<String> = (0..values)
            .map(|v| format!("\"+f\"({})", self.place(td, &d.coord(v))))
            .collect();
        let regs: Vec<String> = (0..values).map(|v| format!("%{v}")).collect();
        let _ = writeln!(self.out, "{pad}{{");
        // `a`'s asm text and inputs; `b`'s descriptor offsets and the transpose flags.
        let (a_text, a_ins, b_offsets, flags) = if rs {
            let pre = if ta.dtype == DType::F32 {
                self.prepacked.pop_front()
            } else {
                None
            };
            let packed: Vec<String> = match pre {
                Some(names) => names,
                None => {
                    // f32 values are rounded to b's type as they are packed.
                    let pack = if ta.dtype == DType::F32 {
                        format!("irc_pack_{ab}")
                    } else {
                        "irc_pack".to_string()
                    };
                    (0..4).map(|p| self.pair(&pack, a, p)).collect()
                }
            };
            let text: Vec<String> = (0..4).map(|i| format!("%{}", values + i)).collect();
            (
                format!("{{{}}}", text.join(", ")),
                packed.iter().map(|r| format!("\"r\"({r})")).collect(),
                (imm(4), imm(5)),
                imm(3).to_string(),
            )
        } else {
            let da = self.descriptor(ta, &a.at, imm(5), imm(6));
            let _ = writeln!(self.out, "{pad}  const unsigned long long da = {da};");
            (
                format!("%{values}"),
                vec!["\"l\"(da)".to_string()],
                (imm(7), imm(8)),
                format!("{}, {}", imm(3), imm(4)),
            )
        };
        let db = self.descriptor(tb, &b.at, b_offsets.0, b_offsets.1);
        let _ = writeln!(self.out, "{pad}  const unsigned long long db = {db};");
        let db_at = values + a_ins.len() as i64;
        let _ = writeln!(
            self.out,
            "{pad}  asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{}, 0;\\nwgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab} {{{}}}, {a_text}, %{db_at}, p, 1, 1, {flags};\\n}}\\n\" : {} : {}, \"l\"(db), \"r\"((unsigned)({acc})));",
            db_at + 1,
            regs.join(","),
            outs.join(", "),
            a_ins.join(", "),
        );
        let _ = writeln!(self.out, "{pad}}}");
    }

    /// The matrix descriptor of `t` at `at`. A constant part of the offset that is whole
    /// 16-byte units is added to the descriptor of the rest (`irc_wgmma_desc_add`), so the
    /// k-steps of one tile share one descriptor computation and each adds an immediate: built
    /// whole for each instruction, the descriptors' dependent integer operations delayed every
    /// `wgmma`'s issue (`bench/gpu/NOTES.md`, run 138).
    fn descriptor(&self, t: &kir::TensorDecl, at: &[Expr], lbo: i64, sbo: i64) -> String {
        let off = self.offset(t, at);
        let (rest, c) = split_constant(&off);
        let bytes = c * t.dtype.size_bytes() as i64;
        if c > 0 && bytes % 16 == 0 {
            let base = self.element(t, &rest);
            return format!(
                "irc_wgmma_desc_add(irc_wgmma_desc(&{base}, {lbo}, {sbo}), {}u)",
                bytes / 16
            );
        }
        let at = self.element(t, &off);
        format!("irc_wgmma_desc(&{at}, {lbo}, {sbo})")
    }
}

/// `e` as `rest + c` with `c` the sum of its top-level constant terms.
fn split_constant(e: &Expr) -> (Expr, i64) {
    match e {
        Expr::Int(v) => (Expr::Int(0), *v),
        Expr::Idx(irc_kir::IdxOp::Add, a, b) => {
            let ((ra, ca), (rb, cb)) = (split_constant(a), split_constant(b));
            let rest = match (ra, rb) {
                (Expr::Int(0), r) | (r, Expr::Int(0)) => r,
                (ra, rb) => Expr::Idx(irc_kir::IdxOp::Add, Box::new(ra), Box::new(rb)),
            };
            (rest, ca + cb)
        }
        _ => (e.clone(), 0),
    }
}

/// The PTX type name of a 16-bit float operand.
fn ab_name(d: DType) -> &'static str {
    if d == DType::BF16 { "bf16" } else { "f16" }
}
