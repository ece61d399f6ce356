//! ptxas's resource report: registers, spills, stack frame and shared memory per kernel.
//!
//! `ptxas -v` prints, per entry function, a "Compiling entry function 'k' for 'sm_90a'" line,
//! then "N bytes stack frame, N bytes spill stores, N bytes spill loads" and "Used N registers,
//! ... N bytes smem ...". [`parse_report`] reads that text; [`assemble`] runs the binary.

use crate::RuntimeError;
use crate::nvrtc::{Arch, Ptx};
use serde::Serialize;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// One kernel's resources as ptxas reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KernelResources {
    pub name: String,
    pub arch: String,
    pub registers: u32,
    pub spill_stores: u64,
    pub spill_loads: u64,
    pub stack_frame: u64,
    /// Static shared memory in bytes.
    pub shared: u64,
}

impl KernelResources {
    /// Whether any register spilled to local memory.
    pub fn spills(&self) -> bool {
        self.spill_stores > 0 || self.spill_loads > 0
    }
}

/// Parses `ptxas -v` output (its standard error) into one entry per kernel, in order.
pub fn parse_report(text: &str) -> Vec<KernelResources> {
    let mut out: Vec<KernelResources> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line
            .split_once("Compiling entry function '")
            .map(|(_, r)| r)
        {
            let (name, tail) = rest.split_once('\'').unwrap_or((rest, ""));
            let arch = tail
                .split_once("for '")
                .and_then(|(_, a)| a.split_once('\''))
                .map(|(a, _)| a.to_string())
                .unwrap_or_default();
            out.push(KernelResources {
                name: name.to_string(),
                arch,
                ..Default::default()
            });
            continue;
        }
        let Some(k) = out.last_mut() else { continue };
        if line.contains("stack frame") {
            for (n, what) in numbered(line) {
                match what {
                    w if w.starts_with("bytes stack frame") => k.stack_frame = n,
                    w if w.starts_with("bytes spill stores") => k.spill_stores = n,
                    w if w.starts_with("bytes spill loads") => k.spill_loads = n,
                    _ => {}
                }
            }
        } else if let Some(used) = line.split_once("Used ").map(|(_, r)| r) {
            for (n, what) in numbered(used) {
                if what.starts_with("registers") {
                    k.registers = u32::try_from(n).unwrap_or(u32::MAX);
                } else if what.starts_with("bytes smem") {
                    k.shared = n;
                }
            }
        }
    }
    out
}

/// `"8 registers, used 0 barriers, 4 bytes smem"` → `[(8, "registers"), (0, "barriers"), (4,
/// "bytes smem")]`: each comma-separated part's first number and the words after it.
fn numbered(text: &str) -> Vec<(u64, &str)> {
    text.split(',')
        .filter_map(|part| {
            let part = part.trim().trim_start_matches("used ").trim();
            let (num, rest) = part.split_once(' ')?;
            Some((num.parse().ok()?, rest.trim()))
        })
        .collect()
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Assembles `ptx` with the `ptxas` at `ptxas` (`-v -arch=<arch>`), discarding the cubin, and
/// returns the resource report. A failure returns ptxas's messages.
pub fn assemble(
    ptxas: &Path,
    ptx: &Ptx,
    arch: &Arch,
) -> Result<Vec<KernelResources>, RuntimeError> {
    let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir();
    let stem = format!("irc-ptxas-{}-{n}", std::process::id());
    let input = dir.join(format!("{stem}.ptx"));
    let output = dir.join(format!("{stem}.cubin"));
    let io = |e: std::io::Error| RuntimeError::Io(format!("{}: {e}", input.display()));
    std::fs::write(&input, &ptx.text).map_err(io)?;
    let result = Command::new(ptxas)
        .arg("-v")
        .arg(format!("-arch={}", arch.sm()))
        .arg("-o")
        .arg(&output)
        .arg(&input)
        .output();
    let _ = std::fs::remove_file(&input);
    let _ = std::fs::remove_file(&output);
    let out =
        result.map_err(|e| RuntimeError::Io(format!("cannot run {}: {e}", ptxas.display())))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(RuntimeError::Compile {
            what: format!("ptxas -arch={} ({})", arch.sm(), out.status),
            log: text,
        });
    }
    Ok(parse_report(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'scale' for 'sm_90a'
ptxas info    : Function properties for scale
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 368 bytes cmem[0]
ptxas info    : Compiling entry function 'tile' for 'sm_90a'
ptxas info    : Function properties for tile
    24 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem, 368 bytes cmem[0]
";

    #[test]
    fn parses_two_kernels() {
        let k = parse_report(REPORT);
        assert_eq!(k.len(), 2);
        assert_eq!(
            k[0],
            KernelResources {
                name: "scale".into(),
                arch: "sm_90a".into(),
                registers: 8,
                ..Default::default()
            }
        );
        assert_eq!(
            (
                k[1].registers,
                k[1].shared,
                k[1].stack_frame,
                k[1].spill_stores,
                k[1].spill_loads
            ),
            (255, 4096, 24, 16, 12)
        );
        assert!(k[1].spills() && !k[0].spills());
    }

    #[test]
    fn garbage_is_empty() {
        assert!(parse_report("Used 3 registers\nnonsense").is_empty());
    }
}
