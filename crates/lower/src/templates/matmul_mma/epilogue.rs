//! The tensor-core template's epilogue: accumulators staged through shared memory in two
//! halves, the elementwise chain over the matmul applied per element, 16-byte stores where the
//! output allows.

use super::TcPlan;
use crate::MmaConfig;
use crate::lower::*;
use irc_ir::{DType, ValueId};
use irc_kir::{self as kir, Builtin, Expr, IdxOp, Stmt, Ty};
use irc_layout::Layout;

/// What the epilogue reads: the block's accumulators and where its results go.
pub(super) struct TcEpilogue<'a> {
    pub(super) cfg: MmaConfig,
    pub(super) p: &'a TcPlan,
    pub(super) dt: DType,
    /// The matmul's value, every root and their output tensors.
    pub(super) mm: ValueId,
    pub(super) roots: &'a [ValueId],
    pub(super) cs: &'a [String],
    /// Each root's 16-byte view of its output, where one copy stores 16 bytes of results.
    pub(super) c_vec: Option<Vec<String>>,
    /// The staging tile (a view of A's shared tiles) and its 8-element view.
    pub(super) stage: String,
    pub(super) stage_v: String,
    /// The f32 accumulator registers `(value, atom m, atom n)`.
    pub(super) acc: String,
    /// The `mma_m16n8k16_c` atom's layout.
    pub(super) atom_c_layout: Layout,
    pub(super) lane: Expr,
    pub(super) wm: Expr,
    pub(super) wn: Expr,
    /// A norm prologue's row scales (`[row]` of the block, shared): each accumulator is
    /// multiplied by its row's before it is rounded.
    pub(super) row_scale: Option<String>,
    /// Row reductions of the epilogue: their partials from each staged half, then the arrival
    /// (`epilogue_reduce`).
    pub(super) reduce: Option<super::super::epilogue_reduce::ReduceTiles>,
}

