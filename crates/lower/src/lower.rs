//! Lowering from the graph IR to the kernel IR.
//!
//! 1. **Plan.** Decide which values are *materialized* (get a device buffer): parameters, graph
//!    results, matmuls, reductions and composites, and elementwise values used more than once.
//!    Everything else is computed where it is read: views (transpose, reshape, broadcast) are
//!    layouts, scalar constants are literals, and single-use elementwise ops are inlined into
//!    their consumer's loads, so an elementwise chain becomes one kernel.
//! 2. **Kernels.** One kernel per materialized computed value, from a template per kind:
//!    elementwise (one element per thread, grid-stride), reduction and row composites (softmax,
//!    rmsnorm, layernorm: one block per row, block reductions), and a tiled matmul (shared-memory
//!    tiles, register accumulators, batch broadcasting and transposed operands through layouts).
//! 3. **Access layouts.** Every read goes through [`Builder::value_at`] with an *access layout*
//!    from the kernel's iteration coordinate to the value's row-major linear index. Reading
//!    through a view composes the view's layout with the access
//!    ([`irc_layout::composition`], checked on a sample of indices:
//!    `crate::indexing::checked_composition`); reading a buffer makes a tensor whose layout is
//!    the access itself. A view whose composition is not a layout, or not the composite (a
//!    reshape of a permuted tensor that does not divide evenly), makes the planner materialize
//!    that view and start again.
//!
//! Layouts list a tensor's dimensions innermost first (mode 0 is the last dimension), so that
//! CuTe's colexicographic 1-D coordinate is the row-major linear index.

use crate::LowerError;
use irc_ir::print::value_names;
use irc_ir::{Attr, Category, DType, Graph, Inst, OpKind, ValueDef, ValueId};
use irc_kir as kir;
use irc_kir::BufferKind;
use irc_layout::{Layout, LayoutError};
use std::collections::HashMap;

pub(crate) use crate::exprs::*;
pub use crate::templates::config::{Choice, ConfigSource};
pub use irc_fused::SourceInfo;

pub(crate) const THREADS: u32 = 256;
/// Grid-stride loops launch at most this many blocks.
pub(crate) const MAX_BLOCKS: u64 = 1 << 20;
/// Kernels whose buffers all have fewer elements index with 32-bit integers.
pub(crate) const I32_LIMIT: u64 = 1 << 30;

/// A planned graph: its Fused IR (with the planner's remarks) and the kernel IR lowered from it.
#[derive(Clone, Debug)]
pub struct Planned {
    pub fused: irc_fused::Module,
    pub remarks: Vec<irc_fused::Remark>,
    pub kernels: kir::Module,
    /// Views lowering found it could not read through a layout, stored by the final plan.
    pub forced: Vec<ValueId>,
    /// Each group's problem and the configuration its template was built with.
    pub choices: Vec<Choice>,
    /// Per kernel, the earlier kernel it is a renamed copy of (the same but for its name and
    /// origins: a repeated group lowered once, `twins.rs`), for the verifier and the emitters.
    pub twins: Vec<Option<usize>>,
    /// Time spent planning (the fusion policy and the Fused IR) and lowering (templates and the
    /// kernel IR's verification), summed over the retries.
    pub plan_time: std::time::Duration,
    pub lower_time: std::time::Duration,
}

/// Choices the templates take as data (an autotuner's, or a test's); `None` is the template's
/// own heuristic.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LowerOptions {
    /// The tensor-core matmul's configuration for every matmul it builds (over `configs`; it
    /// also selects the mma.sync template over the Hopper one).
    pub mma: Option<crate::templates::MmaConfig>,
    /// Whether the Hopper templates (TMA, mbarrier, wgmma: sm_90a) may be used.
    pub wgmma: bool,
    /// Per-kernel configurations, keyed by [`crate::templates::Problem::key`] (what a tuning
    /// cache holds); a kernel without one gets its template's heuristic choice.
    pub configs: std::collections::BTreeMap<String, crate::templates::Config>,
    /// The GPU the configurations are checked against (default: the H100).
    pub target: irc_target::Target,
    /// Lower every group on its own, even one identical to an earlier group but for names
    /// (which otherwise gets a renamed copy of that group's kernels, `twins.rs`). The kernel
    /// IR is the same either way; tests compare the two.
    pub lower_each_group: bool,
}

/// Plans a verified graph and lowers the plan. A view whose layout cannot be composed with its
/// reader's access is forced into memory and the graph planned again, so the returned Fused IR
/// is exactly what the kernel IR was lowered from.
pub fn plan_and_lower(g: &Graph, src: SourceInfo<'_>) -> Result<Planned, LowerError> {
    plan_and_lower_with(g, src, &LowerOptions::default())
}

