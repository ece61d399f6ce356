//! `irc import` and `irc run` on ONNX models (written by `scripts/onnx_models.py` into
//! `tests/onnx_models/`): a transformer block end to end against numpy, the logic ops, the
//! weights side file, bad models as clear errors with exit status 1, and the tiny GPT-2, BERT,
//! Llama and ViT exports of `scripts/export_models.py` (`tests/onnx_models/hf/`) against PyTorch.

mod common;
use common::{irc, root};
use std::path::{Path, PathBuf};
use std::process::Output;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn model(name: &str) -> String {
    root()
        .join("tests/onnx_models")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("irc-onnx-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn npy_f64(path: &Path) -> Vec<f64> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let f = npyz::NpyFile::new(&bytes[..]).unwrap();
    match f.dtype() {
        npyz::DType::Plain(t) if t.type_char() == npyz::TypeChar::Bool => f
            .into_vec::<bool>()
            .unwrap()
            .into_iter()
            .map(|b| f64::from(u8::from(b)))
            .collect(),
        npyz::DType::Plain(t) if t.size_field() == 2 => f
            .into_vec::<half::f16>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
        _ => f
            .into_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
    }
}

#[track_caller]
fn assert_close(got: &[f64], want: &[f64], rtol: f64) {
    assert_eq!(got.len(), want.len());
    let err: f64 = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f64>()
        .sqrt();
    let norm: f64 = want.iter().map(|b| b * b).sum::<f64>().sqrt();
    assert!(
        err <= rtol * norm.max(1e-30),
        "relative error {}",
        err / norm
    );
}

#[track_caller]
fn ok(o: &Output) {
    assert!(o.status.success(), "irc failed: {}", stderr(o));
}

/// Check that a pre-norm transformer block (layernorm, causal attention with Where, softmax,
/// an erf GELU MLP) imports to graph IR plus a weights file, and that `irc run` on the .ir
/// and on the .onnx both match numpy's float64 reference.
#[test]
fn transformer_block_end_to_end() {
    let d = scratch("tb");
    let ir = d.join("block.ir");
    let x = format!("x={}", model("transformer_block.x.npy"));
    let want = npy_f64(Path::new(&model("transformer_block.y.npy")));
    let o = irc(&[
        "import",
        &model("transformer_block.onnx"),
        "--dim",
        "batch=1",
        "-o",
        ir.to_str().unwrap(),
    ]);
    ok(&o);
    let text = std::fs::read_to_string(&ir).unwrap();
    assert!(
        text.starts_with("// irc-weights: block.safetensors\n"),
        "{text}"
    );
    assert!(d.join("block.safetensors").exists());
    assert!(
        text.contains("%attn.wq: tensor<32x32xf32>"),
        "weights are parameters: {text}"
    );
    assert!(
        text.contains("select"),
        "the causal mask is a select: {text}"
    );
    // The printed IR re-parses and verifies.
    ok(&irc(&[ir.to_str().unwrap()]));
    // Its v2 ops (the mask's select, the GELU's erf) lower: it compiles to CUDA, as written
    // and after -O.
    for flags in [&["--emit=cuda"][..], &["-O", "--emit=cuda"][..]] {
        let o = irc(&[flags, &[ir.to_str().unwrap()]].concat());
        ok(&o);
        assert!(String::from_utf8_lossy(&o.stdout).contains("__global__"));
    }
    let out = d.join("out_ir");
    ok(&irc(&[
        "run",
        ir.to_str().unwrap(),
        "--input",
        &x,
        "--save-outputs",
        out.to_str().unwrap(),
    ]));
    assert_close(&npy_f64(&out.join("out0.npy")), &want, 1e-5);
    let out = d.join("out_onnx");
    ok(&irc(&[
        "run",
        &model("transformer_block.onnx"),
        "--dim",
        "batch=1",
        "--input",
        &x,
        "--save-outputs",
        out.to_str().unwrap(),
    ]));
    assert_close(&npy_f64(&out.join("out0.npy")), &want, 1e-5);
    // And through the -O pipeline too (the default of `irc run`) versus --no-passes.
    let out = d.join("out_raw");
    ok(&irc(&[
        "run",
        ir.to_str().unwrap(),
        "--no-passes",
        "--input",
        &x,
        "--save-outputs",
        out.to_str().unwrap(),
    ]));
    assert_close(&npy_f64(&out.join("out0.npy")), &want, 1e-5);
}

/// Check And, Or, Xor and Not (their ONNX node tests predate opset 13) against numpy.
#[test]
fn logic_ops() {
    let d = scratch("logic");
    let (a, b) = (
        format!("a={}", model("logic.a.npy")),
        format!("b={}", model("logic.b.npy")),
    );
    ok(&irc(&[
        "run",
        &model("logic.onnx"),
        "--input",
        &a,
        "--input",
        &b,
        "--save-outputs",
        d.to_str().unwrap(),
    ]));
    for (i, name) in ["and", "or", "xor", "not"].iter().enumerate() {
        let got = npy_f64(&d.join(format!("out{i}.npy")));
        assert_eq!(
            got,
            npy_f64(Path::new(&model(&format!("logic.{name}.npy")))),
            "{name}"
        );
    }
}

/// Check that each kind of bad model is a one-line error naming the problem, exit status 1,
/// never a panic.
#[test]
fn bad_models_are_clear_errors() {
    let cases = [
        ("truncated.onnx", "not a valid ONNX model"),
        (
            "opset9.onnx",
            "ai.onnx opset 9 is not supported: irc imports opsets 13 to 28",
        ),
        (
            "unsupported_op.onnx",
            "node #1 'pick' (Det, opset 17): op 'Det' is not supported",
        ),
        (
            "dynamic_dim.onnx",
            "graph input 'x': axis 0 is the dynamic dim 'batch'; give it a size with --dim batch=N",
        ),
        (
            "external_data.onnx",
            "graph initializer 'w': external data 'weights.bin' (offset 0, to the end of the file): cannot open",
        ),
    ];
    for (file, msg) in cases {
        for cmd in ["import", "run"] {
            let o = irc(&[cmd, &model(file), "--random"][..if cmd == "run" { 3 } else { 2 }]);
            let e = stderr(&o);
            assert_eq!(o.status.code(), Some(1), "{cmd} {file}: {e}");
            assert!(e.contains(msg), "{cmd} {file}: {e}");
            assert!(!e.contains("panicked"), "{cmd} {file}: {e}");
        }
    }
    // A --dim that is no positive integer, and a missing file.
    let o = irc(&["import", &model("dynamic_dim.onnx"), "--dim", "batch=0"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("must be a positive integer"));
    let o = irc(&["import", "/nonexistent/model.onnx"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cannot read /nonexistent/model.onnx"));
}

/// Check that a model with weights needs somewhere to put them, and that --dim fixes a
/// dynamic dim.
#[test]
fn import_to_stdout() {
    let o = irc(&[
        "import",
        &model("transformer_block.onnx"),
        "--dim",
        "batch=1",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("pass -o FILE.ir"), "{}", stderr(&o));
    let o = irc(&["import", &model("dynamic_dim.onnx"), "--dim", "batch=3"]);
    ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("%x: tensor<3x4xf32>"), "{text}");
}

/// Check that the default command compiles an ONNX model as it compiles the graph IR `irc
/// import` writes for it (every stage printed the same), that `--dim` sizes its dynamic dims
/// there too, and that the options that read graph IR text say so.
#[test]
fn emit_reads_onnx_models() {
    let d = scratch("emit-onnx");
    let ir = d.join("m.ir");
    let onnx = model("transformer_block.onnx");
    ok(&irc(&[
        "import",
        &onnx,
        "--dim",
        "batch=1",
        "-o",
        ir.to_str().unwrap(),
    ]));
    for stage in ["graph", "fused", "cuda"] {
        let emit = format!("--emit={stage}");
        let from_ir = irc(&[&emit, ir.to_str().unwrap()]);
        let from_onnx = irc(&[&emit, &onnx, "--dim", "batch=1"]);
        ok(&from_ir);
        ok(&from_onnx);
        assert!(!from_onnx.stdout.is_empty());
        assert_eq!(from_ir.stdout, from_onnx.stdout, "--emit={stage}");
    }
    let o = irc(&[
        "--emit=graph",
        &model("dynamic_dim.onnx"),
        "--dim",
        "batch=3",
    ]);
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("%x: tensor<3x4xf32>"));
    let o = irc(&["--emit=graph", &model("dynamic_dim.onnx")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("give it a size with --dim batch=N"),
        "{}",
        stderr(&o)
    );
    let o = irc(&[
        "--split-input-file",
        &model("dynamic_dim.onnx"),
        "--dim",
        "batch=3",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not an ONNX model"), "{}", stderr(&o));
    let o = irc(&["--dim", "batch=3", ir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is graph IR"), "{}", stderr(&o));
}

/// Check that a flag for the other kind of input is refused, not ignored: `--dim` on graph IR
/// (static shapes), `--weights` on an ONNX model (it carries its own), in each command.
#[test]
fn flags_for_the_other_input_kind_are_refused() {
    let d = scratch("flags");
    let ir = d.join("m.ir");
    let onnx = model("dynamic_dim.onnx");
    ok(&irc(&[
        "import",
        &onnx,
        "--dim",
        "batch=2",
        "-o",
        ir.to_str().unwrap(),
    ]));
    let ir = ir.to_str().unwrap();
    for args in [
        vec!["run", ir, "--random", "--dim", "batch=2"],
        vec!["tune", "--list", ir, "--dim", "batch=2"],
        vec!["--emit=fused", ir, "--dim", "batch=2"],
    ] {
        let o = irc(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&o).contains("is graph IR"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    let o = irc(&[
        "run",
        &onnx,
        "--dim",
        "batch=2",
        "--random",
        "--weights",
        "w.safetensors",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("carries its own"), "{}", stderr(&o));
}

/// Check that the GPU lowering computes a gather where it is read: the index is loaded,
/// wrapped, and clamped for the address (an out-of-range index gives NaN, never a read out of
/// bounds).
#[test]
fn emit_cuda_lowers_v2_ops() {
    let d = scratch("emit");
    let f = d.join("g.ir");
    std::fs::write(
        &f,
        "graph @g(%x: tensor<4x6xf32>, %i: tensor<3xi64>) -> tensor<4x3xf32> {\n  %y = gather %x, %i {axis = 1}\n  %z = exp %y\n  return %z\n}\n",
    )
    .unwrap();
    let o = irc(&["--emit=layout", f.to_str().unwrap()]);
    ok(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(text.matches("kernel @").count(), 1, "{text}");
    assert!(
        text.contains("idx(select(") && text.contains("f32(nan)"),
        "{text}"
    );
    ok(&irc(&["--emit=cuda", f.to_str().unwrap()]));
}

/// Check that the six architectures of `scripts/export_models.py --size tiny` (GPT-2, BERT,
/// RoBERTa (position ids by CumSum) and Llama from transformers with a padded attention mask,
/// timm's ViT with its Conv patch embedding, timm's ResNet-D with its max pool, ceil-mode average pools and padded strided
/// convolutions; PyTorch 2.11's TorchScript exporter), Llama and BERT with PyTorch's SDPA
/// attention through the dynamo exporter at opset 23 (ONNX's `Attention` op; PyTorch 2.15), in
/// f32 and (Llama) f16, import (graph IR plus weights), run on the interpreter within 1e-5 of
/// PyTorch eager's float32 output (2e-2 for the f16 export, which PyTorch computes in f16),
/// and compile to CUDA; and the
/// small CNN of `scripts/cnn_fixture.py` (strided and padded convolutions, max, average and Lp
/// pools with `ceil_mode`, reflect and edge pads, a group norm) within 1e-5 of ONNX's own
/// reference evaluator.
#[test]
fn exported_models_match_pytorch() {
    let d = scratch("hf");
    let models = [
        "gpt2",
        "bert",
        "roberta",
        "llama",
        "vit",
        "resnet",
        "cnn",
        "llama_sdpa",
        "bert_sdpa",
        "llama_f16_sdpa",
    ];
    for name in models {
        let stem = match name {
            "cnn" => "cnn".to_string(),
            "llama_sdpa" => "hf/llama_tiny_sdpa_dyn23".into(),
            "bert_sdpa" => "hf/bert_tiny_sdpa_dyn23".into(),
            "llama_f16_sdpa" => "hf/llama_tiny_f16_sdpa_dyn23".into(),
            _ => format!("hf/{name}_tiny"),
        };
        let onnx = model(&format!("{stem}.onnx"));
        let inputs: &[&str] = if matches!(name, "vit" | "resnet" | "cnn") {
            &["x"]
        } else {
            &["input_ids", "attention_mask"]
        };
        let ir = d.join(format!("{name}.ir"));
        let ir = ir.to_str().unwrap();
        ok(&irc(&["import", &onnx, "-o", ir]));
        let mut args: Vec<String> = vec!["run".into(), ir.into()];
        for i in inputs {
            args.push("--input".into());
            args.push(format!("{i}={}", model(&format!("{stem}.{i}.npy"))));
        }
        let out = d.join(name);
        args.push("--save-outputs".into());
        args.push(out.to_string_lossy().into_owned());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        ok(&irc(&refs));
        let want = npy_f64(Path::new(&model(&format!("{stem}.out0.npy"))));
        // PyTorch computes the f16 export in f16 on the CPU, irc in f32 rounded per op.
        let rtol = if name.contains("f16") { 2e-2 } else { 1e-5 };
        assert_close(&npy_f64(&out.join("out0.npy")), &want, rtol);
        let o = irc(&["--emit=cuda", ir]);
        ok(&o);
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("__global__"),
            "{name}"
        );
    }
}
