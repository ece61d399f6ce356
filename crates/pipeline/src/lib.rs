//! The pipeline: one table of stages from a graph to PTX, used by the driver, the tests, the
//! benches and the fuzz targets.
//!
//! | stage | what it produces |
//! |---|---|
//! | `graph` | the graph IR after decomposition (if asked) and the pass pipeline (if any) |
//! | `fused` | the Fused IR: the planner's kernel groups ([`irc_lower::plan_and_lower`]) |
//! | `layout` | the kernel IR lowered from them |
//! | `cuda` | CUDA C++ and its launch manifest |
//! | `mlir` | the MLIR module (the `mlir` feature) |
//! | `ptx` | PTX: NVRTC's of the CUDA, or the MLIR pipeline's (`Backend::Mlir`) |
//!
//! [`STAGES`] is that table; `irc --emit=` offers exactly its names. [`Pipeline::run`] runs the
//! stages up to the one asked for, each once (the MLIR backend reuses the kernel IR the CUDA
//! backend's manifest was derived from).
//!
//! API Boundary: no IO besides what NVRTC and the MLIR pipeline do; the pass snapshots go to a
//! callback.

use irc_ir::Graph;
use irc_lower::Planned;
use irc_passes::manager::{PassManager, PassRecord, When};
use std::time::{Duration, Instant};

pub use irc_emit_cuda::CudaModule;
pub use irc_lower::SourceInfo;

/// A stage of the pipeline.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    Graph,
    Fused,
    Layout,
    Cuda,
    Mlir,
    Ptx,
}

/// One row of the stage table.
#[derive(Copy, Clone, Debug)]
pub struct StageInfo {
    pub stage: Stage,
    /// The name `--emit=` takes.
    pub name: &'static str,
    pub summary: &'static str,
}

/// The stages, in order.
pub const STAGES: &[StageInfo] = &[
    StageInfo {
        stage: Stage::Graph,
        name: "graph",
        summary: "The graph IR, canonically printed (after --decompose and the pass pipeline)",
    },
    StageInfo {
        stage: Stage::Fused,
        name: "fused",
        summary: "The Fused IR: one group per kernel (anchor, prologue, epilogue tree, loads and stores)",
    },
    StageInfo {
        stage: Stage::Layout,
        name: "layout",
        summary: "The kernel IR (layout level): kernels, their tensors' CuTe layouts, loops and launches",
    },
    StageInfo {
        stage: Stage::Cuda,
        name: "cuda",
        summary: "CUDA C++: one self-contained file per graph, with its launch manifest embedded",
    },
    StageInfo {
        stage: Stage::Mlir,
        name: "mlir",
        summary: "MLIR: a verified gpu.container_module (needs the `mlir` feature)",
    },
    StageInfo {
        stage: Stage::Ptx,
        name: "ptx",
        summary: "PTX: the CUDA C++ through NVRTC, or with --backend=mlir the MLIR pipeline's",
    },
];

impl Stage {
    pub fn info(self) -> &'static StageInfo {
        STAGES
            .iter()
            .find(|s| s.stage == self)
            .unwrap_or(&STAGES[0])
    }

    pub fn from_name(name: &str) -> Option<Stage> {
        STAGES.iter().find(|s| s.name == name).map(|s| s.stage)
    }
}

/// The emitter PTX comes from.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// CUDA C++ compiled by NVRTC.
    #[default]
    Cuda,
    /// MLIR lowered in-process to PTX (the `mlir` feature).
    Mlir,
}

/// Why the pipeline stopped.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("{0}")]
    Decompose(String),
    #[error(transparent)]
    Passes(#[from] irc_passes::registry::PassError),
    #[error(transparent)]
    Lower(#[from] irc_lower::LowerError),
    #[error("{0}")]
    Mlir(String),
    #[error(transparent)]
    Runtime(#[from] irc_runtime::RuntimeError),
    #[error(
        "irc was built without the `mlir` feature, so `--emit=mlir` and `--backend=mlir` are not \
         available; rebuild with `cargo build --release --features mlir` (the README's \"MLIR \
         backend\" section lists the LLVM/MLIR 22 packages it needs)"
    )]
    NoMlir,
}

