//! `irc tune FILE`: for each kernel of the compiled graph, its template's space enumerated,
//! pruned against the target and ranked by the estimate ([`irc_tune::candidates`]); the
//! default and the best `--top-k` others measured on the GPU as `irc bench` measures (L2
//! flushed, CUDA events, median; only that kernel's launches compiled and timed); the fastest
//! checked against the reference interpreter as `irc run --check` does (the whole graph); the
//! winners recorded in the tuning cache.
//!
//! A candidate replaces the default only when it is at least [`MIN_GAIN`] faster and its
//! results pass the check. `--list` ranks the candidates without a GPU; `--show` and `--clear`
//! act on the cache.

use crate::gpu::{CheckHow, Reference, compile, from_host, to_host};
use crate::opt::Backend;
use crate::run::{Loaded, load_inputs_with, load_optimized, select_graph};
use crate::tuning::CacheArgs;
use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use irc_interp::Tensor;
use irc_ir::Graph;
use irc_lower::{Choice, Config, LowerOptions, Problem};
use irc_runtime::{BenchOptions, Gpu, HostTensor};
use irc_tune::cache::{self, Entry};
use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

/// How much faster than the default a candidate must be to replace it.
pub const MIN_GAIN: f64 = 0.01;
/// Non-default candidates checked against the reference, fastest first, before settling on
/// the default.
const MAX_CHECKS: usize = 3;

#[derive(clap::Args, Debug)]
pub struct TuneArgs {
    /// The graph IR file or ONNX model (`.onnx`); not needed with --show or --clear.
    pub input: Option<String>,
    /// The graph to tune; needed when the file holds several.
    #[arg(long, value_name = "NAME")]
    pub graph: Option<String>,
    /// Configurations measured per kernel besides the default, best first by the estimate.
    #[arg(long, default_value_t = 20, value_name = "K")]
    pub top_k: usize,
    /// Untimed runs before timing each candidate.
    #[arg(long, default_value_t = 5)]
    pub warmup: u32,
    /// Timed repetitions of each candidate, each after an L2 flush.
    #[arg(long, default_value_t = 30)]
    pub rep: u32,
    /// The GPU architecture to compile for (and to record the results under).
    #[arg(long, default_value = "sm_90a")]
    pub arch: String,
    /// Parameter values by name from a safetensors file (default: the file an imported graph
    /// names on its `// irc-weights:` line; an ONNX model carries its own). Parameters with no
    /// value are seeded standard normals.
    #[arg(long, value_name = "FILE.safetensors")]
    pub weights: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub dims: crate::import::DimArgs,
    /// The seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// For the check of large graphs: how many rows to sample for the reference.
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub check_rows: u64,
    /// Print every measured configuration's time, not only each kernel's winner.
    #[arg(long)]
    pub each: bool,
    /// Print the tuning cache's entries, and exit.
    #[arg(long, conflicts_with_all = ["clear", "list"])]
    pub show: bool,
    /// Delete the tuning cache file, and exit.
    #[arg(long, conflicts_with = "list")]
    pub clear: bool,
    /// Print each kernel's candidates ranked by the estimate, without measuring (no GPU).
    #[arg(long)]
    pub list: bool,
    /// Tune the graph exactly as written, without the optimizing pipeline.
    #[arg(long)]
    pub no_passes: bool,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub passes: crate::opt::PassArgs,
}

