//! `irc-gen`: writes the benchmarks' generated graphs as graph IR text to stdout, for timing
//! the `irc` binary on them.
//!
//! ```text
//! irc-gen chain N                 # irc_bench::chain_graph(N): N elementwise statements
//! irc-gen transformer LAYERS      # irc_bench::transformer_graph(LAYERS, 128, 256, 4)
//! irc-gen mixed N                 # irc_bench::generated_graph(N)
//! ```
//!
//! `irc --decompose` turns the transformer's composites into primitives (51 statements a layer).

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = args.get(1).and_then(|s| s.parse::<usize>().ok());
    let text = match (args.first().map(String::as_str), n) {
        (Some("chain"), Some(n)) => irc_bench::chain_graph(n),
        (Some("transformer"), Some(n)) => irc_bench::transformer_graph(n, 128, 256, 4),
        (Some("mixed"), Some(n)) => irc_bench::generated_graph(n),
        _ => {
            eprintln!("usage: irc-gen chain N | transformer LAYERS | mixed N");
            return ExitCode::from(2);
        }
    };
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("irc-gen: {e}");
            ExitCode::FAILURE
        }
    }
}
