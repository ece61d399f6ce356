//! Whole models through the kernels: the transformer exports of `scripts/export_models.py`
//! (`tests/onnx_models/hf/*_tiny.onnx`: GPT-2, BERT, RoBERTa, Llama and ViT with one layer, a ResNet-D
//! with one block a stage) and the
//! small CNN of `scripts/cnn_fixture.py` (`tests/onnx_models/cnn.onnx`: convolutions, pools,
//! pads, a group norm) lowered to kernels and run by the kernel-IR emulator on their exported
//! inputs and weights (the transformers also made bf16), against the reference interpreter;
//! and, on these models and the
//! whole corpus, the rule that a kernel
//! never reads a buffer it writes (its own workspace aside): a read can come before the write,
//! in another thread or block, with nothing ordering them.

#[path = "emulate.rs"]
mod emulate;

use irc_interp::tensor::{Data, Tensor};
use std::path::Path;

/// The transformers (`*_sdpa`: exported by the dynamo exporter at opset 23 with PyTorch's
/// SDPA attention, which is ONNX's `Attention` op); [`all`] adds the CNNs and the f16 export.
const MODELS: [&str; 7] = [
    "gpt2",
    "bert",
    "roberta",
    "llama",
    "vit",
    "llama_sdpa",
    "bert_sdpa",
];
/// The models of the other tests beside [`MODELS`].
const OTHERS: [&str; 3] = ["llama_f16_sdpa", "resnet", "cnn"];

/// Every committed model.
fn all() -> Vec<&'static str> {
    MODELS.iter().chain(&OTHERS).copied().collect()
}

/// The path of a model's files without the extension (`<stem>.onnx`, `<stem>.<input>.npy`).
fn stem(name: &str) -> String {
    match name {
        "cnn" => "tests/onnx_models/cnn".into(),
        _ => match name.strip_suffix("_sdpa") {
            // `llama_f16_sdpa`: llama_tiny_f16_sdpa_dyn23.
            Some(base) => {
                let (model, dtype) = base.split_once('_').map_or((base, ""), |(m, d)| (m, d));
                let dtype = if dtype.is_empty() {
                    String::new()
                } else {
                    format!("_{dtype}")
                };
                format!("tests/onnx_models/hf/{model}_tiny{dtype}_sdpa_dyn23")
            }
            None => format!("tests/onnx_models/hf/{name}_tiny"),
        },
    }
}

fn import(name: &str) -> irc_onnx::Imported {
    let path = irc_tests::root().join(format!("{}.onnx", stem(name)));
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
        let path = irc_tests::root().join(format!("{}.{param}.npy", stem(name)));
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
    for name in all() {
        let (g, inputs) = model(name);
        let k = irc_lower::plan_and_lower(&g, Default::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .kernels;
        emulate::assert_agree(emulate::against_interpreter_on(&g, &k, inputs), name);
    }
}

#[test]
fn no_kernel_reads_a_buffer_it_writes() {
    let hopper = irc_lower::LowerOptions {
        wgmma: true,
        ..Default::default()
    };
    let mut graphs: Vec<(String, irc_ir::Graph)> = all()
        .into_iter()
        .map(|n| (n.to_string(), model(n).0))
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
            // A corpus graph may need a GPU's own template (an error here); a model lowers.
            let lowered = match irc_lower::plan_and_lower_with(g, Default::default(), options) {
                Ok(l) => l,
                Err(e) if all().contains(&name.as_str()) => panic!("{name}: {e}"),
                Err(_) => continue,
            };
            let bad = irc_tests::reads_of_own_writes(&lowered.kernels);
            assert!(bad.is_empty(), "{name}: {bad:?}");
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} lowerings checked");
}

/// The transformers with every f32 type made bf16 (their masks' `finfo(f32).min` made bf16's):
/// their attention then runs fused, with the models' own masks in its prologue (f32 attention
/// is not fused), and the kernels compute what the interpreter does on the exported inputs and
/// weights (made bf16) — the decoders' first two query rows masked whole (causal, padding).
#[test]
fn the_models_in_bf16_run_fused_attention_as_interpreted() {
    for name in MODELS {
        let (g, inputs) = model(name);
        let m = irc_ir::Module { graphs: vec![g] };
        let text = irc_ir::print_module(&m)
            .replace("xf32>", "xbf16>")
            .replace("tensor<f32>", "tensor<bf16>")
            .replace("{dtype = f32}", "{dtype = bf16}")
            .replace("-3.4028234663852886e38", "-3.3895313892515355e38");
        let m = irc_frontend::parse_module(&text).unwrap();
        let g = &m.graphs[0];
        let k = irc_lower::plan_and_lower(g, Default::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .kernels;
        let fused = k.kernels.iter().filter(|k| k.name.ends_with("attention"));
        assert_eq!(fused.count(), 1, "{name}: one fused attention kernel");
        let inputs = inputs
            .into_iter()
            .zip(&g.params)
            .map(|(t, &p)| {
                let ty = g.ty(p).clone();
                match ty.dtype {
                    irc_ir::DType::BF16 => {
                        let data = Data::from_f64(ty.dtype, t.data.to_f64());
                        Tensor::new(ty, data).unwrap()
                    }
                    _ => t,
                }
            })
            .collect();
        emulate::assert_agree(emulate::against_interpreter_on(g, &k, inputs), name);
    }
}
