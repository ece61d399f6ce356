//! The pass registry: every pass declared as data (name, summary, description with a
//! before/after example, options with defaults, statistics). It feeds `irc --list-passes`,
//! the pipeline parser and the generated `spec/passes.md`.

use crate::cost::{Target, graph_cost};
use crate::eqsat::{Limits, Report, Rule, saturate};
use crate::pipeline::PassSpec;
use crate::rules;
use irc_ir::Graph;
use std::time::Duration;

/// The value type of a pass option.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OptionKind {
    Int,
    Bool,
}

impl OptionKind {
    pub fn describe(self) -> &'static str {
        match self {
            OptionKind::Int => "a non-negative integer",
            OptionKind::Bool => "true or false",
        }
    }
}

/// One option of a pass.
#[derive(Debug)]
pub struct OptionSpec {
    pub name: &'static str,
    pub kind: OptionKind,
    pub default: &'static str,
    pub doc: &'static str,
}

/// Everything the registry says about a pass.
#[derive(Debug)]
pub struct PassInfo {
    pub name: &'static str,
    pub summary: &'static str,
    /// What it does, with a before/after example in the graph IR.
    pub description: &'static str,
    pub options: &'static [OptionSpec],
    /// The statistics it reports: (name, meaning).
    pub statistics: &'static [(&'static str, &'static str)],
}

/// A statistic's value.
pub type Stats = Vec<(String, String)>;

/// Why a pass failed. Passes fail only on internal errors: a graph they cannot improve is
/// returned unchanged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PassError {
    #[error("pass '{pass}' produced a graph that does not verify: {message}")]
    Verify { pass: String, message: String },
    #[error("pass '{pass}' failed: {message}")]
    Internal { pass: String, message: String },
}

/// A graph-to-graph pass.
pub trait Pass: Sync {
    fn info(&self) -> &PassInfo;
    /// Runs on one graph with the options of `spec`, returning the new graph and statistics.
    fn run(&self, g: &Graph, spec: &PassSpec, target: &Target)
    -> Result<(Graph, Stats), PassError>;
}

const LIMIT_OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        name: "max-iters",
        kind: OptionKind::Int,
        default: "16",
        doc: "stop saturating after this many iterations",
    },
    OptionSpec {
        name: "max-nodes",
        kind: OptionKind::Int,
        default: "200000",
        doc: "stop when the e-graph has grown by this many e-nodes beyond the input's",
    },
    OptionSpec {
        name: "time-limit-ms",
        kind: OptionKind::Int,
        default: "0",
        doc: "stop saturating after this many milliseconds; 0, the default, is no wall-clock limit (with one, the output depends on the machine's load)",
    },
    OptionSpec {
        name: "extract-rounds",
        kind: OptionKind::Int,
        default: "4",
        doc: "rounds of DAG-cost local search in extraction",
    },
];

const EQSAT_STATS: &[(&str, &str)] = &[
    ("rule.<name>", "times each rule added an equality"),
    ("iterations", "saturation iterations run"),
    (
        "stop-reason",
        "why saturation stopped: saturated, or which limit",
    ),
    ("egraph-nodes", "e-nodes in the final e-graph"),
    ("egraph-classes", "e-classes in the final e-graph"),
    (
        "cost-before-ps",
        "the cost model's estimate of the input, picoseconds",
    ),
    ("cost-after-ps", "the estimate of the output"),
    (
        "rejected",
        "rule proposals dropped because they did not type-check (always 0 unless a rule is wrong)",
    ),
    (
        "search-rounds",
        "rounds of extraction's local search (at most `extract-rounds`)",
    ),
    (
        "search-moves-tried",
        "single-class swaps the local search judged",
    ),
    (
        "search-moves-kept",
        "moves it kept, swaps and unshares, in the rounds that paid",
    ),
];

/// An equality-saturation pass over a set of rules.
pub struct EqsatPass {
    pub info: PassInfo,
    pub rules: fn() -> Vec<&'static Rule>,
}

fn stop_name(s: &egg::StopReason) -> String {
    match s {
        egg::StopReason::Saturated => "saturated".into(),
        egg::StopReason::IterationLimit(n) => format!("iteration-limit({n})"),
        egg::StopReason::NodeLimit(n) => format!("node-limit({n})"),
        egg::StopReason::TimeLimit(t) => format!("time-limit({}ms)", (t * 1000.0).round()),
        egg::StopReason::Other(s) => s.clone(),
    }
}

