#!/usr/bin/env bash
# On the GPU machine: A/B timing of irc binaries (variants built from one tree, carried as
# .device-bin/irc-X.xz) on graphs, side by side in one run: `irc bench --json` of each graph
# by each binary in turn, ROUNDS rounds, then the median of each binary's medians.
# Usage: ROUNDS=3 bench/gpu/ab_bench.sh "a b c" GRAPH...
set -uo pipefail
cd "$(dirname "$0")/../.."
names=($1); shift
rounds=${ROUNDS:-3}
for n in "${names[@]}"; do
    [ -x ".device-bin/irc-$n" ] || { xz -d -k -f ".device-bin/irc-$n.xz" && chmod +x ".device-bin/irc-$n"; }
done
printf '| graph |'; for n in "${names[@]}"; do printf ' %s ms |' "$n"; done; printf '\n|---|'
for n in "${names[@]}"; do printf -- '---|'; done; printf '\n'
for g in "$@"; do
    declare -A t=()
    for r in $(seq "$rounds"); do
        for n in "${names[@]}"; do
            ms=$(".device-bin/irc-$n" bench "$g" --json --no-tune-cache 2>/dev/null | tail -1 \
                | python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["report"]["timing"]["median_ms"])' 2>/dev/null || echo nan)
            t[$n]="${t[$n]:-} $ms"
        done
    done
    printf '| %s |' "$(basename "$g" .ir)"
    for n in "${names[@]}"; do
        printf ' %s |' "$(python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:] if x!='nan']; print('%.4f' % statistics.median(v) if v else 'nan')" ${t[$n]})"
    done
    printf '\n'
    unset t
done
