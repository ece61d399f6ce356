//! Vector access for row kernels: each thread owns `width` consecutive elements of a row (16
//! bytes where the row allows), read with one `copy.width` into registers and written with one
//! `copy.width` from them.
//!
//! A template opens a vector loop ([`Builder::vector_loop`]) at a coordinate whose mode 0 is
//! `vb·width + v` (`vb` the vector's index along the row, `v` the unrolled element), or
//! another mode ([`Builder::vector_loop_along`]: a matmul epilogue's columns). While the
//! body is built, every read of a global buffer at exactly that coordinate whose layout reads
//! `width` consecutive, aligned elements ([`vector_layout`]) becomes a register read, its copy
//! hoisted before the loop; every [`Builder::store_elem`] to such a buffer becomes a register
//! write, its copy placed after the loop. Reads at another coordinate (a concat's branch), and
//! buffers whose layout does not allow it (a broadcast along the row, a transposed operand),
//! stay scalar: the vector form is an optimization the layout algebra proves, never a
//! requirement.

use crate::lower::*;
use irc_ir::DType;
use irc_kir::{CacheHint, Expr, Frag, Space, Stmt, Ty};
use irc_layout::{Layout, coalesce, composition};
use std::collections::HashMap;

/// Elements of `dtype` in one vector access along rows of `k`: 16 bytes' worth, halved until
/// it divides `k`; 1 (scalar) when fewer than 4 bytes remain, and for 1-byte types (the MLIR
/// backend's vector copies move 16-, 32- or 64-bit elements).
pub(crate) fn vector_width(dtype: DType, k: u64) -> u64 {
    let size = dtype.size_bytes().max(1);
    if size < 2 {
        return 1;
    }
    let mut w = (16 / size).max(1);
    while w > 1 && k % w != 0 {
        w /= 2;
    }
    if w * size < 4 { 1 } else { w }
}

/// `access` (mode 0 the row) read `width` elements at a time: `(width:1, mode0 ∘ (k/w):w,
/// modes 1..)`, when mode 0 maps each aligned group of `width` coordinates to `width`
/// consecutive elements and every other stride and `offset` are multiples of `width` (so each
/// access is `width`-element aligned, given aligned buffers).
pub(crate) fn vector_layout(access: &Layout, width: u64, offset: i64) -> Option<Layout> {
    let w = i64::try_from(width).ok()?;
    if w < 2 || offset % w != 0 {
        return None;
    }
    let m0 = access.mode(0).ok()?;
    let k = m0.size().ok()?;
    if k % w != 0 {
        return None;
    }
    // The contiguous run the vectors start in must hold whole vectors: a row that repeats a
    // 9-element run (a broadcast, `(9,4):(1,0)`) has vectors of 4 straddling its end, which
    // the composition below does not refuse.
    let runs = coalesce(&m0).ok()?;
    if let Some(&(run, 1)) = runs.leaves().first()
        && run % w != 0
    {
        return None;
    }
    let split = composition(&m0, &Layout::flat(&[w, k / w], &[1, w]).ok()?).ok()?;
    let head = coalesce(&split.mode(0).ok()?).ok()?;
    if head.leaves() != [(w, 1)] {
        return None;
    }
    let mut modes = vec![head, split.mode(1).ok()?];
    modes.extend(access.modes().into_iter().skip(1));
    let l = Layout::concat(&modes).ok()?;
    irc_kir::is_vector_operand(&l, w, l.rank() - 1).then_some(l)
}

/// An open vector loop (module docs).
pub(crate) struct VectorStage {
    /// The coordinate reads must be at to be vectorized: `[vb·width + v, at[1..]]`.
    coord: Vec<Expr>,
    /// The vector layouts' coordinate: `[vb, at without mode..]`.
    at: Vec<Expr>,
    /// The coordinate mode the vectors run along.
    mode: usize,
    /// The unrolled element variable.
    v: Expr,
    width: u64,
    /// Copies into registers, placed before the loop.
    before: Vec<Stmt>,
    /// Copies out of registers, placed after it.
    after: Vec<Stmt>,
    /// The register tensor of each vectorized global tensor.
    regs: HashMap<String, String>,
}