/// Whether the e-graph of `g`, with `classes` classes, is `g` itself: no two statements share a
/// class (nothing was hash-consed together) and every statement is used by a result.
fn is_plain(g: &Graph, classes: usize) -> bool {
    if classes != g.params.len() + g.insts.len() {
        return false;
    }
    let mut used = vec![false; g.values.len()];
    for r in &g.results {
        used[r.index()] = true;
    }
    for inst in g.insts.iter().rev() {
        if used[inst.result.index()] {
            for o in &inst.operands {
                used[o.index()] = true;
            }
        }
    }
    g.insts.iter().all(|i| used[i.result.index()])
}

/// The statistics of a pass whose saturation changed nothing on a plain graph ([`is_plain`]):
/// every class holds one node, so extraction can only choose the input, and its search would
/// judge no move in its one round. The input is returned as it is, without extracting.
fn unchanged_stats(g: &Graph, report: &Report, rounds: usize, target: &Target) -> Stats {
    let before = graph_cost(target, g).to_string();
    let mut stats = report_stats(report);
    stats.push(("search-rounds".into(), rounds.min(1).to_string()));
    stats.push(("search-moves-tried".into(), "0".into()));
    stats.push(("search-moves-kept".into(), "0".into()));
    stats.push(("cost-before-ps".into(), before.clone()));
    stats.push(("cost-after-ps".into(), before));
    stats
}

fn report_stats(report: &Report) -> Stats {
    let mut stats: Stats = report
        .fired
        .iter()
        .map(|(k, v)| (format!("rule.{k}"), v.to_string()))
        .collect();
    stats.push(("iterations".into(), report.iterations.to_string()));
    stats.push(("stop-reason".into(), stop_name(&report.stop_reason)));
    stats.push(("egraph-nodes".into(), report.nodes.to_string()));
    stats.push(("egraph-classes".into(), report.classes.to_string()));
    stats.push(("rejected".into(), report.rejected.to_string()));
    stats
}

/// Saturates `g` with `rules` and extracts the cheapest equivalent graph; the input comes back
/// unchanged when nothing cheaper is found.
pub fn optimize(
    g: &Graph,
    rules: &[&Rule],
    limits: &Limits,
    rounds: usize,
    target: &Target,
) -> Result<(Graph, Stats), String> {
    let mut loaded = crate::lang::load(g);
    let owned: Vec<Rule> = rules
        .iter()
        .map(|r| Rule {
            name: r.name,
            equation: r.equation,
            apply: r.apply,
        })
        .collect();
    let (nodes, classes) = (
        loaded.egraph.total_size(),
        loaded.egraph.number_of_classes(),
    );
    let report = saturate(&mut loaded.egraph, &owned, limits);
    if report.nodes == nodes && report.classes == classes && is_plain(g, classes) {
        let same = (g.clone(), unchanged_stats(g, &report, rounds, target));
        // What extracting would have returned (tests run in debug builds; compared as printed,
        // since a NaN constant is not equal to itself).
        #[cfg(debug_assertions)]
        {
            let printed = |r: &(Graph, Stats)| (irc_ir::print_graph(&r.0), r.1.clone());
            let full = extract_graph(g, &loaded, &report, rounds, target).map(|r| printed(&r));
            debug_assert_eq!(Ok(printed(&same)), full);
        }
        return Ok(same);
    }
    extract_graph(g, &loaded, &report, rounds, target)
}

/// Extraction from a saturated e-graph of `g`, and the pass's statistics.
fn extract_graph(
    g: &Graph,
    loaded: &crate::lang::Loaded,
    report: &Report,
    rounds: usize,
    target: &Target,
) -> Result<(Graph, Stats), String> {
    let roots: Vec<egg::Id> = loaded
        .roots
        .iter()
        .map(|&r| loaded.egraph.find(r))
        .collect();
    let (ex, before) = rayon::join(
        || crate::extract::extract(target, &loaded.egraph, &roots, &loaded.original, rounds),
        || graph_cost(target, g),
    );
    let mut stats = report_stats(report);
    stats.push(("search-rounds".into(), ex.rounds.to_string()));
    stats.push(("search-moves-tried".into(), ex.tried.to_string()));
    stats.push(("search-moves-kept".into(), ex.improvements.to_string()));
    stats.push(("cost-before-ps".into(), before.to_string()));
    if ex.cost >= before {
        stats.push(("cost-after-ps".into(), before.to_string()));
        return Ok((g.clone(), stats));
    }
    let out = crate::lang::build_graph(g, &loaded.egraph, &ex.choice, &roots, &loaded.names)
        .map_err(|e| e.message)?;
    stats.push(("cost-after-ps".into(), ex.cost.to_string()));
    Ok((out, stats))
}

