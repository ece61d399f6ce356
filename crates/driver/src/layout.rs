//! `irc layout`: the CuTe layout-algebra calculator over `irc_layout`.

use anyhow::{Context, Result, bail};
use irc_layout::{LayoutError, Value, eval_expr, render_svg, render_table};
use std::io::BufRead;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct LayoutArgs {
    /// Expressions to evaluate: a layout literal like `(4,8):(1,4)` or a call like
    /// `logical_divide((8,8),[2,4])`.
    pub exprs: Vec<String>,
    /// Read one expression per line from standard input and answer one line each.
    #[arg(long)]
    pub batch: bool,
    /// Print each (rank-2) result as an index grid, like `cute::print_layout`.
    #[arg(long)]
    pub table: bool,
    /// Draw the (last) result as SVG into FILE; thread-value layouts are colored by thread.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

/// `error: message`, with a caret under the failing part when the error knows where it is.
fn describe(expr: &str, e: &LayoutError) -> String {
    match e.offset() {
        Some(at) if at <= expr.len() => format!(
            "error: {e}\n  {expr}\n  {}^",
            " ".repeat(expr[..at].chars().count())
        ),
        _ => format!("error: {e}"),
    }
}

pub fn run(args: &LayoutArgs) -> Result<bool> {
    if args.batch {
        if !args.exprs.is_empty() {
            bail!("--batch reads expressions from standard input; give none on the command line");
        }
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let line = line.context("cannot read standard input")?;
            match eval_expr(line.trim()) {
                Ok(v) => println!("{v}"),
                Err(e) => println!("error: {e}"),
            }
        }
        return Ok(true);
    }
    if args.exprs.is_empty() {
        bail!("no expression given; try `irc layout '(4,8):(1,4)'` or see `irc layout --help`");
    }
    let mut ok = true;
    let mut last: Option<Value> = None;
    for expr in &args.exprs {
        match eval_expr(expr) {
            Ok(v) => {
                if args.table {
                    match render_table(&v) {
                        Ok(t) => print!("{t}"),
                        Err(e) => {
                            eprintln!("{}", describe(expr, &e));
                            ok = false;
                        }
                    }
                } else {
                    println!("{v}");
                }
                last = Some(v);
            }
            Err(e) => {
                eprintln!("{}", describe(expr, &e));
                ok = false;
            }
        }
    }
    if let (Some(path), Some(v)) = (&args.svg, &last) {
        let svg = render_svg(v).map_err(|e| anyhow::anyhow!("{e}"))?;
        std::fs::write(path, svg).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(ok)
}
