#!/usr/bin/env bash
# On the GPU machine: tune every benchmark graph, then time it with the defaults and with the
# tuned configurations side by side (issue 14's done-criteria). Usage:
#   bench/gpu/tune.sh [IRC] [TOP_K] [CACHE]
# Writes the tuning cache to CACHE (default bench/results/tune-cache.json), each `irc tune`
# log to bench/results/tune-logs/, and prints a markdown table: default and tuned medians
# (`irc bench`, same inputs; three processes each, alternating, the middle one), their ratio, the tuning time, and whether
# `irc bench --explain` built every tunable kernel from the cache; then the geometric mean.
set -uo pipefail
cd "$(dirname "$0")/../.."
irc=${1:-.device-bin/irc}
top_k=${2:-20}
cache=${3:-bench/results/tune-cache.json}
logs=bench/results/tune-logs
mkdir -p "$logs" "$(dirname "$cache")"
ms() { python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["report"]["timing"]["median_ms"])' 2>/dev/null || echo nan; }
printf '| workload | kernels tuned | tune s | default ms | tuned ms | default/tuned | from cache |\n|---|---|---|---|---|---|---|\n'
ratios=()
fail=0
for f in examples/*.ir; do
    w=$(basename "$f" .ir)
    start=$(date +%s.%N)
    if ! "$irc" tune "$f" --top-k "$top_k" --tune-cache "$cache" >"$logs/$w.txt" 2>"$logs/$w.err"; then
        printf '| %s | FAILED (see %s) | | | | | |\n' "$w" "$logs/$w.err"
        fail=1
        continue
    fi
    secs=$(python3 -c "print('%.1f' % ($(date +%s.%N) - $start))")
    tuned_kernels=$(grep -c '^kernel ' "$logs/$w.err" || true)
    # Default and tuned alternately, three times each, the median of each side's medians: one
    # process against another varies by a few percent on the same kernel (clocks, placement).
    ds=() ts=()
    for _ in 1 2 3; do
        ds+=("$("$irc" bench "$f" --json --no-tune-cache 2>/dev/null | ms)")
        ts+=("$("$irc" bench "$f" --json --tune-cache "$cache" --explain 2>"$logs/$w.explain" | ms)")
    done
    d=$(printf '%s\n' "${ds[@]}" | sort -g | sed -n 2p)
    t=$(printf '%s\n' "${ts[@]}" | sort -g | sed -n 2p)
    hits=$(grep -c '\[tuning cache: ' "$logs/$w.explain" || true)
    tunable=$(grep -c '^irc: config: .*\]$' "$logs/$w.explain" || true)
    ratio=$(python3 -c "print('%.3f' % ($d / $t))" 2>/dev/null || echo nan)
    ratios+=("$ratio")
    printf '| %s | %s | %s | %s | %s | %s | %s/%s |\n' "$w" "$tuned_kernels" "$secs" "$d" "$t" "$ratio" "$hits" "$tunable"
done
python3 -c "
import math, sys
r = [float(x) for x in sys.argv[1:] if x != 'nan']
print('\ngeometric mean default/tuned: %.3f over %d workloads; slowest case %.3f' % (math.exp(sum(map(math.log, r)) / len(r)), len(r), min(r)) if r else 'no timings')
" "${ratios[@]}"
exit $fail