impl Builder<'_, '_> {
    /// `for v = 0 to width unroll { f(kx, v) }` with the coordinate `[kx = at[0]·width + v,
    /// at[1..]]`: vectorized reads and stores as the module docs say. The caller guards the
    /// whole vector (`at[0]·width < k`); `width` 1 is a plain scalar step.
    pub(crate) fn vector_loop(
        &mut self,
        width: u64,
        at: Vec<Expr>,
        f: impl FnOnce(&mut Self, Expr, Expr) -> R<()>,
    ) -> R<()> {
        self.vector_loop_along(width, 0, at, f)
    }

    /// [`Builder::vector_loop`] along coordinate mode `mode`: the coordinate is `at` with
    /// `at[mode]` replaced by `kx = at[mode]·width + v` (a matmul epilogue's `[m, n, batch]`
    /// runs along `n`).
    pub(crate) fn vector_loop_along(
        &mut self,
        width: u64,
        mode: usize,
        at: Vec<Expr>,
        f: impl FnOnce(&mut Self, Expr, Expr) -> R<()>,
    ) -> R<()> {
        if width <= 1 {
            return f(self, at[mode].clone(), Expr::Int(0));
        }
        let (before, body) = self.vector_loop_parts(width, mode, at, f)?;
        self.out.extend(before);
        self.out.extend(body);
        Ok(())
    }

    /// A vector loop's copies into registers, and the loop with the copies out of registers
    /// after it (`width` at least 2).
    fn vector_loop_parts(
        &mut self,
        width: u64,
        mode: usize,
        at: Vec<Expr>,
        f: impl FnOnce(&mut Self, Expr, Expr) -> R<()>,
    ) -> R<(Vec<Stmt>, Vec<Stmt>)> {
        let var = self.fresh("v");
        let v = Expr::var(&var);
        let mut vat = vec![at[mode].clone()];
        vat.extend(
            at.iter()
                .enumerate()
                .filter(|&(i, _)| i != mode)
                .map(|(_, e)| e.clone()),
        );
        let saved = self.vectors.replace(VectorStage {
            coord: vec![],
            at: vat,
            mode,
            v: v.clone(),
            width,
            before: vec![],
            after: vec![],
            regs: HashMap::new(),
        });
        let body = self.block(|b| {
            let kx = b.let_(
                "kx",
                Ty::Idx,
                add(mul(at[mode].clone(), int(width)), v.clone()),
            );
            let mut coord = at.clone();
            coord[mode] = kx.clone();
            if let Some(st) = b.vectors.as_mut() {
                st.coord = coord;
            }
            f(b, kx, v)
        });
        let stage = std::mem::replace(&mut self.vectors, saved);
        let body = body?;
        let stage = stage.ok_or_else(|| {
            Retry::Fail(crate::LowerError::Internal(
                "vector loop closed twice".into(),
            ))
        })?;
        let mut out = vec![Stmt::For {
            var,
            start: Expr::Int(0),
            end: int(width),
            step: Expr::Int(1),
            unroll: true,
            body,
        }];
        out.extend(stage.after);
        Ok((stage.before, out))
    }

