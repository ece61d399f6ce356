//! Fuzzes the ONNX importer: any bytes must import or give an `ImportError`, never a panic; an
//! imported graph verifies, prints to text that re-parses to the same print, and runs on the
//! reference interpreter (when small) with an error or a result, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut opts = irc_onnx::Options::default();
    opts.dims.insert("batch".into(), 2);
    let Ok(m) = irc_onnx::import_model(data, &opts) else { return };
    let g = &m.graph;
    irc_ir::verify_graph(g).expect("imported graphs verify");
    let module = irc_ir::Module { graphs: vec![g.clone()] };
    let printed = irc_ir::print_module(&module);
    let again = irc_frontend::parse_module(&printed).expect("printed IR re-parses");
    assert_eq!(irc_ir::print_module(&again), printed);
    let small = g.values.iter().all(|v| v.ty.numel() <= 1 << 16);
    if small {
        let n = m.num_inputs();
        let mut inputs: Vec<_> = g.params[..n]
            .iter()
            .enumerate()
            .map(|(i, &p)| irc_interp::random_tensor(g.ty(p), 0, i as u64))
            .collect();
        inputs.extend(m.weights.iter().map(|(_, t)| t.clone()));
        let _ = irc_interp::run_graph(g, inputs);
    }
});
