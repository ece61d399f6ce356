#!/usr/bin/env bash
# On the GPU machine: time graphs under chosen points of a template's space, by one or more
# irc binaries, side by side in one run. Each VARIANT is `BINARY:SPACE@VERSION:CONFIG`
# (`BINARY` a carried `.device-bin/irc-NAME.xz` or `.device-bin/irc` itself as `new`; CONFIG
# `default` for the binary's heuristic). A forced point is written into a tuning cache by
# `force_config.py` for each graph; a graph where the point fails the template's checks shows
# `-`. `irc bench --json` of each graph by each variant in turn, ROUNDS rounds, then the median
# of each variant's medians, as a markdown table.
# Usage: ROUNDS=2 bench/gpu/points.sh "new:attention_wgmma@v6:default base:attention_wgmma@v5:default ..." GRAPH...
set -uo pipefail
cd "$(dirname "$0")/../.."
variants=($1); shift
rounds=${ROUNDS:-2}
bin() { [ "$1" = new ] && echo .device-bin/irc || echo ".device-bin/irc-$1"; }
for v in "${variants[@]}"; do
    n=${v%%:*}
    b=$(bin "$n")
    [ -x "$b" ] || { xz -d -k -f "$b.xz" && chmod +x "$b"; }
done
ms() { python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["report"]["timing"]["median_ms"])' 2>/dev/null || echo nan; }
printf '| graph |'; for v in "${variants[@]}"; do printf ' %s |' "$v"; done; printf '\n|---|'
for _ in "${variants[@]}"; do printf -- '---|'; done; printf '\n'
tmp=$(mktemp -d)
for g in "$@"; do
    declare -A t=() cache=()
    for i in "${!variants[@]}"; do
        IFS=: read -r n space config <<<"${variants[$i]}"
        if [ "$config" = default ]; then
            cache[$i]=--no-tune-cache
        elif python3 bench/gpu/force_config.py "$(bin "$n")" "$space" "$config" "$tmp/$i.json" "$g" >/dev/null 2>&1; then
            cache[$i]="--tune-cache $tmp/$i.json"
        else
            cache[$i]=skip
        fi
    done
    for _ in $(seq "$rounds"); do
        for i in "${!variants[@]}"; do
            [ "${cache[$i]}" = skip ] && continue
            n=${variants[$i]%%:*}
            # shellcheck disable=SC2086
            t[$i]="${t[$i]:-} $("$(bin "$n")" bench "$g" --json ${cache[$i]} 2>/dev/null | tail -1 | ms)"
        done
    done
    printf '| %s |' "$(basename "$g" .ir)"
    for i in "${!variants[@]}"; do
        if [ "${cache[$i]}" = skip ]; then printf ' - |'; continue; fi
        printf ' %s |' "$(python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:] if x!='nan']; print('%.4f' % statistics.median(v) if v else 'nan')" ${t[$i]})"
    done
    printf '\n'
    unset t cache
done
rm -rf "$tmp"
