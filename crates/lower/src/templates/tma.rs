//! TMA operands of the Hopper templates (`matmul_wgmma`, `attention_wgmma`): how a tile of an
//! operand is read by tensor maps into 128-byte-swizzled shared memory, and where its elements
//! land, as the canonical wgmma layouts (`irc_layout::gmma_smem_atom`) tiled as TMA lays its
//! boxes.
//!
//! An operand's stage tile is `rows x kext` (rows: the M or N extent of the tile; kext: its K
//! extent, a multiple of 64). It is K-major (K contiguous in memory) or MN-major. Either way
//! the tile is TMA boxes whose inner extent is 64 elements (128 bytes, the swizzle span):
//! `kext / 64` boxes `64 x rows` when K-major, `rows / 64` boxes `64 x kext` when MN-major.

use crate::lower::*;
use irc_ir::DType;
use irc_kir::{self as kir, Arg, Expr, IdxOp, Intrinsic, Space, Stmt};
use irc_layout::{Layout, coalesce};

/// How one operand is read: its tensor map and where its tile sits in shared memory.
pub(crate) struct Operand {
    /// The buffer the map is over (a graph value's, or a temp's: `realign`).
    pub(crate) buffer: String,
    /// Extents and byte strides of the map, innermost first (inner, outer, batch dims...).
    pub(crate) dims: Vec<u64>,
    pub(crate) strides: Vec<u64>,
    /// The batch dims of the map: the linear batch index's divisor and modulus for each.
    pub(crate) batch: Vec<(u64, u64)>,
    /// Whether K is the contiguous dimension.
    pub(crate) k_major: bool,
    /// Tile rows (the M or N extent of a stage's tile).
    pub(crate) rows: u64,
    /// The tile's K extent (a multiple of 64).
    pub(crate) kext: u64,
}

impl Operand {
    /// An operand with only its tile's shape (no tensor map): for the tests of the tile's
    /// layouts.
    #[cfg(test)]
    pub(crate) fn tile_only(rows: u64, kext: u64, k_major: bool) -> Operand {
        Operand {
            buffer: String::new(),
            dims: vec![],
            strides: vec![],
            batch: vec![],
            k_major,
            rows,
            kext,
        }
    }

    pub(crate) fn boxes(&self) -> u64 {
        if self.k_major {
            self.kext / 64
        } else {
            self.rows / 64
        }
    }

    fn box_dims(&self) -> Vec<u32> {
        let mut b = if self.k_major {
            vec![64, self.rows as u32]
        } else {
            vec![64, self.kext as u32]
        };
        b.extend(self.batch.iter().map(|_| 1));
        b
    }

    /// Elements of one stage's tile.
    pub(crate) fn tile_elems(&self) -> u64 {
        self.rows * self.kext
    }

    /// One stage's tile, `(row, k) -> element` before the 128-byte swizzle
    /// (`Swizzle<3,3,3>` over 16-bit elements): the canonical atoms of
    /// `gmma_smem_atom(K or MN, 128, 16)` tiled over `rows x kext` the way TMA's boxes lay
    /// them out. K-major: atoms of 8 rows x 64 stacked along the rows (8-row groups 512
    /// elements apart), 64-wide K chunks one box (`64 * rows`) apart. MN-major: atoms of 64
    /// rows x 8 k, 8-k groups 512 apart, 64-row chunks one box (`64 * kext`) apart.
    /// `tests::tma_boxes_are_the_gmma_tiles` checks both against the hardware's swizzle of a
    /// TMA box and against the atoms.
    pub(crate) fn smem_tile(&self) -> Result<Layout, irc_layout::LayoutError> {
        use irc_layout::IntTuple as T;
        let t = |v: Vec<T>| T::Tuple(v);
        let i = T::Int;
        let (rows, kext) = (self.rows as i64, self.kext as i64);
        if self.k_major {
            Layout::new(
                t(vec![
                    t(vec![i(8), i(rows / 8)]),
                    t(vec![i(64), i(kext / 64)]),
                ]),
                t(vec![t(vec![i(64), i(512)]), t(vec![i(1), i(64 * rows)])]),
            )
        } else {
            Layout::new(
                t(vec![
                    t(vec![i(64), i(rows / 64)]),
                    t(vec![i(8), i(kext / 8)]),
                ]),
                t(vec![t(vec![i(1), i(64 * kext)]), t(vec![i(64), i(512)])]),
            )
        }
    }

    /// The tile's element offset at `(row, k)`.
    pub(crate) fn at(&self, row: i64, k: i64) -> Result<i64, irc_layout::LayoutError> {
        self.smem_tile()?
            .crd2idx(&irc_layout::IntTuple::ints(&[row, k]))
    }

