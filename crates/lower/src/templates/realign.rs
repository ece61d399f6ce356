//! Operands that TMA cannot read where they lie, realigned by a copy kernel first.
//!
//! A tensor map's row strides must be multiples of 16 bytes, so a 16-bit matrix whose
//! contiguous extent is odd (`[8205, 5921]` f16: rows 11842 bytes apart) cannot feed the Hopper
//! templates in place, and the mma.sync template then reads it element by element (its
//! 16-byte copies need the same alignment) at a fifth of wgmma's rate. For large products the
//! operand is instead copied once into a temp whose rows are padded to 128 bytes — one read
//! and one write of the operand at memory bandwidth, a few percent of the product's time — and
//! the tensor map reads the temp. The padding is never read: the map's extents are the
//! operand's own, so tiles past the end are TMA's zero fill as before.
//!
//! The copy keeps the operand's majorness (its contiguous mode stays contiguous), so both its
//! reads and its writes are coalesced: a block of 256 threads copies 2048 consecutive elements
//! of the operand (in its own order, rows one after the other), eight a thread, the eight
//! loads issued before any store (a load past the end reads the last element instead, and its
//! store is skipped).

use crate::lower::*;
use irc_ir::ValueId;
use irc_kir::{self as kir, Builtin, Expr, Func, IdxOp, Space, Stmt, Ty};
use irc_layout::{Layout, coalesce};

/// Products of at least this many multiply-adds realign their misaligned operands (below, the
/// copy's launch and its pass over the operand outweigh what wgmma saves).
pub(crate) const REALIGN_MIN_MACS: u64 = 1 << 27;
/// Elements a thread copies, and threads a block.
const PER_THREAD: u64 = 8;
const COPY_THREADS: u64 = 256;
/// The temp's rows are padded to this many elements (128 bytes of a 16-bit type).
const ROW_PAD: u64 = 64;

/// A product must have this many multiply-adds per element of an operand TMA can read in
/// place, but whose rows are not 32-byte aligned, for that operand to be realigned: the copy
/// (a read and a write of the operand at memory bandwidth) then costs at most ~8% of the
/// product at the H100's and H200's ratio of tensor-core rate to bandwidth, against the
/// 13-30% the misaligned rows cost (each 128-byte box row touching five 32-byte sectors:
/// `bench/results/2026-11-28-h200-run100-probe.md`).
pub(crate) const REALIGN_MACS_PER_ELEMENT: u64 = 4096;

/// Whether an operand TMA can read in place (`access`: `(rows, k[, batch])`, `elems` its
/// buffer's elements) has rows whose byte stride is not a multiple of 32 and a product of
/// `macs` large enough to pay for copying it ([`REALIGN_MACS_PER_ELEMENT`]).
pub(crate) fn sector_misaligned(access: &Layout, esize: u64, elems: u64, macs: u64) -> bool {
    let modes = access.modes();
    let (Some(rows), Some(k)) = (
        modes.first().and_then(single),
        modes.get(1).and_then(single),
    ) else {
        return false;
    };
    // The stride between rows of the contiguous mode.
    let stride = match (rows.1, k.1) {
        (_, 1) if rows.0 > 1 => rows.1,
        (1, _) if k.0 > 1 => k.1,
        _ => return false,
    };
    (stride.unsigned_abs() * esize) % 32 != 0 && macs / REALIGN_MACS_PER_ELEMENT.max(1) >= elems
}

/// One mode of an access layout as a single `(extent, stride)`, if it is one after coalescing.
fn single(m: &Layout) -> Option<(u64, i64)> {
    match coalesce(m).ok()?.leaves().as_slice() {
        [(s, d)] => Some((*s as u64, *d)),
        [] => Some((1, 0)),
        _ => None,
    }
}

