#!/usr/bin/env python3
"""Each CUDA kernel's time in a suite row's PyTorch baselines (eager and the row's extras, e.g.
SDPA), from `torch.profiler` over a few runs of each: where PyTorch's time goes, to set beside
`profile_kernels.sh` (irc's kernels of the same graph).

    python3 bench/gpu/profile_torch.py WORKLOAD [RUNS]      (on the GPU machine)
"""
import pathlib
import sys
import tempfile

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import suite  # noqa: E402


def main():
    name = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    path = suite.workload_path(name)
    params, _ = suite.signature(path)
    with tempfile.TemporaryDirectory() as tmp:
        xs, _ = suite.make_inputs(params, 0, pathlib.Path(tmp))
    eager, extra = suite.workload_fns(name, path)
    for label, fn in [("eager", eager)] + list(extra.items()):
        with torch.no_grad():
            for _ in range(3):
                fn(*xs)
            torch.cuda.synchronize()
            acts = [torch.profiler.ProfilerActivity.CUDA]
            with torch.profiler.profile(activities=acts) as prof:
                for _ in range(runs):
                    fn(*xs)
                torch.cuda.synchronize()
        events = [e for e in prof.key_averages() if e.self_device_time_total > 0]
        events.sort(key=lambda e: -e.self_device_time_total)
        total = sum(e.self_device_time_total for e in events) / runs
        print(f"## {name}: {label}, {total:.1f} us of kernels a run")
        for e in events[:25]:
            print(f"{e.self_device_time_total / runs:9.1f} us  x{e.count // runs:<3} {e.key[:110]}")
        print()


if __name__ == "__main__":
    main()