    /// The wgmma operand positions of the tile: `(k-step of 16) -> element` (the descriptor
    /// start of each k-step), as offsets of [`Self::smem_tile`].
    pub(crate) fn ksteps(&self) -> R<Layout> {
        let li = |s: i64, d: i64| Layout::int(s, d).map_err(internal);
        if self.k_major {
            // Four k-steps per 128-byte row, then the next box.
            let row = li(4, self.at(0, 16).map_err(internal)?)?;
            if self.kext == 64 {
                return Ok(row);
            }
            concat(&[
                row,
                li((self.kext / 64) as i64, self.at(0, 64).map_err(internal)?)?,
            ])
        } else {
            li((self.kext / 16) as i64, self.at(0, 16).map_err(internal)?)
        }
    }

    /// Descriptor leading and stride byte offsets, read off the tile's strides: K-major, SBO
    /// is the 8-row groups' stride (LBO unused with a swizzle: 16); MN-major, LBO is the 64-row
    /// chunks' stride and SBO the 8-k groups'.
    pub(crate) fn lbo_sbo(&self) -> Result<(i64, i64), irc_layout::LayoutError> {
        let l = self.smem_tile()?;
        let stride1 = |m: usize| -> Result<i64, irc_layout::LayoutError> {
            Ok(l.mode(m)?.leaves().get(1).map_or(0, |&(_, d)| d) * 2)
        };
        if self.k_major {
            Ok((16, stride1(0)?))
        } else {
            Ok((stride1(0)?, stride1(1)?))
        }
    }

    /// The TMA loads of one stage's tile: box `jb` of the tile at rows from `row0` and K from
    /// `k0`, into `dst` at `(stage, box)`, completing `bars` at `bar`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn loads(
        &self,
        dst: &str,
        map: &str,
        bars: &str,
        bar: &Expr,
        st: &Expr,
        row0: &Expr,
        k0: &Expr,
        bi: &Expr,
    ) -> Vec<Stmt> {
        (0..self.boxes())
            .map(|jb| {
                let mut coords = if self.k_major {
                    vec![add(k0.clone(), int(64 * jb)), row0.clone()]
                } else {
                    vec![add(row0.clone(), int(64 * jb)), k0.clone()]
                };
                for &(d, size) in &self.batch {
                    coords.push(Expr::idx(
                        IdxOp::Rem,
                        Expr::idx(IdxOp::Div, bi.clone(), int(d)),
                        int(size),
                    ));
                }
                let op = Intrinsic::tma_load(coords.len()).unwrap_or(Intrinsic::TmaLoad5d);
                let mut args = vec![
                    Arg::at(dst, vec![st.clone(), int(jb)]),
                    Arg::at(map, vec![Expr::Int(0)]),
                    Arg::at(bars, vec![bar.clone()]),
                ];
                args.extend(coords.into_iter().map(Arg::Expr));
                Stmt::Intrinsic { op, args }
            })
            .collect()
    }
}

/// The TMA view of an operand read through `layout` (`(rows, k, batch)`): `None` where TMA
/// cannot read it (a row or K mode that is not one stride, strides that are not multiples of
/// 16 bytes, more than three batch strides, a base that is not a buffer). `extent` is the
/// operand's row count, `k` its K extent; a stage's tile is `rows x kext`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn operand(
    buffer: String,
    layout: &Layout,
    rows: u64,
    kext: u64,
    k: u64,
    extent: u64,
    buffer_elems: u64,
    esize: u64,
) -> Option<Operand> {
    let modes = layout.modes();
    let single = |m: &Layout| -> Option<(i64, i64)> {
        match coalesce(m).ok()?.leaves().as_slice() {
            [(s, d)] => Some((*s, *d)),
            [] => Some((1, 0)),
            _ => None,
        }
    };
    let (_, r_st) = single(modes.first()?)?;
    let (_, k_st) = single(modes.get(1)?)?;
    let batch_leaves: Vec<(i64, i64)> = match modes.get(2) {
        Some(b) => coalesce(b).ok()?.leaves(),
        None => vec![],
    };
    // Batch coordinates: (bi / div) % size for each leaf of the batch layout, broadcasts
    // skipped.
    let mut div = 1u64;
    let mut batch = vec![];
    let mut batch_strides = vec![];
    for (size, stride) in batch_leaves {
        if size > 1 && stride != 0 {
            if stride < 0 {
                return None;
            }
            batch.push((div, size as u64));
            batch_strides.push(stride as u64);
        }
        div *= size.max(1) as u64;
    }
    if batch.len() > 3 {
        return None;
    }
    let k_major = k_st == 1 && (r_st > 0 || extent == 1);
    let (inner, outer, outer_st) = if k_major {
        (k, extent, r_st.max(0) as u64)
    } else if r_st == 1 && k_st > 0 {
        (extent, k, k_st as u64)
    } else {
        return None;
    };
    let outer_st = if outer == 1 { inner } else { outer_st };
    let mut dims = vec![inner, outer];
    let mut strides = vec![outer_st * esize];
    let mut last = (inner - 1) + (outer - 1) * outer_st;
    for (&(_, size), &st) in batch.iter().zip(&batch_strides) {
        dims.push(size);
        strides.push(st * esize);
        last += (size - 1) * st;
    }
    if strides.iter().any(|&s| s % 16 != 0 || s == 0) {
        return None;
    }
    // Stays inside the buffer (views can only narrow it).
    if last >= buffer_elems {
        return None;
    }
    Some(Operand {
        buffer,
        dims,
        strides,
        batch,
        k_major,
        rows,
        kext,
    })
}