impl Pass for EqsatPass {
    fn info(&self) -> &PassInfo {
        &self.info
    }
    fn run(
        &self,
        g: &Graph,
        spec: &PassSpec,
        target: &Target,
    ) -> Result<(Graph, Stats), PassError> {
        let limits = Limits {
            max_iters: spec.int("max-iters") as usize,
            max_nodes: spec.int("max-nodes") as usize,
            time_limit: match spec.int("time-limit-ms") {
                0 => None,
                ms => Some(Duration::from_millis(ms)),
            },
        };
        let rules = (self.rules)();
        optimize(
            g,
            &rules,
            &limits,
            spec.int("extract-rounds") as usize,
            target,
        )
        .map_err(|message| PassError::Internal {
            pass: self.info.name.to_string(),
            message,
        })
    }
}

/// `decompose`: composites into primitives.
pub struct DecomposePass;

static DECOMPOSE_INFO: PassInfo = PassInfo {
    name: "decompose",
    summary: "Rewrite softmax, log_softmax, rmsnorm and layernorm into primitive ops.",
    description: "Each composite becomes its definition in primitives, computed in f32 (f64 for f64) between casts, as `irc --decompose` does.\n\nBefore:\n\n```\n%y = softmax %x {axis = -1} : tensor<4x8xf32>\n```\n\nAfter:\n\n```\n%0 = reduce_max %x {axes = [1], keepdims = true} : tensor<4x1xf32>\n%1 = sub %x, %0 : tensor<4x8xf32>\n%2 = exp %1 : tensor<4x8xf32>\n%3 = reduce_sum %2 {axes = [1], keepdims = true} : tensor<4x1xf32>\n%y = div %2, %3 : tensor<4x8xf32>\n```",
    options: &[],
    statistics: &[],
};

impl Pass for DecomposePass {
    fn info(&self) -> &PassInfo {
        &DECOMPOSE_INFO
    }
    fn run(&self, g: &Graph, _: &PassSpec, _: &Target) -> Result<(Graph, Stats), PassError> {
        irc_ir::decompose_graph(g)
            .map(|g| (g, vec![]))
            .map_err(|e| PassError::Internal {
                pass: "decompose".into(),
                message: e.message,
            })
    }
}

fn canonical_rules() -> Vec<&'static Rule> {
    let t = rules::transpose::RULES
        .iter()
        .filter(|r| matches!(r.name, "compose-transposes" | "remove-identity-transpose"));
    let a = rules::algebra::RULES.iter().filter(|r| {
        matches!(
            r.name,
            "mul-one"
                | "add-zero"
                | "sub-self"
                | "div-by-constant"
                | "fold-unary-constant"
                | "fold-binary-constant"
                | "exp-of-log-nonneg"
                | "neg-neg"
                | "cast-round-trip"
        )
    });
    rules::views::RULES.iter().chain(t).chain(a).collect()
}

fn transpose_rules() -> Vec<&'static Rule> {
    rules::transpose::RULES.iter().collect()
}

fn algebra_rules() -> Vec<&'static Rule> {
    rules::algebra::RULES
        .iter()
        .chain(rules::views::RULES)
        .collect()
}

fn composite_rules() -> Vec<&'static Rule> {
    rules::composites::RULES.iter().collect()
}

static CANONICALIZE: EqsatPass = EqsatPass {
    info: PassInfo {
        name: "canonicalize",
        summary: "Collapse view chains, remove identities and fold constants.",
        description: "Runs the view rules, transpose composition and the algebraic identities (x·1, x+(-0), integer x−x, division by a constant, exp(log(x)) for x ≥ 0, −(−x), casts there and back, constant folding) to saturation, then extracts the cheapest graph.\n\nBefore:\n\n```\n%a = reshape %x {shape = [8, 4]} : tensor<8x4xf32>\n%b = reshape %a {shape = [32]} : tensor<32xf32>\n%c = constant {value = 1.0} : tensor<f32>\n%d = mul %b, %c : tensor<32xf32>\n```\n\nAfter:\n\n```\n%b = reshape %x {shape = [32]} : tensor<32xf32>\n```",
        options: LIMIT_OPTIONS,
        statistics: EQSAT_STATS,
    },
    rules: canonical_rules,
};

static FOLD_TRANSPOSE: EqsatPass = EqsatPass {
    info: PassInfo {
        name: "fold-transpose",
        summary: "Fold transposes into matmul operand flags; compose and sink the rest.",
        description: "A transpose of the last two dims feeding a matmul operand becomes that operand's `transpose_a`/`transpose_b` flag, a transpose of a matmul result swaps and flags the operands, transposes compose, and transposes sink through elementwise ops and reductions until a consumer absorbs them. No transpose is materialized for a matmul.\n\nBefore:\n\n```\n%bt = transpose %b {perm = [1, 0]} : tensor<77x103xf16>\n%c = matmul %a, %bt : tensor<100x103xf16>\n```\n\nAfter:\n\n```\n%c = matmul %a, %b {transpose_b = true} : tensor<100x103xf16>\n```",
        options: LIMIT_OPTIONS,
        statistics: EQSAT_STATS,
    },
    rules: transpose_rules,
};