pub fn run(args: &TuneArgs) -> Result<bool> {
    if args.show || args.clear {
        if args.cache.no_tune_cache {
            bail!("--show and --clear act on a tuning cache; drop --no-tune-cache");
        }
        let path = args.cache.write_path()?;
        return if args.show { show(&path) } else { clear(&path) };
    }
    let Some(input) = args.input.as_deref() else {
        bail!("irc tune needs a graph file (or --show, --clear)");
    };
    if args.rep == 0 {
        bail!("--rep must be at least 1");
    }
    let Some(Loaded {
        written,
        module,
        weights,
    }) = load_optimized(
        input,
        args.weights.as_deref(),
        &args.dims,
        (!args.no_passes).then_some(&args.passes),
    )?
    else {
        return Ok(false);
    };
    let graph = select_graph(&module, input, args.graph.as_deref())?;
    let reference = select_graph(&written, input, args.graph.as_deref())?;
    let target = irc_runtime::Target::h100();
    // The heuristic's build: its problems are what is tuned.
    let base = irc_pipeline::Pipeline {
        arch: Some(args.arch.clone()),
        ..Default::default()
    }
    .compile(graph, Default::default(), irc_pipeline::Stage::Layout)
    .with_context(|| format!("cannot compile @{}", graph.name))?;
    let choices = base.planned.map(|p| p.choices).unwrap_or_default();
    let problems = unique_problems(&choices);
    if args.list {
        print!(
            "{}",
            list(&problems, &built_points(&choices), &target, args.top_k)
        );
        return Ok(true);
    }
    let gpu = Gpu::new(0).map_err(|e| {
        anyhow::anyhow!(
            "irc tune measures kernels on a GPU, and this machine has none usable: {e}\n\
             (`irc tune --list FILE` ranks the candidates without one)"
        )
    })?;
    let known = crate::import::match_weights(graph, weights)?;
    Tuner::new(args, &gpu, graph, reference, known)?.tune(&problems, &target)
}

/// The problems of `choices` that have a space, once each, with the groups built for them.
fn unique_problems(choices: &[Choice]) -> Vec<(Problem, Vec<String>)> {
    let mut out: Vec<(Problem, Vec<String>)> = vec![];
    for c in choices.iter().filter(|c| c.config.is_some()) {
        match out.iter_mut().find(|(p, _)| p.key() == c.problem.key()) {
            Some((_, groups)) => groups.push(c.group.clone()),
            None => out.push((c.problem.clone(), vec![c.group.clone()])),
        }
    }
    out
}

/// The point each problem's kernels were built with where the lowering refined its heuristic's
/// point for the operands (the tensor-core matmul's narrower warps where wide ones would spill).
fn built_points(choices: &[Choice]) -> BTreeMap<String, Config> {
    choices
        .iter()
        .filter(|c| c.source == irc_lower::ConfigSource::Heuristic)
        .filter_map(|c| Some((c.problem.key(), c.config?)))
        .collect()
}

fn list(
    problems: &[(Problem, Vec<String>)],
    built: &BTreeMap<String, Config>,
    target: &irc_runtime::Target,
    k: usize,
) -> String {
    let mut out = String::new();
    for (i, (p, groups)) in problems.iter().enumerate() {
        let space = irc_lower::templates::space(p, target).len();
        out.push_str(&format!(
            "kernel {}/{}: @{} ({}; {}): {space} configurations pass the checks\n",
            i + 1,
            problems.len(),
            groups.join(", @"),
            p.template,
            p.signature
        ));
        let candidates = irc_tune::candidates(p, target, k);
        // The configurations' column: as wide as the longest, at least 28.
        let width = candidates
            .iter()
            .map(|c| c.config.to_string().len())
            .max()
            .unwrap_or(0)
            .max(28);
        let refined = built.get(&p.key()).copied();
        for c in candidates {
            let tag = match refined {
                Some(b) if c.default && b != c.config => format!("  (default, built as {b})"),
                _ if c.default => "  (default)".to_string(),
                _ => String::new(),
            };
            out.push_str(&format!(
                "  {:<width$} estimate {:>10.2} us{tag}\n",
                c.config.to_string(),
                c.estimate_us
            ));
        }
    }
    out
}

