//! How compilation scales: each stage of one equality-saturation pass, the whole `-O` pipeline,
//! and the stages after it (fusion planning, lowering to the kernel IR, CUDA emission, on the
//! `-O` output as `irc -O --emit=cuda` runs them), on generated graphs of 1k to 100k statements
//! (a chain whose every value is read twice, and a decomposed transformer). Every stage should
//! be near-linear: ten times the statements, about ten times the time. `cargo bench -p
//! irc-bench --bench scaling`; bench/README.md and bench/results/ note the numbers.

use divan::{Bencher, black_box};
use irc_passes::cost::Target;
use irc_passes::eqsat::{Limits, Rule, saturate};
use irc_passes::manager::PassManager;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    divan::main();
}

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];

/// The lowering options `irc_pipeline` uses for the default arch (sm_90a).
fn sm90a() -> irc_lower::LowerOptions {
    irc_lower::LowerOptions {
        wgmma: true,
        ..Default::default()
    }
}

/// The `-O` output of a generated graph, computed once per graph and size (it is the input of
/// the planning, lowering and emission benchmarks, and takes seconds at 100k statements).
fn optimized(shape: &str, n: usize, graph: fn(usize) -> irc_ir::Graph) -> irc_ir::Graph {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<(String, usize), irc_ir::Graph>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (shape.to_string(), n);
    if let Some(g) = cache.lock().expect("cache").get(&key) {
        return g.clone();
    }
    let g = PassManager::default_pipeline()
        .run(&graph(n))
        .expect("-O runs")
        .graph;
    cache.lock().expect("cache").insert(key, g.clone());
    g
}

fn chain(n: usize) -> irc_ir::Graph {
    irc_frontend::parse_module(&irc_bench::chain_graph(n))
        .expect("the chain parses")
        .graphs
        .remove(0)
}

/// The rules of `algebraic-simplify`, the pass with the most alternatives to extract from.
fn rules() -> Vec<Rule> {
    irc_passes::rules::algebra::RULES
        .iter()
        .chain(irc_passes::rules::views::RULES)
        .map(|r| Rule {
            name: r.name,
            equation: r.equation,
            apply: r.apply,
        })
        .collect()
}

#[divan::bench(args = SIZES, sample_count = 3, sample_size = 1)]
fn parse_chain(bencher: Bencher, n: usize) {
    let text = irc_bench::chain_graph(n);
    bencher.bench(|| black_box(irc_frontend::parse_module(&text).expect("parses")));
}

/// The stages on one kind of generated graph (`$graph(n)`).
macro_rules! stages {
    ($shape:ident, $graph:path) => {
        mod $shape {
            use super::*;

            #[divan::bench(args = SIZES, sample_count = 3, sample_size = 1)]
            fn load(bencher: Bencher, n: usize) {
                let g = $graph(n);
                bencher.bench(|| black_box(irc_passes::lang::load(&g)));
            }

            #[divan::bench(args = SIZES, sample_count = 3, sample_size = 1)]
            fn saturate_algebraic(bencher: Bencher, n: usize) {
                let g = $graph(n);
                let rules = rules();
                bencher
                    .with_inputs(|| irc_passes::lang::load(&g))
                    .bench_local_values(|mut l| {
                        black_box(saturate(&mut l.egraph, &rules, &Limits::default()))
                    });
            }

            #[divan::bench(args = SIZES, sample_count = 3, sample_size = 1)]
            fn extract_algebraic(bencher: Bencher, n: usize) {
                let g = $graph(n);
                let mut l = irc_passes::lang::load(&g);
                saturate(&mut l.egraph, &rules(), &Limits::default());
                let roots: Vec<egg::Id> = l.roots.iter().map(|&r| l.egraph.find(r)).collect();
                let t = Target::h100();
                bencher.bench(|| {
                    black_box(irc_passes::extract::extract(
                        &t,
                        &l.egraph,
                        &roots,
                        &l.original,
                        4,
                    ))
                });
            }

            #[divan::bench(args = SIZES, sample_count = 3, sample_size = 1)]
            fn build_graph(bencher: Bencher, n: usize) {
                let g = $graph(n);
                let mut l = irc_passes::lang::load(&g);
                saturate(&mut l.egraph, &rules(), &Limits::default());
                let roots: Vec<egg::Id> = l.roots.iter().map(|&r| l.egraph.find(r)).collect();
                let ex = irc_passes::extract::extract(
                    &Target::h100(),
                    &l.egraph,
                    &roots,
                    &l.original,
                    4,
                );
                bencher.bench(|| {
                    black_box(
                        irc_passes::lang::build_graph(&g, &l.egraph, &ex.choice, &roots, &l.names)
                            .expect("builds"),
                    )
                });
            }

            #[divan::bench(args = SIZES, sample_count = 3, sample_size = 1)]
            fn print(bencher: Bencher, n: usize) {
                let g = $graph(n);
                bencher.bench(|| black_box(irc_ir::print_graph(&g)));
            }

            #[divan::bench(args = SIZES, sample_count = 3, sample_size = 1)]
            fn o_pipeline(bencher: Bencher, n: usize) {
                let g = $graph(n);
                let pm = PassManager::default_pipeline();
                bencher.bench(|| black_box(pm.run(&g).expect("runs")));
            }

            /// Fusion planning (the policy and the Fused IR) of the `-O` output.
            #[divan::bench(args = SIZES, sample_count = 3, sample_size = 1)]
            fn plan(bencher: Bencher, n: usize) {
                let g = optimized(stringify!($shape), n, $graph);
                bencher.bench(|| black_box(irc_fused::plan_graph(&g, Default::default(), &[])));
            }

            /// Planning and lowering to verified kernel IR, as the pipeline does for the default
            /// `--arch` (sm_90a: the Hopper matmul template); minus `plan`, the templates.
            #[divan::bench(args = SIZES, sample_count = 3, sample_size = 1)]
            fn plan_and_lower(bencher: Bencher, n: usize) {
                let g = optimized(stringify!($shape), n, $graph);
                bencher.bench(|| {
                    black_box(
                        irc_lower::plan_and_lower_with(&g, Default::default(), &sm90a())
                            .expect("lowers"),
                    )
                });
            }

            /// CUDA C++ emission of the kernel IR.
            #[divan::bench(args = SIZES, sample_count = 3, sample_size = 1)]
            fn emit_cuda(bencher: Bencher, n: usize) {
                let g = optimized(stringify!($shape), n, $graph);
                let p = irc_lower::plan_and_lower_with(&g, Default::default(), &sm90a())
                    .expect("lowers");
                bencher.bench(|| black_box(irc_emit_cuda::emit(&p.kernels)));
            }
        }
    };
}

stages!(chain, super::chain);
stages!(transformer, irc_bench::transformer_statements);
