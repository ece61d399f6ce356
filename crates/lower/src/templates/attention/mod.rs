//! The attention templates: `O = softmax(prologue(Q·Kᵀ)) · V` in one kernel, the scores and
//! probabilities never leaving registers.
//!
//! Two schedules share the per-score work written here:
//! - [`mma`]: FlashAttention-2's schedule on `mma.sync.m16n8k16` (sm_80+).
//! - [`wgmma`]: a Hopper schedule (sm_90a) with TMA loads of Q, K and V into swizzled stages
//!   behind mbarriers, a producer warpgroup and two consumer warpgroups, `wgmma` for both
//!   products, P kept in registers as the A operand of the second. It is used where TMA can
//!   read the three operands; otherwise the mma.sync schedule runs.
//!
//! Both keep each thread's scores in the same register order: the accumulator of a 16-row
//! warp slab is atoms of 16x8 (`mma_m16n8k16_c`, which is also each warp's part of
//! `wgmma_m64nk16_d`), value `v` of atom `j` at `4j + v`. So the prologue per score
//! ([`Builder::att_prologue`]), the online softmax ([`Builder::att_softmax`]) and the final
//! normalization and stores ([`Builder::att_store`]) are written once:
//!
//! 1. The prologue, per score: the accumulator atom gives each value's (row, col), the score
//!    is read through the prologue at that coordinate ([`Builder::value_at`] with the scores'
//!    matmul held in a register), and scores past the sequence's end are `-inf` (guards only
//!    where the tiles do not divide the lengths). The prologue is evaluated in f32
//!    ([`Builder::wide`]): the scores are f32 accumulators that never exist in memory, so they
//!    and the prologue's results are not rounded to 16 bits between ops (as FlashAttention and
//!    Inductor's fused kernels compute; the unfused graph rounds each stored result). Explicit
//!    casts in the prologue still round.
//! 2. Online softmax per row: the row max over the thread's values (`maxnum`: a NaN score still
//!    makes its row NaN through `exp`), then over the 4 lanes of a quad (`warp_reduce.max.4`);
//!    `m` and the per-thread partial row sum `l` are rescaled, the O accumulators too (a row
//!    with no finite score yet subtracts 0, not -inf). Exponentials are `exp2` with `log2(e)`
//!    folded into the argument (a multiply-add and one `ex2` per score).
//! 3. `P = exp(S - m)` rounded to the input type is the A operand of `P·V` as it is: the 4
//!    values of C atoms `2k` and `2k+1` are the 8 values of A fragment `k`
//!    (`tests::p_accumulators_are_a_fragments` checks it on the atoms).
//!
//! At the end the row sums are summed over the quad, `O / l` goes through the group's epilogue
//! (if any) and is stored. A mask band recognized by the policy (`irc_fused::attention::band`:
//! causal, sliding and local windows) skips the key tiles outside it; the tiles it crosses are
//! masked by the prologue itself.

mod decode;
mod decode_merge;
mod decode_mma;
mod mma;
mod prologue;
mod schedule;
mod staged;
mod wgmma;

use super::matmul_simt::MatmulAccess;
use crate::LowerError;
use crate::lower::*;
use irc_fused::attention::Band;
use irc_ir::{DType, Inst, ValueDef, ValueId};
use irc_kir::{self as kir, Expr, Func, IdxOp, ReduceOp, Stmt, Ty};
use irc_layout::{Layout, coalesce, mma_m16n8k16_c};
use prologue::{Prologue, prologue_form};

/// `log2(e)`: `exp(x) = 2^(x·log2(e))`.
const LOG2_E: f64 = std::f64::consts::LOG2_E;

/// How far (in log2 units) a row's max may pass the one its probabilities are taken against
/// before O and l are rescaled, where the rescale is lazy (FlashAttention-4's conditional
/// rescaling; the Hopper kernel's serial schedule at head dim 128): the probabilities are then
/// at most `2^8`, which f16, bf16 and the f32 sums hold with their full precision, and on most
/// key tiles past the first few no row moves, so the O accumulators' rescale (one multiply
/// each) is skipped. The result is the same: O and l share the stale max.
const RESCALE_MARGIN: f64 = 8.0;

