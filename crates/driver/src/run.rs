//! `irc run`: execute a graph on the reference interpreter.

use crate::diag::{Source, render_errors};
use crate::input::read_source;
use crate::npy;
use anyhow::{Context, Result, bail};
use irc_interp::{Tensor, random_tensor, run_graph};
use irc_ir::{Graph, Module};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The graph IR file, `-` for standard input, or an ONNX model (`.onnx`).
    pub input: String,
    /// The graph to run; needed when the file holds several.
    #[arg(long, value_name = "NAME")]
    pub graph: Option<String>,
    /// An input from a .npy file, by parameter name (`x=path.npy` or `%x=path.npy`).
    #[arg(long = "input", value_name = "NAME=PATH.npy")]
    pub inputs: Vec<String>,
    /// Parameter values by name from a safetensors file (default: the file an imported graph
    /// names on its `// irc-weights:` line; an ONNX model carries its own).
    #[arg(long, value_name = "FILE.safetensors")]
    pub weights: Option<PathBuf>,
    #[command(flatten)]
    pub dims: crate::import::DimArgs,
    /// Fill every input not given with --input with seeded standard normals.
    #[arg(long)]
    pub random: bool,
    /// The seed for --random.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write the results to DIR/out0.npy, DIR/out1.npy, ... in `return` order.
    #[arg(long, value_name = "DIR")]
    pub save_outputs: Option<PathBuf>,
    /// Run the graph exactly as written, without the optimizing pipeline.
    #[arg(long)]
    pub no_passes: bool,
    /// Where to run: the reference interpreter (`cpu`) or the GPU through the emitted CUDA.
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
    #[command(flatten)]
    pub gpu: crate::gpu::GpuArgs,
    #[command(flatten)]
    pub passes: crate::opt::PassArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// The CPU reference interpreter.
    Cpu,
    /// The first CUDA GPU (NVRTC + the CUDA driver).
    Gpu,
}

pub fn run(args: &RunArgs) -> Result<bool> {
    let Some(Loaded {
        written,
        module,
        weights,
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
    let limit = match args.device {
        Device::Cpu => Some(irc_interp::MAX_TENSOR_BYTES),
        Device::Gpu => None,
    };
    let known = crate::import::match_weights(graph, weights)?;
    let inputs = load_inputs_with(graph, known, &args.inputs, args.random, args.seed, limit)?;
    let outputs = match args.device {
        Device::Cpu => run_graph(graph, inputs)?,
        Device::Gpu => {
            // The reference is the graph as written, so --check covers the passes too.
            let reference = select_graph(&written, &args.input, args.graph.as_deref())?;
            return crate::gpu::run(graph, reference, inputs, args);
        }
    };
    save_and_print(&outputs, args.save_outputs.as_deref())?;
    Ok(true)
}

/// Parameter values by parameter name.
pub type Weights = Vec<(String, Tensor)>;

/// A command's input read and optimized.
pub struct Loaded {
    /// The module as written: what `--check`'s reference interpreter runs.
    pub written: Module,
    /// The module after the pass pipeline (the same as written without one).
    pub module: Module,
    pub weights: Weights,
}

/// [`load`], then the pass pipeline `passes` (the `-O` pipeline unless they name another;
/// `None` for `--no-passes`) on a copy; `None` when parse errors were reported.
pub fn load_optimized(
    input: &str,
    weights: Option<&Path>,
    dims: &crate::import::DimArgs,
    passes: Option<&crate::opt::PassArgs>,
) -> Result<Option<Loaded>> {
    let pm = match passes {
        Some(p) => p.manager(true)?.map(|pm| (p, pm)),
        None => None,
    };
    let Some((written, weights)) = load(input, weights, dims)? else {
        return Ok(None);
    };
    let mut module = written.clone();
    if let Some((p, pm)) = &pm {
        p.run_on(pm, &mut module)?;
    }
    Ok(Some(Loaded {
        written,
        module,
        weights,
    }))
}

/// The module to run and its weights: an ONNX model imported (with the weights it carries),
/// or a graph IR file parsed with the weights `weights` or its `// irc-weights:` line names.
/// `None` when parse errors were reported.
pub fn load(
    input: &str,
    weights: Option<&Path>,
    dims: &crate::import::DimArgs,
) -> Result<Option<(Module, Weights)>> {
    if crate::import::is_onnx(input) {
        if weights.is_some() {
            bail!(
                "--weights gives a graph IR file's parameters; the ONNX model {input} carries its own"
            );
        }
        let imported = crate::import::import_file(Path::new(input), dims)?;
        let module = Module {
            graphs: vec![imported.graph],
        };
        return Ok(Some((module, imported.weights)));
    }
    dims.refuse_for_graph_ir(input)?;
    let Some(m) = parse(input)? else {
        return Ok(None);
    };
    let named = std::fs::read_to_string(input)
        .ok()
        .and_then(|t| crate::import::weights_named_by(input, &t));
    let weights = match weights.or(named.as_deref()) {
        Some(p) => crate::import::read_weights(p)?,
        None => vec![],
    };
    Ok(Some((m, weights)))
}

/// Writes `DIR/outN.npy` when asked, and prints one summary line per result.
pub fn save_and_print(outputs: &[Tensor], dir: Option<&Path>) -> Result<()> {
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for (i, t) in outputs.iter().enumerate() {
            npy::write(&dir.join(format!("out{i}.npy")), t)?;
        }
    }
    for (i, t) in outputs.iter().enumerate() {
        println!("{}", summary(i, t));
    }
    Ok(())
}

/// Parses a file (`-` for standard input); `None` when errors were reported.
pub fn parse(input: &str) -> Result<Option<Module>> {
    let text = read_source(input)?;
    let name = if input == "-" { "<stdin>" } else { input };
    match irc_frontend::parse_module(&text) {
        Ok(m) => Ok(Some(m)),
        Err(diags) => {
            eprint!("{}", render_errors(&Source { name, text: &text }, &diags));
            Ok(None)
        }
    }
}

/// The graph named by `--graph`, or the file's only graph.
pub fn select_graph<'m>(module: &'m Module, input: &str, graph: Option<&str>) -> Result<&'m Graph> {
    let name = if input == "-" { "<stdin>" } else { input };
    let names: Vec<&str> = module.graphs.iter().map(|g| g.name.as_str()).collect();
    Ok(match (graph, module.graphs.as_slice()) {
        (Some(n), _) => {
            let n = n.trim_start_matches('@');
            module.graph(n).with_context(|| {
                format!("no graph @{n} in {name}; it has @{}", names.join(", @"))
            })?
        }
        (None, [one]) => one,
        (None, []) => bail!("{name} holds no graph"),
        (None, _) => bail!(
            "{name} holds several graphs (@{}); choose one with --graph",
            names.join(", @")
        ),
    })
}

