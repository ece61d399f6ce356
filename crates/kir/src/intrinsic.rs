//! The intrinsics: target instructions of the kernel IR, declared once in [`INTRINSICS`].
//!
//! A row gives the mnemonic the text form uses, a one-sentence meaning, the operands with how
//! each is accessed ([`ArgKind`]) and a typing check beyond the operand kinds. The printer, the
//! parser, the verifier and [`written_tensors`](crate::written_tensors) read the table; an
//! emitter has one case per intrinsic. Adding an instruction (Hopper's wgmma, TMA and mbarrier
//! are next) is one row here plus its case in each emitter.

use crate::{Expr, Frag, TensorDecl};
use irc_ir::DType;

/// An operand of an intrinsic.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// A tensor at a coordinate (a fragment's modes after mode 0, or a full coordinate).
    Frag(Frag),
    /// An index expression.
    Expr(Expr),
}

impl Arg {
    pub fn frag(&self) -> Option<&Frag> {
        match self {
            Arg::Frag(f) => Some(f),
            Arg::Expr(_) => None,
        }
    }
}

/// How an intrinsic accesses an operand.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// A register fragment with this many values in mode 0, indexed at its other modes; written.
    RegOut(i64),
    /// Likewise, read.
    RegIn(i64),
    /// Likewise, read and written (an accumulator).
    RegInOut(i64),
    /// A shared tensor (or a view of one) at a full coordinate, read.
    SharedIn,
    /// An index expression.
    Index,
}

impl ArgKind {
    /// Whether the intrinsic writes the operand's tensor.
    pub fn writes(self) -> bool {
        matches!(self, ArgKind::RegOut(_) | ArgKind::RegInOut(_))
    }
}

/// An intrinsic.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Intrinsic {
    LdmatrixX4,
    LdmatrixX4Trans,
    MmaM16n8k16,
}

/// One row of the table.
pub struct IntrinsicInfo {
    pub op: Intrinsic,
    /// The text form's mnemonic.
    pub name: &'static str,
    pub summary: &'static str,
    /// Operand names (for messages) and kinds, in order.
    pub args: &'static [(&'static str, ArgKind)],
    /// Typing beyond the kinds, given each operand's tensor (`None` for an expression).
    pub check: fn(&[Option<&TensorDecl>]) -> Result<(), String>,
}

/// Every intrinsic.
pub const INTRINSICS: &[IntrinsicInfo] = &[
    IntrinsicInfo {
        op: Intrinsic::LdmatrixX4,
        name: "ldmatrix.x4",
        summary: "`ldmatrix.sync.aligned.m8n8.x4.shared.b16`: each thread gives, at `src`'s coordinate, the start of one 8-element row of a 16-bit shared tile (16-byte aligned); `dst`'s mode 0 receives its 8 values (register j is values 2j, 2j+1). Warp-wide.",
        args: &[("dst", ArgKind::RegOut(8)), ("src", ArgKind::SharedIn)],
        check: check_ldmatrix,
    },
    IntrinsicInfo {
        op: Intrinsic::LdmatrixX4Trans,
        name: "ldmatrix.x4.trans",
        summary: "As `ldmatrix.x4`, each 8x8 matrix transposed on the way (`.trans`).",
        args: &[("dst", ArgKind::RegOut(8)), ("src", ArgKind::SharedIn)],
        check: check_ldmatrix,
    },
    IntrinsicInfo {
        op: Intrinsic::MmaM16n8k16,
        name: "mma.m16n8k16",
        summary: "`mma.sync.aligned.m16n8k16.row.col.f32`: `d += a * b` on tensor cores, f16 or bf16 inputs, f32 accumulate; fragments ordered as the layout atoms `mma_m16n8k16_a/b/c`. Warp-wide.",
        args: &[
            ("d", ArgKind::RegInOut(4)),
            ("a", ArgKind::RegIn(8)),
            ("b", ArgKind::RegIn(4)),
        ],
        check: check_mma,
    },
];

impl Intrinsic {
    pub fn info(self) -> &'static IntrinsicInfo {
        INTRINSICS
            .iter()
            .find(|i| i.op == self)
            .unwrap_or(&INTRINSICS[0])
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }

    pub fn from_name(name: &str) -> Option<Intrinsic> {
        INTRINSICS.iter().find(|i| i.name == name).map(|i| i.op)
    }
}

fn dtype(t: Option<&TensorDecl>) -> Option<DType> {
    t.map(|t| t.dtype)
}

fn check_ldmatrix(ts: &[Option<&TensorDecl>]) -> Result<(), String> {
    let (Some(d), Some(s)) = (ts[0], ts[1]) else {
        return Err("ldmatrix takes two tensors".into());
    };
    let aligned = s
        .layout
        .leaves()
        .iter()
        .all(|&(size, stride)| size == 1 || (stride * 2) % 16 == 0);
    if s.dtype != d.dtype || d.dtype.size_bytes() != 2 || !aligned {
        return Err(
            "ldmatrix reads 16-bit rows of a shared tensor of the fragment's dtype at 16-byte aligned offsets"
                .into(),
        );
    }
    Ok(())
}

fn check_mma(ts: &[Option<&TensorDecl>]) -> Result<(), String> {
    let (d, a, b) = (dtype(ts[0]), dtype(ts[1]), dtype(ts[2]));
    if a != b || !matches!(a, Some(DType::F16 | DType::BF16)) {
        return Err("mma takes f16 or bf16 fragments a and b of one dtype".into());
    }
    if d != Some(DType::F32) {
        return Err("mma accumulates into an f32 fragment".into());
    }
    Ok(())
}