/// `f` over `xs` as a balanced tree (a row's max or sum in `log2(n)` dependent steps, not
/// `n`: the consumers have few warps to hide latency with); `0` for none.
fn tree(f: Func, mut xs: Vec<Expr>) -> Expr {
    if xs.is_empty() {
        return Expr::lit(DType::F32, 0.0);
    }
    while xs.len() > 1 {
        let mut next = Vec::with_capacity(xs.len().div_ceil(2));
        let mut it = xs.into_iter();
        while let Some(a) = it.next() {
            next.push(match it.next() {
                Some(b) => Expr::call(f, vec![a, b]),
                None => a,
            });
        }
        xs = next;
    }
    xs.pop().unwrap_or_else(|| Expr::lit(DType::F32, 0.0))
}

/// The three matmul/softmax statements of an attention group.
pub(crate) struct AttentionOps<'g> {
    pub(crate) scores: &'g Inst,
    pub(crate) softmax: &'g Inst,
    pub(crate) output: &'g Inst,
    /// The prologue's mask band, when it is one (key tiles outside it are skipped).
    pub(crate) band: Option<Band>,
    /// How the kernels evaluate the prologue.
    pub(crate) prologue: Prologue,
    /// Whether the kernel's per-score and per-output work is small: the prologue no more than
    /// a scale and a one-sided band ([`Prologue::plain`]), the output stored as it is (or
    /// through views), no epilogue.
    pub(crate) plain: bool,
}

fn unsupported(reason: String) -> Retry {
    Retry::Fail(LowerError::Unsupported {
        op: "attention".into(),
        reason,
    })
}

impl<'g> Lowering<'g> {
    /// The statements of an attention group storing `roots`, and its prologue's mask band if
    /// it is one.
    pub(crate) fn attention_ops(
        &self,
        grp: &irc_fused::Group,
        att: irc_fused::AttentionStmts,
        roots: &[ValueId],
    ) -> R<crate::templates::AttentionOps<'g>> {
        let inst_of = |k: usize| -> R<&'g Inst> {
            let irc_fused::Stmt::Op(o) = &grp.stmts[k] else {
                return Err(Retry::Fail(LowerError::Internal("attention anchor".into())));
            };
            let v = self.value_of.get(&o.value).map_or(0, |v| v.index());
            match self.g.values[v].def {
                ValueDef::Inst(i) => Ok(&self.g.insts[i]),
                ValueDef::Param(_) => {
                    Err(Retry::Fail(LowerError::Internal("attention anchor".into())))
                }
            }
        };
        let (scores, softmax, output) = (
            inst_of(att.scores)?,
            inst_of(att.softmax)?,
            inst_of(att.output)?,
        );
        let dag = self.dag.get_or_init(|| irc_fused::GraphDag::new(self.g));
        let x = softmax.operands[0].index();
        let m = irc_fused::AttentionMatch {
            output: output.result.index(),
            softmax: softmax.result.index(),
            p_cast: None,
            scores: Some(scores.result.index()),
            prologue: irc_fused::attention::path(dag, x, scores.result.index()),
            declined: None,
            declined_at: None,
        };
        let band = irc_fused::attention::band(dag, &m);
        let form = prologue_form(self.g, softmax.operands[0], scores.result, band.is_some());
        // A band bounded on one side (a causal mask), compared once per score; the output
        // stored as it is or through views (an epilogue, a residual or a cast, is more work).
        let one_sided = band.is_none_or(|b| b.lo.is_none() || b.hi.is_none());
        let as_is = roots
            .iter()
            .all(|&r| r == output.result || self.g.def_inst(r).is_some_and(|i| is_view(i.op)));
        Ok(crate::templates::AttentionOps {
            scores,
            softmax,
            output,
            band,
            plain: form.plain && one_sided && as_is,
            prologue: form,
        })
    }
}