impl Builder<'_, '_> {
    /// An operand's ring of `stages` shared tiles, and the TMA destinations over it:
    /// `(stage, box)` -> the box's first element.
    pub(crate) fn stage_ring(
        &mut self,
        o: &Operand,
        stages: u64,
        dt: DType,
    ) -> R<(String, String)> {
        let li = |s: u64, d: i64| Layout::int(s as i64, d).map_err(internal);
        let tile = o.tile_elems();
        let smem = self.tensor(Space::Shared, dt, li(stages * tile, 1)?);
        let dst = self.tensor(
            Space::View(smem.clone()),
            dt,
            concat(&[
                li(stages, tile as i64)?,
                li(o.boxes(), (tile / o.boxes()) as i64)?,
            ])?,
        );
        Ok((smem, dst))
    }

    /// A temp buffer holding the tensor map of `o`, and the kernel's `i64` tensor over it.
    pub(crate) fn tensor_map(&mut self, o: &Operand, dt: DType) -> R<String> {
        let of = o.buffer.clone();
        let name = format!("{}_tma{}", self.kernel.name, self.temps.len());
        let decl = kir::BufferDecl {
            name: name.clone(),
            dtype: DType::I64,
            shape: vec![16],
            kind: kir::BufferKind::Temp,
            tensor_map: Some(kir::TensorMapDecl {
                of,
                dims: o.dims.clone(),
                strides: o.strides.clone(),
                box_dims: o.box_dims(),
                swizzle: 128,
            }),
        };
        debug_assert!(
            decl.tensor_map
                .as_ref()
                .is_some_and(|t| t.box_bytes(dt) > 0)
        );
        self.temps.push(decl);
        let p = self.param(&name);
        Ok(self.tensor(
            Space::Global(p),
            DType::I64,
            Layout::int(16, 1).map_err(internal)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use irc_layout::{IntTuple, Major, Swizzle, gmma_smem_atom};

    /// Where TMA puts element `(row, k)` of a stage with 128-byte swizzle (CUDA programming
    /// guide, "TMA swizzle"): boxes of 128-byte rows, the 16-byte chunk `c` of row `r` stored
    /// at chunk `c ^ (r % 8)`. K-major: `kext / 64` boxes of `rows` rows of 64 k; MN-major:
    /// `rows / 64` boxes of `kext` k-rows of 64 elements.
    fn tma_byte(o: &Operand, row: i64, k: i64) -> i64 {
        let (rows, kext) = (o.rows as i64, o.kext as i64);
        let (boxi, r, e, box_bytes) = if o.k_major {
            (k / 64, row, k % 64, rows * 128)
        } else {
            (row / 64, k, row % 64, kext * 128)
        };
        boxi * box_bytes + r * 128 + (((e / 8) ^ (r % 8)) * 16) + (e % 8) * 2
    }

    #[test]
    fn tma_boxes_are_the_gmma_tiles() {
        let sw = Swizzle::new(3, 3, 3).unwrap();
        for k_major in [true, false] {
            for rows in [64, 128, 256] {
                for kext in [64, 128] {
                    let o = Operand::tile_only(rows, kext, k_major);
                    for r in 0..rows as i64 {
                        for k in 0..kext as i64 {
                            let e = sw.apply(o.at(r, k).unwrap());
                            assert_eq!(
                                e * 2,
                                tma_byte(&o, r, k),
                                "{k_major} {rows}x{kext} ({r}, {k})"
                            );
                        }
                    }
                    // The tile's first atom is the layout module's canonical atom.
                    let major = if k_major { Major::K } else { Major::Mn };
                    let atom = gmma_smem_atom(major, 128, 16).unwrap();
                    let (ar, ak) = if k_major { (8, 64) } else { (64, 8) };
                    for r in 0..ar {
                        for k in 0..ak {
                            let want = atom.crd2idx(&IntTuple::ints(&[r, k])).unwrap();
                            assert_eq!(sw.apply(o.at(r, k).unwrap()), want, "atom ({r}, {k})");
                        }
                    }
                    let (lbo, sbo) = o.lbo_sbo().unwrap();
                    let mn_lbo = 128 * kext as i64;
                    assert_eq!(
                        (lbo, sbo),
                        if k_major { (16, 1024) } else { (mn_lbo, 1024) }
                    );
                    // Every k-step starts 16 elements further along K.
                    let Ok(ks) = o.ksteps() else {
                        panic!("k-steps of {k_major} {rows}x{kext}")
                    };
                    for s in 0..(kext / 16) as i64 {
                        let at = ks.crd2idx(&IntTuple::Int(s)).unwrap();
                        assert_eq!(at, o.at(0, 16 * s).unwrap(), "k-step {s}");
                    }
                }
            }
        }
    }
}
