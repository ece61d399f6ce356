//! `irc`: the command-line driver. A thin shell over the library crates; the only place that
//! does IO.
//!
//! Exit codes: 0 on success, 1 on a user error (reported with its location where it has one).

mod bench;
mod diag;
mod external;
mod gpu;
mod import;
mod input;
mod layout;
mod npy;
mod opt;
mod run;
mod tune;
mod tuning;
mod verify_diags;

use clap::{CommandFactory, Parser, Subcommand};
use std::io::IsTerminal;
use std::process::ExitCode;

/// The graph IR allocates a few small strings and vectors per statement; mimalloc makes that
/// markedly cheaper than the system allocator (see bench/README.md). It is built without
/// transparent huge pages (the workspace's `no_thp` feature; see the root Cargo.toml).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A multi-level IR compiler for deep-learning tensor graphs.
///
/// With a file and no subcommand, parses, verifies and prints it (like mlir-opt).
#[derive(Parser, Debug)]
#[command(name = "irc", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    opt: opt::OptArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a graph on the CPU reference interpreter or (`--device gpu`) on the GPU.
    Run(run::RunArgs),
    /// Time a graph's kernels on the GPU (warm-up, L2 flush, CUDA events, median).
    Bench(bench::BenchArgs),
    /// Tune each kernel's configuration on the GPU and record the winners in the tuning cache
    /// (`--show`, `--clear`, `--list` need no GPU).
    Tune(tune::TuneArgs),
    /// Import an ONNX model as graph IR, its weights to a safetensors side file.
    Import(import::ImportArgs),
    /// Evaluate CuTe layout-algebra expressions (`irc layout '(4,8):(1,4)'`).
    Layout(layout::LayoutArgs),
}

const SUBCOMMANDS: [&str; 4] = ["run", "bench", "tune", "layout"];

/// Levenshtein distance, for "did you mean" hints.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// `irc rnu file.ir`: a first word that is no file but is a subcommand misspelt. Clap would
/// read it as the input file and complain about the next word; say what was meant instead.
fn misspelt_subcommand(args: &[String]) -> Option<String> {
    let first = args.get(1)?;
    if first.starts_with('-') || std::path::Path::new(first).exists() {
        return None;
    }
    let best = SUBCOMMANDS
        .iter()
        .min_by_key(|s| distance(first, s))
        .filter(|s| distance(first, s) <= 2 && first.as_str() != **s)?;
    Some(format!(
        "'{first}' is neither a file nor a subcommand; did you mean `irc {best}`?"
    ))
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if let Some(hint) = misspelt_subcommand(&argv) {
        eprintln!("irc: error: {hint}");
        return ExitCode::from(2);
    }
    let cli = Cli::parse();
    // `irc` alone at a terminal would wait for a graph on standard input: show the usage.
    if cli.command.is_none()
        && cli.opt.input == "-"
        && !argv.iter().skip(1).any(|a| a == "-")
        && std::io::stdin().is_terminal()
    {
        let _ = Cli::command().print_help();
        eprintln!("\n(`irc -` reads a graph from standard input.)");
        return ExitCode::from(2);
    }
    let result = match &cli.command {
        Some(Command::Run(args)) => run::run(args),
        Some(Command::Bench(args)) => bench::run(args),
        Some(Command::Tune(args)) => tune::run(args),
        Some(Command::Layout(args)) => layout::run(args),
        Some(Command::Import(args)) => import::run(args),
        None => opt::run(&cli.opt),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) if e.is::<input::Located>() => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("irc: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
