//! ONNX models whose weights lie in external data files (as PyTorch saves models over 2 GB):
//! `irc import` and `irc run` read them from the model's directory and give the same graph,
//! weights and results as the self-contained model; a missing file, a range past its end and
//! a location outside the model's directory are errors naming the initializer and the file,
//! exit status 1.

mod common;
use common::{irc, root};
use irc_onnx::proto::{ModelProto, StringStringEntryProto};
use prost::Message;
use std::path::{Path, PathBuf};
use std::process::Output;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("irc-onnx-ext-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn block() -> PathBuf {
    root().join("tests/onnx_models/transformer_block.onnx")
}

/// The transformer block with every initializer of 64 bytes or more moved into `location`
/// (relative to the model), 16-byte aligned, the small ones left inline. Returns the model's
/// bytes, the data file's bytes and the moved initializers' names.
fn externalized(location: &str) -> (Vec<u8>, Vec<u8>, Vec<String>) {
    let mut m = ModelProto::decode(&std::fs::read(block()).unwrap()[..]).unwrap();
    let g = m.graph.as_mut().unwrap();
    let mut data = Vec::new();
    let mut moved = Vec::new();
    for t in &mut g.initializer {
        if t.raw_data.len() < 64 {
            continue;
        }
        data.resize(data.len().next_multiple_of(16), 0xAB);
        let entry = |k: &str, v: String| StringStringEntryProto {
            key: k.into(),
            value: v,
        };
        t.external_data = vec![
            entry("location", location.into()),
            entry("offset", data.len().to_string()),
            entry("length", t.raw_data.len().to_string()),
        ];
        t.data_location = 1;
        data.append(&mut t.raw_data);
        moved.push(t.name.clone());
    }
    (m.encode_to_vec(), data, moved)
}

/// Writes the model as `dir/model.onnx` and its data as `dir/data/block.bin`.
fn write(dir: &Path, location: &str) -> (PathBuf, Vec<String>) {
    let (model, data, moved) = externalized(location);
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("data/block.bin"), data).unwrap();
    let p = dir.join("model.onnx");
    std::fs::write(&p, model).unwrap();
    (p, moved)
}

/// The IR text after the header lines (which name the files).
fn body(ir: &Path) -> String {
    let text = std::fs::read_to_string(ir).unwrap();
    text.lines()
        .skip_while(|l| l.starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn external_weights_import_and_run_as_inline_ones() {
    let d = scratch("same");
    let (model, moved) = write(&d, "data/block.bin");
    assert!(moved.len() >= 4, "the block's weights move out: {moved:?}");
    let size = std::fs::metadata(&model).unwrap().len();
    assert!(
        size * 4 < std::fs::metadata(block()).unwrap().len(),
        "the weights are out of the model ({size} bytes)"
    );
    for (src, out) in [(model.clone(), "ext"), (block(), "inline")] {
        let o = irc(&[
            "import",
            src.to_str().unwrap(),
            "--dim",
            "batch=1",
            "-o",
            d.join(format!("{out}.ir")).to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    assert_eq!(body(&d.join("ext.ir")), body(&d.join("inline.ir")));
    assert!(
        body(&d.join("ext.ir")).contains("%attn.wq: tensor<32x32xf32>"),
        "weights are parameters, not text"
    );
    assert_eq!(
        std::fs::read(d.join("ext.safetensors")).unwrap(),
        std::fs::read(d.join("inline.safetensors")).unwrap()
    );
    // `irc run` straight from the .onnx file, from another working directory: the data is
    // found beside the model, not beside the caller.
    let x = root().join("tests/onnx_models/transformer_block.x.npy");
    for (src, out) in [(model, "out_ext"), (block(), "out_inline")] {
        let o = irc(&[
            "run",
            src.to_str().unwrap(),
            "--dim",
            "batch=1",
            "--input",
            &format!("x={}", x.display()),
            "--save-outputs",
            d.join(out).to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    assert_eq!(
        std::fs::read(d.join("out_ext/out0.npy")).unwrap(),
        std::fs::read(d.join("out_inline/out0.npy")).unwrap()
    );
}

#[track_caller]
fn fails(model: &Path, wants: &[&str]) {
    for cmd in ["import", "run"] {
        let mut args = vec![cmd, model.to_str().unwrap(), "--dim", "batch=1"];
        if cmd == "run" {
            args.push("--random");
        }
        let o = irc(&args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{cmd}: {e}");
        assert!(!e.contains("panicked"), "{cmd}: {e}");
        for w in wants {
            assert!(e.contains(w), "{cmd}: wanted '{w}' in: {e}");
        }
    }
}

#[test]
fn bad_external_data_is_a_clear_error() {
    // The data file is missing.
    let d = scratch("missing");
    let (model, moved) = write(&d, "data/block.bin");
    std::fs::remove_file(d.join("data/block.bin")).unwrap();
    let first = format!("graph initializer '{}'", moved[0]);
    fails(
        &model,
        &[&first, "external data 'data/block.bin'", "cannot open"],
    );
    // The file is shorter than the ranges it should hold.
    let d = scratch("short");
    let (model, _) = write(&d, "data/block.bin");
    let data = std::fs::read(d.join("data/block.bin")).unwrap();
    std::fs::write(d.join("data/block.bin"), &data[..data.len() / 2]).unwrap();
    fails(
        &model,
        &["graph initializer '", "runs past the end of", "block.bin"],
    );
    // Locations that leave the model's directory are refused, even when the file exists.
    let d = scratch("escape");
    let inner = d.join("inner");
    std::fs::create_dir_all(&inner).unwrap();
    let (model, data, _) = externalized("../data/block.bin");
    std::fs::create_dir_all(d.join("data")).unwrap();
    std::fs::write(d.join("data/block.bin"), &data).unwrap();
    std::fs::write(inner.join("model.onnx"), model).unwrap();
    fails(
        &inner.join("model.onnx"),
        &["'../data/block.bin'", "'..' component"],
    );
    let abs = d.join("data/block.bin");
    let (model, _, _) = externalized(abs.to_str().unwrap());
    std::fs::write(inner.join("abs.onnx"), model).unwrap();
    fails(&inner.join("abs.onnx"), &["is an absolute path"]);
}