/// What both schedules know of an attention group: its values, extents, and where `O` goes.
pub(super) struct AttPlan {
    /// The scores' matmul, the softmax's input and the output matmul.
    s_mm: ValueId,
    /// How the prologue is evaluated ([`Prologue`]).
    prologue: Prologue,
    o_mm: ValueId,
    /// The inputs' (and output's) dtype.
    dt: DType,
    /// Query and key counts, head dims of Q/K and of V, flattened batch.
    sq: u64,
    sk: u64,
    d: u64,
    dv: u64,
    batch: u64,
    /// The matmuls' accesses.
    qk: MatmulAccess,
    pv: MatmulAccess,
    /// The output tensors: the roots' (or one view's, stored through its inverse).
    outs: Vec<String>,
    viewed: bool,
    roots: Vec<ValueId>,
    band: Option<Band>,
}

impl Builder<'_, '_> {
    /// One attention kernel storing `roots` (the output matmul or its epilogue): the Hopper
    /// schedule where the target has it and TMA can read Q, K and V, else FlashAttention-2's.
    pub(crate) fn attention(&mut self, ops: &AttentionOps<'_>, roots: &[ValueId]) -> R<()> {
        let qk = self.matmul_access(ops.scores)?;
        let pv = self.matmul_access(ops.output)?;
        let (sq, sk, d) = (qk.ms.m, qk.ms.n, qk.ms.k);
        let dv = pv.ms.n;
        let dt = self.ty(ops.output.result).dtype;
        let head_dim_ok = irc_fused::attention::head_dim_ok;
        if !matches!(dt, DType::F16 | DType::BF16) || !head_dim_ok(d) || !head_dim_ok(dv) {
            return Err(unsupported(format!(
                "{dt} with head dims {d} and {dv}: the template takes f16/bf16 and head dims \
                 that are multiples of 8 up to {}",
                irc_fused::attention::MAX_HEAD_DIM
            )));
        }
        let batch: u64 = qk.ms.batch.iter().product();
        let (s_mm, o_mm) = (ops.scores.result, ops.output.result);
        for o in [self.l.origin(ops.scores), self.l.origin(ops.softmax)] {
            if !self.kernel.origins.contains(&o) {
                self.kernel.origins.push(o);
            }
        }
        // The output's own buffer and epilogue, or (policy rule 2) a result view of it stored
        // through the inverse of the view's layout; a view of an epilogue value (the heads
        // merged for a projection after an importer's guard) is that value, stored through the
        // inverse of the views' layout.
        let viewed = !self.l.buffer_of.contains_key(&o_mm)
            && roots.iter().all(|&r| self.view_base(r) == Some(o_mm));
        let (outs, roots) = if viewed {
            (vec![self.output(o_mm, &pv.access_c)?], roots.to_vec())
        } else {
            let mut outs = vec![];
            let mut stored = vec![];
            for &r in roots {
                match self.view_base(r) {
                    Some(e) if e != o_mm && !self.l.buffer_of.contains_key(&e) => {
                        let t = self.view_store(r, e, &pv.access_c)?.ok_or_else(|| {
                            Retry::Fail(crate::LowerError::Internal(format!(
                                "%{} is not views of the attention epilogue's %{}",
                                self.l.names[r.index()],
                                self.l.names[e.index()]
                            )))
                        })?;
                        outs.push(t);
                        stored.push(e);
                    }
                    _ => {
                        outs.push(self.global(r, pv.access_c.clone()));
                        stored.push(r);
                    }
                }
            }
            (outs, stored)
        };
        let plan = AttPlan {
            s_mm,
            prologue: ops.prologue,
            o_mm,
            dt,
            sq,
            sk,
            d,
            dv,
            batch,
            qk,
            pv,
            outs,
            viewed,
            roots,
            band: ops.band,
        };
        if let Some(crate::templates::Config::Decode(c)) = self.config {
            return self.attention_decode(ops, &plan, c);
        }
        if self.l.options.wgmma
            && self.l.options.mma.is_none()
            && self.attention_wgmma(ops, &plan)?
        {
            return Ok(());
        }
        self.attention_mma(ops, &plan)
    }

