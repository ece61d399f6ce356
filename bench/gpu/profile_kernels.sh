#!/usr/bin/env bash
# On the GPU machine: each kernel's own time for one graph (or ONNX model), under Nsight
# Compute (`gpu__time_duration.sum`, one launch of each kernel: `irc bench --warmup 0 --rep 1`),
# summed by the kernel's role (its name without the graph and index: `matmul`, `softmax`, ...)
# and listed slowest first — where a whole model's time goes.
#
#   bash bench/gpu/profile_kernels.sh GRAPH.ir|MODEL.onnx [irc bench options...]
#
# Environment: IRC (default .device-bin/irc), TOP (kernels listed, default 25).
set -euo pipefail
cd "$(dirname "$0")/../.."
irc=${IRC:-.device-bin/irc}
input=$1
shift
csv=$(mktemp)
ncu --csv --metrics gpu__time_duration.sum -k 'regex:_k[0-9]+_' \
    "$irc" bench "$input" --warmup 0 --rep 1 "$@" > "$csv" 2> "$csv.err" || {
    tail -5 "$csv.err" >&2
    exit 1
}
python3 - "$csv" "${TOP:-25}" <<'PY'
import csv, re, sys
from collections import defaultdict
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))
        if r.get("Metric Name") == "gpu__time_duration.sum"]
if not rows:
    sys.exit("no kernel times in the Nsight Compute output")
kernels = [(r["Kernel Name"], float(r["Metric Value"].replace(",", "")) * scale[r["Metric Unit"]]) for r in rows]
total = sum(t for _, t in kernels)
by_role = defaultdict(lambda: [0, 0.0])
for name, t in kernels:
    role = re.sub(r"^.*_k\d+_", "", name)
    by_role[role][0] += 1
    by_role[role][1] += t
print(f"{len(kernels)} kernels, {total / 1e3:.3f} ms in all (one launch each, no overlap)")
print("\n| role | kernels | us | share |\n|---|---|---|---|")
for role, (n, t) in sorted(by_role.items(), key=lambda x: -x[1][1]):
    print(f"| {role} | {n} | {t:.1f} | {100 * t / total:.1f}% |")
print("\n| kernel | us |\n|---|---|")
for name, t in sorted(kernels, key=lambda x: -x[1])[: int(sys.argv[2])]:
    print(f"| {name} | {t:.1f} |")
PY
rm -f "$csv" "$csv.err"
