//! The default command: parse, verify and print, like `mlir-opt`.

use crate::diag::{Source, render_errors};
use crate::input::{SPLIT_MARKER, read_source, split_cases};
use crate::verify_diags;
use anyhow::Result;
use irc_pipeline::{Pipeline, STAGES, Stage};
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct OptArgs {
    /// The input file: graph IR, `-` for standard input, or an ONNX model (`.onnx`, imported
    /// first as `irc import` does).
    #[arg(default_value = "-")]
    pub input: String,
    /// Write the output here instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The level to print: a stage of the pipeline (irc_pipeline::STAGES).
    #[arg(long, value_parser = stage_parser(), default_value = "graph")]
    pub emit: Stage,
    /// Treat each `// -----`-separated part of the input as its own file.
    #[arg(long)]
    pub split_input_file: bool,
    /// Check the diagnostics against `// expected-error {{...}}` comments instead of failing.
    #[arg(long)]
    pub verify_diagnostics: bool,
    /// Decompose softmax, log_softmax, rmsnorm and layernorm into primitive ops before printing.
    #[arg(long)]
    pub decompose: bool,
    /// With `--emit=fused`: say for each kernel what was fused into it and why each value it
    /// stores is kept in memory (as `// remark:` lines, which the parser skips). With any
    /// stage from `layout` on: say on stderr which configuration each kernel was built with and
    /// whether it came from the tuning cache.
    #[arg(long)]
    pub explain: bool,
    /// The emitter behind `--emit=ptx`: `cuda` (NVRTC) or `mlir` (needs the `mlir` feature).
    #[arg(long, value_enum, default_value_t = Backend::Cuda)]
    pub backend: Backend,
    /// The tensor-core matmul's configuration, `BMxBNxBK/WMxWN/STAGES` (default: the
    /// template's heuristic: 128x128x32/2x2/3 for f16/bf16 (128x128x32/2x4/4 where an operand or the output cannot take 16-byte copies); for f32, 128x64x32/2x2/4 or 64x64x32/2x2/4, whichever tiles finish first by wave quantization; without `/STAGES`, 4 stages).
    #[arg(long, value_name = "CONFIG")]
    pub mma_config: Option<irc_lower::MmaConfig>,
    /// The GPU `--emit=ptx` compiles for (and the tuning cache is looked up for).
    #[arg(long, default_value = "sm_90a")]
    pub arch: String,
    #[command(flatten)]
    pub cache: crate::tuning::CacheArgs,
    #[command(flatten)]
    pub passes: PassArgs,
    #[command(flatten)]
    pub dims: crate::import::DimArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// CUDA C++ (`--emit=cuda`), compiled by NVRTC.
    Cuda,
    /// MLIR (gpu, nvvm, arith, math, memref, scf) lowered in-process to PTX.
    Mlir,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cuda => "cuda",
            Backend::Mlir => "mlir",
        }
    }
}

/// The pass-manager flags, shared by `irc FILE` and `irc run`.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct PassArgs {
    /// Run the default graph-level pipeline (see --list-passes).
    #[arg(short = 'O')]
    pub optimize: bool,
    /// Run this pipeline, e.g. 'graph(canonicalize,fold-transpose{max-iters=8})'.
    #[arg(long, value_name = "PIPELINE")]
    pub pass_pipeline: Option<String>,
    /// List the registered passes with their options, and exit.
    #[arg(long)]
    pub list_passes: bool,
    /// Print the IR (to stderr) before each run of this pass.
    #[arg(long, value_name = "PASS")]
    pub print_ir_before: Vec<String>,
    /// Print the IR (to stderr) after each run of this pass.
    #[arg(long, value_name = "PASS")]
    pub print_ir_after: Vec<String>,
    /// Print the IR (to stderr) after every pass.
    #[arg(long)]
    pub print_ir_after_all: bool,
    /// Print the IR (to stderr) after every pass that changed it.
    #[arg(long)]
    pub print_ir_after_change: bool,
    /// Report each pass's time (to stderr); `irc FILE` also reports each step's: parse,
    /// decompose, passes, plan, lower, emission, print.
    #[arg(long)]
    pub timing: bool,
    /// Report each pass's statistics (to stderr): rules fired, e-graph size, stop reason.
    #[arg(long)]
    pub pass_statistics: bool,
    /// Verify every pass's output.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub verify_each: bool,
}

impl PassArgs {
    /// The pass manager these flags ask for, or `None` when they ask for no passes.
    pub fn manager(&self, default: bool) -> Result<Option<irc_passes::manager::PassManager>> {
        use irc_passes::manager::{Instrumentation, PassManager};
        let text = match (&self.pass_pipeline, self.optimize || default) {
            (Some(p), _) => p.clone(),
            (None, true) => irc_passes::registry::DEFAULT_PIPELINE.to_string(),
            (None, false) => return Ok(None),
        };
        let mut pm = PassManager::parse(&text).map_err(|e| {
            anyhow::anyhow!(
                "{e}\n  {text}\n  {}^",
                " ".repeat(e.column.saturating_sub(1))
            )
        })?;
        pm.verify_each = self.verify_each;
        pm.instrumentation = Instrumentation {
            print_before: self.print_ir_before.clone(),
            print_after: self.print_ir_after.clone(),
            print_after_all: self.print_ir_after_all,
            print_after_change: self.print_ir_after_change,
        };
        Ok(Some(pm))
    }

