//! insta snapshots of the canonical print (and decomposition) of every example.

use irc_pipeline::Stage;

#[test]
fn canonical_print_of_examples() {
    insta::glob!("../examples", "**/*.ir", |path| {
        let src = std::fs::read_to_string(path).unwrap();
        let module = irc_frontend::parse_module(&src)
            .unwrap_or_else(|d| panic!("{}: {d:?}", path.display()));
        let printed = irc_ir::print_module(&module);
        insta::assert_snapshot!(printed);
    });
}

#[test]
fn decomposed_examples() {
    insta::glob!("../examples/small", "*.ir", |path| {
        let src = std::fs::read_to_string(path).unwrap();
        let mut module = irc_frontend::parse_module(&src).unwrap();
        for g in &mut module.graphs {
            *g = irc_ir::decompose_graph(g).unwrap();
        }
        insta::assert_snapshot!(irc_ir::print_module(&module));
    });
}

/// The kernel IR (layout level) of every example and every `tests/gpu` graph.
#[test]
fn layout_ir_of_examples() {
    for dir in ["../examples", "../tests/gpu"] {
        insta::glob!(dir, "**/*.ir", |path| {
            let src = std::fs::read_to_string(path).unwrap();
            let module = irc_frontend::parse_module(&src).unwrap();
            let name = path.file_name().unwrap().to_string_lossy();
            let mut out = String::new();
            for g in &module.graphs {
                let info = irc_pipeline::SourceInfo {
                    name: &name,
                    text: &src,
                };
                let a = irc_pipeline::Pipeline::default()
                    .compile(g, info, Stage::Layout)
                    .unwrap();
                out.push_str(&a.text(Stage::Layout, false));
            }
            insta::assert_snapshot!(out);
        });
    }
}

/// The emitted CUDA C++ of the small examples (the big ones differ only in their constants).
#[test]
fn cuda_of_small_examples() {
    insta::glob!("../examples/small", "*.ir", |path| {
        let src = std::fs::read_to_string(path).unwrap();
        let module = irc_frontend::parse_module(&src).unwrap();
        let name = path.file_name().unwrap().to_string_lossy();
        let info = irc_pipeline::SourceInfo {
            name: &name,
            text: &src,
        };
        let a = irc_pipeline::Pipeline::default()
            .compile(&module.graphs[0], info, Stage::Cuda)
            .unwrap();
        insta::assert_snapshot!(a.text(Stage::Cuda, false));
    });
}

/// The `-O` pipeline's output on every example, with the pass statistics (rules fired, stop
/// reasons, cost estimates; times left out so snapshots do not churn).
#[test]
fn optimized_examples() {
    insta::glob!("../examples", "**/*.ir", |path| {
        let src = std::fs::read_to_string(path).unwrap();
        let mut module = irc_frontend::parse_module(&src).unwrap();
        let pm = irc_passes::manager::PassManager::default_pipeline();
        let mut stats = String::new();
        for g in &mut module.graphs {
            let out = pm.run(g).unwrap();
            for r in &out.records {
                let fired: Vec<String> = r
                    .stats
                    .iter()
                    .filter(|(k, v)| !(k.starts_with("rule.") && v == "0"))
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                stats.push_str(&format!("// {}: {}\n", r.pass, fired.join(" ")));
            }
            *g = out.graph;
        }
        insta::assert_snapshot!(format!("{stats}{}", irc_ir::print_module(&module)));
    });
}
