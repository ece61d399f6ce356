#!/usr/bin/env bash
# Builds the `irc` release binary (default features, or with the MLIR backend: --mlir) and
# copies it into the git-ignored .device-bin/ at the repository root, from where
# bench/gpu/suite.py runs it on a GPU machine (which has no Rust toolchain). Run it here, then
# ship .device-bin with the repository.
set -euo pipefail
cd "$(dirname "$0")/../.."
# `--mlir`: with the MLIR backend (`irc run/bench --backend mlir`, suite.py --mlir); needs the
# LLVM/MLIR 22 packages here (README), links them statically, and finds libdevice on the GPU
# machine through IRC_CUDA_TOOLKIT or beside the nvidia-cuda-nvcc wheel's ptxas.
features=()
if [ "${1:-}" = "--mlir" ]; then
    export MLIR_SYS_220_PREFIX=${MLIR_SYS_220_PREFIX:-/usr/lib/llvm-22}
    export TABLEGEN_220_PREFIX=${TABLEGEN_220_PREFIX:-/usr/lib/llvm-22}
    export LIBCLANG_PATH=${LIBCLANG_PATH:-/usr/lib/llvm-22/lib}
    features=(--features mlir)
fi
cargo build --release -p irc-driver "${features[@]}"
mkdir -p .device-bin
cp target/release/irc .device-bin/irc
echo "==> .device-bin/irc: $(.device-bin/irc --version)"
