//! Parse + verify + print throughput of the graph IR on a generated graph of 100k statements.
//! `cargo bench -p irc-bench --bench parse`; the README notes the number.

use divan::{Bencher, black_box, counter::ItemsCount};

/// The allocator the `irc` binary uses.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const OPS: usize = 100_000;

fn main() {
    divan::main();
}

#[divan::bench(sample_count = 10)]
fn parse_verify_print(bencher: Bencher) {
    let text = irc_bench::generated_graph(OPS);
    bencher.counter(ItemsCount::new(OPS)).bench(|| {
        let module =
            irc_frontend::parse_module(black_box(&text)).expect("generated graph is valid");
        irc_ir::verify_module(&module).expect("verifies");
        irc_ir::print_module(&module)
    });
}

#[divan::bench(sample_count = 10)]
fn parse_only(bencher: Bencher) {
    let text = irc_bench::generated_graph(OPS);
    bencher
        .counter(ItemsCount::new(OPS))
        .bench(|| irc_frontend::parse_module(black_box(&text)).expect("valid"));
}

#[divan::bench(sample_count = 10)]
fn lex_only(bencher: Bencher) {
    let text = irc_bench::generated_graph(OPS);
    bencher
        .counter(ItemsCount::new(OPS))
        .bench(|| irc_frontend::lexer::lex(black_box(&text), 0).expect("valid"));
}

#[divan::bench(sample_count = 10)]
fn verify_only(bencher: Bencher) {
    let module = irc_frontend::parse_module(&irc_bench::generated_graph(OPS)).expect("valid");
    bencher
        .counter(ItemsCount::new(OPS))
        .bench(|| irc_ir::verify_module(black_box(&module)));
}

#[divan::bench(sample_count = 10)]
fn print_only(bencher: Bencher) {
    let module = irc_frontend::parse_module(&irc_bench::generated_graph(OPS)).expect("valid");
    bencher
        .counter(ItemsCount::new(OPS))
        .bench(|| irc_ir::print_module(black_box(&module)));
}
