//! `irc layout`: the CuTe layout-algebra calculator over `irc_layout`.

use anyhow::{Context, Result, bail};
use irc_layout::{LayoutError, Value, eval_expr, render_svg, render_table};
use std::io::BufRead;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct LayoutArgs {
    /// Expressions to evaluate: a layout literal like `(4,8):(1,4)` or a call like
    /// `logical_divide((8,8),[2,4])`. An expression may start with `-` (`-4:1`).
    #[arg(allow_hyphen_values = true)]
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

/// The arguments with the flags that followed an expression (which `allow_hyphen_values` leaves
/// among the expressions) moved back to their fields. No expression starts with `--`, so this is
/// unambiguous.
fn with_trailing_flags(args: &LayoutArgs) -> Result<LayoutArgs> {
    let mut out = LayoutArgs {
        exprs: Vec::new(),
        batch: args.batch,
        table: args.table,
        svg: args.svg.clone(),
    };
    let mut it = args.exprs.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--table" => out.table = true,
            "--batch" => out.batch = true,
            "--svg" => {
                let file = it.next().context("--svg needs a FILE")?;
                out.svg = Some(PathBuf::from(file));
            }
            s if s.starts_with("--svg=") => out.svg = Some(PathBuf::from(&s[6..])),
            s if s.starts_with("--") => bail!("unknown option `{s}` for `irc layout`"),
            _ => out.exprs.push(a.clone()),
        }
    }
    Ok(out)
}

pub fn run(args: &LayoutArgs) -> Result<bool> {
    let args = &with_trailing_flags(args)?;
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