/// Each parameter's value: known already (a weight; one entry per parameter), read from the
/// `.npy` file a `NAME=PATH` spec gives, or (with `random`) a seeded standard normal; `limit`
/// bounds the size of a random input (the interpreter's limit on the CPU).
pub fn load_inputs_with(
    graph: &Graph,
    mut known: Vec<Option<Tensor>>,
    specs: &[String],
    random: bool,
    seed: u64,
    limit: Option<u64>,
) -> Result<Vec<Tensor>> {
    let mut given: Vec<Option<PathBuf>> = vec![None; graph.params.len()];
    let param_names: Vec<String> = graph
        .params
        .iter()
        .map(|&p| graph.value(p).name.clone().unwrap_or_default())
        .collect();
    for spec in specs {
        let (n, path) = spec
            .split_once('=')
            .with_context(|| format!("--input {spec}: expected NAME=PATH.npy"))?;
        let n = n.trim_start_matches('%');
        let i = param_names.iter().position(|p| p == n).with_context(|| {
            format!(
                "--input {spec}: graph @{} has no parameter %{n} (it has %{})",
                graph.name,
                param_names.join(", %")
            )
        })?;
        if given[i].replace(PathBuf::from(path)).is_some() {
            bail!("--input gives %{n} twice");
        }
    }
    let mut inputs: Vec<Tensor> = Vec::with_capacity(given.len());
    for (i, (path, &p)) in given.iter().zip(&graph.params).enumerate() {
        let ty = graph.ty(p);
        let weight = known.get_mut(i).and_then(Option::take);
        let t = match (path, weight) {
            (Some(path), _) => {
                npy::read(path, ty).with_context(|| format!("input %{}", param_names[i]))?
            }
            (None, Some(w)) => w,
            (None, None) if random => {
                if limit.is_some_and(|l| ty.size_bytes() > l) {
                    bail!(
                        "input %{} ({ty}) is too large for the reference interpreter",
                        param_names[i]
                    );
                }
                random_tensor(ty, seed, i as u64)
            }
            (None, None) => bail!(
                "no value for input %{} ({ty}); pass --input {}=PATH.npy or --random",
                param_names[i],
                param_names[i]
            ),
        };
        inputs.push(t);
    }
    Ok(inputs)
}

/// `out0: tensor<2x3xf32> min=-1.5 max=2 mean=0.25`.
pub fn summary(i: usize, t: &Tensor) -> String {
    let v = t.data.to_f64();
    let nan = v.iter().filter(|x| x.is_nan()).count();
    let finite = v.iter().copied().filter(|x| !x.is_nan());
    let (mut min, mut max, mut sum, mut n) = (f64::INFINITY, f64::NEG_INFINITY, 0.0, 0usize);
    for x in finite {
        min = min.min(x);
        max = max.max(x);
        sum += x;
        n += 1;
    }
    let mean = if n > 0 { sum / n as f64 } else { f64::NAN };
    let nan_note = if nan > 0 {
        format!(" nan={nan}")
    } else {
        String::new()
    };
    format!(
        "out{i}: {} min={min:.6} max={max:.6} mean={mean:.6}{nan_note}",
        t.ty
    )
}
