#!/usr/bin/env python3
"""On the GPU machine: irc's matmul beside cuBLAS (torch.matmul) over square sizes, one run.

    python3 bench/gpu/gemm_sizes.py [--irc PATH] [--sizes 4096,6144,8192] [--dtype f16|bf16]
                                    [--groups 4,16,32] [--check]

Each size: a graph `matmul %a, %b` written to a temporary file, timed by `irc bench --json`
(L2 flushed, CUDA events, median), and `a @ b` timed by `triton.testing.do_bench`; prints one
row per size with both medians and TFLOP/s, so a size where irc falls behind stands out.
`--groups`: irc also timed with each of these walks of the Hopper matmul's tiles
(`bn=B,split=1,group=G` at the heuristic's width, forced by `force_config.py`), one column each;
`--check` runs each forced point once with `irc run --check` first.
"""
import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton.testing

ap = argparse.ArgumentParser()
ap.add_argument("--irc", default=".device-bin/irc")
ap.add_argument("--sizes", default="2048,4096,6144,8192,12288")
ap.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
ap.add_argument("--rep", type=int, default=100)
ap.add_argument("--extra", default="", help="more arguments for irc bench, space-separated")
ap.add_argument("--groups", default="", help="walks to time besides the heuristic's (not the default walk itself), e.g. 4,16,32")
ap.add_argument("--check", action="store_true", help="check each forced walk with irc run --check")
args = ap.parse_args()
dt = {"f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
groups = [int(g) for g in args.groups.split(",") if g]
here = Path(__file__).resolve().parent


def irc_bench(path, cache=None):
    flags = ["--tune-cache", str(cache)] if cache else ["--no-tune-cache"]
    out = subprocess.run([args.irc, "bench", str(path), "--json", "--rep", str(args.rep), *flags,
                          *args.extra.split()], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        return f"error: {out.stderr.strip()[:160]}"
    return json.loads(out.stdout.strip().splitlines()[-1])["report"]["timing"]["median_ms"]


def forced(path, group, d):
    """A tuning cache giving the matmul `bn=B,split=1,group=G` (B: the heuristic's width)."""
    explain = subprocess.run([args.irc, "--emit=layout", "--explain", "--no-tune-cache", str(path)],
                             capture_output=True, text=True).stderr
    bn = re.search(r"bn=(\d+)", explain).group(1)
    cache = Path(d) / f"{path.stem}-g{group}.json"
    run = subprocess.run([sys.executable, str(here / "force_config.py"), args.irc, "matmul_wgmma@v2",
                          f"bn={bn},split=1,group={group}", str(cache), str(path)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        return None
    if args.check:
        chk = subprocess.run([args.irc, "run", str(path), "--device", "gpu", "--random", "--check",
                              "--tune-cache", str(cache)], capture_output=True, text=True, timeout=600)
        print(f"check n={path.stem} group={group}: {'ok' if chk.returncode == 0 else 'FAIL ' + chk.stderr[-300:]}",
              flush=True)
    return cache


cols = "".join(f" group={g} ms |" for g in groups)
print(f"| n | irc ms |{cols} cuBLAS ms | irc TFLOP/s | cuBLAS TFLOP/s | irc / cuBLAS |")
print("|---|---|" + "---|" * len(groups) + "---|---|---|---|")
with tempfile.TemporaryDirectory() as d:
    for n in (int(s) for s in args.sizes.split(",")):
        path = Path(d) / f"mm{n}.ir"
        t = f"tensor<{n}x{n}x{args.dtype}>"
        path.write_text(f"graph @mm{n}(%a: {t}, %b: {t}) -> {t} {{\n  %c = matmul %a, %b\n  return %c\n}}\n")
        caches = [forced(path, g, d) for g in groups]
        irc_ms = irc_bench(path)
        if isinstance(irc_ms, str):
            print(f"| {n} | {irc_ms} |")
            continue
        by_group = []
        for c in caches:
            ms = irc_bench(path, c) if c else "n/a"
            by_group.append(f" {ms:.4f} |" if isinstance(ms, float) else f" {ms} |")
        a = torch.randn(n, n, device="cuda", dtype=dt)
        b = torch.randn(n, n, device="cuda", dtype=dt)
        ref_ms = triton.testing.do_bench(lambda: a @ b, rep=args.rep, return_mode="median")
        fl = 2 * n ** 3 / 1e9
        print(f"| {n} | {irc_ms:.4f} |{''.join(by_group)} {ref_ms:.4f} | {fl / irc_ms:.0f} | "
              f"{fl / ref_ms:.0f} | {irc_ms / ref_ms:.3f} |", flush=True)
        del a, b
        torch.cuda.empty_cache()
