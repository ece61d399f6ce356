#!/usr/bin/env bash
# On the GPU machine: per-kernel ncu metrics (duration, DRAM bytes and throughput, occupancy,
# L2 hit rate) of irc's kernels for some graphs and of torch.compile's kernels for the same
# reductions, side by side. ncu runs with --clock-control none (the GPU's clocks untouched).
# Usage: bench/gpu/ncu_compare.sh IR_FILE...   (torch.compile rows: chan_mean, layernorm_16x4m,
# softmax when their graphs are among the files)
set -uo pipefail
cd "$(dirname "$0")/../.."
irc=${IRC:-.device-bin/irc}
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct,launch__grid_size,launch__registers_per_thread,smsp__inst_executed.sum
for f in "$@"; do
    echo "=== irc $f"
    timeout 150 ncu --clock-control none --metrics "$metrics" --launch-skip 0 --launch-count 8 \
        "$irc" bench "$f" --warmup 0 --rep 1 2>&1 | grep -E "^  [a-zA-Z_0-9]+.*\(|gpu__|dram__|sm__|lts__|launch__|smsp__" | head -60
    name=$(basename "$f" .ir)
    case "$name" in
    chan_mean|layernorm_16x4m|softmax) ;;
    *) continue ;;
    esac
    echo "=== torch.compile $name"
    cat >/tmp/tc_$name.py <<PY
import torch, torch.nn.functional as F
name = "$name"
if name == "chan_mean":
    x = torch.randn(32, 64, 128, 128, device="cuda"); f = lambda x: x.mean(dim=(0, 2, 3))
elif name == "layernorm_16x4m":
    x = torch.randn(16, 64, 256, 256, device="cuda"); f = lambda x: F.layer_norm(x, x.shape[1:], eps=1e-5)
else:
    x = torch.randn(262144, 1024, device="cuda", dtype=torch.float16); f = lambda x: torch.softmax(x, dim=-1)
g = torch.compile(f)
for _ in range(3): g(x)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
g(x)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
PY
    timeout 200 ncu --clock-control none --profile-from-start off --metrics "$metrics" python3 /tmp/tc_$name.py 2>&1 \
        | grep -E "^  [a-zA-Z_0-9]+.*\(|gpu__|dram__|sm__|lts__|launch__|smsp__" | head -40
done