    /// Whether mode `mode` of `v` read at `access` is contiguous in memory (looking through
    /// views); `logical` when `v` is computed.
    fn unit_stride(&mut self, v: ValueId, access: &Layout, mode: usize, logical: bool) -> bool {
        match self.resolve(v, access) {
            Some((_, l)) => l
                .modes()
                .get(mode)
                .and_then(|m| coalesce(m).ok())
                .is_some_and(|m| m.leaves().first().is_some_and(|&(_, d)| d == 1)),
            None => logical,
        }
    }

    /// The (row, col) in the block's score tile of each of the 4 values of this thread's
    /// accumulator atoms, for the thread's 16-row warp slab `slab` (rows `16 * slab ..`), col
    /// within the atom's 8 columns.
    fn att_coords(&mut self, lane: &Expr, slab: &Expr) -> R<Vec<(Expr, Expr)>> {
        let atom_c = mma_m16n8k16_c().map_err(internal)?.layout().clone();
        // Value v of an accumulator atom sits at (row, col) = (ci % 16, ci / 16), ci =
        // mma_c(lane, v); v = 0, 1 are row `lane / 4`, v = 2, 3 eight rows below.
        let mut rc = vec![];
        for val in 0..4 {
            let ci =
                kir::offset_expr(&atom_c, &[lane.clone(), Expr::Int(val)]).map_err(internal)?;
            let ci = self.let_("ci", Ty::Idx, ci);
            let row = self.let_(
                "ar",
                Ty::Idx,
                add(
                    mul(slab.clone(), Expr::Int(16)),
                    Expr::idx(IdxOp::Rem, ci.clone(), Expr::Int(16)),
                ),
            );
            let col = self.let_("ac", Ty::Idx, Expr::idx(IdxOp::Div, ci, Expr::Int(16)));
            rc.push((row, col));
        }
        Ok(rc)
    }

    /// The running row max `m` and partial row sum `l` of the thread's two rows (`lane / 4`
    /// and 8 below).
    fn att_state(&mut self) -> (Vec<String>, Vec<String>) {
        let mut m = vec![];
        let mut l = vec![];
        for h in 0..2 {
            let mv = self.fresh(&format!("m{h}_"));
            self.out.push(Stmt::Var {
                var: mv.clone(),
                ty: Ty::Elem(DType::F32),
                init: lit(DType::F32, f64::NEG_INFINITY),
            });
            m.push(mv);
            let lv = self.fresh(&format!("l{h}_"));
            self.out.push(Stmt::Var {
                var: lv.clone(),
                ty: Ty::Elem(DType::F32),
                init: lit(DType::F32, 0.0),
            });
            l.push(lv);
        }
        (m, l)
    }

    /// The prologue applied to each score of `acc_s` (`[4, bkv / 8]`), in place; `-inf` past
    /// the sequence's end. `q0`/`k0` are the block's first query row and the tile's first key,
    /// `bq`/`bkv` the block's query rows and the tile's keys.
    /// With `unmasked`, a recognized mask band is known to keep every score of the tile.
    #[allow(clippy::too_many_arguments)]
    fn att_prologue(
        &mut self,
        p: &AttPlan,
        acc_s: &str,
        rc: &[(Expr, Expr)],
        (q0, k0, bi): (&Expr, &Expr, &Expr),
        bq: u64,
        bkv: u64,
        unmasked: bool,
    ) -> R<()> {
        let (sq, sk) = (p.sq, p.sk);
        for j in 0..bkv / 8 {
            for (val, (row, col)) in rc.iter().enumerate() {
                let at = vec![Expr::Int(val as i64), Expr::Int(j as i64)];
                let gq = self.let_("gq", Ty::Idx, add(q0.clone(), row.clone()));
                let gk = self.let_("gk", Ty::Idx, add(add(k0.clone(), int(8 * j)), col.clone()));
                // The score through the prologue at (gq, gk), in f32.
                let score = Expr::load(acc_s, at.clone());
                let coord = vec![gq.clone(), gk.clone(), bi.clone()];
                let form = p.prologue;
                let prologue = |s: &mut Self| s.att_score(p, score, coord, unmasked);
                // Guards only where a tile can pass the end of the sequence.
                let guard = match (sq % bq == 0, sk % bkv == 0) {
                    (true, true) => None,
                    (false, true) => Some(lt(gq, int(sq))),
                    (true, false) => Some(lt(gk, int(sk))),
                    (false, false) => Some(Expr::idx(IdxOp::And, lt(gq, int(sq)), lt(gk, int(sk)))),
                };
                let value = match guard {
                    // A folded scale leaves the score as it is.
                    None if form.root.is_none() => continue,
                    None => prologue(self)?,
                    Some(inside) => {
                        let xv = self.fresh("x");
                        self.out.push(Stmt::Var {
                            var: xv.clone(),
                            ty: Ty::Elem(DType::F32),
                            init: lit(DType::F32, f64::NEG_INFINITY),
                        });
                        let xv2 = xv.clone();
                        self.if_(inside, |s| {
                            let value = prologue(s)?;
                            s.out.push(Stmt::Assign { var: xv2, value });
                            Ok(())
                        })?;
                        Expr::var(&xv)
                    }
                };
                self.out.push(Stmt::Store {
                    tensor: acc_s.to_string(),
                    coord: at,
                    value,
                });
            }
        }
        Ok(())
    }

