//! Fuzzes everything after the frontend: a graph that parses goes through the `-O` pipeline and
//! the lowering to the kernel IR and CUDA. Nothing may panic; the pipeline's output verifies,
//! the kernel IR verifies and re-parses to itself, and the launch manifest is valid. Lowering may
//! refuse a graph only with a typed error (sizes beyond what the templates support).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(module) = irc_frontend::parse_module(&text) else { return };
    for g in &module.graphs {
        let optimized = irc_passes::manager::PassManager::default_pipeline()
            .run(g)
            .expect("the -O pipeline accepts every verified graph")
            .graph;
        irc_ir::verify_graph(&optimized).expect("-O output verifies");
        for graph in [g, &optimized] {
            let Ok(k) = irc_lower::lower_graph(graph, irc_lower::SourceInfo::default())
            else {
                continue;
            };
            irc_kir::verify_module(&k).expect("lowered kernel IR verifies");
            let printed = irc_kir::print_module(&k);
            let back = irc_kir::parse_module(&printed).expect("kernel IR re-parses");
            assert_eq!(back, k);
            let cu = irc_emit_cuda::emit(&k);
            cu.manifest.check().expect("valid manifest");
        }
    }
});
