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
pass=0 fail=0
for f in examples/attention*.ir tests/gpu/attention*.ir; do
    for b in cuda mlir; do
        if out=$(.device-bin/irc run "$f" --device gpu --random --check --backend "$b" 2>&1); then
            pass=$((pass + 1)); status=ok
        else
            fail=$((fail + 1)); status=FAIL
        fi
        printf '%-4s %-5s %-36s %s\n' "$status" "$b" "$f" \
            "$(echo "$out" | grep -iE 'rel|error|mismatch' | tail -1 | cut -c1-110)"
    done
done
echo "checks: $pass passed, $fail failed"
graphs=("$@")
[ ${#graphs[@]} = 0 ] && graphs=(bench/gpu/attention/*.ir examples/attention.ir examples/attention_long.ir)
ROUNDS=${ROUNDS:-2} bash bench/gpu/ab_bench.sh "${NAMES:-base new}" "${graphs[@]}"