    /// The raw score `score` (an f32 accumulator of `Q·Kᵀ` at `coord` = (query, key, batch))
    /// through the prologue, in f32 (`wide`: no rounding of the accumulator or of the
    /// prologue's results to 16 bits). With `unmasked`, a recognized mask band is known to
    /// keep the score.
    pub(super) fn att_score(
        &mut self,
        p: &AttPlan,
        score: Expr,
        coord: Vec<Expr>,
        unmasked: bool,
    ) -> R<Expr> {
        let form = p.prologue;
        let Some(root) = form.root else {
            return Ok(score);
        };
        let access_s = p.qk.access_c.clone();
        self.coord = coord;
        let memo = std::mem::take(&mut self.memo);
        self.wide = true;
        self.overrides
            .insert(p.s_mm, (access_s.clone(), score.clone()));
        if let Some(a) = form.alias {
            self.known.insert(a, score);
        }
        if let (Some(k), true) = (form.keep, unmasked) {
            self.known.insert(k, lit(DType::I1, 1.0));
        }
        let e = self.value_at(root, &access_s);
        self.overrides.remove(&p.s_mm);
        self.known.clear();
        let x_dt = self.val_dtype(root);
        self.wide = false;
        self.memo = memo;
        Ok(cast_to(DType::F32, x_dt, e?))
    }

    /// One online-softmax step over the tile's scores `acc_s` (`[4, bkv / 8]`, after the
    /// prologue): updates `m` and `l`, rescales `acc_o` (`[4, dv / 8]`) and writes
    /// `P = exp(S - m)` as `dt` to `p_c` (`[4, bkv / 8]`).
    #[allow(clippy::too_many_arguments)]
    fn att_softmax(
        &mut self,
        p: &AttPlan,
        acc_s: &str,
        p_c: &str,
        acc_o: &str,
        (m, l): (&[String], &[String]),
        bkv: u64,
        dv: u64,
        dt: DType,
    ) -> R<()> {
        let scale = self.att_online(p, acc_s, (m, l), bkv, false)?;
        self.att_rescale(acc_o, &scale, dv, false)?;
        for j in 0..bkv / 8 {
            for val in 0..4u64 {
                let at = vec![int(val), int(j)];
                self.out.push(Stmt::Store {
                    tensor: p_c.to_string(),
                    coord: at.clone(),
                    value: Expr::cast(dt, Expr::load(acc_s, at)),
                });
            }
        }
        Ok(())
    }