static ALGEBRAIC: EqsatPass = EqsatPass {
    info: PassInfo {
        name: "algebraic-simplify",
        summary: "Algebraic rules, including row and column scaling moved across matmul.",
        description: "The identities of `canonicalize` plus `matmul(x·r[:,None], W) = matmul(x, W)·r[:,None]`, `matmul(x·g[None,:], W) = matmul(x, g[:,None]·W)` and `rmsnorm(x, g) @ W = matmul(x, g[:,None]·W) · rsqrt(mean(x²)+eps)` (bf16, f32 and f64 only: see Numerics).\n\nBefore:\n\n```\n%n = rmsnorm %x, %g {axis = -1, eps = 1e-6} : tensor<128x256xbf16>\n%y = matmul %n, %w : tensor<128x192xbf16>\n```\n\nAfter:\n\n```\n%0 = reshape %g {shape = [256, 1]} : tensor<256x1xbf16>\n%1 = mul %0, %w : tensor<256x192xbf16>\n%2 = matmul %x, %1 : tensor<128x192xbf16>\n...                                   // rsqrt(mean(x²)+eps) in f32, cast to bf16\n%y = mul %2, %7 : tensor<128x192xbf16>\n```",
        options: LIMIT_OPTIONS,
        statistics: EQSAT_STATS,
    },
    rules: algebra_rules,
};

static RECOGNIZE: EqsatPass = EqsatPass {
    info: PassInfo {
        name: "recognize-composites",
        summary: "Recognise softmax, log_softmax, rmsnorm and layernorm written in primitives.",
        description: "Matches the primitive forms (as written by hand or by `decompose`, with their f32 casts) and adds the composite, which the cost model prefers: one kernel instead of several.\n\nBefore:\n\n```\n%m = reduce_max %x {axes = [1], keepdims = true} : tensor<4x8xf32>\n%s = sub %x, %m : tensor<4x8xf32>\n%e = exp %s : tensor<4x8xf32>\n%z = reduce_sum %e {axes = [1], keepdims = true} : tensor<4x1xf32>\n%y = div %e, %z : tensor<4x8xf32>\n```\n\nAfter:\n\n```\n%y = softmax %x {axis = -1} : tensor<4x8xf32>\n```",
        options: LIMIT_OPTIONS,
        statistics: EQSAT_STATS,
    },
    rules: composite_rules,
};

static REGISTRY: [&dyn Pass; 5] = [
    &CANONICALIZE,
    &RECOGNIZE,
    &FOLD_TRANSPOSE,
    &ALGEBRAIC,
    &DecomposePass,
];

/// Every registered pass.
pub fn all() -> &'static [&'static dyn Pass] {
    &REGISTRY
}

pub fn lookup(name: &str) -> Option<&'static dyn Pass> {
    REGISTRY.iter().copied().find(|p| p.info().name == name)
}

/// The graph-level pipeline `-O` runs.
pub const DEFAULT_PIPELINE: &str =
    "graph(canonicalize,recognize-composites,fold-transpose,algebraic-simplify,canonicalize)";

/// The pass reference of `spec/passes.md` (Markdown), generated from the registry.
pub fn reference_markdown() -> String {
    let mut out = format!("The default pipeline (`-O`): `{DEFAULT_PIPELINE}`\n\n");
    for p in all() {
        let i = p.info();
        out.push_str(&format!(
            "### `{}`\n\n{}\n\n{}\n\n",
            i.name, i.summary, i.description
        ));
        if !i.options.is_empty() {
            out.push_str("Options:\n\n");
            for o in i.options {
                out.push_str(&format!(
                    "- `{}` ({}, default `{}`): {}\n",
                    o.name,
                    o.kind.describe(),
                    o.default,
                    o.doc
                ));
            }
            out.push('\n');
        }
        if !i.statistics.is_empty() {
            out.push_str("Statistics:\n\n");
            for (n, d) in i.statistics {
                out.push_str(&format!("- `{n}`: {d}\n"));
            }
            out.push('\n');
        }
    }
    out.push_str("## Rules (generated)\n\n| rule | equation |\n|---|---|\n");
    for set in rules::all() {
        for r in set {
            out.push_str(&format!(
                "| `{}` | {} |\n",
                r.name,
                r.equation.replace('|', "\\|")
            ));
        }
    }
    out
}
