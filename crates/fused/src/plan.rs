//! The fusion planner: a verified graph to a Fused IR [`Module`].
//!
//! [`policy::decide`] says where each value lives; the planner turns that into buffers and
//! groups: one group per stored value (a matmul whose epilogue reaches the value joins its
//! group), holding every op computed inline on the way from the group's loads to its store.
//! [`Remark`]s say why, for `irc --emit=fused --explain`.

use crate::policy::{self, Dag, Home, NodeKind, Why};
use crate::{Buffer, BufferKind, Group, Module, OpStmt, Stmt};
use irc_ir::infer::matmul_shape;
use irc_ir::print::value_names;
use irc_ir::{Attr, Attrs, Category, Graph, OpKind, Span, TensorType, ValueDef, ValueId};

/// The source a graph was parsed from, to name `file:line:col` of its statements.
#[derive(Copy, Clone, Debug, Default)]
pub struct SourceInfo<'a> {
    /// The file name kernels cite (`<input>` when empty).
    pub name: &'a str,
    pub text: &'a str,
}

/// One explained decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Remark {
    /// The group it is about.
    pub group: String,
    pub text: String,
}

/// A [`Graph`] seen as a policy DAG: node `i` is value `i`.
pub struct GraphDag<'g> {
    g: &'g Graph,
    operands: Vec<Vec<usize>>,
    kinds: Vec<NodeKind>,
    insts: Vec<Option<usize>>,
    results: Vec<usize>,
}

impl<'g> GraphDag<'g> {
    pub fn new(g: &'g Graph) -> Self {
        let n = g.values.len();
        let mut operands = vec![vec![]; n];
        let mut kinds = vec![NodeKind::Param; n];
        let mut insts = vec![None; n];
        for (i, inst) in g.insts.iter().enumerate() {
            let r = inst.result.index();
            operands[r] = inst.operands.iter().map(|o| o.index()).collect();
            kinds[r] = NodeKind::of(inst.op, &inst.attrs);
            insts[r] = Some(i);
        }
        let results = g.results.iter().map(|r| r.index()).collect();
        GraphDag {
            g,
            operands,
            kinds,
            insts,
            results,
        }
    }
}

impl Dag for GraphDag<'_> {
    fn len(&self) -> usize {
        self.kinds.len()
    }
    fn kind(&self, i: usize) -> NodeKind {
        self.kinds[i]
    }
    fn operands(&self, i: usize) -> &[usize] {
        &self.operands[i]
    }
    fn shape(&self, i: usize) -> &[u64] {
        &self.g.values[i].ty.shape
    }
    fn results(&self) -> &[usize] {
        &self.results
    }
    fn dtype(&self, i: usize) -> Option<irc_ir::DType> {
        Some(self.g.values[i].ty.dtype)
    }
    fn attr(&self, i: usize, name: &str) -> Option<Attr> {
        self.g.insts[self.insts[i]?].attrs.get(name).cloned()
    }
    fn op(&self, i: usize) -> Option<irc_ir::OpKind> {
        Some(self.g.insts[self.insts[i]?].op)
    }
}