    /// The first half of [`Builder::att_softmax`]: updates `m` and `l` and leaves
    /// `exp(S - m)` in `acc_s` (f32); the factors of the two rows' rescaling. `lazy`: `m`
    /// moves only past [`RESCALE_MARGIN`], and a factor is exactly 1 where it stays.
    fn att_online(
        &mut self,
        p: &AttPlan,
        acc_s: &str,
        (m, l): (&[String], &[String]),
        bkv: u64,
        lazy: bool,
    ) -> R<Vec<Expr>> {
        // exp(c·x) = 2^(x·c·log2(e)), c the folded scale (1 when none).
        let k = p.prologue.scale.unwrap_or(1.0) * LOG2_E;
        let f32v = |x: f64| Expr::lit(DType::F32, x);
        let call = |f: Func, a: Vec<Expr>| Expr::call(f, a);
        // Rows h = 0 (values 0, 1) and h = 1 (values 2, 3).
        let sval = |val: u64, j: u64| Expr::load(acc_s, vec![int(val), int(j)]);
        let mut scale = vec![];
        let mut mref = vec![];
        for h in 0..2u64 {
            let row: Vec<Expr> = (0..bkv / 8)
                .flat_map(|j| [sval(2 * h, j), sval(2 * h + 1, j)])
                .collect();
            let mx = tree(Func::MaxNum, row);
            let mx = self.let_("mx", Ty::Elem(DType::F32), mx);
            let red = self.fresh("mx");
            self.out.push(Stmt::WarpReduce {
                var: red.clone(),
                ty: Ty::Elem(DType::F32),
                op: ReduceOp::Max,
                width: 4,
                value: mx,
            });
            let old = Expr::var(&m[h as usize]);
            let (mnew, r, sc) = self.att_max_step(old, Expr::var(&red), k, lazy);
            self.out.push(Stmt::Assign {
                var: m[h as usize].clone(),
                value: mnew,
            });
            scale.push(sc);
            let r2 = self.let_(
                "mr2",
                Ty::Elem(DType::F32),
                call(Func::Mul, vec![r, f32v(k)]),
            );
            mref.push(r2);
        }
        let mut sums: Vec<Vec<Expr>> = vec![vec![], vec![]];
        for j in 0..bkv / 8 {
            for val in 0..4u64 {
                let h = (val / 2) as usize;
                // exp(s - m) = 2^(s·log2(e) - m·log2(e)): one fused multiply-add and `ex2`.
                let pe = self.let_(
                    "p",
                    Ty::Elem(DType::F32),
                    call(
                        Func::Exp2,
                        vec![call(
                            Func::Sub,
                            vec![
                                call(Func::Mul, vec![sval(val, j), f32v(k)]),
                                mref[h].clone(),
                            ],
                        )],
                    ),
                );
                sums[h].push(pe.clone());
                self.out.push(Stmt::Store {
                    tensor: acc_s.to_string(),
                    coord: vec![int(val), int(j)],
                    value: pe,
                });
            }
        }
        for h in 0..2 {
            let sum = tree(Func::Add, std::mem::take(&mut sums[h]));
            let sum = self.let_("rs", Ty::Elem(DType::F32), sum);
            self.out.push(Stmt::Assign {
                var: l[h].clone(),
                value: call(
                    Func::Add,
                    vec![
                        call(Func::Mul, vec![Expr::var(&l[h]), scale[h].clone()]),
                        sum,
                    ],
                ),
            });
        }
        Ok(scale)
    }

    /// One step of a row's running max `old` toward `red`, the new maximum among its scores
    /// (`k` the exponent's scale): the new max, the one the probabilities are taken against (0
    /// where the max is still `-inf`: no NaN) and the factor rescaling O and l. `lazy`: the
    /// max moves only when the row's grows by more than [`RESCALE_MARGIN`] (log2 units), else
    /// the stale max stays (the scores' exponentials are then at most `2^RESCALE_MARGIN`) and
    /// the factor is exactly 1.
    pub(super) fn att_max_step(
        &mut self,
        old: Expr,
        red: Expr,
        k: f64,
        lazy: bool,
    ) -> (Expr, Expr, Expr) {
        let f32v = |x: f64| Expr::lit(DType::F32, x);
        let call = |f: Func, a: Vec<Expr>| Expr::call(f, a);
        let grow = self.let_(
            "mg",
            Ty::Elem(DType::I1),
            call(
                Func::Gt,
                vec![
                    call(
                        Func::Mul,
                        vec![call(Func::Sub, vec![red.clone(), old.clone()]), f32v(k)],
                    ),
                    f32v(RESCALE_MARGIN),
                ],
            ),
        );
        let moved = call(Func::Max, vec![old.clone(), red]);
        let mnew = self.let_(
            "mn",
            Ty::Elem(DType::F32),
            if lazy {
                call(Func::Select, vec![grow.clone(), moved, old.clone()])
            } else {
                moved
            },
        );
        let r = self.att_reference(&mnew);
        let factor = call(
            Func::Exp2,
            vec![call(
                Func::Mul,
                vec![call(Func::Sub, vec![old, r.clone()]), f32v(k)],
            )],
        );
        let sc = self.let_(
            "sc",
            Ty::Elem(DType::F32),
            if lazy {
                call(Func::Select, vec![grow, factor, f32v(1.0)])
            } else {
                factor
            },
        );
        (mnew, r, sc)
    }