fn show(path: &std::path::Path) -> Result<bool> {
    let loaded = cache::read(path);
    if let Some(w) = &loaded.warning {
        eprintln!("irc: warning: {w}");
    }
    let entries = &loaded.cache.entries;
    println!("tuning cache {}: {} entries", path.display(), entries.len());
    for e in entries.values() {
        println!(
            "{} (v{}) {} on {} (irc {}): {} {:.4} ms (default {} {:.4} ms, {:.2}x), {} candidates on {}",
            e.template,
            e.space_version,
            e.problem,
            e.arch,
            e.irc_version,
            e.config,
            e.ms,
            e.default_config,
            e.default_ms,
            e.default_ms / e.ms,
            e.candidates,
            e.device
        );
    }
    Ok(true)
}

fn clear(path: &std::path::Path) -> Result<bool> {
    if cache::clear(path)? {
        println!("removed the tuning cache {}", path.display());
    } else {
        println!("no tuning cache at {}", path.display());
    }
    Ok(true)
}

/// One kernel's outcome.
struct Outcome {
    problem: Problem,
    groups: Vec<String>,
    default: Config,
    default_ms: f64,
    best: Config,
    best_ms: f64,
    measured: usize,
    seconds: f64,
}

struct Tuner<'a> {
    args: &'a TuneArgs,
    gpu: &'a Gpu,
    graph: &'a Graph,
    reference_graph: &'a Graph,
    inputs: Vec<Tensor>,
    host: Vec<HostTensor>,
    reference: Option<Reference>,
    bench: BenchOptions,
}

