#!/usr/bin/env python3
"""irc's kernels and torch.compile's timed by one clock, two ways (session 33).

The suite times irc with `irc bench` (an L2 flush by `cuMemsetD8` of twice the L2 before each
repetition, CUDA events, median) and PyTorch with `triton.testing.do_bench` (a 256 MB buffer
zeroed by a kernel before each repetition, events, median). For rows whose time is a few tens
of microseconds the two flushes may leave the L2 in different states (dirty lines written back
during the timed kernel). This script launches irc's emitted kernels from Python (the CUDA file
compiled by nvcc, launched through the driver API as its manifest says, on PyTorch's stream)
and times them and torch.compile's function

- with `do_bench` (the suite's PyTorch clock), and
- with the `irc bench` flush (`cuMemsetD8` of max(2 x L2, 64 MiB), events, median),

beside `irc bench`'s own number, and checks irc's output against PyTorch eager's.

    python3 bench/gpu/same_timer.py NAME... [--irc PATH] [--arch sm_90a]
"""

import argparse
import ctypes
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parent))
import suite  # noqa: E402

cuda = ctypes.CDLL("libcuda.so.1")


def check(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what}: CUDA driver error {rc}")


def manifest_of(cu):
    text = cu.read_text().splitlines()
    a = text.index("// BEGIN IRC MANIFEST")
    b = text.index("// END IRC MANIFEST")
    return json.loads("\n".join(line[3:] for line in text[a + 1:b]))


class Kernels:
    """irc's launches of one graph, on PyTorch's current stream."""

    def __init__(self, irc, path, arch, tmp, xs, edit=None, tag="k"):
        cu = tmp / f"{tag}.cu"
        subprocess.run([irc, "--emit=cuda", "--arch", arch, str(path), "-o", str(cu)], check=True)
        if edit:
            cu.write_text(edit(cu.read_text()))
        cubin = tmp / f"{tag}.cubin"
        subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-O3", "-diag-suppress", "177", "-o",
                        str(cubin), str(cu)], check=True)
        self.m = manifest_of(cu)
        if any(b.get("tensor_map") for b in self.m["buffers"]):
            raise RuntimeError("tensor maps are not launched by this script")
        mod = ctypes.c_void_p()
        check(cuda.cuModuleLoad(ctypes.byref(mod), str(cubin).encode()), "cuModuleLoad")
        self.bufs = []
        for b in self.m["buffers"]:
            t = torch.zeros(max(b["bytes"], 1), dtype=torch.uint8, device="cuda")
            self.bufs.append(t)
        for i, x in zip(self.m["inputs"], xs):
            src = x.contiguous().view(torch.uint8).reshape(-1)
            self.bufs[i][: src.numel()].copy_(src)
        self.launches = []
        for l in self.m["launches"]:
            if l.get("cooperative"):
                raise RuntimeError("cooperative launches are not supported by this script")
            f = ctypes.c_void_p()
            check(cuda.cuModuleGetFunction(ctypes.byref(f), mod, l["kernel"].encode()),
                  "cuModuleGetFunction")
            if l["shared_bytes"] > 48 * 1024:
                check(cuda.cuFuncSetAttribute(f, 8, ctypes.c_int(l["shared_bytes"])),
                      "cuFuncSetAttribute")
            ptrs = [ctypes.c_uint64(self.bufs[a].data_ptr()) for a in l["args"]]
            params = (ctypes.c_void_p * len(ptrs))(*[ctypes.cast(ctypes.byref(p), ctypes.c_void_p)
                                                     for p in ptrs])
            self.launches.append((f, l, ptrs, params))

    def __call__(self):
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        for f, l, _, params in self.launches:
            g, b = l["grid"], l["block"]
            check(cuda.cuLaunchKernel(f, g[0], g[1], g[2], b[0], b[1], b[2], l["shared_bytes"],
                                      stream, params, None), "cuLaunchKernel")

    def output(self, i, dtype, shape):
        return self.bufs[self.m["outputs"][i]].view(dtype).reshape(shape)


def irc_flush_ms(fn, reps=100, warmup=25):
    """Times `fn` as `irc bench` does: a cuMemsetD8 flush before each repetition, events."""
    props = torch.cuda.get_device_properties(0)
    n = max(2 * props.L2_cache_size, 64 << 20)
    buf = torch.empty(n, dtype=torch.uint8, device="cuda")
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def flush():
        check(cuda.cuMemsetD8Async(ctypes.c_uint64(buf.data_ptr()), ctypes.c_ubyte(0),
                                   ctypes.c_size_t(n), stream), "cuMemsetD8Async")

    for _ in range(warmup):
        flush()
        fn()
    torch.cuda.synchronize()
    evs = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush()
        s.record()
        fn()
        e.record()
        evs.append((s, e))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in evs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="+")
    ap.add_argument("--irc", default=str(suite.REPO / ".device-bin" / "irc"))
    ap.add_argument("--arch", default="sm_90a")
    args = ap.parse_args()
    print("| workload | irc bench | irc do_bench | irc memset-flush | tc do_bench | tc memset-flush | irc max err |")
    print("|---|---|---|---|---|---|---|")
    for name in args.names:
        path = suite.workload_path(name)
        params, results = suite.signature(path)
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            xs, specs = suite.make_inputs(params, 0, tmp)
            eager, _ = suite.workload_fns(name, path)
            k = Kernels(args.irc, path, args.arch, tmp, xs)
            with torch.no_grad():
                ref = eager(*xs)
                k()
                torch.cuda.synchronize()
                got = k.output(0, ref.dtype, ref.shape)
                err = float((got.float() - ref.float()).abs().max())
                torch._dynamo.reset()
                tc = torch.compile(eager, dynamic=False)
                tc(*xs)
                rows = [
                    triton.testing.do_bench(k, warmup=25, rep=100, return_mode="median"),
                    irc_flush_ms(k),
                    triton.testing.do_bench(lambda: tc(*xs), warmup=25, rep=100,
                                            return_mode="median"),
                    irc_flush_ms(lambda: tc(*xs)),
                ]
            flags = [a for s in specs for a in ("--input", s)]
            out = subprocess.run([args.irc, "bench", str(path), "--json", "--arch", args.arch,
                                  *flags], capture_output=True, text=True, check=True).stdout
            bench = json.loads(out.strip().splitlines()[-1])["report"]["timing"]["median_ms"]
        cells = " | ".join(f"{v:.4f}" for v in [bench, *rows])
        print(f"| {name} | {cells} | {err:.3g} |", flush=True)


if __name__ == "__main__":
    main()
