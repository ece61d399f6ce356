//! Fuzzes everything after the frontend: a graph that parses goes through the `-O` pipeline and
//! the pipeline to the Fused IR, the kernel IR and CUDA. Nothing may panic; the pipeline's output verifies,
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
            let pipeline = irc_pipeline::Pipeline::default();
            let Ok(a) = pipeline.compile(graph, Default::default(), irc_pipeline::Stage::Cuda)
            else {
                continue;
            };
            let p = a.planned.expect("planned");
            let fused = irc_fused::print_module(&p.fused);
            assert_eq!(irc_fused::parse_module(&fused).as_ref(), Ok(&p.fused));
            irc_fused::verify_module(&p.fused).expect("the Fused IR verifies");
            let k = p.kernels;
            irc_kir::verify_module(&k).expect("lowered kernel IR verifies");
            let printed = irc_kir::print_module(&k);
            let back = irc_kir::parse_module(&printed).expect("kernel IR re-parses");
            assert_eq!(back, k);
            a.cuda.expect("cuda").manifest.check().expect("valid manifest");
        }
    }
});
