//! Saturation benchmark: the `-O` pipeline (equality saturation + extraction) on every example
//! graph and on a generated 32-layer transformer (decomposed: a few thousand ops).
//! `cargo bench -p irc-bench --bench passes`; the README notes the numbers.

use divan::{Bencher, black_box};
use irc_passes::manager::PassManager;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    divan::main();
}

fn examples() -> Vec<irc_ir::Graph> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut graphs = vec![];
    for dir in ["examples", "examples/small"] {
        let mut files: Vec<_> = std::fs::read_dir(root.join(dir))
            .expect("examples exist")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "ir"))
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).expect("readable");
            graphs.extend(irc_frontend::parse_module(&text).expect("valid").graphs);
        }
    }
    graphs
}

fn transformer() -> irc_ir::Graph {
    let text = irc_bench::transformer_graph(32, 128, 256, 4);
    let m = irc_frontend::parse_module(&text).expect("valid");
    irc_ir::decompose_graph(&m.graphs[0]).expect("decomposes")
}

#[divan::bench(sample_count = 5)]
fn o_pipeline_all_examples(bencher: Bencher) {
    let graphs = examples();
    let pm = PassManager::default_pipeline();
    bencher.bench(|| {
        for g in &graphs {
            black_box(pm.run(g).expect("runs"));
        }
    });
}

#[divan::bench(sample_count = 5)]
fn o_pipeline_transformer_32_layers(bencher: Bencher) {
    let g = transformer();
    let pm = PassManager::default_pipeline();
    bencher.bench(|| black_box(pm.run(&g).expect("runs")));
}
