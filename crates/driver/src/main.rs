//! `irc`: the command-line driver. A thin shell over the library crates; the only place that
//! does IO.
//!
//! Exit codes: 0 on success, 1 on a user error (reported with its location where it has one).

mod bench;
mod diag;
mod gpu;
mod import;
mod input;
mod layout;
mod npy;
mod opt;
mod run;
mod verify_diags;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// The graph IR allocates a few small strings and vectors per statement; mimalloc makes that
/// markedly cheaper than the system allocator (see bench/README.md).
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
    /// Import an ONNX model as graph IR, its weights to a safetensors side file.
    Import(import::ImportArgs),
    /// Evaluate CuTe layout-algebra expressions (`irc layout '(4,8):(1,4)'`).
    Layout(layout::LayoutArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Some(Command::Run(args)) => run::run(args),
        Some(Command::Bench(args)) => bench::run(args),
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