    /// A row's `vecs` vectors spread over a group of `lanes` threads, `unroll` vectors per
    /// thread in flight: `for off = 0 to vecs step lanes·unroll { for u = 0 to unroll unroll {
    /// vb = off + u·lanes + lane; if vb < vecs [and valid] { vector_loop(width, [vb, rest..],
    /// f) } } }` (no guard where the steps are whole and nothing else is checked); `f` gets the
    /// element index.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn strided_vectors(
        &mut self,
        vecs: u64,
        lane: Expr,
        lanes: u64,
        unroll: u64,
        width: u64,
        rest: Vec<Expr>,
        valid: Option<Expr>,
        f: impl FnOnce(&mut Self, Expr) -> R<()>,
    ) -> R<()> {
        let unroll = unroll.min(vecs.div_ceil(lanes)).max(1);
        self.for_(
            "off",
            Expr::Int(0),
            int(vecs),
            int(lanes * unroll),
            false,
            |s, off| {
                s.for_(
                    "u",
                    Expr::Int(0),
                    int(unroll),
                    Expr::Int(1),
                    true,
                    |s, u| {
                        let vb = s.let_("vb", Ty::Idx, add(add(off, mul(u, int(lanes))), lane));
                        // Whole steps only: every vector exists, and no guard keeps the
                        // unrolled loads from being in flight together.
                        if valid.is_none() && vecs % (lanes * unroll) == 0 {
                            let mut at = vec![vb];
                            at.extend(rest);
                            return s.vector_loop(width, at, |s, kx, _| f(s, kx));
                        }
                        let mut cond = lt(vb.clone(), int(vecs));
                        if let Some(v) = valid {
                            cond = Expr::idx(irc_kir::IdxOp::And, v, cond);
                        }
                        s.if_(cond, |s| {
                            let mut at = vec![vb];
                            at.extend(rest);
                            s.vector_loop(width, at, |s, kx, _| f(s, kx))
                        })
                    },
                )
            },
        )
    }

    /// The vector layout of a global tensor read or written at the current coordinate inside
    /// a vector loop, and that loop's width.
    fn vectorizable(
        &self,
        coord: &[Expr],
        access: &Layout,
        offset: i64,
        dtype: DType,
    ) -> Option<(Layout, u64)> {
        let st = self.vectors.as_ref()?;
        // The loop's width is the row's; a wider element (an f32 operand of a 16-bit row)
        // would make one copy longer than 16 bytes: it is read element by element.
        if coord != st.coord.as_slice() || !matches!(st.width * dtype.size_bytes(), 4 | 8 | 16) {
            return None;
        }
        // Elements of 2 bytes or more (the MLIR backend's vector copies move 16-, 32- or
        // 64-bit elements).
        if dtype.size_bytes() < 2 {
            return None;
        }
        // A flat coordinate into a multi-mode access (a pointwise kernel's broadcast or
        // transposed operand) reads the access's modes grouped into one: the same function,
        // whose contiguous runs `vector_layout` can see.
        let grouped;
        let access = if coord.len() == 1 && access.rank() > 1 {
            grouped = irc_layout::group_modes(access, 0, access.rank()).ok()?;
            &grouped
        } else {
            access
        };
        if access.rank() != coord.len() {
            return None;
        }
        // Vectors along another mode than the first: that mode first (the vector layout's
        // coordinate is the stage's `at`, in the same order).
        let moved;
        let access = if st.mode != 0 {
            let modes = access.modes();
            let mut order = vec![modes.get(st.mode)?.clone()];
            order.extend(
                modes
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| i != st.mode)
                    .map(|(_, m)| m.clone()),
            );
            moved = Layout::concat(&order).ok()?;
            &moved
        } else {
            access
        };
        Some((vector_layout(access, st.width, offset)?, st.width))
    }

    /// The register tensor that holds the vector of global tensor `src`, made (and its copy
    /// recorded before or after the loop) on first use.
    /// `load`: the copy's cache hint where the global tensor is read (its copy placed before
    /// the loop), `None` where it is written (after).
    fn vector_register(
        &mut self,
        global: String,
        dtype: DType,
        width: u64,
        load: Option<CacheHint>,
    ) -> R<String> {
        if let Some(r) = self.vectors.as_ref().and_then(|s| s.regs.get(&global)) {
            return Ok(r.clone());
        }
        let reg = self.tensor(
            Space::Registers,
            dtype,
            Layout::int(width as i64, 1).map_err(internal)?,
        );
        let st = self.vectors.as_mut().ok_or_else(|| {
            Retry::Fail(crate::LowerError::Internal("no open vector loop".into()))
        })?;
        let (reg_frag, mem) = (
            Frag {
                tensor: reg.clone(),
                at: vec![],
            },
            Frag {
                tensor: global.clone(),
                at: st.at.clone(),
            },
        );
        let copy = |dst, src, hint| Stmt::Copy {
            width: width as u32,
            dst,
            src,
            hint,
        };
        match load {
            Some(hint) => st.before.push(copy(reg_frag, mem, hint)),
            None => st.after.push(copy(mem, reg_frag, CacheHint::Normal)),
        }
        st.regs.insert(global, reg.clone());
        Ok(reg)
    }

    /// Whether reads are at the open vector loop's own coordinate (not a concat's branch or
    /// a gather's source, which read elsewhere).
    pub(crate) fn at_vector_coord(&self) -> bool {
        self.vectors.as_ref().is_some_and(|s| s.coord == self.coord)
    }

    /// The open vector loop's element variable (0 outside one).
    pub(crate) fn vector_lane(&self) -> Expr {
        self.vectors
            .as_ref()
            .map(|s| s.v.clone())
            .unwrap_or(Expr::Int(0))
    }

    /// A read of buffer parameter `p` at the current coordinate through `access` (+ `offset`):
    /// the element of a register vector when the read vectorizes (module docs), else `None`.
    pub(crate) fn vector_read(
        &mut self,
        p: &str,
        dtype: DType,
        access: &Layout,
        offset: i64,
    ) -> R<Option<Expr>> {
        let Some((layout, width)) = self.vectorizable(&self.coord, access, offset, dtype) else {
            return Ok(None);
        };
        let global = self.tensor_at(Space::Global(p.to_string()), dtype, layout, offset);
        // The configuration's cache hint is for the graph's values the kernel streams in, not
        // a buffer it writes (the scratch its blocks write and read back: a split reduction's
        // partials), which a hinted load may not read (the kernel IR's verifier).
        let hint = match self.config {
            Some(super::Config::Reduction(c)) if !self.writes_param(p) => c.loads,
            _ => CacheHint::Normal,
        };
        let reg = self.vector_register(global, dtype, width, Some(hint))?;
        let v = self.vector_lane();
        Ok(Some(self.let_(
            "v",
            Ty::Elem(dtype),
            Expr::load(&reg, vec![v]),
        )))
    }

    /// `store %out[coord], value`, through a register vector copied out after the loop when
    /// `coord` is the vector loop's and `out`'s layout vectorizes. Called once per element of
    /// the loop, unconditionally within it.
    pub(crate) fn store_elem(&mut self, out: &str, coord: Vec<Expr>, value: Expr) -> R<()> {
        let decl = self
            .kernel
            .tensors
            .iter()
            .find(|t| t.name == out)
            .map(|t| (t.space.clone(), t.dtype, t.layout.clone(), t.offset));
        if let Some((Space::Global(p), dtype, layout, offset)) = decl
            && let Some((vl, width)) = self.vectorizable(&coord, &layout, offset, dtype)
        {
            let global = self.tensor_at(Space::Global(p), dtype, vl, offset);
            let reg = self.vector_register(global, dtype, width, None)?;
            let v = self.vector_lane();
            self.out.push(Stmt::Store {
                tensor: reg,
                coord: vec![v],
                value,
            });
            return Ok(());
        }
        self.out.push(Stmt::Store {
            tensor: out.to_string(),
            coord,
            value,
        });
        Ok(())
    }
}