/// What the stages produced, up to the one asked for.
#[derive(Clone, Debug)]
pub struct Artifacts {
    /// The graph after the `graph` stage.
    pub graph: Graph,
    /// Each pass's record (timing, statistics).
    pub records: Vec<PassRecord>,
    pub planned: Option<Planned>,
    pub cuda: Option<CudaModule>,
    pub mlir: Option<String>,
    pub ptx: Option<String>,
    /// The time of each step that ran, in order (`decompose`, `passes`, `plan`, `lower`,
    /// `emit-cuda`, `emit-mlir`, `ptx`).
    pub times: Vec<(&'static str, Duration)>,
}

/// How to compile.
#[derive(Default)]
pub struct Pipeline {
    /// Decompose softmax, log_softmax, rmsnorm and layernorm into primitives first.
    pub decompose: bool,
    /// The graph-level passes, if any.
    pub passes: Option<PassManager>,
    pub backend: Backend,
    /// The GPU PTX is compiled for (`sm_90a` by default).
    pub arch: Option<String>,
    /// Choices the kernel templates take as data (`None` fields: their heuristics).
    pub lower: irc_lower::LowerOptions,
}

impl Pipeline {
    /// The templates' options for this arch: the Hopper templates on sm_90a (both backends
    /// emit their statements), and the arch's target (`Target::for_arch`: its shared-memory
    /// limit sizes the tiles) when an arch is given.
    pub fn lower_options(&self) -> irc_lower::LowerOptions {
        let arch = self.arch.as_deref().unwrap_or("sm_90a");
        let mut o = irc_lower::LowerOptions {
            wgmma: arch == "sm_90a",
            ..self.lower.clone()
        };
        if self.arch.is_some() {
            o.target = irc_target::Target::for_arch(arch);
        }
        o
    }

    /// Whether this build can run `stage` with this backend.
    pub fn available(&self, stage: Stage) -> Result<(), PipelineError> {
        let mlir = stage == Stage::Mlir || (stage == Stage::Ptx && self.backend == Backend::Mlir);
        if mlir && !cfg!(feature = "mlir") {
            return Err(PipelineError::NoMlir);
        }
        Ok(())
    }

    /// Runs the stages up to `until` on a verified graph; pass snapshots go to `snapshot`.
    pub fn run(
        &self,
        g: &Graph,
        src: SourceInfo<'_>,
        until: Stage,
        snapshot: &mut dyn FnMut(When, &str, &Graph),
    ) -> Result<Artifacts, PipelineError> {
        self.available(until)?;
        let mut times = vec![];
        let mut clock = Instant::now();
        let mut lap = |name: &'static str, times: &mut Vec<(&'static str, Duration)>| {
            let now = Instant::now();
            times.push((name, now - clock));
            clock = now;
        };
        let mut graph = if self.decompose {
            let d = irc_ir::decompose_graph(g).map_err(|e| PipelineError::Decompose(e.message))?;
            lap("decompose", &mut times);
            d
        } else {
            g.clone()
        };
        let mut records = vec![];
        if let Some(pm) = &self.passes {
            let out = pm.run_with(&graph, snapshot)?;
            graph = out.graph;
            records = out.records;
            lap("passes", &mut times);
        }
        let mut a = Artifacts {
            graph,
            records,
            planned: None,
            cuda: None,
            mlir: None,
            ptx: None,
            times: vec![],
        };
        if until == Stage::Graph {
            a.times = times;
            return Ok(a);
        }
        let planned = irc_lower::plan_and_lower_with(&a.graph, src, &self.lower_options())?;
        lap("plan and lower", &mut times);
        times.pop();
        times.push(("plan", planned.plan_time));
        times.push(("lower", planned.lower_time));
        if until >= Stage::Cuda && until != Stage::Mlir {
            a.cuda = Some(irc_emit_cuda::emit_with_twins(
                &planned.kernels,
                &planned.twins,
            ));
            lap("emit-cuda", &mut times);
        }
        if until == Stage::Mlir || (until == Stage::Ptx && self.backend == Backend::Mlir) {
            a.mlir = Some(mlir::emit(&planned.kernels)?);
            lap("emit-mlir", &mut times);
        }
        if until == Stage::Ptx {
            let arch = irc_runtime::Arch::parse(self.arch.as_deref().unwrap_or("sm_90a"))?;
            a.ptx = Some(match self.backend {
                Backend::Cuda => {
                    let cuda = a.cuda.as_ref().map_or("", |c| c.source.as_str());
                    irc_runtime::nvrtc::compile(cuda, &format!("{}.cu", a.graph.name), &arch)?.text
                }
                Backend::Mlir => mlir::ptx(&planned.kernels, &arch.to_string())?,
            });
            lap("ptx", &mut times);
        }
        a.planned = Some(planned);
        a.times = times;
        Ok(a)
    }

    /// [`Pipeline::run`] with pass snapshots dropped.
    pub fn compile(
        &self,
        g: &Graph,
        src: SourceInfo<'_>,
        until: Stage,
    ) -> Result<Artifacts, PipelineError> {
        self.run(g, src, until, &mut |_, _, _| {})
    }
}

/// CUDA C++ and NVRTC's PTX for `arch` of a kernel IR module built by lowering (or a part of
/// one: `irc tune` compiles the kernels of the one problem it measures).
pub fn cuda_and_ptx(
    kernels: &irc_kir::Module,
    arch: &str,
) -> Result<(CudaModule, String), PipelineError> {
    let arch = irc_runtime::Arch::parse(arch)?;
    let cuda = irc_emit_cuda::emit(kernels);
    let ptx = irc_runtime::nvrtc::compile(&cuda.source, &format!("{}.cu", kernels.name), &arch)?;
    Ok((cuda, ptx.text))
}