impl Builder<'_, '_> {
    /// The epilogue of the block at `(m0, n0)` of batch `bi`.
    pub(super) fn tc_epilogue(
        &mut self,
        e: &TcEpilogue<'_>,
        m0: &Expr,
        n0: &Expr,
        bi: &Expr,
    ) -> R<()> {
        let TcEpilogue {
            cfg,
            p,
            dt,
            mm,
            roots,
            cs,
            c_vec,
            stage,
            stage_v,
            acc,
            atom_c_layout,
            lane,
            wm,
            wn,
            row_scale,
            reduce,
        } = e;
        let (cfg, dt, mm) = (*cfg, *dt, *mm);
        // Elements per 16-byte chunk.
        let w = 16 / dt.size_bytes();
        let s = self;
        // Epilogue, through shared memory in two halves of 64 rows: the warps of a half
        // store their accumulators (value v of atom (i, j) sits at (row, col) =
        // mma_c(lane, v) of that atom), then all threads read 16 bytes of consecutive columns
        // each, apply the elementwise chain over the matmul, and store them with one
        // 16-byte copy where the output allows.
        s.for_(
            "h",
            Expr::Int(0),
            Expr::Int(2),
            Expr::Int(1),
            false,
            |s, h| {
                let h = &h;
                s.out.push(Stmt::Sync);
                let mine = Expr::idx(IdxOp::Eq, wm.clone(), h.clone());
                s.if_(mine, |s| {
                    s.unrolled("i", cfg.mt(), &mut |s, i| {
                        let i2 = i.clone();
                        s.unrolled("j", cfg.nt(), &mut |s, j| {
                            let (i3, j2) = (i2.clone(), j.clone());
                            s.unrolled("v", 4, &mut |s, v| {
                                let cidx =
                                    kir::offset_expr(atom_c_layout, &[lane.clone(), v.clone()])
                                        .map_err(internal)?;
                                let cidx = s.let_("ci", Ty::Idx, cidx);
                                let row = add(
                                    mul(i3.clone(), Expr::Int(16)),
                                    Expr::idx(IdxOp::Rem, cidx.clone(), Expr::Int(16)),
                                );
                                let col = add(
                                    add(
                                        mul(wn.clone(), int(cfg.nt() * 8)),
                                        mul(j2.clone(), Expr::Int(8)),
                                    ),
                                    Expr::idx(IdxOp::Div, cidx, Expr::Int(16)),
                                );
                                let mut x = Expr::load(acc, vec![v, i3.clone(), j2.clone()]);
                                if let Some(rs) = row_scale {
                                    let r = add(mul(h.clone(), int(cfg.bm / 2)), row.clone());
                                    x = Expr::call(
                                        kir::Func::Mul,
                                        vec![x, Expr::load(rs, vec![r])],
                                    );
                                }
                                let accv = cast_to(dt, DType::F32, x);
                                s.out.push(Stmt::Store {
                                    tensor: stage.clone(),
                                    coord: vec![row, col],
                                    value: accv,
                                });
                                Ok(())
                            })
                        })
                    })
                })?;
                s.out.push(Stmt::Sync);
                if let Some(rt) = reduce {
                    s.staged_row_partials(rt, p, mm, stage, cfg.threads(), (m0, n0, bi), h)?;
                    let half = cfg.bm / 2;
                    let gm0 = s.let_("hm", Ty::Idx, add(m0.clone(), mul(h.clone(), int(half))));
                    let block = s.let_(
                        "hb",
                        Ty::Idx,
                        add(Expr::idx(IdxOp::Div, m0.clone(), int(half)), h.clone()),
                    );
                    let load = |r: Expr, c: Expr| Expr::load(stage, vec![r, c]);
                    s.staged_col_partials(
                        rt,
                        p,
                        mm,
                        &load,
                        (half, cfg.bn, cfg.threads()),
                        &bx(Builtin::TidX),
                        (&gm0, n0, bi),
                        &block,
                    )?;
                    if roots.is_empty() {
                        return Ok(());
                    }
                    // The element pass below may rewrite the staged values in place (where
                    // the output takes no 16-byte copies).
                    s.out.push(Stmt::Sync);
                }
                let chunks = (cfg.bm / 2) * cfg.bn / w / cfg.threads();
                let at = s.out.len();
                s.unrolled("l", chunks, &mut |s, l| {
                    let e = s.let_(
                        "e",
                        Ty::Idx,
                        add(mul(l, int(cfg.threads())), bx(Builtin::TidX)),
                    );
                    let c8 = s.let_(
                        "c8",
                        Ty::Idx,
                        Expr::idx(IdxOp::Rem, e.clone(), int(cfg.bn / w)),
                    );
                    let r = s.let_("r", Ty::Idx, Expr::idx(IdxOp::Div, e, int(cfg.bn / w)));
                    let col0 = s.let_("c0", Ty::Idx, mul(c8.clone(), int(w)));
                    let gm = s.let_(
                        "cm",
                        Ty::Idx,
                        add(add(m0.clone(), mul(h.clone(), int(cfg.bm / 2))), r.clone()),
                    );
                    let gn0 = s.let_("cn", Ty::Idx, add(n0.clone(), col0.clone()));
                    match &c_vec {
                        Some(gvs) => {
                            // Each root's values, element by element, into the register copy
                            // of the staged values (one root) or its own registers (several:
                            // the staged matmul values stay, and each root's value is reused
                            // by the roots computed from it); then one 16-byte copy per root.
                            let in_place = roots.len() == 1;
                            // A chain reads the thread's staged values from registers (one
                            // 16-byte load) and leaves one root's results there.
                            let staged_frag = kir::Frag {
                                tensor: stage_v.clone(),
                                at: vec![r.clone(), c8.clone()],
                            };
                            let src = match roots.iter().any(|&r| r != mm) {
                                true => {
                                    let t = s.tensor(
                                        kir::Space::Registers,
                                        dt,
                                        Layout::int(w as i64, 1).map_err(internal)?,
                                    );
                                    s.out.push(Stmt::Copy {
                                        width: w as u32,
                                        dst: kir::Frag {
                                            tensor: t.clone(),
                                            at: vec![],
                                        },
                                        src: staged_frag.clone(),
                                        hint: irc_kir::CacheHint::Normal,
                                    });
                                    Some(t)
                                }
                                false => None,
                            };
                            let regs: Vec<Option<String>> = roots
                                .iter()
                                .map(|&r| match in_place || r == mm {
                                    true => Ok(None),
                                    false => Ok(Some(s.tensor(
                                        kir::Space::Registers,
                                        dt,
                                        Layout::int(w as i64, 1).map_err(internal)?,
                                    ))),
                                })
                                .collect::<R<_>>()?;
                            // The vector's elements are all inside the output or none
                            // (N is a multiple of w): one guard a vector, none where the tiles
                            // divide the output (the unrolled chunks are then straight-line
                            // code, their loads issued together). Operands the chain reads 8
                            // contiguous aligned elements of are one copy (`vector_loop_along`).
                            let whole = p.m.is_multiple_of(cfg.bm) && p.n.is_multiple_of(cfg.bn);
                            let cond = (!whole).then(|| {
                                Expr::idx(
                                    IdxOp::And,
                                    lt(gm.clone(), int(p.m)),
                                    lt(gn0.clone(), int(p.n)),
                                )
                            });
                            let body = s.block(|s| {
                                if let Some(src) = &src {
                                    let vb = s.let_("cb", Ty::Idx, div(gn0.clone(), int(w)));
                                    let at = vec![gm.clone(), vb, bi.clone()];
                                    s.vector_loop_along(w, 1, at, |s, gn, z| {
                                        let staged = Expr::load(src, vec![z.clone()]);
                                        s.coord = vec![gm.clone(), gn, bi.clone()];
                                        let targets: Vec<(String, Vec<Expr>)> = regs
                                            .iter()
                                            .map(|reg| {
                                                (
                                                    reg.as_ref().unwrap_or(src).clone(),
                                                    vec![z.clone()],
                                                )
                                            })
                                            .collect();
                                        s.roots_into(mm, staged, &p.access_c, roots, &targets)
                                    })?;
                                }
                                for ((&root, gv), reg) in roots.iter().zip(gvs).zip(&regs) {
                                    let src = match (root == mm, reg, &src) {
                                        (false, Some(t), _) | (_, None, Some(t)) => kir::Frag {
                                            tensor: t.clone(),
                                            at: vec![],
                                        },
                                        _ => staged_frag.clone(),
                                    };
                                    s.out.push(Stmt::Copy {
                                        width: w as u32,
                                        dst: kir::Frag {
                                            tensor: gv.clone(),
                                            at: vec![
                                                gm.clone(),
                                                Expr::idx(IdxOp::Div, gn0.clone(), int(w)),
                                                bi.clone(),
                                            ],
                                        },
                                        src,
                                        hint: irc_kir::CacheHint::Normal,
                                    });
                                }
                                Ok(())
                            })?;
                            s.guarded(cond, body);
                            Ok(())
                        }
                        None => s.unrolled("z", w, &mut |s, z| {
                            let gn = add(gn0.clone(), z.clone());
                            let cond =
                                Expr::idx(IdxOp::And, lt(gm.clone(), int(p.m)), lt(gn, int(p.n)));
                            s.if_(cond, |s| {
                                let gn = s.let_("cz", Ty::Idx, add(gn0.clone(), z.clone()));
                                let col = add(col0.clone(), z.clone());
                                let staged = Expr::load(stage, vec![r.clone(), col.clone()]);
                                s.coord = vec![gm.clone(), gn.clone(), bi.clone()];
                                s.epilogue_stores(
                                    mm,
                                    staged,
                                    &p.access_c,
                                    roots,
                                    cs,
                                    vec![gm.clone(), gn, bi.clone()],
                                )
                            })
                        }),
                    }
                })?;
                // An operand chosen element by element (a concat whose operands split the
                // 16-byte vectors) branches around each load: unrolling batches none of them
                // but holds their registers beside the accumulators the other half still
                // stores (1.2 KB of spills on sm_80 for a bias of 60 + 68 columns).
                let global: std::collections::HashSet<&str> = s
                    .kernel
                    .tensors
                    .iter()
                    .filter(|t| matches!(t.space, kir::Space::Global(_)))
                    .map(|t| t.name.as_str())
                    .collect();
                let rolled = matches!(s.out.get(at), Some(Stmt::For { body, .. })
                    if loads_under_branch(body, &global));
                if let Some(Stmt::For { unroll, .. }) = s.out.get_mut(at) {
                    *unroll &= !rolled;
                }
                Ok(())
            },
        )?;
        if let Some(rt) = reduce {
            let tid = bx(Builtin::TidX);
            s.reduce_finish(rt, p, (m0, n0, bi), &tid, cfg.threads(), &Stmt::Sync)?;
        }
        Ok(())
    }
}

/// Whether `body` loads from a `global` tensor inside an `if` with an `else`: an operand
/// chosen, and read, element by element (a concat whose operands split the vectors; an aligned
/// one loads every operand's vector before its branch, which picks among registers).
fn loads_under_branch(body: &[Stmt], global: &std::collections::HashSet<&str>) -> bool {
    let mut found = false;
    kir::walk(body, &mut |s| {
        if let Stmt::If { body, orelse, .. } = s
            && !orelse.is_empty()
        {
            found |= [body, orelse]
                .iter()
                .any(|b| kir::read_tensors(b).iter().any(|t| global.contains(t)));
        }
    });
    found
}