impl<'a> Tuner<'a> {
    fn new(
        args: &'a TuneArgs,
        gpu: &'a Gpu,
        graph: &'a Graph,
        reference_graph: &'a Graph,
        known: Vec<Option<Tensor>>,
    ) -> Result<Tuner<'a>> {
        let inputs = load_inputs_with(graph, known, &[], true, args.seed, None)?;
        let host = inputs.iter().map(to_host).collect();
        Ok(Tuner {
            args,
            gpu,
            graph,
            reference_graph,
            inputs,
            host,
            reference: None,
            bench: BenchOptions {
                warmup: args.warmup,
                rep: args.rep,
                cuda_graph: false,
            },
        })
    }

    fn options(&self, configs: BTreeMap<String, Config>) -> LowerOptions {
        LowerOptions {
            configs,
            ..Default::default()
        }
    }

    /// The median time of the kernels built for the problem `key` (of the whole graph with
    /// `None`). Only those kernels are compiled and launched: the buffers they read from other
    /// kernels hold whatever the allocation held, which changes no timing (indices are clamped,
    /// never out of bounds).
    fn measure(&self, options: LowerOptions, key: Option<&str>) -> Result<f64> {
        let planned = kernels_of(self.graph, &self.args.arch, options, key)?;
        let (cuda, text) = irc_pipeline::cuda_and_ptx(&planned.kernels, &self.args.arch)?;
        let ptx = irc_runtime::Ptx {
            text,
            arch: irc_runtime::Arch::parse(&self.args.arch)?,
            log: String::new(),
        };
        let mut program = self.gpu.load(&ptx, &cuda.manifest)?;
        program.write_inputs(&self.host)?;
        Ok(program.bench(self.bench)?.median_ms)
    }

    /// Whether the graph built with `options` computes what the reference does.
    fn check(&mut self, options: LowerOptions) -> Result<bool> {
        let crate::gpu::Compiled {
            module: cuda, ptx, ..
        } = compile(self.graph, &self.args.arch, Backend::Cuda, options)?;
        let mut program = self.gpu.load(&ptx, &cuda.manifest)?;
        let raw = program.run(&self.host)?;
        let outputs: Vec<Tensor> = raw
            .into_iter()
            .zip(&self.graph.result_types)
            .map(|(h, ty)| from_host(h, ty.dtype))
            .collect::<Result<_>>()?;
        if self.reference.is_none() {
            let m = &cuda.manifest;
            let how = CheckHow {
                rows: self.args.check_rows,
                full: false,
                seed: self.args.seed,
            };
            let r = Reference::new(
                self.reference_graph,
                self.inputs.clone(),
                m.flops,
                m.min_bytes,
                how,
            )?;
            self.reference = Some(r);
        }
        let r = self.reference.as_ref().expect("computed above");
        Ok(r.compare(&outputs)?.iter().all(|c| c.passed()))
    }

    fn tune(
        mut self,
        problems: &[(Problem, Vec<String>)],
        target: &irc_runtime::Target,
    ) -> Result<bool> {
        let plans: Vec<Vec<irc_tune::Candidate>> = problems
            .iter()
            .map(|(p, _)| irc_tune::candidates(p, target, self.args.top_k))
            .collect();
        let total: usize = plans.iter().map(Vec::len).sum();
        let bar = ProgressBar::new(total as u64);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {wide_msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let say = |line: String| {
            if bar.is_hidden() {
                eprintln!("{line}");
            } else {
                bar.println(line);
            }
        };
        say(format!(
            "irc tune: @{} on {}: {} kernel(s) to tune, {total} configurations to measure",
            self.graph.name,
            self.gpu.info().name,
            problems.len()
        ));
        let mut outcomes = vec![];
        let mut winners: BTreeMap<String, Config> = BTreeMap::new();
        for (i, ((p, groups), cands)) in problems.iter().zip(&plans).enumerate() {
            let start = Instant::now();
            let key = p.key();
            let mut times: Vec<(Config, f64)> = vec![];
            for (j, c) in cands.iter().enumerate() {
                let opts = self.options(BTreeMap::from([(key.clone(), c.config)]));
                match self.measure(opts, Some(&key)) {
                    Ok(ms) => {
                        if self.args.each {
                            say(format!("  @{}: {} {ms:.4} ms", groups[0], c.config));
                        }
                        times.push((c.config, ms))
                    }
                    Err(e) => say(format!("  @{}: {} failed: {e:#}", groups[0], c.config)),
                }
                let best = times.iter().min_by(|a, b| a.1.total_cmp(&b.1));
                bar.set_message(format!(
                    "kernel {}/{} @{}: candidate {}/{}, best {}",
                    i + 1,
                    problems.len(),
                    groups[0],
                    j + 1,
                    cands.len(),
                    best.map_or("-".into(), |(c, ms)| format!("{ms:.4} ms ({c})"))
                ));
                bar.inc(1);
            }
            let default = cands[0].config;
            let Some(&(_, default_ms)) = times.iter().find(|(c, _)| *c == default) else {
                say(format!(
                    "  @{}: the default configuration could not be measured; not recorded",
                    groups[0]
                ));
                continue;
            };
            let best = pick(default, default_ms, &times, |c| {
                let mut configs = winners.clone();
                configs.insert(key.clone(), c);
                let ok = self.check(self.options(configs))?;
                if !ok {
                    say(format!(
                        "  @{}: {c} is faster but its results fail the check",
                        groups[0]
                    ));
                }
                Ok(ok)
            })?;
            winners.insert(key, best.0);
            let o = Outcome {
                problem: p.clone(),
                groups: groups.clone(),
                default,
                default_ms,
                best: best.0,
                best_ms: best.1,
                measured: times.len(),
                seconds: start.elapsed().as_secs_f64(),
            };
            say(format!(
                "kernel {}/{} @{}: {} {:.4} ms -> {} {:.4} ms in {:.1} s",
                i + 1,
                problems.len(),
                groups[0],
                o.default,
                o.default_ms,
                o.best,
                o.best_ms,
                o.seconds
            ));
            outcomes.push(o);
        }
        bar.finish_and_clear();
        self.finish(outcomes, winners)
    }

    /// The whole graph checked and timed with every winner, the summary, the cache written.
    fn finish(mut self, outcomes: Vec<Outcome>, winners: BTreeMap<String, Config>) -> Result<bool> {
        let tuned = self.options(winners);
        if !self.check(tuned.clone())? {
            bail!(
                "@{} with every winner together fails the check against the reference; nothing \
                 recorded",
                self.graph.name
            );
        }
        let before = self.measure(self.options(BTreeMap::new()), None)?;
        let after = self.measure(tuned, None)?;
        println!("{}", summary(&outcomes));
        println!(
            "@{}: {before:.4} ms with the defaults, {after:.4} ms tuned ({:.2}x); results checked against the reference",
            self.graph.name,
            before / after
        );
        if self.args.cache.no_tune_cache {
            println!("--no-tune-cache: nothing recorded");
            return Ok(true);
        }
        let path = self.args.cache.write_path()?;
        let arch = irc_runtime::Arch::parse(&self.args.arch)?.to_string();
        let device = self.gpu.info().name.clone();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let entries: Vec<Entry> = outcomes
            .iter()
            .map(|o| Entry {
                template: o.problem.template.into(),
                space_version: irc_lower::templates::space_of(o.problem.template)
                    .map_or(0, |s| s.version()),
                problem: o.problem.signature.clone(),
                arch: arch.clone(),
                irc_version: irc_tune::IRC_VERSION.into(),
                config: o.best.to_string(),
                ms: o.best_ms,
                default_config: o.default.to_string(),
                default_ms: o.default_ms,
                device: device.clone(),
                candidates: o.measured,
                tuned_at: now,
            })
            .collect();
        let n = entries.len();
        if let Some(w) = cache::update(&path, |c| entries.into_iter().for_each(|e| c.insert(e)))? {
            eprintln!("irc: warning: {w} (replaced)");
        }
        println!(
            "recorded {n} entr{} in {}",
            if n == 1 { "y" } else { "ies" },
            path.display()
        );
        Ok(true)
    }
}