impl Builder<'_, '_> {
    /// Copies `buf`, read through `access` (`(rows, k[, batch])` → element), into a new temp
    /// with rows padded to [`ROW_PAD`] elements, by a kernel launched before this one; returns
    /// the temp's name and the same `(rows, k[, batch])` access over it. `None` (nothing
    /// emitted) where the access is not a matrix with one contiguous mode and a dense batch. The
    /// copy kernel's origin is statement `inst_index` (the matmul).
    pub(crate) fn realigned(
        &mut self,
        inst_index: usize,
        buf: ValueId,
        access: &Layout,
        what: &str,
    ) -> R<Option<(String, Layout)>> {
        let modes = access.modes();
        let (Some(rows), Some(k)) = (
            modes.first().and_then(single),
            modes.get(1).and_then(single),
        ) else {
            return Ok(None);
        };
        let batch = match modes.get(2) {
            Some(b) => match single(b) {
                Some(x) => Some(x),
                None => return Ok(None),
            },
            None => None,
        };
        // A batch broadcast (stride 0: a matrix shared by every batch entry) is copied once and
        // read as broadcast from the temp.
        let (nb_all, sb) = batch.unwrap_or((1, 0));
        let nb = if sb == 0 { 1 } else { nb_all };
        // The contiguous mode (`c`) and the other (`o`): K-major or MN-major.
        let k_contiguous = k.1 == 1 && k.0 > 1;
        let (c, o) = if k_contiguous {
            (k, rows)
        } else if rows.1 == 1 && rows.0 > 1 {
            (rows, k)
        } else {
            return Ok(None);
        };
        let (ec, eo) = (c.0, o.0);
        let pc = ec.next_multiple_of(ROW_PAD);
        let name = format!("{}_realign_{what}", self.kernel.name);
        let dtype = self.ty(buf).dtype;
        let decl = kir::BufferDecl {
            name: name.clone(),
            dtype,
            shape: vec![nb, eo, pc],
            kind: kir::BufferKind::Temp,
            tensor_map: None,
        };
        self.temps.push(decl.clone());

        // The copy: source and temp both indexed (contiguous, other, batch).
        let mut cp = Builder::new(
            self.l,
            format!("{}_realign_{what}", self.kernel.name),
            inst_index,
        );
        // The module's index width counts the graph's buffers, not this temp, whose padding can
        // make it several times the operand (rows of 9 padded to 64).
        if nb * eo * pc >= I32_LIMIT {
            cp.kernel.index = kir::IndexWidth::I64;
        }
        cp.temps.push(decl);
        let li = |s: u64, d: i64| Layout::int(s as i64, d).map_err(internal);
        let batch_mode = |s: i64| li(nb, s);
        let src_layout = concat(&[li(ec, c.1)?, li(eo, o.1)?, batch_mode(sb)?])?;
        let src = cp.global(buf, src_layout);
        let pp = cp.param(&name);
        let dst = cp.tensor(
            Space::Global(pp),
            dtype,
            concat(&[
                li(ec, 1)?,
                li(eo, pc as i64)?,
                batch_mode((eo * pc) as i64)?,
            ])?,
        );
        // The operand's elements in order (contiguous mode first), 2048 a unit, so a warp's
        // loads and stores are contiguous. Rows of at least 1024 elements: a unit is a chunk
        // of one row (`ceil(ec / 2048)` units a row), its row found once per thread and its
        // elements by an add each. Shorter rows: a unit spans rows, element `g` being
        // `(g % ec, g / ec % eo, g / (ec · eo))`.
        let span = PER_THREAD * COPY_THREADS;
        let chunks = (ec >= span / 2).then(|| ec.div_ceil(span));
        let total = nb * eo * ec;
        let units = match chunks {
            Some(n) => nb * eo * n,
            None => total.div_ceil(span),
        };
        cp.kernel.block = [COPY_THREADS as u32, 1, 1];
        cp.rows(units, |b, u| {
            let tid = bx(Builtin::TidX);
            let mut held = vec![];
            // Row chunks: the row (and batch) once, then `(e0 + j·256, r, bi)`; spans across
            // rows: element `g0 + j·256`, split into its coordinates.
            let by_row = match chunks {
                Some(n) => {
                    let row = b.let_("row", Ty::Idx, Expr::idx(IdxOp::Div, u.clone(), int(n)));
                    let e0 = add(mul(Expr::idx(IdxOp::Rem, u, int(n)), int(span)), tid);
                    let e0 = b.let_("e", Ty::Idx, e0);
                    let r = b.let_("r", Ty::Idx, Expr::idx(IdxOp::Rem, row.clone(), int(eo)));
                    let bi = b.let_("bi", Ty::Idx, Expr::idx(IdxOp::Div, row, int(eo)));
                    Ok((e0, r, bi))
                }
                None => Err(b.let_("g", Ty::Idx, add(mul(u, int(span)), tid))),
            };
            for j in 0..PER_THREAD {
                let step = int(j * COPY_THREADS);
                // The element's index where it is inside the operand, else the last one's.
                let clamp = |b: &mut Self, i: Expr, end: u64| {
                    let inside = lt(i.clone(), int(end));
                    let at = Expr::call(Func::Select, vec![inside.clone(), i, int(end - 1)]);
                    (b.let_("at", Ty::Idx, at), inside)
                };
                let (coord, inside) = match &by_row {
                    Ok((e0, r, bi)) => {
                        let (at, inside) = clamp(b, add(e0.clone(), step), ec);
                        (vec![at, r.clone(), bi.clone()], inside)
                    }
                    Err(g0) => {
                        let (at, inside) = clamp(b, add(g0.clone(), step), total);
                        let e = b.let_("e", Ty::Idx, Expr::idx(IdxOp::Rem, at.clone(), int(ec)));
                        let row = b.let_("row", Ty::Idx, Expr::idx(IdxOp::Div, at, int(ec)));
                        let r = b.let_("r", Ty::Idx, Expr::idx(IdxOp::Rem, row.clone(), int(eo)));
                        let bi = b.let_("bi", Ty::Idx, Expr::idx(IdxOp::Div, row, int(eo)));
                        (vec![e, r, bi], inside)
                    }
                };
                let v = b.let_("v", Ty::Elem(dtype), Expr::load(&src, coord.clone()));
                held.push((coord, inside, v));
            }
            for (coord, inside, v) in held {
                let store = Stmt::Store {
                    tensor: dst.clone(),
                    coord,
                    value: v,
                };
                b.out.push(Stmt::If {
                    cond: inside,
                    body: vec![store],
                    orelse: vec![],
                });
            }
            Ok(())
        })?;
        self.pre.push(cp.finish());

        // The access over the temp, in the operand's mode order.
        let (r_st, k_st) = if k_contiguous {
            (pc as i64, 1)
        } else {
            (1, pc as i64)
        };
        let mut out = vec![li(rows.0, r_st)?, li(k.0, k_st)?];
        if batch.is_some() {
            let stride = if sb == 0 { 0 } else { (eo * pc) as i64 };
            out.push(li(nb_all, stride)?);
        }
        Ok(Some((name, concat(&out)?)))
    }
}
