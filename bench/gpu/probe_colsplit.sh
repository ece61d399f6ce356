#!/usr/bin/env bash
# On the GPU machine (session 21): where colmax_64's and sum_few_rows' time goes. Each irc
# kernel's own duration (Nsight Compute, clocks as found), torch.compile's kernels for the same
# reductions (torch.profiler), and the read-only bandwidth a plain reduction reaches (PyTorch's
# full sum of 1 GiB and 128 MiB, timed like the suite: do_bench medians, L2 flushed).
set -uo pipefail
cd "$(dirname "$0")/../.."
irc=${IRC:-.device-bin/irc}
for g in colmax_64 sum_few_rows; do
    echo "=== irc $g (ncu, clocks as found)"
    ncu --clock-control none --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum \
        "$irc" bench "bench/gpu/reductions/$g.ir" --warmup 2 --rep 1 2>/dev/null \
        | grep -E '^"' | awk -F'","' '{print $5, $(NF-2), $(NF-1), $NF}' | tail -12
done
python3 - <<'PY'
import torch, triton.testing as tt
from torch.profiler import profile, ProfilerActivity
def show(name, f, x):
    g = torch.compile(f)
    for _ in range(3):
        g(x)
    torch.cuda.synchronize()
    ms = tt.do_bench(lambda: g(x), warmup=25, rep=200, return_mode="median")
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(5):
            g(x)
        torch.cuda.synchronize()
    print(f"=== torch.compile {name}: {ms:.4f} ms (do_bench)")
    for e in p.key_averages():
        t = getattr(e, "device_time", None)
        if t is None:
            t = getattr(e, "cuda_time", 0.0)
        if t and t > 0:
            print(f"  {e.key[:100]:100s} n={e.count} avg={t:.2f} us")
x = torch.randn(1048576, 64, dtype=torch.float16, device="cuda")
show("colmax_64 amax(0)", lambda x: x.amax(dim=0), x)
y = torch.randn(16, 4194304, dtype=torch.float32, device="cuda")
show("sum_few_rows sum(1)", lambda y: y.sum(dim=1), y)
for n, dt in ((1 << 28, torch.float32), (1 << 26, torch.float16)):
    z = torch.randn(n, dtype=dt, device="cuda")
    ms = tt.do_bench(lambda: z.sum(), warmup=25, rep=200, return_mode="median")
    b = n * z.element_size()
    print(f"read-only torch sum of {b >> 20} MiB {dt}: {ms:.4f} ms = {b / ms / 1e6:.0f} GB/s")
PY
