//! Shared by the driver's integration tests: run the `irc` binary from the repository root.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn irc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_irc"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("irc runs")
}
