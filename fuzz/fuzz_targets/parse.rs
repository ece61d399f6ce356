//! Fuzzes the frontend and the verifier: any bytes must give a module or located errors, never
//! a panic; a module that parses must print to text that re-parses to the same print, and
//! decompose into a graph that verifies.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(module) = irc_frontend::parse_module(&text) else { return };
    let printed = irc_ir::print_module(&module);
    let again = irc_frontend::parse_module(&printed).expect("printed IR re-parses");
    assert_eq!(irc_ir::print_module(&again), printed);
    for g in &module.graphs {
        let d = irc_ir::decompose_graph(g).expect("verified graphs decompose");
        irc_ir::verify_graph(&d).expect("decomposition verifies");
    }
});