impl Artifacts {
    /// [`Artifacts::text`], moving the text out where it is already one (CUDA, MLIR, PTX: a
    /// large graph's CUDA is hundreds of megabytes, not to be copied); it is left empty here.
    pub fn take_text(&mut self, stage: Stage, explain: bool) -> String {
        match stage {
            Stage::Cuda => self
                .cuda
                .as_mut()
                .map_or(String::new(), |c| std::mem::take(&mut c.source)),
            Stage::Mlir => self.mlir.take().unwrap_or_default(),
            Stage::Ptx => self.ptx.take().unwrap_or_default(),
            _ => self.text(stage, explain),
        }
    }

    /// The printed form of `stage` (which must have run); `explain` adds the planner's remarks
    /// to the Fused IR.
    pub fn text(&self, stage: Stage, explain: bool) -> String {
        match stage {
            Stage::Graph => irc_ir::print_graph(&self.graph),
            Stage::Fused => self.planned.as_ref().map_or(String::new(), |p| {
                let remarks: &[irc_fused::Remark] = if explain { &p.remarks } else { &[] };
                irc_fused::print_with_remarks(&p.fused, remarks)
            }),
            Stage::Layout => self
                .planned
                .as_ref()
                .map_or(String::new(), |p| irc_kir::print_module(&p.kernels)),
            Stage::Cuda => self
                .cuda
                .as_ref()
                .map_or(String::new(), |c| c.source.clone()),
            Stage::Mlir => self.mlir.clone().unwrap_or_default(),
            Stage::Ptx => self.ptx.clone().unwrap_or_default(),
        }
    }
}

#[cfg(feature = "mlir")]
mod mlir {
    use super::PipelineError;

    pub fn emit(m: &irc_kir::Module) -> Result<String, PipelineError> {
        irc_emit_mlir::emit_mlir(m).map_err(|e| PipelineError::Mlir(e.to_string()))
    }

    /// The PTX pipeline's options: libdevice from `irc_emit_mlir::find_cuda_toolkit`, else
    /// beside the `ptxas` the runtime finds (a CUDA install or the `nvidia-cuda-nvcc` wheel).
    pub fn ptx(m: &irc_kir::Module, arch: &str) -> Result<String, PipelineError> {
        use std::path::Path;
        let mut opts = irc_emit_mlir::PtxOptions::new(arch);
        if opts.toolkit.is_none() {
            opts.toolkit = irc_runtime::toolkit::find_ptxas().ok().and_then(|ptxas| {
                let root = ptxas.parent().and_then(Path::parent)?;
                root.join("nvvm/libdevice/libdevice.10.bc")
                    .is_file()
                    .then(|| root.to_path_buf())
            });
        }
        irc_emit_mlir::compile_to_ptx_with(m, &opts).map_err(|e| PipelineError::Mlir(e.to_string()))
    }
}

#[cfg(not(feature = "mlir"))]
mod mlir {
    use super::PipelineError;

    pub fn emit(_: &irc_kir::Module) -> Result<String, PipelineError> {
        Err(PipelineError::NoMlir)
    }

    pub fn ptx(_: &irc_kir::Module, _: &str) -> Result<String, PipelineError> {
        Err(PipelineError::NoMlir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_has_one_row_in_order() {
        let stages: Vec<Stage> = STAGES.iter().map(|s| s.stage).collect();
        let mut sorted = stages.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(stages, sorted);
        for s in STAGES {
            assert_eq!(Stage::from_name(s.name), Some(s.stage));
            assert_eq!(s.stage.info().name, s.name);
        }
    }

    #[test]
    fn stages_run_up_to_the_one_asked_for() {
        let text = "graph @g(%x: tensor<4x8xf16>, %w: tensor<8x16xf16>) -> tensor<4x16xf16> {\n  %y = matmul %x, %w\n  %r = relu %y\n  return %r\n}\n";
        let g = &irc_frontend::parse_module(text).unwrap().graphs[0];
        let p = Pipeline::default();
        let a = p.compile(g, SourceInfo::default(), Stage::Graph).unwrap();
        assert!(a.planned.is_none());
        let a = p.compile(g, SourceInfo::default(), Stage::Cuda).unwrap();
        assert_eq!(a.planned.as_ref().unwrap().fused.groups.len(), 1);
        assert!(a.text(Stage::Cuda, false).contains("extern \"C\""));
        assert!(a.text(Stage::Fused, true).contains("// remark:"));
        if !cfg!(feature = "mlir") {
            assert!(matches!(
                p.compile(g, SourceInfo::default(), Stage::Mlir),
                Err(PipelineError::NoMlir)
            ));
        }
    }
}
