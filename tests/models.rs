//! Whole models through the kernels: the transformer exports of `scripts/export_models.py`
//! (`tests/onnx_models/hf/*_tiny.onnx`: GPT-2, BERT, Llama and ViT with one layer) lowered to
//! kernels and run by the kernel-IR emulator on their exported inputs and weights, against the
//! reference interpreter; and, on these models and the whole corpus, the rule that a kernel
//! never reads a buffer it writes (its own workspace aside): a read can come before the write,
//! in another thread or block, with nothing ordering them.

#[path = "emulate.rs"]
mod emulate;

use irc_interp::tensor::{Data, Tensor};
use irc_kir::{Expr, Module, Space, Stmt};
use std::collections::{HashMap, HashSet};
use std::path::Path;

const MODELS: [&str; 4] = ["gpt2", "bert", "llama", "vit"];

fn import(name: &str) -> irc_onnx::Imported {
    let path = irc_tests::root().join(format!("tests/onnx_models/hf/{name}_tiny.onnx"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    irc_onnx::import_model(&bytes, &Default::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A `.npy` input of the export as a tensor of the parameter's type.
fn npy(path: &Path, ty: &irc_ir::TensorType) -> Tensor {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let f = npyz::NpyFile::new(&bytes[..]).unwrap();
    let data = match ty.dtype {
        irc_ir::DType::I64 | irc_ir::DType::I32 => {
            Data::from_i64(ty.dtype, f.into_vec::<i64>().unwrap())
        }
        d => Data::from_f64(
            d,
            f.into_vec::<f32>()
                .unwrap()
                .into_iter()
                .map(f64::from)
                .collect(),
        ),
    };
    Tensor::new(ty.clone(), data).unwrap()
}

/// The model's graph after the default pipeline (as `irc run` has it) and its parameters'
/// values: the export's inputs, then the weights.
fn model(name: &str) -> (irc_ir::Graph, Vec<Tensor>) {
    let imported = import(name);
    let g = &imported.graph;
    let mut inputs = vec![];
    for &p in &g.params[..imported.num_inputs()] {
        let param = g.values[p.index()].name.clone().unwrap_or_default();
        let path = irc_tests::root().join(format!("tests/onnx_models/hf/{name}_tiny.{param}.npy"));
        inputs.push(npy(&path, g.ty(p)));
    }
    inputs.extend(imported.weights.iter().map(|(_, t)| t.clone()));
    let g = irc_passes::manager::PassManager::default_pipeline()
        .run(g)
        .expect("-O runs")
        .graph;
    (g, inputs)
}

#[test]
fn the_exported_models_kernels_compute_what_the_interpreter_does() {
    for name in MODELS {
        let (g, inputs) = model(name);
        let k = irc_lower::plan_and_lower(&g, Default::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .kernels;
        for (i, (got, want)) in emulate::against_interpreter_on(&g, &k, inputs)
            .into_iter()
            .enumerate()
        {
            let cmp = irc_interp::compare::compare(&got, &want).unwrap();
            assert!(cmp.passed(), "{name} result {i}: {cmp:?}");
        }
    }
}

/// The global tensors an expression loads from.
fn loads<'a>(e: &'a Expr, out: &mut HashSet<&'a str>) {
    match e {
        Expr::Load { tensor, coord } => {
            out.insert(tensor);
            coord.iter().for_each(|c| loads(c, out));
        }
        Expr::Idx(_, a, b) => {
            loads(a, out);
            loads(b, out);
        }
        Expr::Call(_, args) => args.iter().for_each(|a| loads(a, out)),
        _ => {}
    }
}

/// The tensors a kernel body reads: loads anywhere, copy sources, intrinsic operands read.
fn read_tensors(body: &[Stmt]) -> HashSet<&str> {
    let mut out = HashSet::new();
    irc_kir::walk(body, &mut |s| match s {
        Stmt::Let { value, .. } | Stmt::Assign { value, .. } => loads(value, &mut out),
        Stmt::Var { init, .. } => loads(init, &mut out),
        Stmt::Store { coord, value, .. } => {
            loads(value, &mut out);
            coord.iter().for_each(|c| loads(c, &mut out));
        }
        Stmt::For {
            start, end, step, ..
        } => [start, end, step]
            .into_iter()
            .for_each(|e| loads(e, &mut out)),
        Stmt::If { cond, .. } => loads(cond, &mut out),
        Stmt::Copy { src, .. } => {
            out.insert(&src.tensor);
        }
        Stmt::BlockReduce { value, .. } | Stmt::WarpReduce { value, .. } => loads(value, &mut out),
        Stmt::Intrinsic { op, args } => {
            for ((_, kind), arg) in op.info().args.iter().zip(args) {
                match arg {
                    irc_kir::Arg::Frag(f) if !kind.writes() => {
                        out.insert(&f.tensor);
                    }
                    irc_kir::Arg::Expr(e) => loads(e, &mut out),
                    _ => {}
                }
            }
        }
        Stmt::Sync => {}
    });
    out
}

/// Each kernel of `k` that reads a buffer it writes, with the buffer, unless the buffer is the
/// kernel's own workspace (a temp no other launch touches: split reductions' partials).
fn reads_of_own_writes(k: &Module) -> Vec<String> {
    let mut users: HashMap<&str, usize> = HashMap::new();
    for l in &k.launches {
        for a in l.args.iter().collect::<HashSet<_>>() {
            *users.entry(a.as_str()).or_default() += 1;
        }
    }
    let mut bad = vec![];
    for l in &k.launches {
        let kernel = k.kernels.iter().find(|x| x.name == l.kernel).unwrap();
        let buffer_of = |t: &str| -> Option<&str> {
            let decl = kernel.tensors.iter().find(|d| d.name == t)?;
            match &decl.space {
                Space::Global(p) => {
                    let i = kernel.params.iter().position(|x| &x.name == p)?;
                    Some(l.args[i].as_str())
                }
                _ => None,
            }
        };
        let written: HashSet<&str> = irc_kir::written_tensors(&kernel.body)
            .into_iter()
            .filter_map(buffer_of)
            .collect();
        for b in read_tensors(&kernel.body).into_iter().filter_map(buffer_of) {
            let decl = k.buffers.iter().find(|d| d.name == b).unwrap();
            let workspace = users[b] == 1
                && matches!(
                    decl.kind,
                    irc_kir::BufferKind::Temp | irc_kir::BufferKind::Zeroed
                );
            if written.contains(b) && !workspace {
                bad.push(format!("@{} reads {b}, which it writes", l.kernel));
            }
        }
    }
    bad
}

#[test]
fn no_kernel_reads_a_buffer_it_writes() {
    let hopper = irc_lower::LowerOptions {
        wgmma: true,
        ..Default::default()
    };
    let mut graphs: Vec<(String, irc_ir::Graph)> = MODELS
        .iter()
        .map(|&n| (n.to_string(), model(n).0))
        .collect();
    for path in irc_tests::corpus() {
        let text = std::fs::read_to_string(&path).unwrap();
        let m = irc_frontend::parse_module(&text).unwrap();
        graphs.extend(
            m.graphs
                .into_iter()
                .map(|g| (path.display().to_string(), g)),
        );
    }
    let mut checked = 0;
    for (name, g) in &graphs {
        for options in [&Default::default(), &hopper] {
            let Ok(lowered) = irc_lower::plan_and_lower_with(g, Default::default(), options) else {
                continue;
            };
            let bad = reads_of_own_writes(&lowered.kernels);
            assert!(bad.is_empty(), "{name}: {bad:?}");
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} lowerings checked");
}
