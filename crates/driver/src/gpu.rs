//! `irc run --device gpu`: the emitted CUDA on the GPU, optionally checked against the
//! reference interpreter.

use crate::opt::Backend;
use crate::run::{RunArgs, save_and_print};
use anyhow::{Context, Result, bail};
use half::{bf16, f16};
use irc_interp::compare::{Comparison, compare_at, result_tolerances};
use irc_interp::sample::{RowPlan, gather, plan, sample_rows};
use irc_interp::{Data, Tensor, run_graph};
use irc_ir::{DType, Graph};
use irc_pipeline::CudaModule;
use irc_runtime::{Arch, Gpu, HostTensor};

#[derive(clap::Args, Debug)]
pub struct GpuArgs {
    /// The GPU architecture to compile for (`sm_90a`, `sm_80`, ...).
    #[arg(long, default_value = "sm_90a")]
    pub arch: String,
    /// Compare the GPU's results with the reference interpreter (exit 1 on a mismatch).
    #[arg(long)]
    pub check: bool,
    /// For --check on large graphs: how many rows to sample for the reference.
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub check_rows: u64,
    /// For --check: run the reference on the whole graph, however large.
    #[arg(long)]
    pub full_check: bool,
    /// The emitter whose PTX runs: `cuda` (NVRTC) or `mlir` (needs the `mlir` feature).
    #[arg(long, value_enum, default_value_t = Backend::Cuda)]
    pub backend: Backend,
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
}

/// A graph compiled for the GPU: its CUDA module (whose launch manifest runs the PTX), the PTX,
/// the architecture, the configuration each kernel was built with, and each kernel's own
/// [`irc_fused::Work`] (for the sum of the kernels' floors).
pub struct Compiled {
    pub module: CudaModule,
    pub ptx: irc_runtime::Ptx,
    pub arch: Arch,
    pub choices: Vec<irc_lower::Choice>,
    pub work: Vec<irc_fused::Work>,
}

/// The graph's PTX for `arch`: its emitted CUDA through NVRTC, or (`Backend::Mlir`) its MLIR
/// through MLIR's pipeline; the CUDA module's launch manifest runs either.
pub fn compile(
    graph: &Graph,
    arch: &str,
    backend: Backend,
    lower: irc_lower::LowerOptions,
) -> Result<Compiled> {
    let arch = Arch::parse(arch)?;
    let pipeline = irc_pipeline::Pipeline {
        backend: backend.pipeline(),
        arch: Some(arch.to_string()),
        lower,
        ..Default::default()
    };
    let a = pipeline
        .compile(graph, Default::default(), irc_pipeline::Stage::Ptx)
        .with_context(|| format!("cannot compile @{} for {arch}", graph.name))?;
    let (Some(module), Some(text), Some(planned)) = (a.cuda, a.ptx, a.planned) else {
        anyhow::bail!("the pipeline produced no PTX for @{}", graph.name);
    };
    let ptx = irc_runtime::Ptx {
        text,
        arch: arch.clone(),
        log: String::new(),
    };
    Ok(Compiled {
        module,
        ptx,
        arch,
        work: irc_fused::group_work(&planned.fused),
        choices: planned.choices,
    })
}

/// Runs `graph` (the pipeline's output) on the GPU; `--check` compares with the interpreter
/// running `reference` (the graph as written, same signature).
pub fn run(graph: &Graph, reference: &Graph, inputs: Vec<Tensor>, args: &RunArgs) -> Result<bool> {
    let lookup = args.gpu.cache.lookup(&args.input, &args.gpu.arch);
    let options = args.gpu.cache.options(args.gpu.mma_config, &lookup);
    let Compiled {
        module,
        ptx,
        arch,
        choices,
        ..
    } = compile(graph, &args.gpu.arch, args.gpu.backend, options)?;
    if args.gpu.explain {
        eprint!("{}", crate::tuning::explain(&choices, &lookup));
    }
    let gpu = Gpu::new(0)?;
    eprintln!(
        "device: {} ({} SMs), compiled for {arch}",
        gpu.info().name,
        gpu.info().sm_count
    );
    let mut program = gpu.load(&ptx, &module.manifest)?;
    let host: Vec<HostTensor> = inputs.iter().map(to_host).collect();
    let raw = program.run(&host)?;
    let outputs: Vec<Tensor> = raw
        .into_iter()
        .zip(&graph.result_types)
        .map(|(h, ty)| from_host(h, ty.dtype))
        .collect::<Result<_>>()?;
    save_and_print(&outputs, args.save_outputs.as_deref())?;
    if !args.gpu.check {
        return Ok(true);
    }
    check(reference, inputs, &outputs, &module, args)
}

