//! Valid graphs made unusual: the examples and the GPU corpus with a number, a dtype, an op or
//! an operand replaced. Whatever the frontend accepts goes through the `-O` pipeline and is
//! compiled to CUDA for sm_90a (the Hopper templates) and sm_80; nothing may panic, `-O`'s
//! output verifies, and every lowered module passes `irc_tests::check_kernels`. A graph the
//! templates cannot take is refused with a typed error. `IRC_MUTATION_CASES` sets the number of
//! mutated files (default 96: CI's share).

use irc_ir::ALL_OPS;
use irc_pipeline::{Pipeline, Stage};
use proptest::prelude::*;

const NUMBERS: &[&str] = &[
    "0", "1", "2", "3", "5", "7", "8", "16", "17", "33", "64", "127", "128", "255", "1025", "4097",
    "-1", "-2", "-3", "0.0", "-0.0", "0.5", "1e-30", "1e30", "inf", "-inf", "nan",
];
const DIMS: &[&str] = &[
    "1", "2", "3", "5", "7", "16", "17", "33", "64", "128", "1025",
];
const DTYPES: &[&str] = &["f16", "bf16", "f32", "f64", "i32", "i64", "i1"];

type Site = ((usize, usize), Vec<String>);

/// The spans of `text` that a mutation of `kind` may replace, each with what may replace it.
fn sites(text: &str, kind: u8) -> Vec<Site> {
    let b = text.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut spans = vec![];
    let mut i = 0;
    while i < b.len() {
        if !word(b[i]) && b[i] != b'%' {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        while i < b.len() && word(b[i]) {
            i += 1;
        }
        spans.push((start, i));
    }
    let tok = |&(s, e): &(usize, usize)| &text[s..e];
    match kind % 4 {
        // Digit runs anywhere: dims inside `4x8xf32`, attribute values, constants.
        0 => {
            let numbers: Vec<String> = NUMBERS.iter().map(|s| s.to_string()).collect();
            let dims: Vec<String> = DIMS.iter().map(|s| s.to_string()).collect();
            let mut out = vec![];
            let mut i = 0;
            while i < b.len() {
                if b[i] == b'x' && i > 0 && b[i - 1].is_ascii_digit() {
                    // A shape's separator (`4x8xf32`): the next dim follows.
                    i += 1;
                    continue;
                }
                if !b[i].is_ascii_digit() {
                    // A whole word (`f32`, `v10`, `transpose_b`): its digits are not numbers.
                    let start = i;
                    while i < b.len() && word(b[i]) {
                        i += 1;
                    }
                    i = i.max(start + 1);
                    continue;
                }
                let s = i;
                while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                    i += 1;
                }
                let dim = s > 0 && matches!(b[s - 1], b'<' | b'x');
                out.push(((s, i), if dim { dims.clone() } else { numbers.clone() }));
            }
            out
        }
        // Element types, in signatures and attributes (`tensor<4xf16>`, `dtype = f32`).
        1 => {
            let mut out = vec![];
            for (s, e) in spans {
                let t = &text[s..e];
                for d in DTYPES {
                    if let Some(at) = t.rfind(d)
                        && at + d.len() == t.len()
                        && (at == 0 || t.as_bytes()[at - 1] == b'x')
                    {
                        out.push((s + at, e));
                    }
                }
            }
            let dtypes: Vec<String> = DTYPES.iter().map(|s| s.to_string()).collect();
            out.into_iter().map(|d| (d, dtypes.clone())).collect()
        }
        // Op names.
        2 => spans
            .iter()
            .filter(|s| text[..s.0].trim_end().ends_with('='))
            .filter_map(|s| {
                let op = ALL_OPS.iter().find(|o| o.name() == tok(s))?;
                let like = ALL_OPS
                    .iter()
                    .filter(|o| o.info().arity == op.info().arity)
                    .map(|o| o.name().to_string());
                Some((*s, like.collect()))
            })
            .collect(),
        // Operands: one value's name for another's.
        _ => {
            // Uses, not definitions (`%x = ...`, `%x: tensor<...>`).
            let values: Vec<(usize, usize)> = spans
                .into_iter()
                .filter(|&(s, e)| {
                    let rest = text[e..].trim_start();
                    b[s] == b'%' && !rest.starts_with('=') && !rest.starts_with(':')
                })
                .collect();
            let mut names: Vec<String> = values.iter().map(|s| tok(s).to_string()).collect();
            names.sort();
            names.dedup();
            values.into_iter().map(|v| (v, names.clone())).collect()
        }
    }
}

/// `text` without the result types the frontend infers (every statement's but a constant's
/// and an iota's), so that a changed dim or dtype flows on to the statements after it.
fn untyped(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let keep = line.contains("constant") || line.contains("iota") || !line.contains(" = ");
        match line.find(" : tensor<") {
            Some(at) if !keep => {
                let end = line[at..].find('>').map_or(line.len(), |e| at + e + 1);
                out.push_str(&line[..at]);
                out.push_str(&line[end..]);
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Everything after the frontend, on one parsed module.
fn compile_all(m: &irc_ir::Module) -> Result<(), String> {
    for g in &m.graphs {
        let o = irc_passes::manager::PassManager::default_pipeline()
            .run(g)
            .map_err(|e| format!("-O refused a verified graph: {e}"))?
            .graph;
        irc_ir::verify_graph(&o).map_err(|e| format!("-O's output does not verify: {e:?}"))?;
        for graph in [g, &o] {
            for arch in ["sm_90a", "sm_80"] {
                let pipeline = Pipeline {
                    arch: Some(arch.into()),
                    ..Pipeline::default()
                };
                // A refusal is a typed error (sizes beyond what the templates take).
                let Ok(a) = pipeline.compile(graph, Default::default(), Stage::Cuda) else {
                    continue;
                };
                let k = a.planned.ok_or("no plan")?.kernels;
                irc_tests::check_kernels(graph, &k).map_err(|e| format!("{arch}: {e}"))?;
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: irc_tests::cases_from_env("IRC_MUTATION_CASES", 96), ..ProptestConfig::default() })]

    #[test]
    fn mutated_graphs_compile_or_are_refused_without_a_panic(
        file in any::<usize>(),
        edits in prop::collection::vec((any::<u8>(), any::<usize>(), any::<usize>()), 1..6),
    ) {
        let mut files = irc_tests::examples();
        if let Ok(dir) = std::fs::read_dir(irc_tests::root().join("tests/gpu")) {
            let mut gpu: Vec<_> = dir.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "ir")).collect();
            gpu.sort();
            files.extend(gpu);
        }
        let path = &files[file % files.len()];
        let mut text = untyped(&std::fs::read_to_string(path).expect("readable"));
        for (kind, site, with) in edits {
            let sites = sites(&text, kind);
            let Some(((s, e), choices)) = sites.get(site % sites.len().max(1)) else { continue };
            let by = choices[with % choices.len()].clone();
            text.replace_range(*s..*e, &by);
        }
        let Ok(m) = irc_frontend::parse_module(&text) else { return Ok(()) };
        compile_all(&m).map_err(|e| TestCaseError::fail(format!("{}: {e}\n{text}", path.display())))?;
    }
}

/// The number sites of a statement: each dim of a shape and each number, not the digits of
/// names or element types.
#[test]
fn number_sites_are_dims_and_numbers() {
    let text = "%v10 = constant {value = 0.125} : tensor<4x8xf32>";
    let found: Vec<&str> = sites(text, 0)
        .iter()
        .map(|((s, e), _)| &text[*s..*e])
        .collect();
    assert_eq!(found, ["0.125", "4", "8"]);
}