/// [`plan_and_lower`] with the templates' choices given.
pub fn plan_and_lower_with(
    g: &Graph,
    src: SourceInfo<'_>,
    options: &LowerOptions,
) -> Result<Planned, LowerError> {
    let names = value_names(g);
    let mut forced: Vec<ValueId> = vec![];
    let (mut plan_time, mut lower_time) = Default::default();
    // Each retry forces one more view, so this ends within the number of values.
    for _ in 0..=g.values.len() {
        let start = std::time::Instant::now();
        let (fused, remarks) = irc_fused::plan_graph(g, src, &forced);
        irc_fused::verify_module(&fused)
            .map_err(|e| LowerError::Internal(format!("the fusion planner: {e}")))?;
        plan_time += start.elapsed();
        let start = std::time::Instant::now();
        let lowered = lower(&fused, options);
        lower_time += start.elapsed();
        match lowered {
            Err(Retry::Materialize(name)) => {
                let v = names.iter().position(|n| *n == name).ok_or_else(|| {
                    LowerError::Internal(format!("lowering forced an unknown value %{name}"))
                })?;
                forced.push(ValueId(v as u32));
            }
            Err(Retry::Fail(e)) => return Err(e),
            Ok((kernels, choices, twins)) => {
                return Ok(Planned {
                    fused,
                    remarks,
                    kernels,
                    forced,
                    choices,
                    twins,
                    plan_time,
                    lower_time,
                });
            }
        }
    }
    Err(LowerError::Internal("the planner did not converge".into()))
}

/// Lowers a verified graph to a verified kernel IR module.
pub fn lower_graph(g: &Graph, src: SourceInfo<'_>) -> Result<kir::Module, LowerError> {
    plan_and_lower(g, src).map(|p| p.kernels)
}

/// Lowers a verified Fused IR module to a verified kernel IR module.
pub fn lower_fused(m: &irc_fused::Module) -> Result<kir::Module, LowerError> {
    lower(m, &LowerOptions::default())
        .map(|(k, _, _)| k)
        .map_err(|r| match r {
            Retry::Fail(e) => e,
            Retry::Materialize(v) => LowerError::Unsupported {
                op: format!("%{v}"),
                reason:
                    "its view cannot be composed with its reader's access layout; plan the graph \
                     again with the view stored"
                        .into(),
            },
        })
}

/// A lowered module, each group's choice and each kernel's twin.
type Lowers = (kir::Module, Vec<Choice>, Vec<Option<usize>>);

pub(crate) fn lower(m: &irc_fused::Module, options: &LowerOptions) -> R<Lowers> {
    let (g, locs) = crate::rebuild::rebuild(m)?;
    let l = Lowering::new(&g, m, locs, options.clone())?;
    let (k, choices, twins) = l.run(m)?;
    kir::verify_module_with_twins(&k, &twins).map_err(|e| LowerError::Internal(e.to_string()))?;
    Ok((k, choices, twins))
}

pub(crate) enum Retry {
    /// The view with this name cannot be read through a layout (or the attention kernel
    /// reading the softmax with this name cannot be built): store it and plan again.
    Materialize(String),
    Fail(LowerError),
}

impl From<LowerError> for Retry {
    fn from(e: LowerError) -> Retry {
        Retry::Fail(e)
    }
}

pub(crate) type R<T> = Result<T, Retry>;

pub(crate) fn internal(e: LayoutError) -> Retry {
    Retry::Fail(LowerError::Internal(format!("layout algebra: {e}")))
}

/// Row-major strides of a shape.
pub(crate) fn row_major(shape: &[u64]) -> Vec<i64> {
    let mut st = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * shape[i + 1] as i64;
    }
    st
}

/// A layout from `modes` given outermost first (as the graph lists dims), written innermost
/// first; a rank-0 tensor is `1:0`.
pub(crate) fn dims_layout(modes: &[(u64, i64)]) -> Result<Layout, LayoutError> {
    if modes.is_empty() {
        return Layout::int(1, 0);
    }
    let shape: Vec<i64> = modes.iter().rev().map(|&(s, _)| s as i64).collect();
    let stride: Vec<i64> = modes
        .iter()
        .rev()
        .map(|&(s, d)| if s == 1 { 0 } else { d })
        .collect();
    Layout::flat(&shape, &stride)
}

/// The layout reading a tensor of shape `from` broadcast (numpy rules) to shape `to`: a
/// coordinate of `to` to the row-major index of `from`.
pub(crate) fn broadcast_layout(from: &[u64], to: &[u64]) -> Result<Layout, LayoutError> {
    let st = row_major(from);
    let lead = to.len() - from.len();
    let modes: Vec<(u64, i64)> = to
        .iter()
        .enumerate()
        .map(|(j, &t)| {
            if j < lead || from[j - lead] == 1 {
                (t, 0)
            } else {
                (t, st[j - lead])
            }
        })
        .collect();
    dims_layout(&modes)
}