/// Compares the GPU's results with the reference, on sampled rows when the graph is large.
fn check(
    graph: &Graph,
    inputs: Vec<Tensor>,
    outputs: &[Tensor],
    module: &CudaModule,
    args: &RunArgs,
) -> Result<bool> {
    let m = &module.manifest;
    let how = CheckHow {
        rows: args.gpu.check_rows,
        full: args.gpu.full_check,
        seed: args.seed,
    };
    let reference = Reference::new(graph, inputs, m.flops, m.min_bytes, how)?;
    println!("check: {}", reference.description);
    let mut ok = true;
    for (i, c) in reference.compare(outputs)?.iter().enumerate() {
        ok &= c.passed();
        println!("{}", report_line(i, c));
    }
    if !ok {
        println!("check: MISMATCH");
    }
    Ok(ok)
}

/// How to check: rows sampled for large graphs, or the whole graph.
#[derive(Clone, Copy, Debug)]
pub struct CheckHow {
    pub rows: u64,
    pub full: bool,
    pub seed: u64,
}

/// The reference interpreter's results, computed once, to compare GPU results with (on
/// sampled rows of the results when the graph is large).
pub struct Reference {
    plan: Option<(RowPlan, Vec<u64>)>,
    refs: Vec<Tensor>,
    /// Each result's tolerance (`irc_interp::compare::result_tolerances`).
    tolerances: Vec<f64>,
    /// What the reference ran on, in words.
    pub description: String,
}

impl Reference {
    pub fn new(
        graph: &Graph,
        inputs: Vec<Tensor>,
        flops: u64,
        min_bytes: u64,
        how: CheckHow,
    ) -> Result<Reference> {
        let small = flops <= SMALL_FLOPS && min_bytes <= SMALL_BYTES;
        let Some(p) = (if small || how.full { None } else { plan(graph) }) else {
            return Ok(Reference {
                plan: None,
                refs: run_graph(graph, inputs)?,
                tolerances: result_tolerances(graph),
                description: "the reference interpreter on the whole graph".into(),
            });
        };
        let afford = ((SAMPLE_BUDGET - p.cost_full) / p.cost_per_row.max(1.0)).floor();
        let k = (how.rows.max(1) as f64)
            .min(afford.max(2.0))
            .min(p.extent as f64) as u64;
        let rows = sample_rows(p.extent, k, how.seed);
        let sliced = p
            .slice_graph(graph, k)
            .map_err(|e| anyhow::anyhow!("cannot slice @{} for the check: {e}", graph.name))?;
        let sliced_inputs: Vec<Tensor> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| match p.param_axis(graph, i) {
                Some(a) => gather(t, a, &rows),
                None => Ok(t.clone()),
            })
            .collect::<Result<_, _>>()?;
        drop(inputs);
        let axes: Vec<String> = p.result_axes.iter().map(|a| a.to_string()).collect();
        let description = format!(
            "the reference interpreter on {k} sampled rows of {} (axis {} of the results; seed {})",
            p.extent,
            axes.join(", "),
            how.seed
        );
        Ok(Reference {
            refs: run_graph(&sliced, sliced_inputs)?,
            tolerances: result_tolerances(graph),
            plan: Some((p, rows)),
            description,
        })
    }

    /// Each result compared with the reference.
    pub fn compare(&self, outputs: &[Tensor]) -> Result<Vec<Comparison>> {
        let gots: Vec<Tensor> = match &self.plan {
            None => outputs.to_vec(),
            Some((p, rows)) => outputs
                .iter()
                .zip(&p.result_axes)
                .map(|(t, &a)| gather(t, a, rows))
                .collect::<Result<_, _>>()?,
        };
        gots.iter()
            .zip(&self.refs)
            .zip(&self.tolerances)
            .map(|((got, want), &tol)| Ok(compare_at(got, want, tol)?))
            .collect()
    }
}

/// Graphs under these sizes are checked whole.
const SMALL_FLOPS: u64 = 4_000_000_000;
const SMALL_BYTES: u64 = 256 << 20;
/// The sampled reference aims at about this much work (elements plus multiply-adds).
const SAMPLE_BUDGET: f64 = 4e9;

fn report_line(i: usize, c: &Comparison) -> String {
    let verdict = if c.passed() { "ok" } else { "MISMATCH" };
    let nonfinite = if c.bad_nonfinite > 0 {
        format!(
            " ({} NaN/Inf where the reference is finite)",
            c.bad_nonfinite
        )
    } else {
        String::new()
    };
    format!(
        "out{i}: rel_err={:.3e} max_abs_err={:.3e} tol={:.0e} over {} elements: {verdict}{nonfinite}",
        c.rel_err, c.max_abs_err, c.tolerance, c.count
    )
}

