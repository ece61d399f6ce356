//! The Fused IR on the whole corpus: it prints, re-parses to itself, verifies and lowers to the
//! same kernels, and the cost model prices exactly the kernels lowering builds (random graphs
//! are checked in `graph_ir.rs` and `passes.rs`).

use irc_tests::{check_fusion_agrees, corpus};

#[test]
fn fused_ir_round_trips_and_cost_model_agrees_on_the_corpus() {
    let mut checked = 0;
    for path in corpus() {
        let text = std::fs::read_to_string(&path).unwrap();
        let m = irc_frontend::parse_module(&text).unwrap();
        for g in &m.graphs {
            for graph in [g.clone(), optimized(g)] {
                match check_fusion_agrees(&graph) {
                    Ok(agreed) => checked += usize::from(agreed),
                    Err(e) => panic!("{}: {e}", path.display()),
                }
            }
        }
    }
    assert!(checked > 40, "only {checked} graphs checked");
}

fn optimized(g: &irc_ir::Graph) -> irc_ir::Graph {
    irc_passes::manager::PassManager::default_pipeline()
        .run(g)
        .expect("-O runs")
        .graph
}
