#!/usr/bin/env bash
# On the GPU machine: one build-check-time cycle of the attention kernels. `irc run --device gpu
# --random --check` of every attention graph of the corpus with the CUDA and MLIR backends (the
# carried .device-bin/irc.xz), then each graph of ARGS (default: the attention set and the two
# headline rows) timed by the binaries .device-bin/irc-{NAMES}.xz side by side
# (`ab_bench.sh`; "new" is the carried irc itself).
# Usage: NAMES="base new" ROUNDS=2 bench/gpu/att_cycle.sh [GRAPH...]
set -uo pipefail
cd "$(dirname "$0")/../.."
bash bench/gpu/unpack.sh >/dev/null
ln -sf irc .device-bin/irc-new
bash bench/gpu/check_all.sh .device-bin/irc examples/attention*.ir tests/gpu/attention*.ir
graphs=("$@")
[ ${#graphs[@]} = 0 ] && graphs=(bench/gpu/attention/*.ir examples/attention.ir examples/attention_long.ir)
ROUNDS=${ROUNDS:-2} bash bench/gpu/ab_bench.sh "${NAMES:-base new}" "${graphs[@]}"
