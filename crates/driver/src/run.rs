//! `irc run`: execute a graph on the reference interpreter.

use crate::diag::{Source, render_errors};
use crate::input::read_source;
use crate::npy;
use anyhow::{Context, Result, bail};
use irc_interp::{Tensor, random_tensor, run_graph};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The graph IR file, `-` for standard input.
    pub input: String,
    /// The graph to run; needed when the file holds several.
    #[arg(long, value_name = "NAME")]
    pub graph: Option<String>,
    /// An input from a .npy file, by parameter name (`x=path.npy` or `%x=path.npy`).
    #[arg(long = "input", value_name = "NAME=PATH.npy")]
    pub inputs: Vec<String>,
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
    #[command(flatten)]
    pub passes: crate::opt::PassArgs,
}

pub fn run(args: &RunArgs) -> Result<bool> {
    let text = read_source(&args.input)?;
    let name = if args.input == "-" {
        "<stdin>"
    } else {
        args.input.as_str()
    };
    let pm = if args.no_passes {
        None
    } else {
        args.passes.manager(true)?
    };
    let mut module = match irc_frontend::parse_module(&text) {
        Ok(m) => m,
        Err(diags) => {
            eprint!("{}", render_errors(&Source { name, text: &text }, &diags));
            return Ok(false);
        }
    };
    if let Some(pm) = &pm {
        args.passes.run_on(pm, &mut module)?;
    }
    let names: Vec<&str> = module.graphs.iter().map(|g| g.name.as_str()).collect();
    let graph = match (&args.graph, module.graphs.as_slice()) {
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
    };
    let mut given: Vec<Option<PathBuf>> = vec![None; graph.params.len()];
    let param_names: Vec<String> = graph
        .params
        .iter()
        .map(|&p| graph.value(p).name.clone().unwrap_or_default())
        .collect();
    for spec in &args.inputs {
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
        let t = match path {
            Some(path) => {
                npy::read(path, ty).with_context(|| format!("input %{}", param_names[i]))?
            }
            None if args.random => {
                if ty.size_bytes() > irc_interp::MAX_TENSOR_BYTES {
                    bail!(
                        "input %{} ({ty}) is too large for the reference interpreter",
                        param_names[i]
                    );
                }
                random_tensor(ty, args.seed, i as u64)
            }
            None => bail!(
                "no value for input %{} ({ty}); pass --input {}=PATH.npy or --random",
                param_names[i],
                param_names[i]
            ),
        };
        inputs.push(t);
    }
    let outputs = run_graph(graph, inputs)?;
    if let Some(dir) = &args.save_outputs {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for (i, t) in outputs.iter().enumerate() {
            npy::write(&dir.join(format!("out{i}.npy")), t)?;
        }
    }
    for (i, t) in outputs.iter().enumerate() {
        println!("{}", summary(i, t));
    }
    Ok(true)
}

/// `out0: tensor<2x3xf32> min=-1.5 max=2 mean=0.25`.
fn summary(i: usize, t: &Tensor) -> String {
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
