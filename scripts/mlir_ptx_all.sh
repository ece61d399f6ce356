#!/usr/bin/env bash
# Writes NAME.ptx (MLIR backend) and NAME.manifest.json for every example, small example and
# tests/gpu graph into OUT, for loading on a GPU machine (cuModuleLoadData + cuLaunchKernel per
# manifest launch). Names: examples/X.ir -> X, examples/small/X.ir -> small_X, tests/gpu/X.ir ->
# gpu_X.
#
#   bash scripts/mlir_ptx_all.sh OUT [ARCH]      (ARCH defaults to sm_90a)
#
# Needs the LLVM/MLIR 22 packages (scripts/test.sh installs them) and libdevice from the
# nvidia-cuda-nvcc==13.0.* wheel (IRC_CUDA_TOOLKIT, or .venv-cuda as scripts/test.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: mlir_ptx_all.sh OUT [ARCH]}
arch=${2:-sm_90a}
export MLIR_SYS_220_PREFIX=${MLIR_SYS_220_PREFIX:-/usr/lib/llvm-22}
export TABLEGEN_220_PREFIX=${TABLEGEN_220_PREFIX:-/usr/lib/llvm-22}
export LIBCLANG_PATH=${LIBCLANG_PATH:-/usr/lib/llvm-22/lib}
specs=()
for f in examples/*.ir; do specs+=("$(basename "$f" .ir)=$f"); done
for f in examples/small/*.ir; do specs+=("small_$(basename "$f" .ir)=$f"); done
for f in tests/gpu/*.ir; do specs+=("gpu_$(basename "$f" .ir)=$f"); done
cargo run --quiet -p irc-emit-mlir --example ptx_folder -- "$out" "$arch" "${specs[@]}"
