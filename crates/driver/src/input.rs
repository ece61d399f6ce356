//! Reading the input text and splitting it into cases.

use anyhow::{Context, Result};
use std::io::Read;

/// Reads `path`, or standard input for `-`.
pub fn read_source(path: &str) -> Result<String> {
    if path == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read standard input")?;
        Ok(s)
    } else {
        let bytes = std::fs::read(path).with_context(|| format!("cannot read {path}"))?;
        String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            let prefix = &e.as_bytes()[..at];
            let line = prefix.iter().filter(|&&b| b == b'\n').count() + 1;
            let col = at - prefix.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1) + 1;
            anyhow::Error::new(Located(format!("{path}:{line}:{col}: error: invalid UTF-8 (byte 0x{:02x}); graph IR files are UTF-8 text", e.as_bytes()[at])))
        })
    }
}

/// The separator line of `--split-input-file`.
pub const SPLIT_MARKER: &str = "// -----";

/// The byte ranges of the cases of `text` split at lines starting with `// -----`.
pub fn split_cases(text: &str) -> Vec<std::ops::Range<usize>> {
    let mut cases = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_end().starts_with(SPLIT_MARKER) {
            cases.push(start..offset);
            start = offset + line.len();
        }
        offset += line.len();
    }
    cases.push(start..text.len());
    cases
}

/// An error whose message already starts with its location (`file:line:col: error: ...`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Located(pub String);
