//! ONNX conformance: every backend node test of a claimed op (exported by
//! `scripts/onnx_node_tests.py` into `tests/onnx_node/`) is imported and run on the reference
//! interpreter against ONNX's expected outputs.
//!
//! A case that does not pass must be listed, with the reason, in
//! `tests/onnx_node/EXPECTED_FAILURES.tsv` (a dtype irc lacks, a zero-sized dim, ...), and a
//! listed case that passes fails the test too, so the list stays exact. The coverage table of
//! `spec/onnx.md` is generated from the same run. `IRC_BLESS=1` rewrites both.

use irc_interp::{Tensor, run_graph};
use irc_ir::DType;
use std::collections::BTreeMap;
use std::path::Path;

/// Why a case did not pass (the first line of the message is enough to classify it).
fn run_case(dir: &Path) -> Result<(), String> {
    let model = std::fs::read(dir.join("model.onnx")).map_err(|e| e.to_string())?;
    let read = |name: String| -> Result<Option<Tensor>, String> {
        match std::fs::read(dir.join(&name)) {
            Ok(b) => irc_onnx::decode_tensor(&b)
                .map(Some)
                .map_err(|e| format!("{name}: {e}")),
            Err(_) => Ok(None),
        }
    };
    let mut inputs = Vec::new();
    for i in 0.. {
        match read(format!("input_{i}.pb"))? {
            Some(t) => inputs.push(t),
            None => break,
        }
    }
    let mut opts = irc_onnx::Options::default();
    let mut imported = irc_onnx::import_model(&model, &opts);
    // An input that decides a shape (axes, a target shape, starts, split sizes, k, a range's
    // bounds, Resize's scales) has to be known at import time: bind the integer and scalar
    // inputs and short float lists to the case's values, as a user would with
    // `Options::known`, and import again.
    // An empty list of axes is such an input too (a graph input of shape [0] is refused).
    if let Err(e) = &imported
        && (e.to_string().contains("must be known at import time")
            || e.to_string().contains("has size 0"))
    {
        let names = irc_onnx::input_names(&model).map_err(|e| format!("import: {e}"))?;
        let mut kept = Vec::new();
        for (name, t) in names.into_iter().zip(std::mem::take(&mut inputs)) {
            let short_list = t.ty.rank() == 1 && t.ty.numel() <= 16;
            if t.ty.rank() == 0
                || short_list
                || matches!(t.ty.dtype, irc_ir::DType::I32 | irc_ir::DType::I64)
            {
                opts.known.insert(name, t);
            } else {
                kept.push(t);
            }
        }
        inputs = kept;
        imported = irc_onnx::import_model(&model, &opts);
    }
    let imported = imported.map_err(|e| format!("import: {e}"))?;
    let g = &imported.graph;
    if inputs.len() != imported.num_inputs() {
        return Err(format!(
            "import: the graph takes {} inputs, the case gives {}",
            imported.num_inputs(),
            inputs.len()
        ));
    }
    inputs.extend(imported.weights.iter().map(|(_, t)| t.clone()));
    let outs = run_graph(g, inputs).map_err(|e| format!("run: {e}"))?;
    for (i, got) in outs.iter().enumerate() {
        let want = read(format!("output_{i}.pb"))?.ok_or("missing expected output")?;
        compare(got, &want).map_err(|e| format!("output {i}: {e}"))?;
    }
    Ok(())
}

/// ONNX's backend tolerance (rtol 1e-3), with an absolute floor for values near zero; for
/// f16 and bf16 results, also one unit in the last place of the type (a value rounded once
/// more or once less than the reference's order of operations rounds it: the attention
/// cases scale Q and K before their product, irc the product).
fn compare(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if got.ty != want.ty {
        return Err(format!("type {} but expected {}", got.ty, want.ty));
    }
    let mantissa = match got.ty.dtype {
        DType::F16 => Some(10),
        DType::BF16 => Some(7),
        _ => None,
    };
    let ulp = |b: f64| match mantissa {
        Some(m) if b != 0.0 && b.is_finite() => 2f64.powi(b.abs().log2().floor() as i32 - m),
        _ => 0.0,
    };
    let (g, w) = (got.data.to_f64(), want.data.to_f64());
    for (k, (a, b)) in g.iter().zip(&w).enumerate() {
        let tol = (1e-3 * b.abs() + 1e-5).max(ulp(*b));
        let ok = a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= tol;
        if !ok {
            return Err(format!("element {k}: got {a}, expected {b}"));
        }
    }
    Ok(())
}

