//! Finding CUDA's pieces on a machine: the headers NVRTC needs (`cuda_fp16.h`, `cuda_bf16.h`),
//! the `ptxas` binary, and the NVRTC shared library.
//!
//! Places are tried in a fixed order, each search reports every place it tried, and nothing here
//! needs a GPU. The PyPI wheels are found in two layouts: CUDA 13's `nvidia/cu13/{include,bin,lib}`
//! and CUDA 12's per-package `nvidia/cuda_runtime/include`, `nvidia/cuda_nvcc/bin`,
//! `nvidia/cuda_nvrtc/lib`.

use crate::RuntimeError;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `site-packages` folders a Python interpreter would import the NVIDIA wheels from: the active
/// virtualenv's, the `.venv-cuda` that `scripts/test.sh` installs the wheels into (in the
/// current directory or a parent of it, or in a parent of the running executable, such as the
/// repository of `target/release/irc`), `IRC_CUDA_PYTHON`'s (or `python3`'s) purelib and
/// platlib, and the parents of `nvidia/*/lib` folders named in `LD_LIBRARY_PATH`.
fn site_packages() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let venv_sites = |venv: &Path, out: &mut Vec<PathBuf>| {
        if let Ok(entries) = std::fs::read_dir(venv.join("lib")) {
            for e in entries.flatten() {
                out.push(e.path().join("site-packages"));
            }
        }
    };
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        venv_sites(Path::new(&venv), &mut out);
    }
    let bases = [
        std::env::current_dir().ok(),
        std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf)),
    ];
    for base in bases.iter().flatten() {
        for dir in base.ancestors() {
            let venv = dir.join(".venv-cuda");
            if venv.is_dir() {
                venv_sites(&venv, &mut out);
                break;
            }
        }
    }
    let python = std::env::var("IRC_CUDA_PYTHON").unwrap_or_else(|_| "python3".into());
    let script =
        "import sysconfig; p = sysconfig.get_paths(); print(p['purelib']); print(p['platlib'])";
    if let Ok(o) = Command::new(&python).args(["-c", script]).output() {
        if o.status.success() {
            for line in String::from_utf8_lossy(&o.stdout).lines() {
                out.push(PathBuf::from(line.trim()));
            }
        }
    }
    for dir in std::env::var("LD_LIBRARY_PATH")
        .unwrap_or_default()
        .split(':')
    {
        // .../site-packages/nvidia/<pkg>/lib
        let p = Path::new(dir);
        if let Some(nvidia) = p.parent().and_then(Path::parent) {
            if nvidia.file_name().is_some_and(|n| n == "nvidia") {
                if let Some(site) = nvidia.parent() {
                    out.push(site.to_path_buf());
                }
            }
        }
    }
    dedup(out)
}

fn dedup(v: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in v {
        if !p.as_os_str().is_empty() && !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// `$CUDA_HOME`, `$CUDA_PATH` and `/usr/local/cuda`, in that order.
fn toolkit_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(v) = std::env::var_os(var) {
            roots.push(PathBuf::from(v));
        }
    }
    roots.push(PathBuf::from("/usr/local/cuda"));
    dedup(roots)
}

/// The places searched for the CUDA headers, in order.
pub fn include_candidates() -> Vec<PathBuf> {
    let mut c = Vec::new();
    if let Some(v) = std::env::var_os("IRC_CUDA_INCLUDE") {
        c.push(PathBuf::from(v));
    }
    for root in toolkit_roots() {
        c.push(root.join("include"));
    }
    // Beside an explicitly named NVRTC library folder (`.../cu13/lib` -> `.../cu13/include`).
    if let Some(lib) = std::env::var_os("IRC_NVRTC_LIB_DIR") {
        if let Some(root) = Path::new(&lib).parent() {
            c.push(root.join("include"));
        }
    }
    for site in site_packages() {
        for sub in [
            "nvidia/cu13/include",
            "nvidia/cuda_runtime/include",
            "nvidia/cuda_crt/include",
            "nvidia/cuda_nvrtc/include",
        ] {
            c.push(site.join(sub));
        }
    }
    dedup(c)
}

/// The folder holding `cuda_fp16.h` and `cuda_bf16.h`, for NVRTC's `--include-path`.
pub fn find_cuda_include() -> Result<PathBuf, RuntimeError> {
    let searched = include_candidates();
    searched
        .iter()
        .find(|d| d.join("cuda_fp16.h").is_file() && d.join("cuda_bf16.h").is_file())
        .cloned()
        .ok_or_else(|| RuntimeError::NotFound {
            what: "the CUDA headers cuda_fp16.h and cuda_bf16.h (set IRC_CUDA_INCLUDE)".into(),
            searched,
        })
}

/// Extra include folders some layouts need beside the main one (CUDA 12 wheels keep `crt/`
/// headers in their own package); only existing folders are returned.
pub fn extra_include_dirs(main: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(nvidia) = main.parent().and_then(Path::parent) {
        for sub in ["cuda_crt/include", "cuda_runtime/include"] {
            let p = nvidia.join(sub);
            if p.is_dir() && p != main {
                out.push(p);
            }
        }
    }
    out
}

/// The places searched for `ptxas`, in order.
pub fn ptxas_candidates() -> Vec<PathBuf> {
    let mut c = Vec::new();
    if let Some(v) = std::env::var_os("IRC_PTXAS") {
        c.push(PathBuf::from(v));
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            c.push(dir.join("ptxas"));
        }
    }
    for root in toolkit_roots() {
        c.push(root.join("bin/ptxas"));
    }
    if let Some(lib) = std::env::var_os("IRC_NVRTC_LIB_DIR") {
        if let Some(root) = Path::new(&lib).parent() {
            c.push(root.join("bin/ptxas"));
        }
    }
    for site in site_packages() {
        for sub in ["nvidia/cu13/bin/ptxas", "nvidia/cuda_nvcc/bin/ptxas"] {
            c.push(site.join(sub));
        }
    }
    dedup(c)
}

/// The `ptxas` binary.
pub fn find_ptxas() -> Result<PathBuf, RuntimeError> {
    let searched = ptxas_candidates();
    searched
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| RuntimeError::NotFound {
            what: "ptxas (set IRC_PTXAS)".into(),
            searched,
        })
}

/// Folders that may hold `libnvrtc.so.*`: `IRC_NVRTC_LIB_DIR`, the toolkit's `lib64`/`lib`, and
/// the wheels' `lib` folders. `LD_LIBRARY_PATH` and the system's library path are always tried
/// first by the loader itself.
pub fn nvrtc_lib_candidates() -> Vec<PathBuf> {
    let mut c = Vec::new();
    if let Some(v) = std::env::var_os("IRC_NVRTC_LIB_DIR") {
        c.push(PathBuf::from(v));
    }
    for root in toolkit_roots() {
        c.push(root.join("lib64"));
        c.push(root.join("lib"));
    }
    for site in site_packages() {
        for sub in ["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"] {
            c.push(site.join(sub));
        }
    }
    dedup(c)
}
