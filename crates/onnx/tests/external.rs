//! Initializers stored outside the model (`data_location` EXTERNAL): the importer asks
//! `Options::external` for their bytes and decodes them as it decodes `raw_data`, so a model
//! imports the same with its weights inline or external; bad references are errors naming the
//! initializer and its file.

mod common;
use common::{FLOAT, f32s, model_with, node, value};
use irc_interp::run_graph;
use irc_onnx::proto::{StringStringEntryProto, TensorProto};
use irc_onnx::{ExternalData, ExternalRef, Options, import_model};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const W: [f32; 12] = [
    0.5, -1.0, 2.0, 0.25, 1.5, -0.75, 3.0, 1.0, -2.0, 0.125, 0.0, 4.0,
];

/// `y = x @ w`, x [2, 3], w [3, 4] the initializer given.
fn model(w: TensorProto) -> Vec<u8> {
    model_with(
        vec![node("MatMul", &["x", "w"], &["y"], vec![])],
        vec![w],
        vec![value("x", FLOAT, &[2, 3])],
        vec![value("y", FLOAT, &[2, 4])],
    )
}

fn w_bytes() -> Vec<u8> {
    W.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn inline() -> TensorProto {
    TensorProto {
        dims: vec![3, 4],
        data_type: FLOAT,
        name: "w".into(),
        raw_data: w_bytes(),
        ..Default::default()
    }
}

fn external(entries: &[(&str, &str)]) -> TensorProto {
    TensorProto {
        dims: vec![3, 4],
        data_type: FLOAT,
        name: "w".into(),
        data_location: 1,
        external_data: entries
            .iter()
            .map(|(k, v)| StringStringEntryProto {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

/// A reader over in-memory files that records what it was asked for.
fn files(files: &[(&str, Vec<u8>)]) -> (ExternalData, Arc<Mutex<Vec<ExternalRef>>>) {
    let files: HashMap<String, Vec<u8>> = files
        .iter()
        .map(|(n, b)| (n.to_string(), b.clone()))
        .collect();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = asked.clone();
    let reader = ExternalData::new(move |r: &ExternalRef| {
        log.lock().unwrap().push(r.clone());
        let f = files
            .get(&r.location)
            .ok_or_else(|| format!("no file {}", r.location))?;
        let start = r.offset as usize;
        let end = r.length.map_or(f.len(), |l| start + l as usize);
        f.get(start..end)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| format!("range {start}..{end} is past the end ({} bytes)", f.len()))
    });
    (reader, asked)
}

fn with(reader: ExternalData) -> Options {
    Options {
        external: Some(reader),
        ..Default::default()
    }
}

fn run(bytes: &[u8], opts: &Options) -> Vec<f64> {
    let imported = import_model(bytes, opts).unwrap();
    let mut inputs = vec![f32s(&[2, 3], vec![1.0, 2.0, -1.0, 0.5, 0.0, 3.0])];
    inputs.extend(imported.weights.iter().map(|(_, t)| t.clone()));
    run_graph(&imported.graph, inputs).unwrap()[0].data.to_f64()
}

#[test]
fn external_weights_import_as_inline_ones() {
    // The weight sits 16 bytes into a file that holds other data after it too.
    let mut file = vec![7u8; 16];
    file.extend(w_bytes());
    file.extend([1u8; 8]);
    let (reader, asked) = files(&[("weights.bin", file)]);
    let ext = model(external(&[
        ("location", "weights.bin"),
        ("offset", "16"),
        ("length", "48"),
    ]));
    let inl = model(inline());
    let a = import_model(&ext, &with(reader.clone())).unwrap();
    let b = import_model(&inl, &Options::default()).unwrap();
    assert_eq!(
        irc_ir::print_module(&irc_ir::Module {
            graphs: vec![a.graph.clone()]
        }),
        irc_ir::print_module(&irc_ir::Module {
            graphs: vec![b.graph.clone()]
        })
    );
    assert_eq!(a.weights, b.weights);
    assert_eq!(a.weights.len(), 1, "the weight is a parameter, not text");
    assert_eq!(run(&ext, &with(reader)), run(&inl, &Options::default()));
    assert_eq!(
        asked.lock().unwrap()[0],
        ExternalRef {
            location: "weights.bin".into(),
            offset: 16,
            length: Some(48),
        }
    );
}

#[test]
fn without_offset_and_length_the_whole_file_is_read() {
    let (reader, asked) = files(&[("w", w_bytes())]);
    let m = model(external(&[("location", "w")]));
    assert_eq!(
        run(&m, &with(reader)),
        run(&model(inline()), &Options::default())
    );
    assert_eq!(asked.lock().unwrap()[0].length, None);
}

fn error(t: TensorProto, opts: &Options) -> String {
    import_model(&model(t), opts).unwrap_err().to_string()
}

#[test]
fn bad_external_data_is_an_error_naming_the_initializer_and_file() {
    let (reader, _) = files(&[("w.bin", w_bytes())]);
    let opts = with(reader);
    // No reader at all (bytes imported without a file).
    let e = error(external(&[("location", "w.bin")]), &Options::default());
    assert!(
        e.contains("initializer 'w'") && e.contains("'w.bin'") && e.contains("reads no files"),
        "{e}"
    );
    // The length does not match the dims.
    let e = error(external(&[("location", "w.bin"), ("length", "40")]), &opts);
    assert!(
        e.contains("initializer 'w'")
            && e.contains("'w.bin' (offset 0, length 40)")
            && e.contains("holds 40 bytes, but 12 elements of 4 bytes need 48"),
        "{e}"
    );
    // The reader's own failure (a missing file, a range past the end) is passed on.
    let e = error(external(&[("location", "other.bin")]), &opts);
    assert!(
        e.contains("initializer 'w'") && e.contains("no file other.bin"),
        "{e}"
    );
    let e = error(
        external(&[("location", "w.bin"), ("offset", "40"), ("length", "48")]),
        &opts,
    );
    assert!(e.contains("past the end"), "{e}");
    // Malformed entries.
    let e = error(external(&[("location", "w.bin"), ("offset", "-4")]), &opts);
    assert!(
        e.contains("offset '-4' is not a non-negative integer"),
        "{e}"
    );
    let e = error(external(&[("offset", "0")]), &opts);
    assert!(e.contains("names no location"), "{e}");
    let mut both = external(&[("location", "w.bin")]);
    both.raw_data = w_bytes();
    let e = error(both, &opts);
    assert!(e.contains("also holds data inline"), "{e}");
}
