//! `irc bench`: times a graph's emitted kernels on the GPU as `triton.testing.do_bench` does
//! and judges the median against a roofline target.

use crate::gpu::{Compiled, compile, to_host};
use crate::run::{Loaded, load_inputs_with, load_optimized, select_graph};
use anyhow::{Result, bail};
use irc_runtime::{BenchOptions, Gpu, HostTensor, Report, Target};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// The graph IR file, `-` for standard input, or an ONNX model (`.onnx`).
    pub input: String,
    /// The graph to time; needed when the file holds several.
    #[arg(long, value_name = "NAME")]
    pub graph: Option<String>,
    /// An input from a .npy file, by parameter name; the others are seeded standard normals.
    #[arg(long = "input", value_name = "NAME=PATH.npy")]
    pub inputs: Vec<String>,
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
    /// Untimed runs before timing.
    #[arg(long, default_value_t = 10)]
    pub warmup: u32,
    /// Timed repetitions, each after an L2 flush.
    #[arg(long, default_value_t = 100)]
    pub rep: u32,
    /// Capture the launch sequence once as a CUDA graph and time its replays (one launch per
    /// run instead of one per kernel).
    #[arg(long)]
    pub cuda_graph: bool,
    /// The GPU architecture to compile for.
    #[arg(long, default_value = "sm_90a")]
    pub arch: String,
    /// The emitter whose PTX is timed: `cuda` (NVRTC) or `mlir` (needs the `mlir` feature).
    #[arg(long, value_enum, default_value_t = crate::opt::Backend::Cuda)]
    pub backend: crate::opt::Backend,
    /// The tensor-core matmul's configuration, `BMxBNxBK/WMxWN/STAGES` (default: the
    /// template's heuristic: 128x128x32/2x2/3 for f16/bf16 (128x128x32/2x4/4 where an operand or the output cannot take 16-byte copies); for f32, 128x64x32/2x2/4 or 64x64x32/2x2/4, whichever tiles finish first by wave quantization; without `/STAGES`, 4 stages).
    #[arg(long, value_name = "CONFIG")]
    pub mma_config: Option<irc_lower::MmaConfig>,
    /// Say (on stderr) which configuration each kernel was built with, and where it came from
    /// (the tuning cache or the template's heuristic).
    #[arg(long)]
    pub explain: bool,
    #[command(flatten)]
    pub cache: crate::tuning::CacheArgs,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// The roofline target's name (env IRC_TARGET_NAME; default H100).
    #[arg(long, value_name = "NAME")]
    pub target_name: Option<String>,
    /// Peak TFLOP/s of the target (env IRC_PEAK_TFLOPS; default 737, the H100's bf16 matmul).
    #[arg(long, value_name = "TFLOPS")]
    pub peak_tflops: Option<f64>,
    /// Peak GB/s of the target (env IRC_PEAK_GBPS; default 3006, the H100's copy bandwidth).
    #[arg(long, value_name = "GBPS")]
    pub peak_gbps: Option<f64>,
    /// Time the graph exactly as written, without the optimizing pipeline.
    #[arg(long)]
    pub no_passes: bool,
    #[command(flatten)]
    pub passes: crate::opt::PassArgs,
}

/// The target: flags over environment over the H100 defaults.
fn target(args: &BenchArgs) -> Result<Target> {
    let mut t = Target::h100();
    let env = |name: &str| std::env::var(name).ok();
    let num = |flag: Option<f64>, var: &str| -> Result<Option<f64>> {
        match (flag, env(var)) {
            (Some(v), _) => Ok(Some(v)),
            (None, Some(s)) => match s.trim().parse::<f64>() {
                Ok(v) => Ok(Some(v)),
                Err(_) => bail!("{var}={s} is not a number"),
            },
            (None, None) => Ok(None),
        }
    };
    if let Some(v) = num(args.peak_tflops, "IRC_PEAK_TFLOPS")? {
        t.peak_tflops = v;
    }
    if let Some(v) = num(args.peak_gbps, "IRC_PEAK_GBPS")? {
        t.peak_gbps = v;
    }
    if let Some(n) = args.target_name.clone().or_else(|| env("IRC_TARGET_NAME")) {
        t.name = n;
    }
    if !(t.peak_tflops > 0.0
        && t.peak_gbps > 0.0
        && t.peak_tflops.is_finite()
        && t.peak_gbps.is_finite())
    {
        bail!("the target's peaks must be positive numbers");
    }
    Ok(t)
}