/// A name usable as a buffer or kernel name.
pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Plans a verified graph; `forced` holds the views lowering found it cannot compose.
pub fn plan_graph(g: &Graph, src: SourceInfo<'_>, forced: &[ValueId]) -> (Module, Vec<Remark>) {
    let dag = GraphDag::new(g);
    let mut forced_at = vec![false; g.values.len()];
    for v in forced {
        forced_at[v.index()] = true;
    }
    let policy::Decisions {
        home,
        attention,
        prologues,
        reductions,
    } = policy::decide_explained(&dag, &forced_at);
    let names = value_names(g);
    let module_name = sanitize(&g.name);

    // Buffers: parameters in order, then stored values in statement order.
    let mut buffers: Vec<Buffer> = vec![];
    let mut buffer_of: Vec<Option<usize>> = vec![None; g.values.len()];
    let mut taken = std::collections::HashSet::new();
    let mut add = |v: ValueId, kind: BufferKind, buffers: &mut Vec<Buffer>| {
        let base = sanitize(&names[v.index()]);
        let mut name = base.clone();
        let mut n = 1;
        while !taken.insert(name.clone()) {
            name = format!("{base}_{n}");
            n += 1;
        }
        buffer_of[v.index()] = Some(buffers.len());
        buffers.push(Buffer {
            name,
            value: names[v.index()].clone(),
            ty: g.ty(v).clone(),
            kind,
        });
    };
    for &p in &g.params {
        add(p, BufferKind::Input, &mut buffers);
    }
    let is_result = |v: ValueId| g.results.contains(&v);
    for inst in &g.insts {
        if home[inst.result.index()].kernel().is_some() {
            let kind = if is_result(inst.result) {
                BufferKind::Output
            } else {
                BufferKind::Temp
            };
            add(inst.result, kind, &mut buffers);
        }
    }

    // Where each line starts, once: a statement's line is a binary search, not a scan.
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(src.text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let loc = |i: usize| -> Option<String> {
        let inst = &g.insts[i];
        if let Some(p) = &inst.loc {
            return Some(format!("{}:{}:{}", p.file, p.line, p.col));
        }
        let span = inst.span?;
        let (line, col) = line_col(src.text, &line_starts, span);
        let file = if src.name.is_empty() {
            "<input>"
        } else {
            src.name
        };
        Some(format!("{file}:{line}:{col}"))
    };
    let inst_of = |v: usize| match g.values[v].def {
        ValueDef::Inst(i) => Some(i),
        ValueDef::Param(_) => None,
    };

    // The attention chains by output matmul.
    let mut chains_of: std::collections::HashMap<usize, Vec<&policy::AttentionMatch>> =
        std::collections::HashMap::new();
    for a in &attention {
        chains_of.entry(a.output).or_default().push(a);
    }
    // Rule 10's verdicts: an accepted prologue is told in its matmul's group, a declined one in
    // the rmsnorm's.
    let mut prologues_of: std::collections::HashMap<usize, Vec<&policy::NormPrologue>> =
        std::collections::HashMap::new();
    for p in &prologues {
        let at = if p.declined.is_none() {
            p.matmul
        } else {
            p.norm
        };
        prologues_of.entry(at).or_default().push(p);
    }
    // Rule 6's reduction verdicts, told likewise in the matmul's or the reduction's group.
    let mut reductions_of: std::collections::HashMap<usize, Vec<&policy::EpilogueReduction>> =
        std::collections::HashMap::new();
    for r in &reductions {
        let at = if r.declined.is_none() {
            r.matmul
        } else {
            r.reduction
        };
        reductions_of.entry(at).or_default().push(r);
    }
    let mut groups = vec![];
    let mut remarks = vec![];
    let mut member = vec![usize::MAX; g.values.len()];
    for (leader, stores) in policy::kernels(&dag, &home) {
        let Some(lead_inst) = inst_of(leader) else {
            continue;
        };
        let chains = chains_of.get(&leader).map_or(&[][..], Vec::as_slice);
        let att = chains.iter().find(|a| a.declined.is_none());
        let name = format!(
            "{module_name}_k{}_{}",
            groups.len(),
            if att.is_some() {
                "attention"
            } else {
                g.insts[lead_inst].op.name()
            }
        );
        // The ops computed in this kernel: everything reached from its stores through values
        // that are not in memory (or are stored by this kernel).
        let mut loads: Vec<usize> = vec![];
        let mut members: Vec<usize> = vec![];
        let mut stack = stores.clone();
        while let Some(v) = stack.pop() {
            if member[v] == leader {
                continue;
            }
            let own = home[v].kernel() == Some(leader);
            if !own && buffer_of[v].is_some() {
                if !loads.contains(&v) {
                    loads.push(v);
                }
                continue;
            }
            member[v] = leader;
            if let Some(i) = inst_of(v) {
                members.push(i);
            }
            stack.extend(dag.operands(v).iter().copied());
        }
        // Statement order: the graph's (each kernel visits only its own ops).
        members.sort_unstable();
        loads.sort_by_key(|&v| buffer_of[v]);
        let mut stmts: Vec<Stmt> = loads
            .iter()
            .map(|&v| Stmt::Load {
                value: names[v].clone(),
                buffer: buffers[buffer_of[v].unwrap_or(0)].name.clone(),
            })
            .collect();
        let mut fused = vec![];
        for &j in &members {
            let x = &g.insts[j];
            let v = x.result.index();
            let in_attention = matches!(home[v], Home::Attention { .. });
            if v != leader
                && !stores.contains(&v)
                && !in_attention
                && !matches!(x.op.category(), Category::Constant)
            {
                fused.push(format!("%{} ({})", names[v], x.op.name()));
            }
            stmts.push(Stmt::Op(OpStmt {
                value: names[v].clone(),
                op: x.op,
                operands: x
                    .operands
                    .iter()
                    .map(|o| names[o.index()].clone())
                    .collect(),
                attrs: x.attrs.clone(),
                ty: g.ty(x.result).clone(),
                loc: loc(j),
            }));
        }
        for &v in &stores {
            stmts.push(Stmt::Store {
                value: names[v].clone(),
                buffer: buffers[buffer_of[v].unwrap_or(0)].name.clone(),
            });
            let Home::Stored { why, .. } = &home[v] else {
                continue;
            };
            let reason = match why {
                Why::Result => "it is a graph result".to_string(),
                Why::Anchor => format!(
                    "{} ends a kernel: its readers need the whole result (a reduction boundary)",
                    g.insts[inst_of(v).unwrap_or(0)].op.name()
                ),
                Why::SharedBy(n) => {
                    format!("{n} statements read it; each would recompute it")
                }
                Why::MatmulOperand(m) => format!(
                    "it is an operand of the matmul %{}, whose every tile would recompute it",
                    names[*m]
                ),
                Why::Forced
                    if g.insts[inst_of(v).unwrap_or(0)].op.category() == Category::Composite =>
                {
                    "lowering could not build the attention kernel that would read it".into()
                }
                Why::Forced => {
                    "its layout cannot be composed with its reader's access, so it is copied".into()
                }
                Why::ReadOutsideEpilogue => {
                    "a statement outside this kernel's epilogue reads it".into()
                }
                Why::ViewForMatmul(m) => format!(
                    "the matmul %{} reads it: the attention output is stored in that layout",
                    names[*m]
                ),
            };
            remarks.push(Remark {
                group: name.clone(),
                text: format!("%{} is kept in memory: {reason}", names[v]),
            });
        }
        if home[leader] == Home::Epilogue {
            let op = g.insts[lead_inst].op;
            // An attention output is stored through a result view (rule 2) or by its epilogue.
            let is_view = |v: usize| {
                inst_of(v).is_some_and(|i| {
                    matches!(g.insts[i].op.category(), Category::View | Category::Slice)
                })
            };
            let views_only = stores.iter().all(|&v| is_view(v));
            let epilogue = match op.category() {
                Category::Matmul => att.is_none() || !views_only,
                Category::Composite => !views_only,
                _ => false,
            };
            let text = if epilogue && stores.iter().any(|&v| is_view(v)) {
                format!(
                    "the {} %{} is not stored: only its kernel reads it (its epilogue, and the result views it stores)",
                    op.name(),
                    names[leader]
                )
            } else if epilogue {
                format!(
                    "the {} %{} is not stored: only its epilogue reads it",
                    op.name(),
                    names[leader]
                )
            } else {
                let views: Vec<String> = stores.iter().map(|&v| format!("%{}", names[v])).collect();
                let what = if stores.iter().all(|v| dag.results().contains(v)) {
                    "the result"
                } else {
                    "its view"
                };
                format!(
                    "the {} %{} is not stored: its kernel stores {what} {} through the view's \
                     layout (no copy kernel)",
                    op.name(),
                    names[leader],
                    views.join(", ")
                )
            };
            remarks.push(Remark {
                group: name.clone(),
                text,
            });
        }
        for a in chains {
            remarks.push(Remark {
                group: name.clone(),
                text: attention_remark(&dag, a, &names),
            });
        }
        for p in prologues_of.get(&leader).map_or(&[][..], Vec::as_slice) {
            let (n, m) = (&names[p.norm], &names[p.matmul]);
            let text = match &p.declined {
                None => format!(
                    "prologue: the rmsnorm %{n} is computed by the matmul %{m}'s kernel: each A \
                     tile is scaled along K as it arrives, each row's sum of squares is taken \
                     from the same tiles, and the row scale is applied to the accumulator"
                ),
                Some(why) => {
                    format!("the rmsnorm %{n} is not the prologue of the matmul %{m}: {why}")
                }
            };
            remarks.push(Remark {
                group: name.clone(),
                text,
            });
        }
        for r in reductions_of.get(&leader).map_or(&[][..], Vec::as_slice) {
            let (s, m) = (&names[r.reduction], &names[r.matmul]);
            let inst = &g.insts[inst_of(r.reduction).unwrap_or(0)];
            let op = inst.op.name();
            let rank = g.ty(inst.operands[0]).rank();
            let rows =
                irc_ir::infer::reduction_axes(rank, &inst.attrs).ok() == Some(vec![rank - 1]);
            let (axis, axis_tiles) = match rows {
                true => ("rows", "row of tiles"),
                false => ("columns", "column of tiles"),
            };
            let text = match &r.declined {
                None => format!(
                    "epilogue reduction: the {op} %{s} over the {axis} is computed by the matmul \
                     %{m}'s kernel: each block reduces its tile's part of each, and the last \
                     block of a {axis_tiles} adds their partials in order"
                ),
                Some(why) => {
                    format!("the {op} %{s} is not in the matmul %{m}'s epilogue: {why}")
                }
            };
            remarks.push(Remark {
                group: name.clone(),
                text,
            });
        }
        if !fused.is_empty() {
            remarks.push(Remark {
                group: name.clone(),
                text: format!("fused: {}", fused.join(", ")),
            });
        }
        groups.push(Group { name, stmts });
    }

    let results = g
        .results
        .iter()
        .map(|r| buffers[buffer_of[r.index()].unwrap_or(0)].name.clone())
        .collect();
    let mut seen = std::collections::HashSet::new();
    let min_bytes = g
        .params
        .iter()
        .chain(&g.results)
        .filter(|v| seen.insert(**v))
        .fold(0u64, |b, &v| b.saturating_add(g.ty(v).size_bytes()));
    let module = Module {
        name: module_name,
        flops: graph_flops(g),
        min_bytes,
        buffers,
        groups,
        results,
    };
    let buffer_of: std::collections::HashMap<&str, &Buffer> = module
        .buffers
        .iter()
        .map(|b| (b.name.as_str(), b))
        .collect();
    for grp in &module.groups {
        if let Some(evt) = grp.evt_by(|name| buffer_of.get(name).copied()) {
            remarks.push(Remark {
                group: grp.name.clone(),
                text: format!("epilogue tree: {evt}"),
            });
        }
    }
    (module, remarks)
}

/// What rule 8 did with an attention chain, for `--explain`.
fn attention_remark(dag: &GraphDag<'_>, a: &policy::AttentionMatch, names: &[String]) -> String {
    let name = |v: usize| format!("%{}", names[v]);
    let op = |v: usize| dag.op(v).map_or("param", |o| o.name());
    let scores = a.scores.map_or("?".to_string(), name);
    match &a.declined {
        None => {
            let prologue: Vec<String> = a
                .prologue
                .iter()
                .map(|&v| format!("{} ({})", name(v), op(v)))
                .collect();
            let prologue = if prologue.is_empty() {
                "none".to_string()
            } else {
                prologue.join(", ")
            };
            let causal = match crate::attention::band(dag, a) {
                Some(b) if b.is_causal() => {
                    "; causal: key tiles past the diagonal are skipped".to_string()
                }
                Some(b) => format!("; mask band ({b}): key tiles outside it are skipped"),
                None => String::new(),
            };
            let cast = a
                .p_cast
                .map_or(String::new(), |c| format!(" (cast {})", name(c)));
            format!(
                "attention: scores {scores} (matmul), prologue {prologue}, softmax {}{cast}, \
                 output {} in one kernel; the scores and probabilities stay in registers{causal}",
                name(a.softmax),
                name(a.output)
            )
        }
        Some(why) => {
            let at = a
                .declined_at
                .map_or(String::new(), |v| format!(" ({})", name(v)));
            format!(
                "not fused as attention (scores {scores}, softmax {}, output {}): {why}{at}",
                name(a.softmax),
                name(a.output)
            )
        }
    }
}

/// The 1-based line and column (in characters) of a span's start.
fn line_col(text: &str, line_starts: &[usize], span: Span) -> (usize, usize) {
    let start = span.range().start.min(text.len());
    let line = line_starts.partition_point(|&s| s <= start);
    let from = line_starts.get(line.wrapping_sub(1)).copied().unwrap_or(0);
    let col = text.get(from..start).map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// Floating-point work: 2·M·N·K per matmul, one per element per elementwise op or reduction
/// input, a handful per element for composites.
fn graph_flops(g: &Graph) -> u64 {
    g.insts.iter().fold(0u64, |flops, inst| {
        let operands: Vec<&TensorType> = inst.operands.iter().map(|&v| g.ty(v)).collect();
        flops.saturating_add(op_flops(inst.op, &inst.attrs, &operands, g.ty(inst.result)))
    })
}

/// One op's floating-point work, as [`Module::flops`] counts it.
fn op_flops(op: OpKind, attrs: &Attrs, operands: &[&TensorType], out: &TensorType) -> u64 {
    match op.category() {
        Category::Matmul => {
            let (Some(a), Some(b)) = (operands.first(), operands.get(1)) else {
                return 0;
            };
            let flag = |n: &str| attrs.get(n).and_then(Attr::as_bool).unwrap_or(false);
            matmul_shape(&a.shape, &b.shape, flag("transpose_a"), flag("transpose_b"))
                .map(|s| 2 * s.m * s.n * s.k * s.batch.iter().product::<u64>())
                .unwrap_or(0)
        }
        Category::Unary | Category::Binary => out.numel(),
        Category::Reduction => operands.first().map_or(0, |t| t.numel()),
        Category::Composite => 5 * out.numel(),
        _ => 0,
    }
}

/// What one kernel must do at the least, for its own roofline floor: the floating-point work
/// of its ops (counted as [`Module::flops`] counts the graph's) and the bytes of every buffer
/// it loads or stores, each once.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Work {
    pub flops: u64,
    pub bytes: u64,
}

/// The [`Work`] of each group of `m`, in launch order. Summing each kernel's floor over them
/// bounds what a launch sequence of these kernels can reach, as [`Module::min_bytes`] and
/// [`Module::flops`] bound the graph.
pub fn group_work(m: &Module) -> Vec<Work> {
    let buffer: std::collections::HashMap<&str, &Buffer> =
        m.buffers.iter().map(|b| (b.name.as_str(), b)).collect();
    m.groups
        .iter()
        .map(|grp| {
            let mut ty: std::collections::HashMap<&str, &TensorType> = Default::default();
            let mut touched = std::collections::HashSet::new();
            let mut w = Work::default();
            for st in &grp.stmts {
                match st {
                    Stmt::Load { value, buffer: b } | Stmt::Store { value, buffer: b } => {
                        if let Some(buf) = buffer.get(b.as_str()) {
                            if matches!(st, Stmt::Load { .. }) {
                                ty.insert(value, &buf.ty);
                            }
                            if touched.insert((b.as_str(), matches!(st, Stmt::Load { .. }))) {
                                w.bytes = w.bytes.saturating_add(buf.ty.size_bytes());
                            }
                        }
                    }
                    Stmt::Op(o) => {
                        let operands: Vec<&TensorType> = o
                            .operands
                            .iter()
                            .filter_map(|v| ty.get(v.as_str()).copied())
                            .collect();
                        if operands.len() == o.operands.len() {
                            w.flops = w
                                .flops
                                .saturating_add(op_flops(o.op, &o.attrs, &operands, &o.ty));
                        }
                        ty.insert(&o.value, &o.ty);
                    }
                }
            }
            w
        })
        .collect()
}
