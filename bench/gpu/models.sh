#!/usr/bin/env bash
# Whole models on the GPU (issue 15): exports GPT-2, BERT, Llama, ViT, RoBERTa and ResNet to ONNX with seeded random
# weights (scripts/export_models.py, PyTorch eager's outputs beside them, saved as float32), imports each
# with `irc import` (a model over 2 GB through its external data file), runs it with
# `irc run --device gpu --check` (irc's own check against the reference interpreter, on sampled
# rows when large) and compares the first output with PyTorch's (||irc - torch|| / ||torch||),
# then times it with `irc bench` (kernel by kernel, and replayed as one CUDA graph:
# `--cuda-graph`) beside PyTorch eager and torch.compile (in the models' type, as exported: DTYPE;
# `triton.testing.do_bench`). The graph's floor and the sum of its kernels' own floors come from
# `irc bench --json`.
#
#   bash bench/gpu/models.sh [small|bench] [IRC]     (on the GPU machine, from the repository root)
#
# Environment:
#   MODELS    comma-separated subset of gpt2,bert,llama,vit,roberta,resnet (default: all six)
#   DTYPE     float32 (default), float16 or bfloat16: the models' type (files <model>_<size>_f16.*,
#             <model>_<size>_bf16.*; PyTorch eager and torch.compile run in that type too)
#   EXPORTER  torchscript (default) or dynamo (PyTorch's default exporter; OPSET 23 by default)
#   ATTENTION eager (default) or sdpa: the transformers' attention (sdpa with the dynamo exporter
#             at opset 23: ONNX's `Attention` op; files <stem>_sdpa_dyn23.*)
#   BATCHES   space-separated batch sizes (default: the configuration's batch for small,
#             "1 8" for bench: the files are then <model>_<size>_b<B>.*)
#   WORK      where the exports, IR and weights go (default /tmp/irc-models; a bench-size
#             Llama is 4.4 GB of weights, twice: ONNX data and safetensors); they are deleted
#             after each model unless KEEP=1
#   STEP_TIMEOUT  seconds allowed to each irc step (default 900)
#   OUT       the table goes to $OUT/bench/results/<date>-models-<size>.md (and .json)
#
# One model failing (export, import, run, check or bench) is recorded in its row and the others
# go on. Each step's log is in $WORK/<stem>.*.log and copied to $OUT/bench/results/logs/.
set -uo pipefail
cd "$(dirname "$0")/../.."
size=${1:-small}
irc=${2:-.device-bin/irc}
irc=$(cd "$(dirname "$irc")" && pwd)/$(basename "$irc")
work=${WORK:-/tmp/irc-models}
models=${MODELS:-gpt2,bert,llama,vit,roberta,resnet}
if [ "$size" = bench ]; then batches=${BATCHES-1 8}; else batches=${BATCHES-}; fi
step_timeout=${STEP_TIMEOUT:-900}
results=${OUT:-.}/bench/results
mkdir -p "$work" "$results/logs"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '-')
dtype=${DTYPE:-float32}
case $dtype in
    float32) suffix= ;;
    float16) suffix=_f16 ;;
    bfloat16) suffix=_bf16 ;;
    *) echo "models.sh: DTYPE must be float32, float16 or bfloat16 (got $dtype)" >&2; exit 2 ;;
esac
# The exporter and attention form (export_models.py's --exporter/--attention; files
# <stem>_sdpa_dyn23.* for the dynamo exporter's `Attention` op at opset 23).
exporter=${EXPORTER:-torchscript}
attention=${ATTENTION:-eager}
opset=${OPSET:-$([ "$exporter" = dynamo ] && echo 23 || echo 17)}
[ "$attention" != eager ] && suffix=${suffix}_$attention
[ "$exporter" = dynamo ] && suffix=${suffix}_dyn$opset
table=$results/$(date +%F)-models-$size${suffix}${gpu:+-$gpu}.md
rows=$work/rows-$size$suffix.jsonl
: > "$rows"

# The exports: one call per model and batch, so memory is given back between them.
export_flags=(--out "$work" --size "$size" --time --dtype "$dtype" --exporter "$exporter"
              --opset "$opset" --attention "$attention")