pub fn run(args: &BenchArgs) -> Result<bool> {
    let target = target(args)?;
    if args.rep == 0 {
        bail!("--rep must be at least 1");
    }
    // The same pipeline as `irc run`: by default the `-O` pipeline's output is timed.
    let Some(Loaded {
        module, weights, ..
    }) = load_optimized(
        &args.input,
        args.weights.as_deref(),
        &args.dims,
        (!args.no_passes).then_some(&args.passes),
    )?
    else {
        return Ok(false);
    };
    let graph = select_graph(&module, &args.input, args.graph.as_deref())?;
    let lookup = args.cache.lookup(&args.input, &args.arch);
    let options = args.cache.options(args.mma_config, &lookup);
    let Compiled {
        module: cuda,
        ptx,
        arch,
        choices,
        work,
    } = compile(graph, &args.arch, args.backend, options)?;
    if args.explain {
        eprint!("{}", crate::tuning::explain(&choices, &lookup));
    }
    let known = crate::import::match_weights(graph, weights)?;
    let inputs = load_inputs_with(graph, known, &args.inputs, true, args.seed, None)?;
    let host: Vec<HostTensor> = inputs.iter().map(to_host).collect();
    drop(inputs);
    let gpu = Gpu::new(0)?;
    let mut program = gpu.load(&ptx, &cuda.manifest)?;
    program.write_inputs(&host)?;
    let timing = program.bench(BenchOptions {
        warmup: args.warmup,
        rep: args.rep,
        cuda_graph: args.cuda_graph,
    })?;
    let m = &cuda.manifest;
    let info = gpu.info();
    let report = Report::new(
        &graph.name,
        &info.name,
        timing,
        m.flops,
        m.min_bytes,
        &target,
    );
    // Each kernel's own floor (its flops, and every buffer it reads or writes moved once),
    // summed: what this launch sequence could reach, beside the whole graph's floor.
    let kernel_floor_ms: f64 = work.iter().map(|w| target.floor_ms(w.flops, w.bytes)).sum();
    if args.json {
        let v = serde_json::json!({
            "kernel_floor_ms": kernel_floor_ms,
            "graph": report.graph,
            "device": info,
            "arch": arch.sm(),
            "backend": args.backend.name(),
            "kernels": m.launches.len(),
            "configs": choices
                .iter()
                .map(|c| serde_json::json!({
                    "group": c.group,
                    "template": c.problem.template,
                    "problem": c.problem.signature,
                    "config": c.config.map(|x| x.to_string()),
                    "from_cache": c.source == irc_lower::ConfigSource::Given,
                }))
                .collect::<Vec<_>>(),
            "warmup": args.warmup,
            "cuda_graph": args.cuda_graph,
            "report": report,
        });
        println!("{v}");
    } else {
        let t = &report.timing;
        println!(
            "@{} on {} ({arch}, {} backend): {} kernel launch(es){}, {} reps after {} warm-up, L2 flushed ({} MiB) before each",
            report.graph,
            info.name,
            args.backend.name(),
            m.launches.len(),
            if args.cuda_graph {
                " in one CUDA graph"
            } else {
                ""
            },
            t.count,
            args.warmup,
            t.flush_bytes >> 20
        );
        println!(
            "time:  median {:.4} ms  p20 {:.4} ms  p80 {:.4} ms",
            t.median_ms, t.p20_ms, t.p80_ms
        );
        println!(
            "rate:  {:.1} TFLOP/s  {:.1} GB/s",
            report.tflops, report.gbps
        );
        println!(
            "floor: {:.4} ms on {} ({} TFLOP/s, {} GB/s): {:.1}% of floor speed ({:.2}x the floor)",
            report.floor_ms,
            target.name,
            target.peak_tflops,
            target.peak_gbps,
            report.pct_of_floor,
            report.x_floor
        );
        println!(
            "kernels' floors: {kernel_floor_ms:.4} ms summed over the {} kernels ({:.2}x that sum)",
            work.len(),
            t.median_ms / kernel_floor_ms.max(1e-12)
        );
    }
    Ok(true)
}