    /// Runs the pipeline on every graph of `module`, printing snapshots and reports to stderr.
    pub fn run_on(
        &self,
        pm: &irc_passes::manager::PassManager,
        module: &mut irc_ir::Module,
    ) -> Result<()> {
        let mut records = Vec::new();
        for g in &mut module.graphs {
            let mut snap = |when: irc_passes::manager::When, pass: &str, g: &irc_ir::Graph| {
                let w = match when {
                    irc_passes::manager::When::Before => "Before",
                    irc_passes::manager::When::After => "After",
                };
                eprint!(
                    "// -----// IR Dump {w} {pass} //----- //\n{}",
                    irc_ir::print_graph(g)
                );
            };
            let out = pm.run_with(g, &mut snap)?;
            *g = out.graph;
            records.extend(out.records);
        }
        if self.timing {
            eprint!("{}", irc_passes::manager::timing_report(&records));
        }
        if self.pass_statistics {
            eprint!("{}", irc_passes::manager::statistics_report(&records));
        }
        Ok(())
    }
}

/// `--list-passes`: every registered pass, its summary and options.
pub fn list_passes() -> String {
    let mut out = format!(
        "Default pipeline (-O): {}\n\nPasses:\n",
        irc_passes::registry::DEFAULT_PIPELINE
    );
    for p in irc_passes::registry::all() {
        let i = p.info();
        out.push_str(&format!("  {:<22} {}\n", i.name, i.summary));
        for o in i.options {
            out.push_str(&format!("    {{{}={}}}  {}\n", o.name, o.default, o.doc));
        }
    }
    out
}

/// `--emit`'s values: the names of the pipeline's stages, with their summaries.
fn stage_parser() -> impl clap::builder::TypedValueParser<Value = Stage> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(
        STAGES
            .iter()
            .map(|s| PossibleValue::new(s.name).help(s.summary)),
    )
    .map(|name| Stage::from_name(&name).unwrap_or(Stage::Graph))
}

impl Backend {
    /// The pipeline's backend.
    pub fn pipeline(self) -> irc_pipeline::Backend {
        match self {
            Backend::Cuda => irc_pipeline::Backend::Cuda,
            Backend::Mlir => irc_pipeline::Backend::Mlir,
        }
    }
}

/// Runs the command; `Ok(false)` when errors were reported (exit code 1).
pub fn run(args: &OptArgs) -> Result<bool> {
    let probe = Pipeline {
        backend: args.backend.pipeline(),
        ..Pipeline::default()
    };
    probe.available(args.emit)?;
    if args.passes.list_passes {
        print!("{}", list_passes());
        return Ok(true);
    }
    let pm = args.passes.manager(false)?;
    let text = source_text(args)?;
    let name = if args.input == "-" {
        "<stdin>"
    } else {
        args.input.as_str()
    };
    let src = Source { name, text: &text };
    let cases = if args.split_input_file {
        split_cases(&text)
    } else {
        vec![0..text.len()]
    };
    let mut outputs = Vec::new();
    let mut ok = true;
    let mut stderr = String::new();
    for range in cases {
        let chunk = &text[range.clone()];
        let result = compile(chunk, range.start, args, &src, pm.as_ref());
        if args.verify_diagnostics {
            let expected = match verify_diags::parse_expectations(&text, range.start, chunk) {
                Ok(e) => e,
                Err(diags) => {
                    stderr.push_str(&render_errors(&src, &diags));
                    ok = false;
                    continue;
                }
            };
            let produced = result.as_ref().err().cloned().unwrap_or_default();
            let problems = verify_diags::check(&text, &produced, &expected);
            if !problems.is_empty() {
                ok = false;
                stderr.push_str(&render_errors(&src, &problems));
            }
            if let Ok(out) = result {
                outputs.push(out);
            }
        } else {
            match result {
                Ok(out) => outputs.push(out),
                Err(diags) => {
                    ok = false;
                    stderr.push_str(&render_errors(&src, &diags));
                }
            }
        }
    }
    eprint!("{stderr}");
    let joined = join(outputs, &format!("{SPLIT_MARKER}\n"));
    match &args.output {
        Some(path) => std::fs::write(path, joined)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?,
        None => std::io::stdout().write_all(joined.as_bytes())?,
    }
    Ok(ok)
}

