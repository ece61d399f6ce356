#!/usr/bin/env bash
# The project's test command (README: "Run the tests"). Installs what the tests need on a fresh
# Debian 12 machine that has the Rust toolchain, then runs every test of the workspace.
#
# - pycute (the CuTe reference, from the nvidia-cutlass wheel) goes into .venv-pycute for the
#   layout algebra's differential test; IRC_PYCUTE_PYTHON points the test at it.
# - NVRTC, the CUDA headers and ptxas (CUDA 13.0 wheels from PyPI) go into .venv-cuda for the
#   compile test of the emitted CUDA (crates/runtime/tests/emitted_cuda.rs); IRC_NVRTC_LIB_DIR,
#   LD_LIBRARY_PATH, IRC_CUDA_INCLUDE and IRC_PTXAS point the tests at them. No GPU is needed.
#   GPU tests run only with IRC_GPU_TESTS=1.
# - The MLIR backend (crates/emit-mlir, the driver's `mlir` feature) builds against Debian's
#   LLVM/MLIR 22 packages, installed here when missing; its tests use mlir-opt-22 and, for PTX,
#   ptxas and libdevice from the nvidia-cuda-nvcc wheel in .venv-cuda (IRC_PTXAS and
#   IRC_CUDA_TOOLKIT point the tests at them).
# - Tests run under cargo-nextest when it is installed, else under cargo test; doctests always
#   run under cargo test (nextest does not run them).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '==> %s\n' "$*"; }

need_python() {
    if ! command -v python3 >/dev/null; then
        say "installing python3 (apt)"
        apt-get update -qq && apt-get install -y -qq python3 python3-venv
    fi
}

# A new, empty virtualenv in $1 (installing python3-venv when `python3 -m venv` cannot).
fresh_venv() {
    rm -rf "$1"
    if ! python3 -m venv "$1" 2>/dev/null; then
        say "python3 -m venv failed; installing python3-venv (apt)"
        apt-get update -qq && apt-get install -y -qq python3-venv
        python3 -m venv "$1"
    fi
}

setup_pycute() {
    local venv=.venv-pycute
    if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import pycute' 2>/dev/null; then
        need_python
        say "creating $venv with pycute (nvidia-cutlass==4.2.0.0)"
        fresh_venv "$venv"
        "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps nvidia-cutlass==4.2.0.0
    fi
    IRC_PYCUTE_PYTHON="$PWD/$venv/bin/python"
    export IRC_PYCUTE_PYTHON
    say "pycute: $("$IRC_PYCUTE_PYTHON" -c 'import pycute, sys; print(sys.executable)')"
}

setup_cuda() {
    local venv=.venv-cuda
    local pins=("nvidia-cuda-nvrtc==13.0.*" "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-crt==13.0.*" "nvidia-cuda-nvcc==13.0.*")
    local nv="$venv/lib/python3*/site-packages/nvidia/cu13"
    # shellcheck disable=SC2086
    if ! ls $nv/lib/libnvrtc.so.* $nv/include/cuda_bf16.h $nv/bin/ptxas >/dev/null 2>&1; then
        need_python
        say "creating $venv with NVRTC, the CUDA headers and ptxas (${pins[*]})"
        fresh_venv "$venv"
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "${pins[@]}"
    fi
    local root
    # shellcheck disable=SC2086
    root="$(cd $nv && pwd)"
    export IRC_NVRTC_LIB_DIR="$root/lib"
    export LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export IRC_CUDA_INCLUDE="$root/include"
    export IRC_PTXAS="$root/bin/ptxas"
    # libdevice (nvvm/libdevice/libdevice.10.bc) for the MLIR backend's PTX.
    export IRC_CUDA_TOOLKIT="$root"
    say "CUDA toolchain: $("$IRC_PTXAS" --version | tail -1) in $root"
}


MLIR_PACKAGES=(libmlir-22-dev mlir-22-tools llvm-22-dev libclang-22-dev libzstd-dev libz3-dev
    libxml2-dev zlib1g-dev libpolly-22-dev)

setup_mlir() {
    if ! dpkg -s "${MLIR_PACKAGES[@]}" >/dev/null 2>&1; then
        say "installing LLVM/MLIR 22 (apt): ${MLIR_PACKAGES[*]}"
        local sudo=""
        [ "$(id -u)" = 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${MLIR_PACKAGES[@]}" >/dev/null
    fi
    export MLIR_SYS_220_PREFIX=/usr/lib/llvm-22 TABLEGEN_220_PREFIX=/usr/lib/llvm-22
    export LIBCLANG_PATH=/usr/lib/llvm-22/lib
    export IRC_MLIR_OPT=/usr/lib/llvm-22/bin/mlir-opt
    say "MLIR: $("$IRC_MLIR_OPT" --version | grep -i version | head -1)"
}

setup_pycute
setup_cuda
setup_mlir

# The driver's `mlir` feature compiles the MLIR backend into `irc` and its CLI tests.
FEATURES=(--features irc-driver/mlir)
say "doctests: cargo test --workspace --doc ${FEATURES[*]}"
cargo test --workspace --doc "${FEATURES[@]}"
if cargo nextest --version >/dev/null 2>&1; then
    say "cargo nextest run --workspace ${FEATURES[*]}"
    cargo nextest run --workspace --no-fail-fast "${FEATURES[@]}"
else
    say "cargo-nextest is not installed; running cargo test instead"
    cargo test --workspace --no-fail-fast --tests --bins --lib "${FEATURES[@]}"
fi
