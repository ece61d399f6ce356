//! `irc import model.onnx -o model.ir`: an ONNX model to graph IR text plus a safetensors
//! side file of its weights; and the helpers `irc run` uses to take `.onnx` files and weights.
//!
//! The `.ir` file names its weights file on its first line, `// irc-weights: model.safetensors`
//! (relative to the `.ir` file), so `irc run model.ir` finds them; `--weights` overrides.

use anyhow::{Context, Result, bail};
use irc_interp::Tensor;
use irc_ir::{Graph, Module};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The header line naming the weights file.
pub const WEIGHTS_HEADER: &str = "// irc-weights: ";

#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// The ONNX model (`.onnx`; external data files are read from its directory).
    pub input: PathBuf,
    /// Where to write the graph IR; its weights go next to it, as FILE.safetensors. Without
    /// it the IR goes to standard output (and a model with weights needs --weights).
    #[arg(short, long, value_name = "FILE.ir")]
    pub output: Option<PathBuf>,
    /// Where to write the weights (default: the output with the extension .safetensors).
    #[arg(long, value_name = "FILE.safetensors")]
    pub weights: Option<PathBuf>,
    #[command(flatten)]
    pub dims: DimArgs,
}

/// `--dim NAME=N`, shared with `irc run`.
#[derive(clap::Args, Debug, Default)]
pub struct DimArgs {
    /// The size of a dynamic (named) dim of the model's inputs, e.g. `--dim batch=16`.
    #[arg(long = "dim", value_name = "NAME=N")]
    pub dims: Vec<String>,
}

impl DimArgs {
    /// An error where `--dim` was given for `input`, a graph IR file (its shapes are static).
    pub fn refuse_for_graph_ir(&self, input: &str) -> Result<()> {
        if !self.dims.is_empty() {
            bail!("--dim sizes the dynamic dims of an ONNX model's inputs; {input} is graph IR");
        }
        Ok(())
    }

    pub fn options(&self) -> Result<irc_onnx::Options> {
        let mut dims = BTreeMap::new();
        for spec in &self.dims {
            let (name, n) = spec
                .split_once('=')
                .with_context(|| format!("--dim {spec}: expected NAME=N"))?;
            let n: u64 =
                n.parse().ok().filter(|&n| n > 0).with_context(|| {
                    format!("--dim {spec}: the size must be a positive integer")
                })?;
            if dims.insert(name.to_string(), n).is_some() {
                bail!("--dim gives {name} twice");
            }
        }
        Ok(irc_onnx::Options {
            dims,
            ..Default::default()
        })
    }
}

/// Whether a path names an ONNX model.
pub fn is_onnx(path: &str) -> bool {
    Path::new(path)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

/// Imports an ONNX file; tensors stored in external data files are read from the model's
/// directory.
pub fn import_file(path: &Path, dims: &DimArgs) -> Result<irc_onnx::Imported> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
    let options = irc_onnx::Options {
        external: Some(crate::external::reader(dir)),
        ..dims.options()?
    };
    irc_onnx::import_model(&bytes, &options)
        .with_context(|| format!("cannot import {}", path.display()))
}

pub fn run(args: &ImportArgs) -> Result<bool> {
    let imported = import_file(&args.input, &args.dims)?;
    let text = irc_ir::print_module(&Module {
        graphs: vec![imported.graph.clone()],
    });
    let weights_path = args.weights.clone().or_else(|| {
        args.output
            .as_ref()
            .map(|o| o.with_extension("safetensors"))
    });
    let mut header = format!(
        "// imported from {} (ai.onnx opset {}) by irc import\n",
        args.input.display(),
        imported.opset
    );
    if !imported.weights.is_empty() {
        let Some(wp) = &weights_path else {
            bail!(
                "the model has {} weights; pass -o FILE.ir (they go to FILE.safetensors) or --weights FILE.safetensors",
                imported.weights.len()
            );
        };
        let bytes = irc_onnx::weights::to_safetensors(&imported.weights)?;
        std::fs::write(wp, bytes).with_context(|| format!("cannot write {}", wp.display()))?;
        // Relative to the .ir file when both sit in one directory.
        let rel = match (&args.output, wp.parent()) {
            (Some(o), Some(dir)) if o.parent() == Some(dir) => {
                PathBuf::from(wp.file_name().unwrap_or_default())
            }
            _ => wp.clone(),
        };
        header = format!("{WEIGHTS_HEADER}{}\n{header}", rel.display());
    }
    let out = format!("{header}{text}");
    match &args.output {
        Some(o) => {
            std::fs::write(o, out).with_context(|| format!("cannot write {}", o.display()))?
        }
        None => print!("{out}"),
    }
    Ok(true)
}

/// The weights file a graph IR file names in its header, resolved against its directory.
pub fn weights_named_by(ir_path: &str, text: &str) -> Option<PathBuf> {
    let name = text.lines().next()?.strip_prefix(WEIGHTS_HEADER)?.trim();
    let p = Path::new(name);
    Some(if p.is_absolute() {
        p.to_path_buf()
    } else {
        Path::new(ir_path)
            .parent()
            .unwrap_or(Path::new("."))
            .join(p)
    })
}

/// Reads a safetensors weights file.
pub fn read_weights(path: &Path) -> Result<Vec<(String, Tensor)>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    irc_onnx::weights::from_safetensors(&bytes).with_context(|| format!("{}", path.display()))
}

/// The given tensors matched to the graph's parameters by name (checking types): one entry per
/// parameter, `None` where the weights do not name it.
pub fn match_weights(graph: &Graph, weights: Vec<(String, Tensor)>) -> Result<Vec<Option<Tensor>>> {
    let mut by_name: BTreeMap<String, Tensor> = weights.into_iter().collect();
    let mut out = Vec::with_capacity(graph.params.len());
    for &p in &graph.params {
        let name = graph.value(p).name.clone().unwrap_or_default();
        let t = by_name.remove(&name);
        if let Some(t) = &t
            && t.ty != *graph.ty(p)
        {
            bail!(
                "weight {name} is {}, but the graph's parameter %{name} is {}",
                t.ty,
                graph.ty(p)
            );
        }
        out.push(t);
    }
    Ok(out)
}