impl Builder<'_, '_> {
    /// A concat read at the open vector loop's coordinate where every vector lies inside one
    /// operand (the concat's access reads the vector's elements consecutively from an
    /// aligned index, and each operand's start and the concat's row, in elements of its
    /// row-major walk, are multiples of the width): the operand is chosen once per vector,
    /// before the loop, and computed there by a vector loop of its own — whose reads vectorize
    /// as any other — into registers the loop's elements read. `None` where the concat does
    /// not allow it (it is then computed element by element).
    pub(crate) fn vector_concat(
        &mut self,
        parts: &[(irc_ir::ValueId, i64, i64)],
        (inner, n): (i64, i64),
        dtype: DType,
        access: &Layout,
        offset: i64,
    ) -> R<Option<Expr>> {
        let Some(st) = self.vectors.as_ref().filter(|_| self.at_vector_coord()) else {
            return Ok(None);
        };
        let w = st.width as i64;
        let aligned = |x: i64| x % w == 0;
        if !aligned(n * inner)
            || !parts.iter().all(|&(_, start, _)| aligned(start * inner))
            || self
                .vectorizable(&self.coord, access, offset, dtype)
                .is_none()
        {
            return Ok(None);
        }
        let (v, mode) = (st.v.clone(), st.mode);
        let mut coord0 = self.coord.clone();
        coord0[mode] = mul(st.at[0].clone(), int(st.width));
        let wide = self.wide_of(dtype);
        let reg = self.tensor(Space::Registers, wide, Layout::int(w, 1).map_err(internal)?);
        // The branches' reads are at their own coordinates: neither the open loop's vectors
        // nor a shared-memory transpose's tiles (which hold operands at the loop's) serve them.
        let (outer_stage, saved_coord) = (self.vectors.take(), self.coord.clone());
        let transpose = self.stage.take();
        let before = self.block(|b| {
            let e = irc_kir::offset_expr(access, &coord0).map_err(internal)?;
            let r0 = b.let_("r", Ty::Idx, add(e, Expr::Int(offset)));
            let q = b.let_(
                "q",
                Ty::Idx,
                rem(div(r0.clone(), Expr::Int(inner)), Expr::Int(n)),
            );
            let outer = b.let_("o", Ty::Idx, div(r0.clone(), Expr::Int(inner * n)));
            let stmts = b.vector_concat_branches(parts, &reg, (&q, &outer, &r0), (inner, w))?;
            b.out.extend(stmts);
            Ok(())
        });
        self.coord = saved_coord;
        self.vectors = outer_stage;
        self.stage = transpose;
        let before = before?;
        if let Some(st) = self.vectors.as_mut() {
            st.before.extend(before);
        }
        Ok(Some(self.let_(
            "c",
            Ty::Elem(wide),
            Expr::load(&reg, vec![v]),
        )))
    }