[ "$size" = bench ] && export_flags+=(--device cuda)
stems=()
for model in ${models//,/ }; do
    for b in ${batches:-default}; do
        if [ "$b" = default ]; then stem=$work/${model}_$size$suffix; bflag=(); else stem=$work/${model}_${size}_b$b$suffix; bflag=(--batch "$b"); fi
        stems+=("$stem")
        python3 scripts/export_models.py "${export_flags[@]}" --models "$model" "${bflag[@]}" \
            > "$stem.export.log" 2>&1
        grep -E 'export failed|external data' "$stem.export.log" >&2 || true
    done
done

# What `irc bench --json` reports: median ms, kernels, graph floor, the kernels' floors summed.
bench_json() {
    python3 -c "
import json, sys
try:
    v = json.loads(sys.stdin.read().strip().splitlines()[-1])
    r = v['report']
    print(json.dumps({'ms': r['timing']['median_ms'], 'kernels': v['kernels'],
                      'floor_ms': r['floor_ms'], 'kernel_floor_ms': v.get('kernel_floor_ms')}))
except Exception as e:
    print(json.dumps({'error': type(e).__name__}))"
}

for stem in "${stems[@]}"; do
    name=$(basename "$stem")
    if [ ! -f "$stem.onnx" ]; then
        msg=$(grep -m1 'export failed' "$stem.export.log" | cut -c1-120 | tr '"' "'")
        echo "{\"model\": \"$name\", \"export\": \"FAIL: ${msg:-see log}\"}" >> "$rows"
        cp "$stem.export.log" "$results/logs/" 2>/dev/null
        continue
    fi
    inputs=()
    for npy in "$stem".*.npy; do
        base=$(basename "$npy" .npy)
        in=${base#"$name".}
        [ "$in" = out0 ] && continue
        inputs+=(--input "$in=$npy")
    done
    imp=ok run=- check=- err=- plain='{}' graph='{}'
    if ! timeout "$step_timeout" "$irc" import "$stem.onnx" -o "$stem.ir" > "$stem.import.log" 2>&1; then
        imp="FAIL: $(tail -1 "$stem.import.log" | cut -c1-100 | tr '"' "'")"
    else
        timeout "$step_timeout" "$irc" run "$stem.ir" --device gpu --check "${inputs[@]}" \
            --save-outputs "$stem.irc" > "$stem.run.log" 2>&1
        rc=$?
        if [ -f "$stem.irc/out0.npy" ]; then
            run=ok
            if [ $rc = 0 ]; then check=ok
            elif [ $rc = 124 ]; then check="timeout"
            elif grep -q 'check: MISMATCH' "$stem.run.log"; then check="MISMATCH"
            else check="FAIL: $(grep -m1 -i error "$stem.run.log" | cut -c1-80 | tr '"' "'")"; fi
            err=$(python3 -c "
import numpy as np
a = np.load('$stem.irc/out0.npy').astype(np.float64); b = np.load('$stem.out0.npy').astype(np.float64)
bad = int((~np.isfinite(a)).sum())
e = np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30) if a.shape == b.shape else None
print((f'{e:.2e}' if e is not None else f'shape {a.shape} vs {b.shape}') + (f' ({bad} non-finite)' if bad else ''))")
            plain=$(timeout "$step_timeout" "$irc" bench "$stem.ir" "${inputs[@]}" --json 2> "$stem.bench.log" | bench_json)
            graph=$(timeout "$step_timeout" "$irc" bench "$stem.ir" "${inputs[@]}" --cuda-graph --json 2> "$stem.bench-graph.log" | bench_json)
        else
            run="FAIL: $(grep -m1 -i error "$stem.run.log" | cut -c1-100 | tr '"' "'")"
            [ $rc = 124 ] && run="FAIL: timeout after ${step_timeout}s"
        fi
    fi
    torch=$(cat "$stem.torch.json" 2>/dev/null || echo '{}')
    python3 -c "
import json, sys
row = dict(model='$name', export='ok', imp=sys.argv[1], run=sys.argv[2], check=sys.argv[3], err=sys.argv[4],
           plain=json.loads(sys.argv[5] or '{}'), graph=json.loads(sys.argv[6] or '{}'), torch=json.loads(sys.argv[7] or '{}'))
print(json.dumps(row))" "$imp" "$run" "$check" "$err" "$plain" "$graph" "$torch" >> "$rows"
    cp "$stem".*.log "$results/logs/" 2>/dev/null
    [ "${KEEP:-0}" = 1 ] || rm -rf "$stem.onnx" "$stem.onnx.data" "$stem.ir" "$stem.safetensors" "$stem.irc" "$stem".*.npy
done

python3 - "$rows" "$table" "$size" "$dtype" <<'EOF'
import json, sys
rows_path, table, size, dtype = sys.argv[1:5]
rows = [json.loads(l) for l in open(rows_path) if l.strip()]
f = lambda d, k: f"{d[k]:.3f}" if isinstance(d.get(k), (int, float)) else "-"
out = [f"# Whole models, {size} size: irc (kernel by kernel and as one CUDA graph) beside PyTorch eager and torch.compile", "",
       f"{dtype} as exported; `irc bench` and `triton.testing.do_bench` medians, L2 flushed. check: `irc run --check` "
       "against irc's reference interpreter; rel. error: irc's first output against PyTorch eager's. "
       "floor: the graph's roofline floor; kernels' floors: each kernel's own floor (its flops, every buffer it "
       "reads or writes moved once), summed over the launch sequence.", "",
       "| model | import | run | check | rel. error vs PyTorch | kernels | irc ms | irc ms (CUDA graph) | floor ms | kernels' floors ms | CUDA graph / kernels' floors | eager ms | torch.compile ms |",
       "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    if r.get("export", "ok") != "ok":
        out.append(f"| {r['model']} | {r['export']} |" + " - |" * 11)
        continue
    p, g, t = r["plain"], r["graph"], r["torch"]
    kf = p.get("kernel_floor_ms") or g.get("kernel_floor_ms")
    ratio = f"{g['ms'] / kf:.2f}" if isinstance(g.get("ms"), (int, float)) and kf else "-"
    kernels = p.get("kernels", g.get("kernels", "-"))
    compile_ms = f(t, "compile_ms") if "compile_ms" in t else ("FAIL" if "compile_error" in t else "-")
    out.append(f"| {r['model']} | {r['imp']} | {r['run']} | {r['check']} | {r['err']} | {kernels} | {f(p, 'ms')} | {f(g, 'ms')} "
               f"| {f(p, 'floor_ms') if 'floor_ms' in p else f(g, 'floor_ms')} | {f({'k': kf}, 'k')} | {ratio} | {f(t, 'eager_ms')} | {compile_ms} |")
text = "\n".join(out) + "\n"
open(table, "w").write(text)
json.dump(rows, open(table[:-3] + ".json", "w"), indent=1)
print(text, end="")
EOF