/// The elementwise-kernel access: the 1-D index itself.
pub(crate) fn linear(n: u64) -> Result<Layout, LayoutError> {
    Layout::int(n as i64, 1)
}

/// Transposes, reshapes, broadcasts and slices: layouts (a slice's with an offset).
pub(crate) fn is_view(op: OpKind) -> bool {
    matches!(op.category(), Category::View | Category::Slice)
}

pub(crate) fn attr_f64(a: &Attr) -> f64 {
    match a {
        Attr::Bool(b) => f64::from(u8::from(*b)),
        other => other.as_f64().unwrap_or(0.0),
    }
}

/// One group lowered: its temp buffers, its kernels (with their arguments and constant
/// arrays) in launch order, and its configuration.
pub(crate) struct Lowered {
    pub(crate) temps: Vec<kir::BufferDecl>,
    pub(crate) kernels: Vec<(kir::Kernel, Vec<String>, Vec<kir::ConstDecl>)>,
    pub(crate) choice: Choice,
    /// A renamed copy of another group's kernels (`twins.rs`).
    pub(crate) copied: bool,
}

pub(crate) struct Lowering<'g> {
    pub(crate) g: &'g Graph,
    pub(crate) names: Vec<String>,
    /// Each value's name → the value.
    pub(crate) value_of: HashMap<String, ValueId>,
    /// Each buffer's name → its dtype (the Fused IR's; a template's temps are its builder's, and
    /// no other group reads them).
    pub(crate) dtype_of: HashMap<String, DType>,
    /// The graph as a policy DAG, built on first use (an attention group's prologue).
    pub(crate) dag: std::sync::OnceLock<irc_fused::GraphDag<'g>>,
    /// Source location of each statement.
    pub(crate) locs: HashMap<ValueId, String>,
    /// Value held in a buffer → the buffer's name.
    pub(crate) buffer_of: HashMap<ValueId, String>,
    pub(crate) module: kir::Module,
    pub(crate) index: kir::IndexWidth,
    pub(crate) options: LowerOptions,
}

