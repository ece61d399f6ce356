#!/usr/bin/env bash
# On the GPU machine: one configuration point of a template checked on every graph it builds,
# without a toggle in the code. `force_config.py` writes a tuning cache giving every kernel of
# FILEs built by SPACE (template@version) the point CONFIG (where it passes the checks), then
# `irc run --device gpu --random --check` runs each file with that cache on the CUDA and MLIR
# backends. Prints one line per run and a summary; exits 1 on any failure.
# Usage: bench/gpu/config_cycle.sh SPACE@VERSION CONFIG FILE...   (IRC=.device-bin/irc)
set -uo pipefail
cd "$(dirname "$0")/../.."
irc=${IRC:-.device-bin/irc}
space=$1 config=$2
shift 2
cache=$(mktemp --suffix=.json)
python3 bench/gpu/force_config.py "$irc" "$space" "$config" "$cache" "$@"
pass=0 fail=0
for f in "$@"; do
    for b in cuda mlir; do
        if out=$("$irc" run "$f" --device gpu --random --check --backend "$b" --tune-cache "$cache" 2>&1); then
            pass=$((pass + 1)); status=ok
        else
            fail=$((fail + 1)); status=FAIL
        fi
        printf '%-4s %-5s %-40s %s\n' "$status" "$b" "$f" \
            "$(echo "$out" | grep -iE 'rel|error|mismatch' | tail -1 | cut -c1-110)"
    done
done
rm -f "$cache"
echo "$config: $pass passed, $fail failed"
[ "$fail" = 0 ]
