//! Writes `NAME.ptx` (through the MLIR pipeline) and `NAME.manifest.json` for graph files, for
//! carrying to a GPU machine: `cargo run -p irc-emit-mlir --example ptx_folder -- OUT ARCH
//! NAME=FILE...` (`scripts/mlir_ptx_all.sh` runs it on every example).

use irc_lower::SourceInfo;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out, arch, files @ ..] = args.as_slice() else {
        eprintln!("usage: ptx_folder OUT ARCH NAME=FILE...");
        return ExitCode::from(2);
    };
    if let Err(e) = std::fs::create_dir_all(out) {
        eprintln!("cannot create {out}: {e}");
        return ExitCode::from(1);
    }
    let mut failed = false;
    for spec in files {
        let Some((name, file)) = spec.split_once('=') else {
            eprintln!("expected NAME=FILE, got {spec}");
            return ExitCode::from(2);
        };
        match one(out, arch, name, file) {
            Ok(()) => println!("{name}: {out}/{name}.ptx"),
            Err(e) => {
                eprintln!("{name} ({file}): {e}");
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn one(out: &str, arch: &str, name: &str, file: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let module = irc_frontend::parse_module(&text).map_err(|d| format!("{d:?}"))?;
    let g = module.graphs.first().ok_or("no graph")?;
    let info = SourceInfo {
        name: file,
        text: &text,
    };
    let m = irc_lower::lower_graph(g, info).map_err(|e| e.to_string())?;
    let ptx = irc_emit_mlir::compile_to_ptx(&m, arch).map_err(|e| e.to_string())?;
    let manifest = irc_kir::manifest_of(&m);
    std::fs::write(format!("{out}/{name}.ptx"), ptx).map_err(|e| e.to_string())?;
    std::fs::write(format!("{out}/{name}.manifest.json"), manifest.to_json())
        .map_err(|e| e.to_string())?;
    Ok(())
}
