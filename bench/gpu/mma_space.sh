#!/usr/bin/env bash
# On the GPU machine: the tensor-core template's configuration space (MmaConfig::space on the
# H100 target, the points CI compiles) — `irc run --check` of odd matmul graphs and
# `irc bench` of examples/gemm.ir (4096^3 f16) at every point. Usage:
#   bench/gpu/mma_space.sh [IRC] [CONFIG...]
set -uo pipefail
cd "$(dirname "$0")/../.."
irc=${1:-.device-bin/irc}
shift || true
configs=("$@")
if [ ${#configs[@]} = 0 ]; then
    # A sample of the 28 points (BMxBNxBK/WMxWN/STAGES; the runtime test
    # every_mma_config_compiles_without_spills prints them all).
    configs=(64x64x32/2x2/3 64x64x32/2x4/4 64x128x64/2x2/3 128x64x64/2x2/4 128x64x32/2x4/4
        128x128x32/2x4/3 128x128x32/2x4/4 128x128x64/2x4/3 128x128x64/2x4/4)
fi
fail=0
printf '| config | checks | gemm 4096^3 ms | TFLOP/s |\n|---|---|---|---|\n'
for c in "${configs[@]}"; do
    ok=ok
    for f in tests/gpu/odd_matmul_bt.ir tests/gpu/epilogue_stores.ir tests/gpu/batch_broadcast.ir; do
        if ! "$irc" run "$f" --device gpu --random --check --mma-config "$c" >/dev/null 2>&1; then
            ok="FAIL($f)"; fail=1
        fi
    done
    j=$("$irc" bench examples/gemm.ir --json --mma-config "$c" 2>/dev/null)
    ms=$(echo "$j" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.3f %.0f" % (r["timing"]["median_ms"], r["tflops"]))' 2>/dev/null || echo "- -")
    printf '| %s | %s | %s | %s |\n' "$c" "$ok" ${ms}
done
exit $fail