/// The graph lowered with `options`, its kernel IR cut down to the kernels built for the
/// problem `key` (all with `None`).
fn kernels_of(
    graph: &Graph,
    arch: &str,
    options: LowerOptions,
    key: Option<&str>,
) -> Result<irc_lower::Planned> {
    // Lowered for the arch the candidates are timed on (the Hopper templates on sm_90a).
    let pipeline = irc_pipeline::Pipeline {
        arch: Some(arch.to_string()),
        lower: options,
        ..Default::default()
    };
    let a = pipeline
        .compile(graph, Default::default(), irc_pipeline::Stage::Layout)
        .with_context(|| format!("cannot compile @{}", graph.name))?;
    let Some(mut planned) = a.planned else {
        bail!("the pipeline produced no kernels for @{}", graph.name);
    };
    if let Some(key) = key {
        let keep: HashSet<String> = (planned.choices.iter())
            .filter(|c| c.problem.key() == key)
            .flat_map(|c| c.kernels.iter().cloned())
            .collect();
        let m = &mut planned.kernels;
        m.kernels.retain(|k| keep.contains(&k.name));
        m.launches.retain(|l| keep.contains(&l.kernel));
        if m.launches.is_empty() {
            bail!("no kernel of @{} is built for {key}", graph.name);
        }
    }
    Ok(planned)
}

/// The winner among measured `times`: the fastest candidate at least [`MIN_GAIN`] faster than
/// the default whose results pass `check` (at most [`MAX_CHECKS`] tried, fastest first), else
/// the default.
fn pick(
    default: Config,
    default_ms: f64,
    times: &[(Config, f64)],
    mut check: impl FnMut(Config) -> Result<bool>,
) -> Result<(Config, f64)> {
    let mut faster: Vec<(Config, f64)> = times
        .iter()
        .copied()
        .filter(|&(c, ms)| c != default && ms < default_ms * (1.0 - MIN_GAIN))
        .collect();
    faster.sort_by(|a, b| a.1.total_cmp(&b.1));
    for (c, ms) in faster.into_iter().take(MAX_CHECKS) {
        if check(c)? {
            return Ok((c, ms));
        }
    }
    Ok((default, default_ms))
}

