#!/usr/bin/env python3
"""Probe (session 33): irc's 16-byte global loads with cache-eviction hints, timed by do_bench.

The emitted CUDA's vector loads (`*reinterpret_cast<const uint4*>(&x)`) are rewritten to one
of several PTX loads, the file compiled by nvcc and launched from Python (`same_timer.Kernels`),
each variant checked against PyTorch eager and timed beside torch.compile:

- plain: the emitted load;
- triton: `ld.global.L1::evict_first.L2::cache_hint` with an `L2::evict_first` policy (what
  Triton emits for `eviction_policy="evict_first"`);
- l2first: the `L2::evict_first` policy alone;
- cs: `ld.global.cs` (evict-first in L1 and L2; run 133's streaming loads).

    python3 bench/gpu/cache_hint_probe.py NAME...
"""

import re
import sys
import tempfile
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parent))
import same_timer  # noqa: E402
import suite  # noqa: E402

LOADS = {
    "triton": "ld.global.L1::evict_first.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;",
    "l2first": "ld.global.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;",
    "cs": "ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];",
}


def helper(asm):
    pol = "%5" in asm
    policy = ('  unsigned long long pol;\n'
              '  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));\n'
              if pol else "")
    extra = ', "l"(pol)' if pol else ""
    return ("__device__ __forceinline__ uint4 irc_ld_hint(const void* p) {\n  uint4 r;\n" + policy +
            f'  asm("{asm}" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p){extra});\n'
            "  return r;\n}\n")


def edit_for(variant):
    if variant == "plain":
        return None
    pat = re.compile(r"\*reinterpret_cast<const uint4\*>\((&p_p[^;]*)\);")

    def edit(text):
        n = len(pat.findall(text))
        out = pat.sub(lambda m: f"irc_ld_hint({m.group(1)});", text)
        i = out.index('\nextern "C" __global__') + 1
        print(f"    {variant}: {n} loads rewritten", flush=True)
        return out[:i] + helper(LOADS[variant]) + "\n" + out[i:]

    return edit


def time_variants(names, variants, tol, rep=100):
    """Prints a table: each workload's torch.compile time and each `(name, edit)` variant's
    (the emitted CUDA rewritten by `edit`, checked against eager within `tol` relative to the
    largest output, else nan), all by `do_bench`."""
    irc = str(suite.REPO / ".device-bin" / "irc")
    print("| workload | tc | " + " | ".join(n for n, _ in variants) + " |")
    print("|---|---|" + "---|" * len(variants))
    for name in names:
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
            cells.append(triton.testing.do_bench(lambda: tc(*xs), warmup=25, rep=rep,
                                                 return_mode="median"))
            for vname, edit in variants:
                try:
                    tag = re.sub(r"[^A-Za-z0-9_]", "_", vname)
                    k = same_timer.Kernels(irc, path, "sm_90a", tmp, xs, edit, tag)
                    k()
                    torch.cuda.synchronize()
                    got = k.output(0, ref.dtype, ref.shape).float()
                    err = float((got - ref.float()).abs().max() / (ref.float().abs().max() + 1e-30))
                    t = triton.testing.do_bench(k, warmup=25, rep=rep, return_mode="median")
                    cells.append(t if err < tol else float("nan"))
                    del k
                except Exception as e:
                    print(f"    {name} {vname}: {e}", flush=True)
                    cells.append(float("nan"))
        print(f"| {name} | " + " | ".join(f"{c:.4f}" for c in cells) + " |", flush=True)


def main():
    variants = [(v, edit_for(v)) for v in ["plain", *LOADS]]
    time_variants(sys.argv[1:], variants, 1e-2)


if __name__ == "__main__":
    main()