    /// `m`, or 0 where it is `-inf`: the max a row's exponentials are taken against (a row
    /// with no finite score subtracts 0, not -inf: no NaN, its weights 0).
    pub(super) fn att_reference(&mut self, m: &Expr) -> Expr {
        let is_inf = Expr::call(
            Func::Eq,
            vec![m.clone(), lit(DType::F32, f64::NEG_INFINITY)],
        );
        self.let_(
            "mr",
            Ty::Elem(DType::F32),
            Expr::call(Func::Select, vec![is_inf, lit(DType::F32, 0.0), m.clone()]),
        )
    }

    /// The second half of [`Builder::att_softmax`]: `acc_o *= scale` per row (`P` is
    /// `acc_s`, rounded to the inputs' type as the `P·V` product reads it); `lazy` (with a
    /// lazy [`Builder::att_online`]), only where a factor is below 1.
    fn att_rescale(&mut self, acc_o: &str, scale: &[Expr], dv: u64, lazy: bool) -> R<()> {
        let rescale = |s: &mut Self| -> R<()> {
            for j in 0..dv / 8 {
                for val in 0..4u64 {
                    let at = vec![int(val), int(j)];
                    s.out.push(Stmt::Store {
                        tensor: acc_o.to_string(),
                        coord: at.clone(),
                        value: Expr::call(
                            Func::Mul,
                            vec![Expr::load(acc_o, at), scale[(val / 2) as usize].clone()],
                        ),
                    });
                }
            }
            Ok(())
        };
        if !lazy {
            return rescale(self);
        }
        // Skipped unless a row's max moved (`att_online`): a factor below 1.
        let moved = Expr::call(
            Func::Lt,
            vec![
                Expr::call(Func::Min, scale.to_vec()),
                Expr::lit(DType::F32, 1.0),
            ],
        );
        self.if_(moved, rescale)
    }

    /// `O / l` (as `O` times `1 / l`, one division a row) through the group's epilogue,
    /// stored where the row exists (`bq`: the block's query rows, from `q0`).
    fn att_store(
        &mut self,
        p: &AttPlan,
        acc_o: &str,
        l: &[String],
        rc: &[(Expr, Expr)],
        (q0, bi): (&Expr, &Expr),
        bq: u64,
    ) -> R<()> {
        let inv = self.att_inverse_sums(l);
        for j in 0..p.dv / 8 {
            for (val, (row, col)) in rc.iter().enumerate() {
                let gq = self.let_("oq", Ty::Idx, add(q0.clone(), row.clone()));
                let gd = self.let_("od", Ty::Idx, add(int(8 * j), col.clone()));
                let o = Expr::call(
                    Func::Mul,
                    vec![
                        Expr::load(acc_o, vec![int(val as u64), int(j)]),
                        inv[val / 2].clone(),
                    ],
                );
                let o = Expr::cast(p.dt, o);
                let coord = vec![gq.clone(), gd, bi.clone()];
                let store = |s: &mut Self| s.att_store_at(p, o, coord);
                // Rows past the end only where the query tiles pass it.
                if p.sq % bq == 0 {
                    store(self)?;
                } else {
                    self.if_(lt(gq, int(p.sq)), store)?;
                }
            }
        }
        Ok(())
    }

