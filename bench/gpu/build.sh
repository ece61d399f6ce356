#!/usr/bin/env bash
# Builds the `irc` release binary (default features: no MLIR) and copies it into the git-ignored
# .device-bin/ at the repository root, from where bench/gpu/suite.py runs it on a GPU machine
# (which has no Rust toolchain). Run it here, then ship .device-bin with the repository.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -p irc-driver
mkdir -p .device-bin
cp target/release/irc .device-bin/irc
echo "==> .device-bin/irc: $(.device-bin/irc --version)"
