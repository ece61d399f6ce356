#!/usr/bin/env bash
# On the GPU machine: `irc run --device gpu --random --check` on every graph of the corpus
# (examples/, examples/small/, tests/gpu/), and `irc run --device gpu --check` on the exported
# transformer models (tests/onnx_models/hf/*_tiny*.onnx, on their exported inputs), with the
# CUDA backend and, when the irc binary has the `mlir` feature, the MLIR backend. Prints one
# line per run and a summary; exits 1 on any failure.
# Usage: bench/gpu/check_all.sh [IRC [FILE...]]   (default .device-bin/irc, the whole
# corpus; IRC_RUN_ARGS: more arguments for each `irc run`, e.g. `--tune-cache PATH`)
set -uo pipefail
cd "$(dirname "$0")/../.."
irc=${1:-.device-bin/irc}
shift || true
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(examples/*.ir examples/small/*.ir tests/gpu/*.ir tests/onnx_models/hf/*_tiny*.onnx)
backends=(cuda)
if "$irc" --emit=mlir examples/small/gemm.ir >/dev/null 2>&1; then backends+=(mlir); fi
pass=0 fail=0
for f in "${files[@]}"; do
    # A model runs on its exported inputs (<stem>.<input>.npy beside it), a graph on random ones.
    inputs=(--random)
    if [[ $f == *.onnx ]]; then
        inputs=()
        for npy in "${f%.onnx}".*.npy; do
            [ -e "$npy" ] || continue
            name=${npy#"${f%.onnx}".}; name=${name%.npy}
            [[ $name == out[0-9]* ]] || inputs+=(--input "$name=$npy")
        done
    fi
    for b in "${backends[@]}"; do
        start=$(date +%s%N)
        # shellcheck disable=SC2086 # IRC_RUN_ARGS is a list of arguments
        if out=$("$irc" run "$f" --device gpu "${inputs[@]}" --check --backend "$b" ${IRC_RUN_ARGS:-} 2>&1); then
            pass=$((pass + 1)); status=ok
        else
            fail=$((fail + 1)); status=FAIL
        fi
        ms=$(( ($(date +%s%N) - start) / 1000000 ))
        printf '%-4s %-5s %-40s %6d ms  %s\n' "$status" "$b" "$f" "$ms" \
            "$(echo "$out" | grep -iE 'rel|error|mismatch' | tail -1 | cut -c1-120)"
    done
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