    /// Stores `o` (the output's dtype) at `coord` = (query, dv, batch): through the group's
    /// epilogue, or (a result view stored for the output) through the view's inverse.
    pub(super) fn att_store_at(&mut self, p: &AttPlan, o: Expr, coord: Vec<Expr>) -> R<()> {
        if p.viewed {
            self.out.push(Stmt::Store {
                tensor: p.outs[0].clone(),
                coord,
                value: o,
            });
            return Ok(());
        }
        self.coord = coord.clone();
        self.epilogue_stores(p.o_mm, o, &p.pv.access_c, &p.roots, &p.outs, coord)
    }

    /// `1 / l` of each of the thread's two rows, `l` summed over the quad first.
    fn att_inverse_sums(&mut self, l: &[String]) -> Vec<Expr> {
        l.iter()
            .map(|lv| {
                let red = self.fresh("l");
                self.out.push(Stmt::WarpReduce {
                    var: red.clone(),
                    ty: Ty::Elem(DType::F32),
                    op: ReduceOp::Sum,
                    width: 4,
                    value: Expr::var(lv),
                });
                let inv = Expr::call(Func::Div, vec![Expr::lit(DType::F32, 1.0), Expr::var(&red)]);
                self.let_("il", Ty::Elem(DType::F32), inv)
            })
            .collect()
    }

    /// Stores f32 zero to every value of a `[4, atoms]` accumulator.
    fn zero(&mut self, acc: &str, atoms: u64) -> R<()> {
        for j in 0..atoms {
            for val in 0..4 {
                self.out.push(Stmt::Store {
                    tensor: acc.to_string(),
                    coord: vec![int(val), int(j)],
                    value: lit(DType::F32, 0.0),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use irc_layout::{IntTuple, mma_m16n8k16_a, mma_m16n8k16_c, wgmma_m64nk16_d};

    /// The register identity P·V relies on: value `v` of the A fragment of k-step `k` (16
    /// columns) is value `v % 4` of C atom `2k + v / 4` (8 columns each), at the same
    /// (row, column) of the 16x16 tile.
    #[test]
    fn p_accumulators_are_a_fragments() {
        let a = mma_m16n8k16_a().unwrap();
        let c = mma_m16n8k16_c().unwrap();
        let rc = |idx: i64, rows: i64| (idx % rows, idx / rows);
        for t in 0..32 {
            for v in 0..8 {
                let (ar, ak) = rc(a.layout().crd2idx(&IntTuple::ints(&[t, v])).unwrap(), 16);
                let (cr, cc) = rc(
                    c.layout().crd2idx(&IntTuple::ints(&[t, v % 4])).unwrap(),
                    16,
                );
                assert_eq!((ar, ak), (cr, cc + 8 * (v / 4)), "t={t} v={v}");
            }
        }
    }

    /// The Hopper schedule's accumulators are the mma.sync atoms per warp: value `4j + v` of
    /// thread `t` of `wgmma_m64nk16_d(N)` is value `v` of atom `j` of lane `t % 32` in the
    /// 16-row slab of warp `t / 32` (so the per-score code and the P identity above hold).
    #[test]
    fn wgmma_accumulators_are_mma_atoms() {
        let c = mma_m16n8k16_c().unwrap();
        for n in [64, 128, 256] {
            let d = wgmma_m64nk16_d(n).unwrap();
            for t in 0..128 {
                for j in 0..n / 8 {
                    for v in 0..4 {
                        let idx = d
                            .layout()
                            .crd2idx(&IntTuple::ints(&[t, 4 * j + v]))
                            .unwrap();
                        let (row, col) = (idx % 64, idx / 64);
                        let ci = c.layout().crd2idx(&IntTuple::ints(&[t % 32, v])).unwrap();
                        let want = (16 * (t / 32) + ci % 16, 8 * j + ci / 16);
                        assert_eq!((row, col), want, "n={n} t={t} j={j} v={v}");
                    }
                }
            }
        }
    }
}