/// The input's text: the file (or standard input) as written, or an ONNX model imported and
/// printed as graph IR — its weights stay parameters, which is all a compile needs.
fn source_text(args: &OptArgs) -> Result<String> {
    if !crate::import::is_onnx(&args.input) {
        args.dims.refuse_for_graph_ir(&args.input)?;
        return read_source(&args.input);
    }
    if args.split_input_file || args.verify_diagnostics {
        anyhow::bail!(
            "--split-input-file and --verify-diagnostics read graph IR text, not an ONNX model"
        );
    }
    let imported = crate::import::import_file(std::path::Path::new(&args.input), &args.dims)?;
    Ok(irc_ir::print_module(&irc_ir::Module {
        graphs: vec![imported.graph],
    }))
}

fn compile(
    chunk: &str,
    base: usize,
    args: &OptArgs,
    src: &Source,
    pm: Option<&irc_passes::manager::PassManager>,
) -> Result<String, Vec<irc_ir::Diagnostic>> {
    let mut times = StageTimes::new(args.passes.timing);
    let mut module = irc_frontend::parse_module_at(chunk, base)?;
    times.lap("parse");
    if args.decompose {
        for g in &mut module.graphs {
            *g = irc_ir::decompose_graph(g)
                .map_err(|e| vec![irc_ir::Diagnostic::error(g.span, e.message)])?;
        }
        irc_ir::verify_module(&module)?;
        times.lap("decompose");
    }
    if let Some(pm) = pm {
        args.passes
            .run_on(pm, &mut module)
            .map_err(|e| vec![irc_ir::Diagnostic::error(None, format!("{e:#}"))])?;
        times.lap("passes");
    }
    if args.emit == Stage::Graph {
        let text = irc_ir::print_module(&module);
        times.lap("print");
        times.report();
        return Ok(text);
    }
    let info = irc_pipeline::SourceInfo {
        name: src.name,
        text: src.text,
    };
    let lookup = args.cache.lookup(&args.input, &args.arch);
    let pipeline = Pipeline {
        backend: args.backend.pipeline(),
        arch: Some(args.arch.clone()),
        lower: args.cache.options(args.mma_config, &lookup),
        ..Pipeline::default()
    };
    let mut files = Vec::new();
    for g in &module.graphs {
        let mut a = pipeline
            .compile(g, info, args.emit)
            .map_err(|e| vec![irc_ir::Diagnostic::error(g.span, e.to_string())])?;
        times.extend(&a.times);
        if let (true, true, Some(p)) = (args.explain, args.emit >= Stage::Layout, &a.planned) {
            eprint!("{}", crate::tuning::explain(&p.choices, &lookup));
        }
        files.push(a.take_text(args.emit, args.explain));
        times.lap("print");
        if !args.split_input_file {
            // The process ends next: freeing a large graph's kernel IR would cost a twentieth
            // of its compile time, so the OS takes it back (clang's -disable-free).
            std::mem::forget(a);
        }
    }
    if !args.split_input_file {
        std::mem::forget(module);
    }
    times.report();
    // Graph-level files join as one module; the others are one file per graph.
    let sep = if args.emit == Stage::Fused || args.emit == Stage::Layout {
        String::new()
    } else {
        format!("{SPLIT_MARKER}\n")
    };
    Ok(join(files, &sep))
}

/// `parts.join(sep)`, without copying a single part (a large graph's CUDA).
fn join(mut parts: Vec<String>, sep: &str) -> String {
    if parts.len() == 1 {
        return parts.pop().unwrap_or_default();
    }
    parts.join(sep)
}

/// `--timing`'s second report: the time of each step of `irc FILE` (parse, decompose, the
/// passes, planning, lowering, emission, printing), summed over the graphs of the file.
struct StageTimes {
    on: bool,
    clock: std::time::Instant,
    steps: Vec<(&'static str, std::time::Duration)>,
}

impl StageTimes {
    fn new(on: bool) -> Self {
        StageTimes {
            on,
            clock: std::time::Instant::now(),
            steps: vec![],
        }
    }

    fn add(&mut self, name: &'static str, t: std::time::Duration) {
        match self.steps.iter_mut().find(|(n, _)| *n == name) {
            Some((_, sum)) => *sum += t,
            None => self.steps.push((name, t)),
        }
    }

    /// Counts the time since the last lap as `name`.
    fn lap(&mut self, name: &'static str) {
        let now = std::time::Instant::now();
        self.add(name, now - self.clock);
        self.clock = now;
    }

    /// Adds the pipeline's own steps (already timed; the clock restarts after them).
    fn extend(&mut self, steps: &[(&'static str, std::time::Duration)]) {
        for &(name, t) in steps {
            self.add(name, t);
        }
        self.clock = std::time::Instant::now();
    }

    fn report(&self) {
        if !self.on {
            return;
        }
        let total: std::time::Duration = self.steps.iter().map(|s| s.1).sum();
        let mut out = String::from("===-- stage timing report --===\n");
        for (name, t) in self.steps.iter().chain([&("total", total)]) {
            out.push_str(&format!("  {:>10.3} ms  {name}\n", t.as_secs_f64() * 1e3));
        }
        eprint!("{out}");
    }
}
