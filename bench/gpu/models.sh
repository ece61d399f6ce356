#!/usr/bin/env bash
# Whole models on the GPU (issue 15): exports GPT-2, BERT, Llama and ViT to ONNX with seeded random
# weights (scripts/export_models.py, PyTorch eager's float32 outputs beside them), imports each
# with `irc import`, runs it with `irc run --device gpu` and compares the first output with
# PyTorch's (||irc - torch|| / ||torch||), then times it with `irc bench` (kernel by kernel, and
# replayed as one CUDA graph: `--cuda-graph`) beside PyTorch eager and torch.compile (float32,
# as exported; `triton.testing.do_bench`).
#
#   bash bench/gpu/models.sh [small|bench] [IRC]     (on the GPU machine, from the repository root)
set -uo pipefail
cd "$(dirname "$0")/../.."
size=${1:-small}
irc=${2:-.device-bin/irc}
out=${OUT:-/tmp}/models
mkdir -p "$out"
python3 scripts/export_models.py --out "$out" --size "$size" --time > "$out/export.log" 2>&1
grep -E 'export failed' "$out/export.log" || true
printf '| model | import | run | rel. error vs PyTorch | irc ms | irc ms (CUDA graph) | eager ms | torch.compile ms |\n|---|---|---|---|---|---|---|---|\n'
for onnx in "$out"/*_"$size".onnx; do
    stem=${onnx%.onnx}
    name=$(basename "$stem")
    inputs=()
    for npy in "$stem".*.npy; do
        base=$(basename "$npy" .npy)
        in=${base#"$name".}
        [ "$in" = out0 ] && continue
        inputs+=(--input "$in=$npy")
    done
    imp=ok run=- err=- ms=- gms=-
    if ! "$irc" import "$onnx" -o "$stem.ir" > "$stem.import.log" 2>&1; then
        imp="FAIL: $(tail -1 "$stem.import.log" | cut -c1-80)"
    elif ! "$irc" run "$stem.ir" --device gpu "${inputs[@]}" --save-outputs "$stem.irc" > "$stem.run.log" 2>&1; then
        run="FAIL: $(grep -m1 -i error "$stem.run.log" | cut -c1-80)"
    else
        run=ok
        err=$(python3 -c "
import numpy as np, sys
a = np.load('$stem.irc/out0.npy').astype(np.float64); b = np.load('$stem.out0.npy').astype(np.float64)
print(f'{np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30):.2e}' if a.shape == b.shape else f'shape {a.shape} vs {b.shape}')")
        ms=$("$irc" bench "$stem.ir" "${inputs[@]}" --json 2>/dev/null | tail -1 \
            | python3 -c "import json,sys; print(f\"{json.load(sys.stdin)['report']['timing']['median_ms']:.3f}\")" 2>/dev/null || echo -)
        gms=$("$irc" bench "$stem.ir" "${inputs[@]}" --cuda-graph --json 2>/dev/null | tail -1 \
            | python3 -c "import json,sys; print(f\"{json.load(sys.stdin)['report']['timing']['median_ms']:.3f}\")" 2>/dev/null || echo -)
    fi
    torch=$(python3 -c "
import json
try:
    t = json.load(open('$stem.torch.json'))
    print(' | '.join(f'{t[k]:.3f}' if k in t else '-' for k in ('eager_ms', 'compile_ms')))
except OSError:
    print('- | -')")
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$imp" "$run" "$err" "$ms" "$gms" "$torch"
done
