#!/usr/bin/env bash
# On the GPU machine: one configuration point of a template checked on every graph it builds,
# without a toggle in the code. `force_config.py` writes a tuning cache giving every kernel of
# FILEs built by SPACE (template@version) the point CONFIG (where it passes the checks), then
# `check_all.sh` runs each file with that cache (`irc run --device gpu --random --check` on the
# CUDA and MLIR backends). Prints one line per run and a summary; exits 1 on any failure.
# Usage: bench/gpu/config_cycle.sh SPACE@VERSION CONFIG FILE...   (IRC=.device-bin/irc; FILEs
# relative to the repository root)
set -uo pipefail
cd "$(dirname "$0")/../.."
irc=${IRC:-.device-bin/irc}
space=$1 config=$2
shift 2
cache=$(mktemp --suffix=.json)
python3 bench/gpu/force_config.py "$irc" "$space" "$config" "$cache" "$@" || exit 1
IRC_RUN_ARGS="--tune-cache $cache" bash bench/gpu/check_all.sh "$irc" "$@"
rc=$?
rm -f "$cache"
exit $rc