    /// Every operand's vector read at once, then `if q < end0 { reg <- x0 } else { ... }`:
    /// each operand's registers are loaded before the branches (a warp whose lanes take
    /// different operands waits for one load, not one an operand) at its own row-major index
    /// (`concat_branches`'s `j`) with the axis position taken modulo the operand's extent,
    /// `(q − start + K) mod len` (`K` the least multiple of `len` not below `start`), which is
    /// `q − start` inside the operand and an aligned vector inside it elsewhere.
    fn vector_concat_branches(
        &mut self,
        parts: &[(irc_ir::ValueId, i64, i64)],
        reg: &str,
        (q, outer, r0): (&Expr, &Expr, &Expr),
        (inner, w): (i64, i64),
    ) -> R<Vec<Stmt>> {
        let mut bodies = vec![];
        // An operand empty along the axis holds no element.
        for &(o, start, len) in parts.iter().filter(|p| p.2 > 0) {
            let k = (start + len - 1) / len * len;
            let pos = rem(
                add(sub(q.clone(), Expr::Int(start)), Expr::Int(k)),
                Expr::Int(len),
            );
            let j0 = add(
                mul(
                    add(mul(outer.clone(), Expr::Int(len)), pos),
                    Expr::Int(inner),
                ),
                rem(r0.clone(), Expr::Int(inner)),
            );
            let jb = self.let_("jb", Ty::Idx, div(j0, Expr::Int(w)));
            let (before, body) = self.vector_loop_parts(w as u64, 0, vec![jb], |b, kx, v| {
                let e = b.value_at_index(o, kx)?;
                b.out.push(Stmt::Store {
                    tensor: reg.to_string(),
                    coord: vec![v],
                    value: e,
                });
                Ok(())
            })?;
            // Unguarded (run 192: each operand's copy guarded by its range was 15% slower on
            // rotary embedding, a branch a copy).
            self.out.extend(before);
            bodies.push((start + len, body));
        }
        // The branches, innermost first: the last operand is the final else.
        let mut chain = bodies.pop().map(|(_, b)| b).unwrap_or_default();
        while let Some((end, body)) = bodies.pop() {
            chain = vec![Stmt::If {
                cond: lt(q.clone(), Expr::Int(end)),
                body,
                orelse: chain,
            }];
        }
        Ok(chain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_stay_inside_contiguous_runs() {
        // 36 elements repeating a 9-element run: no vector of 4 (one would read 8..11).
        let repeated = Layout::flat(&[9, 4], &[1, 0]).unwrap();
        assert!(vector_layout(&repeated, 4, 0).is_none());
        // Runs of 8 hold whole vectors of 4 and 8.
        let runs = Layout::flat(&[8, 4], &[1, 0]).unwrap();
        assert!(vector_layout(&runs, 4, 0).is_some());
        assert!(vector_layout(&runs, 8, 0).is_some());
        // A plain row of 36.
        assert!(vector_layout(&Layout::int(36, 1).unwrap(), 4, 0).is_some());
    }
}