/// The failure class written to the expectations file: the message up to its first detail.
fn class(msg: &str) -> String {
    let m = msg.replace('\t', " ");
    m.lines().next().unwrap_or("").chars().take(160).collect()
}

#[test]
fn onnx_node_tests() {
    let root = irc_tests::root();
    let dir = root.join("tests/onnx_node");
    let manifest = std::fs::read_to_string(dir.join("MANIFEST.tsv")).expect("MANIFEST.tsv");
    let cases: Vec<(String, String)> = manifest
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('\t'))
        .map(|(c, o)| (c.to_string(), o.to_string()))
        .collect();
    assert!(cases.len() > 500, "node tests missing");
    let mut failures = BTreeMap::new();
    let mut per_op: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (case, op) in &cases {
        let result = std::panic::catch_unwind(|| run_case(&dir.join(case)))
            .unwrap_or_else(|_| Err("PANIC".into()));
        let e = per_op.entry(op.clone()).or_default();
        e.1 += 1;
        match result {
            Ok(()) => e.0 += 1,
            Err(m) => {
                failures.insert(case.clone(), class(&m));
            }
        }
    }
    let expected_path = dir.join("EXPECTED_FAILURES.tsv");
    let fresh: String = std::iter::once(
        "# node-test cases of claimed ops that do not pass, and why (tests/onnx_node.rs)\n"
            .to_string(),
    )
    .chain(failures.iter().map(|(c, m)| format!("{c}\t{m}\n")))
    .collect();
    let spec_path = root.join("spec/onnx.md");
    let spec = std::fs::read_to_string(&spec_path).unwrap_or_default();
    let fresh_spec = coverage(&spec, &per_op, cases.len(), failures.len());
    if std::env::var_os("IRC_BLESS").is_some() {
        std::fs::write(&expected_path, &fresh).unwrap();
        std::fs::write(&spec_path, &fresh_spec).unwrap();
        return;
    }
    assert!(
        !failures.values().any(|m| m.contains("PANIC")),
        "the importer or interpreter panicked: {failures:#?}"
    );
    let committed = std::fs::read_to_string(&expected_path).unwrap_or_default();
    assert!(
        committed == fresh,
        "node-test results differ from tests/onnx_node/EXPECTED_FAILURES.tsv; diff it against:\n{fresh}\n(IRC_BLESS=1 cargo test -p irc-tests --test onnx_node rewrites it and spec/onnx.md)"
    );
    assert!(
        spec == fresh_spec,
        "spec/onnx.md is stale; run IRC_BLESS=1 cargo test -p irc-tests --test onnx_node"
    );
}

/// `spec/onnx.md` with its generated coverage section replaced.
fn coverage(
    doc: &str,
    per_op: &BTreeMap<String, (usize, usize)>,
    n: usize,
    failed: usize,
) -> String {
    let mut body = format!(
        "## Coverage (generated)\n\n{} of {} exported node-test cases pass; {} ops claimed.\n\n| ONNX op | maps to | node cases passing |\n|---|---|---|\n",
        n - failed,
        n,
        irc_onnx::ops::OPS.len()
    );
    for row in irc_onnx::ops::OPS {
        let (p, t) = per_op.get(row.name).copied().unwrap_or((0, 0));
        let cases = if t == 0 {
            "no node test".to_string()
        } else {
            format!("{p} / {t}")
        };
        body.push_str(&format!("| {} | {} | {cases} |\n", row.name, row.note));
    }
    let begin = "<!-- BEGIN GENERATED: coverage -->\n";
    let end = "<!-- END GENERATED: coverage -->";
    match (doc.find(begin), doc.find(end)) {
        (Some(b), Some(e)) => format!("{}{begin}{body}{}", &doc[..b], &doc[e..]),
        _ => format!("{doc}{begin}{body}{end}\n"),
    }
}