impl<'g> Lowering<'g> {
    pub(crate) fn new(
        g: &'g Graph,
        m: &irc_fused::Module,
        locs: HashMap<ValueId, String>,
        options: LowerOptions,
    ) -> R<Lowering<'g>> {
        let names = value_names(g);
        let value_of: HashMap<String, ValueId> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), ValueId(i as u32)))
            .collect();
        let value = |name: &str| {
            value_of.get(name).copied().ok_or_else(|| {
                Retry::Fail(LowerError::Internal(format!(
                    "Fused IR: %{name} is undefined"
                )))
            })
        };
        let mut buffer_of = HashMap::new();
        let mut buffers = vec![];
        for b in &m.buffers {
            buffer_of.insert(value(&b.value)?, b.name.clone());
            buffers.push(kir::BufferDecl {
                name: b.name.clone(),
                dtype: b.ty.dtype,
                shape: b.ty.shape.clone(),
                kind: match b.kind {
                    irc_fused::BufferKind::Input => BufferKind::Input,
                    irc_fused::BufferKind::Output => BufferKind::Output,
                    irc_fused::BufferKind::Temp => BufferKind::Temp,
                },
                tensor_map: None,
            });
        }
        let index = if buffers.iter().all(|b| b.elements() < I32_LIMIT) {
            kir::IndexWidth::I32
        } else {
            kir::IndexWidth::I64
        };
        let dtype_of = buffers.iter().map(|b| (b.name.clone(), b.dtype)).collect();
        let module = kir::Module {
            name: m.name.clone(),
            flops: m.flops,
            min_bytes: m.min_bytes,
            buffers,
            constants: vec![],
            kernels: vec![],
            launches: vec![],
            results: m.results.clone(),
        };
        Ok(Lowering {
            g,
            names,
            value_of,
            dtype_of,
            dag: std::sync::OnceLock::new(),
            locs,
            buffer_of,
            module,
            index,
            options,
        })
    }

    /// One group's kernels, in launch order, with the temp buffers they add.
    pub(crate) fn group(
        &self,
        m: &irc_fused::Module,
        buffers: &HashMap<&str, &irc_fused::Buffer>,
        grp: &irc_fused::Group,
    ) -> R<Lowered> {
        let id = |name: &str| self.value_of.get(name).copied().unwrap_or(ValueId(0));
        let roots: Vec<ValueId> = grp.stores().map(|(v, _)| id(v)).collect();
        // The statement the kernel is built around: the anchor, or the stored value.
        let lead = match grp.anchor_index().map(|i| &grp.stmts[i]) {
            Some(irc_fused::Stmt::Op(o)) => id(&o.value),
            _ => roots[0],
        };
        let ValueDef::Inst(i) = self.g.values[lead.index()].def else {
            return Err(Retry::Fail(LowerError::Internal(format!(
                "group @{} stores a parameter",
                grp.name
            ))));
        };
        let inst = &self.g.insts[i];
        let single = |what: &str| {
            if roots.len() == 1 {
                Ok(())
            } else {
                Err(Retry::Fail(LowerError::Unsupported {
                    op: inst.op.name().into(),
                    reason: format!(
                        "a {what} kernel stores one value; @{} stores {}",
                        grp.name,
                        roots.len()
                    ),
                }))
            }
        };
        let hopper = self.options.wgmma && self.options.mma.is_none();
        let attention = (grp.attention())
            .map(|att| self.attention_ops(grp, att, &roots))
            .transpose()?;
        // What the templates that need a builder's view of the operands see.
        let mut probe = Builder::new(self, grp.name.clone(), i);
        let decode = match &attention {
            Some(ops) => probe.decode_shape(ops)?,
            None => None,
        };
        let template = match attention {
            Some(_) if decode.is_some() => "attention_decode",
            Some(_) if hopper => "attention_wgmma",
            Some(_) => "attention",
            None if inst.op.category() == Category::Matmul && probe.gemv_applies(inst) => {
                "matmul_gemv"
            }
            None => {
                crate::templates::template_of(inst.op, self.g.values[lead.index()].ty.dtype, hopper)
            }
        };
        let mut problem = crate::templates::problem_of(
            m,
            buffers,
            grp,
            self.g,
            inst,
            template,
            attention.as_ref(),
        );
        if let Some(shape) = decode.and_then(|s| s.problem_shape(&problem.shape)) {
            problem.shape = shape;
        }
        let (config, source) = self.resolve(&problem)?;
        let mut b = Builder::new(self, grp.name.clone(), i);
        b.roots = roots.clone();
        b.config = config;
        // The heuristic's point, whether chosen by default or given (a tuner's baseline, a
        // cache entry holding that point), but not a flag's: a template may refine it
        // (`Builder::heuristic`).
        let point = crate::templates::config::space_of(problem.template)
            .map(|s| s.heuristic(&problem, &self.options.target));
        b.heuristic = match source {
            ConfigSource::Heuristic => true,
            ConfigSource::Flag => false,
            _ => config.is_some() && config == point,
        };
        if let Some(ops) = &attention {
            b.attention(ops, &roots)?;
        } else {
            match inst.op.category() {
                Category::Matmul if problem.template == "matmul_gemv" => {
                    // The policy leaves a matrix-vector product's reductions to their own kernels.
                    if !b.split_row_reductions(&roots).1.is_empty() {
                        return Err(Retry::Fail(LowerError::Unsupported {
                            op: inst.op.name().into(),
                            reason: format!(
                                "@{} reduces a matrix-vector product in its epilogue",
                                grp.name
                            ),
                        }));
                    }
                    b.gemv(inst, &roots)?
                }
                Category::Matmul => b.matmul(inst, &roots)?,
                Category::Reduction => {
                    single("reduction")?;
                    b.reduction(inst)?
                }
                Category::Composite => b.composite(inst)?,
                _ => b.elementwise(&roots)?,
            }
        }
        let temps = std::mem::take(&mut b.temps);
        let mut kernels = std::mem::take(&mut b.pre);
        // A template may refine its heuristic's point once it sees the operands (`b.config`).
        let config = if b.heuristic { b.config } else { config };
        kernels.push(b.finish());
        let choice = Choice {
            group: grp.name.clone(),
            kernels: kernels.iter().map(|k| k.0.name.clone()).collect(),
            problem,
            config,
            source,
        };
        Ok(Lowered {
            temps,
            kernels,
            choice,
            copied: false,
        })
    }

    pub(crate) fn origin(&self, inst: &Inst) -> kir::Origin {
        let names = &self.names;
        let operands: Vec<String> = inst
            .operands
            .iter()
            .map(|o| format!("%{}", names[o.index()]))
            .collect();
        let op = format!(
            "%{} = {} {}",
            names[inst.result.index()],
            inst.op.name(),
            operands.join(", ")
        );
        let loc = self
            .locs
            .get(&inst.result)
            .cloned()
            .unwrap_or_else(|| "<builder>".to_string());
        kir::Origin {
            op: op.trim_end().to_string(),
            loc,
        }
    }
}

pub(crate) use crate::builder::Builder;
