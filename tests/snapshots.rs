//! insta snapshots of the canonical print (and decomposition) of every example.

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
