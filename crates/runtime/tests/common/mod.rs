//! Shared by the runtime's integration tests.

use irc_runtime::{nvrtc, toolkit};

/// Whether NVRTC, the CUDA headers and ptxas are all found. A missing one fails the test under
/// `CI=true` (scripts/test.sh installs them) and prints `SKIPPED <test>` elsewhere.
pub fn toolchain_or_skip(test: &str) -> bool {
    let missing = nvrtc::ensure_nvrtc()
        .and_then(|_| toolkit::find_cuda_include())
        .and_then(|_| toolkit::find_ptxas());
    match missing {
        Ok(_) => true,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("{test}: the CUDA toolchain is required under CI=true: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED {test}: no CUDA toolchain ({e})");
            false
        }
    }
}