/// A tensor's little-endian bytes.
pub fn to_host(t: &Tensor) -> HostTensor {
    fn le<T, const N: usize>(v: &[T], f: impl Fn(&T) -> [u8; N]) -> Vec<u8> {
        v.iter().flat_map(f).collect()
    }
    let bytes = match &t.data {
        Data::F16(v) => le(v, |x| x.to_le_bytes()),
        Data::BF16(v) => le(v, |x| x.to_le_bytes()),
        Data::F32(v) => le(v, |x| x.to_le_bytes()),
        Data::F64(v) => le(v, |x| x.to_le_bytes()),
        Data::I32(v) => le(v, |x| x.to_le_bytes()),
        Data::I64(v) => le(v, |x| x.to_le_bytes()),
        Data::I1(v) => v.iter().map(|&b| u8::from(b)).collect(),
    };
    HostTensor {
        dtype: t.ty.dtype.to_string(),
        shape: t.ty.shape.clone(),
        bytes,
    }
}

/// A tensor from the GPU's bytes.
pub fn from_host(h: HostTensor, dtype: DType) -> Result<Tensor> {
    fn chunks<const N: usize, T>(b: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
        b.chunks_exact(N)
            .map(|c| f(c.try_into().expect("exact chunks")))
            .collect()
    }
    let b = &h.bytes;
    let data = match dtype {
        DType::F16 => Data::F16(chunks(b, f16::from_le_bytes)),
        DType::BF16 => Data::BF16(chunks(b, bf16::from_le_bytes)),
        DType::F32 => Data::F32(chunks(b, f32::from_le_bytes)),
        DType::F64 => Data::F64(chunks(b, f64::from_le_bytes)),
        DType::I32 => Data::I32(chunks(b, i32::from_le_bytes)),
        DType::I64 => Data::I64(chunks(b, i64::from_le_bytes)),
        DType::I1 => {
            if let Some(bad) = b.iter().find(|&&x| x > 1) {
                bail!("an i1 result holds the byte {bad:#04x} (an element no kernel wrote?)");
            }
            Data::I1(b.iter().map(|&x| x == 1).collect())
        }
    };
    let ty = irc_ir::TensorType::new(h.shape, dtype);
    Ok(Tensor::new(ty, data)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use irc_ir::TensorType;

    #[test]
    fn host_bytes_round_trip() {
        for dtype in DType::ALL {
            let t = irc_interp::random_tensor(&TensorType::new([3, 5], dtype), 1, 0);
            let h = to_host(&t);
            assert_eq!(h.bytes.len() as u64, t.ty.size_bytes());
            assert_eq!(from_host(h, dtype).unwrap(), t);
        }
        let bad = HostTensor {
            dtype: "i1".into(),
            shape: vec![1],
            bytes: vec![0xFF],
        };
        assert!(from_host(bad, DType::I1).is_err());
    }

    fn examples(dir: &str) -> Vec<(String, Graph)> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(dir);
        let mut out = Vec::new();
        for e in std::fs::read_dir(&root).unwrap().flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "ir") {
                let text = std::fs::read_to_string(&path).unwrap();
                let m = irc_frontend::parse_module(&text).unwrap();
                out.push((path.display().to_string(), m.graphs[0].clone()));
            }
        }
        assert!(out.len() >= 9, "{}", root.display());
        out
    }

    /// Every benchmark graph can be checked on sampled rows, cheaply.
    #[test]
    fn every_benchmark_graph_has_a_cheap_row_plan() {
        for (path, g) in examples("examples") {
            let p = plan(&g).unwrap_or_else(|| panic!("{path}: no row plan"));
            let k = 8;
            assert!(
                p.cost_full + k as f64 * p.cost_per_row < SAMPLE_BUDGET,
                "{path}: {p:?}"
            );
            p.slice_graph(&g, k)
                .unwrap_or_else(|e| panic!("{path}: {e}"));
        }
    }

    /// On the small graphs, the sliced reference equals the sampled rows of the full one.
    #[test]
    fn sampled_reference_equals_rows_of_the_full_reference() {
        for (path, g) in examples("examples/small") {
            let p = plan(&g).unwrap_or_else(|| panic!("{path}: no row plan"));
            let inputs: Vec<Tensor> = (0..g.params.len())
                .map(|i| irc_interp::random_tensor(g.ty(g.params[i]), 3, i as u64))
                .collect();
            let full = run_graph(&g, inputs.clone()).unwrap();
            let k = 5.min(p.extent);
            let rows = sample_rows(p.extent, k, 11);
            let small = p.slice_graph(&g, k).unwrap();
            let sliced: Vec<Tensor> = inputs
                .iter()
                .enumerate()
                .map(|(i, t)| match p.param_axis(&g, i) {
                    Some(a) => gather(t, a, &rows).unwrap(),
                    None => t.clone(),
                })
                .collect();
            let got = run_graph(&small, sliced).unwrap();
            for (i, (o, &a)) in full.iter().zip(&p.result_axes).enumerate() {
                let want = gather(o, a, &rows).unwrap();
                let c = irc_interp::compare::compare(&got[i], &want).unwrap();
                // Row slicing changes no arithmetic; matmul blocking may reorder sums.
                assert!(c.rel_err < 1e-6 && c.bad_nonfinite == 0, "{path}: {c:?}");
            }
        }
    }
}
