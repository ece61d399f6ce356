//! The pass manager: runs a [`Pipeline`] over a graph with MLIR-style instrumentation —
//! IR snapshots before/after passes (handed to a callback: this crate never prints), the
//! verifier after every pass (`verify_each`, on by default), timing and statistics.
//!
//! Embedding, without the CLI:
//!
//! ```
//! use irc_ir::{DType, GraphBuilder, TensorType};
//! use irc_passes::manager::PassManager;
//!
//! // Another compiler builds A @ transpose(B) through the builder API...
//! let mut b = GraphBuilder::new("gemm_bt");
//! let a = b.param("a", TensorType::new([64, 32], DType::F16));
//! let w = b.param("w", TensorType::new([48, 32], DType::F16));
//! let wt = b.transpose(w, &[1, 0]).unwrap();
//! let c = b.matmul(a, wt).unwrap();
//! let g = b.finish(&[c]).unwrap();
//!
//! // ...runs a pipeline given as a string...
//! let pm = PassManager::parse("graph(canonicalize,fold-transpose)").unwrap();
//! let out = pm.run(&g).unwrap();
//!
//! // ...and reads the result: one matmul that carries the transposition.
//! assert_eq!(out.graph.insts.len(), 1);
//! assert_eq!(out.graph.insts[0].op, irc_ir::OpKind::Matmul);
//! assert_eq!(out.graph.insts[0].attrs.get("transpose_b"), Some(&irc_ir::Attr::Bool(true)));
//! irc_ir::verify_graph(&out.graph).unwrap();
//! ```

use crate::cost::Target;
use crate::pipeline::{Pipeline, PipelineError, parse_pipeline};
use crate::registry::{self, PassError, Stats};
use irc_ir::Graph;
use std::time::{Duration, Instant};

/// When an IR snapshot is taken.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum When {
    Before,
    After,
}

/// Which snapshots to take.
#[derive(Clone, Debug, Default)]
pub struct Instrumentation {
    pub print_before: Vec<String>,
    pub print_after: Vec<String>,
    pub print_after_all: bool,
    /// After every pass that changed the graph.
    pub print_after_change: bool,
}

/// What one pass did to one graph.
#[derive(Clone, Debug)]
pub struct PassRecord {
    pub pass: String,
    pub graph: String,
    pub time: Duration,
    pub changed: bool,
    pub stats: Stats,
}

/// The result of running a pipeline.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub graph: Graph,
    pub records: Vec<PassRecord>,
}

/// A pipeline, a target, and how to run it.
pub struct PassManager {
    pub pipeline: Pipeline,
    pub target: Target,
    /// Verify every pass's output (default true).
    pub verify_each: bool,
    pub instrumentation: Instrumentation,
}

impl PassManager {
    pub fn new(pipeline: Pipeline) -> PassManager {
        PassManager {
            pipeline,
            target: Target::h100(),
            verify_each: true,
            instrumentation: Instrumentation::default(),
        }
    }

    /// A manager for a pipeline string (see [`crate::pipeline`]).
    pub fn parse(text: &str) -> Result<PassManager, PipelineError> {
        parse_pipeline(text).map(PassManager::new)
    }

    /// The `-O` pipeline.
    pub fn default_pipeline() -> PassManager {
        PassManager::parse(registry::DEFAULT_PIPELINE).expect("the default pipeline parses")
    }

    pub fn run(&self, g: &Graph) -> Result<Outcome, PassError> {
        self.run_with(g, &mut |_, _, _| {})
    }

    /// Runs the pipeline; `snapshot(when, pass, graph)` is called for each IR snapshot the
    /// instrumentation asks for.
    pub fn run_with(
        &self,
        g: &Graph,
        snapshot: &mut dyn FnMut(When, &str, &Graph),
    ) -> Result<Outcome, PassError> {
        let ins = &self.instrumentation;
        let mut cur = g.clone();
        let mut cur_text: Option<String> = None;
        let mut records = Vec::new();
        for spec in &self.pipeline.passes {
            let pass = registry::lookup(&spec.name).ok_or_else(|| PassError::Internal {
                pass: spec.name.clone(),
                message: "unknown pass".into(),
            })?;
            if ins.print_before.contains(&spec.name) {
                snapshot(When::Before, &spec.name, &cur);
            }
            let start = Instant::now();
            let (out, stats) = pass.run(&cur, spec, &self.target)?;
            let time = start.elapsed();
            // Changed means printed differently. A pass that found nothing returns its input,
            // so structural equality settles most runs without printing; the print of the
            // output is kept as the next pass's input print. The verifier runs beside.
            let (verified, changed) = rayon::join(
                || {
                    if self.verify_each {
                        irc_ir::verify_graph(&out)
                    } else {
                        Ok(())
                    }
                },
                || {
                    out != cur && {
                        let (before, after) = rayon::join(
                            || cur_text.take().unwrap_or_else(|| irc_ir::print_graph(&cur)),
                            || irc_ir::print_graph(&out),
                        );
                        let changed = after != before;
                        cur_text = Some(after);
                        changed
                    }
                },
            );
            verified.map_err(|d| PassError::Verify {
                pass: spec.name.clone(),
                message: d
                    .iter()
                    .map(|d| d.message.clone())
                    .collect::<Vec<_>>()
                    .join("; "),
            })?;
            if ins.print_after_all
                || ins.print_after.contains(&spec.name)
                || (ins.print_after_change && changed)
            {
                snapshot(When::After, &spec.name, &out);
            }
            records.push(PassRecord {
                pass: spec.name.clone(),
                graph: g.name.clone(),
                time,
                changed,
                stats,
            });
            cur = out;
        }
        Ok(Outcome {
            graph: cur,
            records,
        })
    }
}

/// `--timing`: one line per pass run, then the total (a report as text; the driver prints it).
pub fn timing_report(records: &[PassRecord]) -> String {
    let total: Duration = records.iter().map(|r| r.time).sum();
    let mut out = String::from("===-- pass execution timing report --===\n");
    for r in records {
        out.push_str(&format!(
            "  {:>10.3} ms  {} (@{})\n",
            r.time.as_secs_f64() * 1e3,
            r.pass,
            r.graph
        ));
    }
    out.push_str(&format!(
        "  {:>10.3} ms  total\n",
        total.as_secs_f64() * 1e3
    ));
    out
}

/// `--pass-statistics`: each pass run's statistics, zero rule counts left out.
pub fn statistics_report(records: &[PassRecord]) -> String {
    let mut out = String::from("===-- pass statistics report --===\n");
    for r in records {
        out.push_str(&format!("{} (@{})\n", r.pass, r.graph));
        for (k, v) in &r.stats {
            if k.starts_with("rule.") && v == "0" {
                continue;
            }
            out.push_str(&format!("  {k} = {v}\n"));
        }
        out.push_str(&format!("  time-ms = {:.3}\n", r.time.as_secs_f64() * 1e3));
    }
    out
}