/// The summary table: kernel, template, problem, default and best configurations and times.
fn summary(outcomes: &[Outcome]) -> String {
    let mut rows = vec![[
        "kernel".to_string(),
        "template".into(),
        "default".into(),
        "ms".into(),
        "best".into(),
        "ms".into(),
        "speedup".into(),
        "tuned in".into(),
        "problem".into(),
    ]];
    for o in outcomes {
        rows.push([
            format!("@{}", o.groups.join(", @")),
            o.problem.template.into(),
            o.default.to_string(),
            format!("{:.4}", o.default_ms),
            o.best.to_string(),
            format!("{:.4}", o.best_ms),
            format!("{:.2}x", o.default_ms / o.best_ms),
            format!("{:.1} s ({} runs)", o.seconds, o.measured),
            o.problem.signature.clone(),
        ]);
    }
    let widths: Vec<usize> = (0..9)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r
                .iter()
                .zip(&widths)
                .map(|(s, w)| format!("{s:<w$}"))
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choices(text: &str) -> Vec<Choice> {
        let m = irc_frontend::parse_module(text).unwrap();
        irc_lower::plan_and_lower(&m.graphs[0], Default::default())
            .unwrap()
            .choices
    }

    /// Identical kernels are tuned once; templates without a space are not tuned.
    #[test]
    fn identical_kernels_are_one_problem() {
        let c = choices(
            "graph @g(%a: tensor<32x300xf16>, %b: tensor<32x300xf16>, %w: tensor<8x8xf64>) -> (tensor<32x300xf16>, tensor<32x300xf16>, tensor<8x8xf64>) {\n  %x = softmax %a {axis = -1}\n  %y = softmax %b {axis = -1}\n  %m = matmul %w, %w\n  return %x, %y, %m\n}\n",
        );
        assert_eq!(c.len(), 3);
        let p = unique_problems(&c);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].1.len(), 2);
        assert_eq!(p[0].0.template, "row");
    }

    /// Where the lowering refines the heuristic's point (an f16 matmul whose operands cannot
    /// take 16-byte copies gets the narrower warps), `--list` says what the kernel is built
    /// with beside the default it lists.
    #[test]
    fn the_list_names_a_refined_default() {
        let text = "graph @g(%a: tensor<517x1001xf16>, %b: tensor<1001x263xf16>) -> tensor<517x263xf16> {\n  %c = matmul %a, %b\n  return %c\n}\n";
        let m = irc_frontend::parse_module(text).unwrap();
        let all = kernels_of(&m.graphs[0], "sm_80", LowerOptions::default(), None).unwrap();
        let problems = unique_problems(&all.choices);
        let built = built_points(&all.choices);
        let target = irc_runtime::Target::h100();
        let out = list(&problems, &built, &target, 3);
        let mma = irc_lower::MmaConfig::DEFAULT;
        assert!(out.contains(&format!("(default, built as {mma})")), "{out}");
        // A problem built with its heuristic's point is listed as plainly the default.
        let plain = choices(
            "graph @g(%a: tensor<32x300xf16>) -> tensor<32x300xf16> {\n  %x = softmax %a {axis = -1}\n  return %x\n}\n",
        );
        let out = list(&unique_problems(&plain), &built_points(&plain), &target, 3);
        assert!(
            out.contains("  (default)\n") && !out.contains("built as"),
            "{out}"
        );
    }

    #[test]
    fn the_winner_is_the_fastest_checked_point_clearly_faster_than_the_default() {
        let cfg = |t: &str| Config::parse("row", t).unwrap();
        let d = cfg("warp,warps=8");
        let (a, b, c) = (
            cfg("block,threads=128"),
            cfg("block,threads=256"),
            cfg("streamed,threads=128"),
        );
        let times = [(d, 1.0), (a, 0.8), (b, 0.7), (c, 0.9)];
        // All pass: the fastest.
        assert_eq!(pick(d, 1.0, &times, |_| Ok(true)).unwrap(), (b, 0.7));
        // The fastest fails its check: the next.
        let mut tried = vec![];
        let got = pick(d, 1.0, &times, |x| {
            tried.push(x);
            Ok(x != b)
        });
        assert_eq!(got.unwrap(), (a, 0.8));
        assert_eq!(tried, vec![b, a]);
        // Every faster one fails (at most MAX_CHECKS tried): the default.
        let mut n = 0;
        let got = pick(d, 1.0, &times, |_| {
            n += 1;
            Ok(false)
        });
        assert_eq!(got.unwrap(), (d, 1.0));
        assert_eq!(n, MAX_CHECKS);
        // Within noise of the default: the default, nothing checked.
        let close = [(d, 1.0), (a, 0.995)];
        assert_eq!(
            pick(d, 1.0, &close, |_| panic!("checked")).unwrap(),
            (d, 1.0)
        );
        // A check that cannot run is an error, not a silent default.
        assert!(pick(d, 1.0, &times, |_| bail!("no GPU")).is_err());
    }

    /// A candidate is measured on its problem's kernels alone; that module emits and (where
    /// NVRTC is found) compiles.
    #[test]
    fn a_problem_is_measured_on_its_own_kernels() {
        let text = "graph @g(%a: tensor<600x5000xf16>, %w: tensor<5000x64xf16>) -> tensor<600x64xf16> {\n  %x = softmax %a {axis = -1}\n  %m = matmul %x, %w\n  return %m\n}\n";
        let m = irc_frontend::parse_module(text).unwrap();
        let g = &m.graphs[0];
        // Lowered for sm_80, where both templates have a space (on sm_90a the Hopper matmul,
        // without one yet, splits K: two kernels).
        let all = kernels_of(g, "sm_80", LowerOptions::default(), None).unwrap();
        assert_eq!(all.kernels.launches.len(), 2);
        let p = unique_problems(&all.choices);
        assert_eq!(p.len(), 2);
        let split = Config::parse("row", "split,chunk=1024").unwrap();
        let key = p.iter().find(|(p, _)| p.template == "row").unwrap().0.key();
        let options = LowerOptions {
            configs: BTreeMap::from([(key.clone(), split)]),
            ..Default::default()
        };
        let one = kernels_of(g, "sm_80", options, Some(&key)).unwrap();
        // The split schedule (3000 blocks, too many for one cooperative launch): its partial
        // and merge kernels, nothing of the matmul.
        let names: Vec<&str> = one
            .kernels
            .launches
            .iter()
            .map(|l| l.kernel.as_str())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names.iter().all(|n| n.contains("softmax")), "{names:?}");
        match irc_pipeline::cuda_and_ptx(&one.kernels, "sm_90a") {
            Ok((cuda, ptx)) => {
                assert_eq!(cuda.manifest.launches.len(), 2);
                assert!(ptx.contains(".entry") && !ptx.contains("matmul"));
            }
            Err(irc_pipeline::PipelineError::Runtime(irc_runtime::RuntimeError::NotFound {
                ..
            })) => println!("SKIPPED the NVRTC compile: no toolchain"),
            Err(e) => panic!("{e}"),
        }
        assert!(kernels_of(g, "sm_80", LowerOptions::default(), Some("no such key")).is_err());
    }

    #[test]
    fn the_summary_is_a_table() {
        let c = choices(
            "graph @g(%a: tensor<32x300xf16>) -> tensor<32x300xf16> {\n  %x = softmax %a {axis = -1}\n  return %x\n}\n",
        );
        let o = Outcome {
            problem: c[0].problem.clone(),
            groups: vec![c[0].group.clone()],
            default: c[0].config.unwrap(),
            default_ms: 0.02,
            best: Config::parse("row", "block,threads=128").unwrap(),
            best_ms: 0.01,
            measured: 9,
            seconds: 1.25,
        };
        let s = summary(&[o]);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("kernel") && lines[0].contains("speedup"));
        for cell in [
            "row",
            "warp,warps=4",
            "0.0200",
            "block,threads=128",
            "0.0100",
            "2.00x",
            "1.2 s (9 runs)",
        ] {
            assert!(lines[1].contains(cell), "{cell}: {s}");
        }
    }
}
