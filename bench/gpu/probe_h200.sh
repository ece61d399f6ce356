#!/usr/bin/env bash
# On the GPU machine (session 13's first call on an H200): the two ceilings (a device-to-device
# copy counting bytes read + written; a bf16 8192³ matmul through PyTorch), a GEMM alignment
# probe (mm_irregular's shape beside neighbours whose sizes are multiples of the tiles or of
# 128 bytes, timed by `irc bench`), then the given suite rows beside eager and torch.compile.
# Usage: bench/gpu/probe_h200.sh [SUITE_ARGS...]   (passed to suite.py after --peak-*)
set -uo pipefail
cd "$(dirname "$0")/../.."
suite_args=("$@")
export PYTHONUNBUFFERED=1
irc=.device-bin/irc
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
python3 - <<'EOF' | tee "$out/ceilings.txt"
import torch, triton.testing as tt
n = 1 << 30  # 2 GiB of f16 each way
a = torch.empty(n, dtype=torch.float16, device="cuda").normal_()
b = torch.empty_like(a)
ms = tt.do_bench(lambda: b.copy_(a), warmup=50, rep=400, return_mode="median")
print(f"copy: {2 * 2 * n / ms / 1e6:.0f} GB/s (read + write, {ms:.3f} ms)")
del a, b
x = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
y = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
ms = tt.do_bench(lambda: x @ y, warmup=50, rep=400, return_mode="median")
print(f"bf16 8192^3: {2 * 8192**3 / ms / 1e9:.0f} TFLOP/s ({ms:.3f} ms)")
EOF
gbps=$(sed -n 's/^copy: \([0-9]*\) GB.*/\1/p' "$out/ceilings.txt")
tflops=$(sed -n 's/^bf16 8192^3: \([0-9]*\) TFLOP.*/\1/p' "$out/ceilings.txt")
echo "ceilings: $gbps GB/s, $tflops TFLOP/s"

# GEMM alignment probe: M N K f16, A [M,K] and B [K,N] row-major.
tmp=$(mktemp -d)
printf '| M | N | K | A row bytes mod 128 | B row bytes mod 128 | ms | TFLOP/s | config |\n|---|---|---|---|---|---|---|---|\n'
for s in "8200 2952 5920" "8192 2944 5888" "8192 3072 6144" "8192 2952 5888" "8192 2944 5920" \
         "8200 2944 5888" "8205 2952 5928" "8205 2949 5921"; do
    set -- $s
    f=$tmp/mm_${1}x${2}x${3}.ir
    printf 'graph @mm(%%a: tensor<%sx%sxf16>, %%b: tensor<%sx%sxf16>) -> tensor<%sx%sxf16> {\n  %%c = matmul %%a, %%b\n  return %%c\n}\n' \
        "$1" "$3" "$3" "$2" "$1" "$2" >"$f"
    j=$("$irc" bench "$f" --json --explain 2>"$tmp/explain.txt" | tail -1)
    ms=$(echo "$j" | python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["report"]["timing"]["median_ms"])' 2>/dev/null || echo nan)
    cfg=$(grep -m1 'irc: config' "$tmp/explain.txt" | sed 's/^irc: config: @[^ ]* (\([a-z_0-9]*\);[^)]*): /\1 /' | tr '|' '/' | cut -c1-60)
    tf=$(python3 -c "print('%.0f' % (2*$1*$2*$3/($ms*1e9)))" 2>/dev/null || echo nan)
    printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$1" "$2" "$3" $(( $3 * 2 % 128 )) $(( $2 * 2 % 128 )) "$ms" "$tf" "$cfg"
done | tee "$out/gemm-align.md"
head -5 "$tmp/explain.txt"

[ "${#suite_args[@]}" -gt 0 ] || exit 0
python3 bench/gpu/suite.py --peak-gbps "${gbps:-4300}" --peak-tflops "${tflops:-790}" "${suite_args[@]}"
