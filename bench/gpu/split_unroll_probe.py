#!/usr/bin/env python3
"""Probe (session 33, run 248): the split row reduction's 16-byte loads a thread an iteration.

The split schedule's block of 256 threads reads 4 vectors a thread an iteration (16 KiB a
block); Triton's chan_mean reads one a thread (run 247: its kernel at 86% of DRAM peak against
irc's 80%, at equal occupancy). The emitted CUDA's chunk loop is rewritten to U vectors a
thread an iteration (U = 1, 2, 4 (as emitted), 8), optionally with Triton's evict-first loads
(`cache_hint_probe.py`), each variant checked against PyTorch eager and timed by do_bench
beside torch.compile.

    python3 bench/gpu/split_unroll_probe.py NAME...
"""

import re
import sys
import tempfile
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cache_hint_probe  # noqa: E402
import same_timer  # noqa: E402
import suite  # noqa: E402

THREADS = 256


def unroll(u, hint=False):
    def edit(text):
        m = re.search(r"for \(int (v_base\d+) = 0; \1 < (\d+); \1 \+= 1024\)", text)
        if not m:
            raise RuntimeError("no split chunk loop")
        base = m.group(1)
        step = THREADS * u
        text = text.replace(f"{base} += 1024)", f"{base} += {step})")
        text = text.replace(f"({base} + 1023)", f"({base} + {step - 1})")
        text = re.sub(r"(for \(int v_u\d+ = 0; v_u\d+ < )4(; v_u\d+ \+= 1\))", rf"\g<1>{u}\g<2>", text)
        if hint:
            text = cache_hint_probe.edit_for("triton")(text)
        return text

    return edit


VARIANTS = [("u1", unroll(1)), ("u2", unroll(2)), ("u4", None), ("u8", unroll(8)),
            ("u1+ef", unroll(1, True)), ("u4+ef", unroll(4, True))]


def main():
    irc = str(suite.REPO / ".device-bin" / "irc")
    print("| workload | tc | " + " | ".join(n for n, _ in VARIANTS) + " |")
    print("|---|---|" + "---|" * len(VARIANTS))
    for name in sys.argv[1:]:
        path = suite.workload_path(name)
        params, _ = suite.signature(path)
        cells = []
        with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
            tmp = Path(tmp)
            xs, _ = suite.make_inputs(params, 0, tmp)
            eager, _ = suite.workload_fns(name, path)
            ref = eager(*xs)
            torch._dynamo.reset()
            tc = torch.compile(eager, dynamic=False)
            tc(*xs)
            cells.append(triton.testing.do_bench(lambda: tc(*xs), warmup=25, rep=200,
                                                 return_mode="median"))
            for vname, edit in VARIANTS:
                try:
                    k = same_timer.Kernels(irc, path, "sm_90a", tmp, xs, edit, vname.replace("+", "_"))
                    k()
                    torch.cuda.synchronize()
                    got = k.output(0, ref.dtype, ref.shape).float()
                    err = float((got - ref.float()).abs().max() / (ref.float().abs().max() + 1e-30))
                    t = triton.testing.do_bench(k, warmup=25, rep=200, return_mode="median")
                    cells.append(t if err < 1e-3 else float("nan"))
                    del k
                except Exception as e:
                    print(f"    {name} {vname}: {e}", flush=True)
                    cells.append(float("nan"))
        print(f"| {name} | " + " | ".join(f"{c:.4f}" for c in cells) + " |", flush=True)


if __name__ == "__main__":
    main()
