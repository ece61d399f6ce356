#!/usr/bin/env python3
"""The GPU benchmark suite: irc against PyTorch on MISSION.md's workloads, side by side in one run.

Runs on a machine with a GPU, PyTorch and Triton (no Rust, no network needed). For every
workload (one `examples/NAME.ir` each) it

1. makes seeded inputs with torch, of the shapes and dtypes the .ir file declares, and saves them
   as .npy (bf16 as float32 holding bf16-rounded values, which is what `irc run` reads);
2. times PyTorch eager, torch.compile and, for attention, SDPA with `triton.testing.do_bench`
   (median, L2 flushed before each run);
3. runs `irc run FILE --device gpu --input ... --save-outputs DIR` and checks the results against
   a float64 PyTorch reference (||out - ref|| / ||ref||, max abs error, NaN/Inf), and times irc
   with `irc bench FILE --json --input ...` (the same inputs), its kernels at their templates'
   heuristic configurations (no tuning cache read) or, with `--tune K`, at those `irc tune
   --top-k K` picks for the row first (each kernel's configuration, as `--explain` gives it, is
   kept in the JSON row: `irc_configs`);
4. prints a markdown table and writes it with a JSON file to
   `$OUT/bench/results/<date>-<name>.{md,json}` (or `bench/results/` of the repository when OUT
   is unset), `<name>` from `--name` (default: the GPU's name), with `-2`, `-3`, ... added
   rather than overwriting an earlier table.

A failing irc step is recorded in its row; the suite goes on.

    python3 bench/gpu/suite.py [--suite headline|reductions|gemm|all] [--only NAME]... [--quick]
                               [--no-compile] [--irc PATH] [--tune K]
"""

import argparse
import datetime
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import triton.testing

REPO = Path(__file__).resolve().parents[2]

# MISSION.md's table, in its order.
WORKLOADS = [
    "gemm",
    "gemm_bt",
    "gemm_bias_relu",
    "matmul_divide_exp",
    "softmax",
    "rmsnorm",
    "rmsnorm_gemm",
    "attention",
    "attention_long",
]

# Issue 17's reduction suite, a separate list (`--suite reductions`) so the headline rows stay:
# one `bench/gpu/reductions/NAME.ir` each. Softmax, rmsnorm (weight) and layernorm (weight and
# bias), f16, over rows of 128 to 16M elements (524288 rows of 128 ... 4 rows of 16M, 64M
# elements each); the 16 x 4M f32 LayerNorm over the last three dims of [16,64,256,256];
# reduce_sum over each axis of a [256,512,512] f32 tensor; and the split reductions: 16 rows
# of 4M, 64 outputs of a leading axis, per-channel means of an NCHW tensor.
ROW_SIZES = ["128", "1k", "8k", "64k", "1m", "16m"]
# Plain reductions of one op over given axes (`reduce_OP %x {axes = [...]}`, their eager form
# read from the graph, `reduce_eager`), 8 to 256 MiB: batch-norm statistics of NCHW tensors (f16,
# f32; one inside the L2), leading-axis reductions into 32, 128 and 768 outputs and into 1M,
# few to many rows of f32, bf16 and f16 (many rows of 8 to 64 vectors: the warp schedule).
REDUCE_ROWS = ["bn_stats_f16", "bn_stats_f32", "chan_mean_l2", "colmax_32", "colsum_f32",
               "token_mean", "rows8_f32", "rows64_bf16", "rows256_f32", "sum_axis0_wide",
               "rowsum_many", "rowsum_f32_256", "rowmax_f16_64", "rowsum_bf16_96"]
REDUCTIONS = (
    [f"{op}_{n}" for op in ("softmax", "rmsnorm", "layernorm") for n in ROW_SIZES]
    + ["layernorm_16x4m", "sum_axis0", "sum_axis1", "sum_axis2"]
    + ["sum_few_rows", "colmax_64", "chan_mean"]
    # Log-softmax (f16 rows of 1k; f32 rows of a 32000-token vocabulary), the pre-norm
    # residual (x + r stored and normalized), a mean-squared-error loss to one scalar, and a
    # group norm (32 groups of an NCHW tensor, per-channel scale and shift).
    + ["logsoftmax_1k", "logsoftmax_32000", "prenorm_4k", "mse_loss", "groupnorm_32"]
    + REDUCE_ROWS
)
# Issue 12's GEMM shape classes (`--suite gemm`): one `bench/gpu/gemm/NAME.ir` each — square
# 1k-8k, irregular (aligned and odd), tall-skinny, large K, small K, batched 3-D/4-D,
# matrix-vector (M = 1, N = 1), transposed operands, f16 and bf16, and epilogue chains (bias +
# GELU, scale + residual, row sums, row maxima and column sums in the matmul's epilogue, two
# outputs).
GEMMS = sorted(p.stem for p in (REPO / "bench" / "gpu" / "gemm").glob("*.ir"))
# Issue 13's attention set (`--suite attention`): one `bench/gpu/attention/NAME.ir` each — head
# dims 32/64/128, f16 and bf16, sequences of 512 to 8k, causal (iota/compare/select mask) and
# grouped-query (K/V broadcast over the group axis), beside SDPA and torch.compile.
ATTENTIONS = sorted(p.stem for p in (REPO / "bench" / "gpu" / "attention").glob("*.ir"))
# Elementwise kernels (`--suite pointwise`): one `bench/gpu/pointwise/NAME.ir` each — a
# bias and GELU, SwiGLU's gate, a cast, row and column broadcasts, matrix transposes read by
# elementwise ops, NCHW <-> NHWC permutes and attention's head split as graph results, one
# unary op, rotary embedding (a concat of slices of the heads); each graph's PyTorch version
# is read from the graph itself (`graph_fn`).
POINTWISE = sorted(p.stem for p in (REPO / "bench" / "gpu" / "pointwise").glob("*.ir"))
SUITES = {
    "headline": WORKLOADS,
    "reductions": REDUCTIONS,
    "gemm": GEMMS,
    "attention": ATTENTIONS,
    "pointwise": POINTWISE,
    "all": WORKLOADS + REDUCTIONS + GEMMS + ATTENTIONS + POINTWISE,
}


def reduce_eager(path):
    """The eager form of a graph that is one `reduce_OP %x {axes = [...]}`."""
    m = re.search(r"reduce_(sum|mean|max|min) %x \{axes = \[([0-9, ]*)\]\}", path.read_text())
    op, dims = m.group(1), tuple(int(a) for a in m.group(2).split(","))
    fn = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin}[op]
    return lambda x: fn(x, dim=dims)


def workload_path(name):
    if name in REDUCTIONS:
        return REPO / "bench" / "gpu" / "reductions" / f"{name}.ir"
    if name in GEMMS:
        return REPO / "bench" / "gpu" / "gemm" / f"{name}.ir"
    if name in ATTENTIONS:
        return REPO / "bench" / "gpu" / "attention" / f"{name}.ir"
    if name in POINTWISE:
        return REPO / "bench" / "gpu" / "pointwise" / f"{name}.ir"
    return REPO / "examples" / f"{name}.ir"


DTYPES = {
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f32": torch.float32,
    "f64": torch.float64,
    "i32": torch.int32,
    "i64": torch.int64,
    "i1": torch.bool,
}


def signature(path):
    """[(name, shape, dtype)] of the first graph's parameters and [(shape, dtype)] of its results."""
    text = path.read_text()
    head = text[text.index("graph @") : text.index("{")]
    params = [
        (name, parse_type(ty))
        for name, ty in re.findall(r"%(\w+)\s*:\s*(tensor<[^>]*>)", head.split("->")[0])
    ]
    results = [parse_type(t) for t in re.findall(r"tensor<[^>]*>", head.split("->")[1])]
    return [(n, s, d) for n, (s, d) in params], results


def parse_type(ty):
    parts = ty[len("tensor<") : -1].split("x")
    return [int(p) for p in parts[:-1]], parts[-1]


def attention_scale(path):
    m = re.search(r"constant \{value = ([0-9.eE+-]+)\}", path.read_text())
    return float(m.group(1))


def attention_window(path):
    m = re.search(r"%w = constant \{value = (\d+)\}", path.read_text())
    return int(m.group(1))


def rmsnorm_eps(path):
    m = re.search(r"eps = ([0-9.eE+-]+)", path.read_text())
    return float(m.group(1)) if m else 1e-6


def gemm_fn(name, path):
    """The PyTorch version of a GEMM shape-class graph, from its matmul's flags and epilogue."""
    text = path.read_text()
    ta, tb = "transpose_a = true" in text, "transpose_b = true" in text

    def mm(a, b):
        a = a.transpose(-1, -2) if ta else a
        b = b.transpose(-1, -2) if tb else b
        return a @ b

    if "gelu" in text:
        return lambda a, b, bias: F.gelu(mm(a, b) + bias)
    if "%r: tensor" in text:
        return lambda a, b, r: (mm(a, b) * 0.5).to(a.dtype) + r
    if "reduce_sum" in text and "axes = [0]" in text:
        return lambda a, b: mm(a, b).float().sum(0)
    if "reduce_sum" in text:
        return lambda a, b: torch.relu(mm(a, b)).float().sum(-1)
    if "reduce_max" in text:
        return lambda a, b: mm(a, b).amax(-1, keepdim=True)
    if "return %c, %r" in text:

        def two(a, b):
            c = mm(a, b)
            return c, torch.relu(c)

        return two
    if "%bias: tensor" in text:
        return lambda a, b, bias: mm(a, b) + bias
    return mm


GRAPH_OPS = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "max": torch.maximum, "min": torch.minimum, "pow": torch.pow,
    "gelu": F.gelu, "silu": F.silu, "relu": torch.relu, "sigmoid": torch.sigmoid,
    "exp": torch.exp, "log": torch.log, "tanh": torch.tanh, "neg": torch.neg, "abs": torch.abs,
    "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
}


def graph_fn(path, exact=False):
    """A PyTorch function of a pointwise graph (its elementwise ops, casts, views, slices and
    concats), taking the parameters in order; results are materialized (`contiguous`), as irc
    stores them. With `exact`, casts are skipped (the float64 reference)."""
    text = path.read_text()
    head = text[text.index("graph @") : text.index("{")]
    names = re.findall(r"%(\w+)\s*:", head.split("->")[0])
    body = text[text.index("{", text.index("graph @")) + 1 :]
    steps = []
    for line in body.splitlines():
        line = line.split("//")[0].strip()
        if m := re.match(r"%(\w+) = (\w+) ([^{]*)(\{.*\})?$", line):
            args = re.findall(r"%(\w+)", m.group(3))
            attrs = m.group(4) or ""
            steps.append((m.group(1), m.group(2), args, attrs))
        elif line.startswith("return"):
            rets = re.findall(r"%(\w+)", line)

    def ints(attrs, key):
        return [int(v) for v in re.search(key + r" = \[([^\]]*)\]", attrs).group(1).split(",")]

    def fn(*xs):
        env = dict(zip(names, xs))
        for out, op, args, attrs in steps:
            a = [env[x] for x in args]
            if op == "transpose":
                env[out] = a[0].permute(*ints(attrs, "perm"))
            elif op == "reshape":
                env[out] = a[0].reshape(ints(attrs, "shape"))
            elif op == "broadcast":
                env[out] = a[0].expand(ints(attrs, "shape"))
            elif op == "slice":
                idx = [slice(None)] * a[0].dim()
                starts, ends = ints(attrs, "starts"), ints(attrs, "ends")
                axes = ints(attrs, "axes") if "axes" in attrs else list(range(len(starts)))
                for ax, s, e in zip(axes, starts, ends):
                    idx[ax] = slice(s, e)
                env[out] = a[0][tuple(idx)]
            elif op == "concat":
                env[out] = torch.cat(a, dim=int(re.search(r"axis = (-?\d+)", attrs).group(1)))
            elif op == "cast":
                env[out] = a[0] if exact else a[0].to(DTYPES[re.search(r"dtype = (\w+)", attrs).group(1)])
            else:
                env[out] = GRAPH_OPS[op](*a)
        outs = [env[r].contiguous() for r in rets]
        return outs[0] if len(outs) == 1 else tuple(outs)

    return fn


def workload_fns(name, path):
    """(eager function, extra baselines {label: function}); each takes the inputs in order."""
    if name in POINTWISE:
        return graph_fn(path), {}
    if name in GEMMS:
        return gemm_fn(name, path), {}
    if name == "gemm":
        return (lambda a, b: a @ b), {}
    if name == "gemm_bt":
        return (lambda a, b: a @ b.t()), {}
    if name == "gemm_bias_relu":
        return (lambda a, b, bias: torch.relu(a @ b + bias)), {}
    if name == "matmul_divide_exp":
        return (lambda q, k: torch.exp(q @ k.transpose(-1, -2) / 8.0)), {}
    if name == "softmax" or name.startswith("softmax_"):
        return (lambda x: torch.softmax(x, dim=-1)), {}
    if name == "rmsnorm_gemm":
        eps = rmsnorm_eps(path)
        return (lambda x, g, w: F.rms_norm(x, (x.shape[-1],), g, eps) @ w), {}
    if name.startswith("rmsnorm_"):
        eps = rmsnorm_eps(path)
        return (lambda x, w: F.rms_norm(x, (x.shape[-1],), w, eps)), {}
    if name == "layernorm_16x4m":
        return (lambda x: F.layer_norm(x, x.shape[1:], eps=1e-5)), {}
    if name.startswith("layernorm_"):
        return (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)), {}
    if name.startswith("logsoftmax_"):
        return (lambda x: torch.log_softmax(x, dim=-1)), {}
    if name.startswith("prenorm_"):
        eps = rmsnorm_eps(path)

        def prenorm(x, r, w):
            h = x + r
            return h, F.rms_norm(h, (h.shape[-1],), w, eps)

        return prenorm, {}
    if name == "mse_loss":
        return (lambda a, b: F.mse_loss(a, b)), {}
    if name.startswith("groupnorm_"):
        groups = int(name[len("groupnorm_"):])
        return (lambda x, w, b: F.group_norm(x, groups, w.flatten(), b.flatten(), 1e-5)), {}
    if name in REDUCE_ROWS:
        return reduce_eager(path), {}
    if name == "sum_few_rows":
        return (lambda x: x.sum(dim=1)), {}
    if name == "colmax_64":
        return (lambda x: x.amax(dim=0)), {}
    if name == "chan_mean":
        return (lambda x: x.mean(dim=(0, 2, 3))), {}
    if name.startswith("sum_axis"):
        axis = int(name[len("sum_axis"):])
        return (lambda x: x.sum(dim=axis)), {}
    if name == "rmsnorm":
        eps = rmsnorm_eps(path)
        return (lambda x, w: F.rms_norm(x, (x.shape[-1],), w, eps)), {}
    if name in ("attention", "attention_long"):
        scale = attention_scale(path)

        def eager(q, k, v):
            return torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1) @ v

        def sdpa(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, scale=scale)

        return eager, {"sdpa": sdpa}
    if name.startswith("block_llama"):
        # A Llama-style decoder block (bench/gpu/attention/block_llama_*.ir): grouped-query
        # heads (K/V repeated over each group), rotary embedding by rotate-half, causal
        # attention, SwiGLU MLP; eager with the attention written out, and SDPA.
        eps = rmsnorm_eps(path)
        scale = attention_scale(path)
        dd = signature(path)[0][6][1][-1]

        def block(x, g1, wq, wk, wv, wo, cos, sin, g2, wg, wu, wd, attend):
            b, s, dm = x.shape
            heads, kv = dm // dd, wk.shape[-1] // dd
            h = F.rms_norm(x, (dm,), g1, eps)
            split = lambda t, n: t.reshape(b, s, n, dd).transpose(1, 2)
            rot = lambda t: t * cos + torch.cat((-t[..., dd // 2:], t[..., : dd // 2]), -1) * sin
            q, k, v = rot(split(h @ wq, heads)), rot(split(h @ wk, kv)), split(h @ wv, kv)
            k, v = (t.repeat_interleave(heads // kv, dim=1) for t in (k, v))
            x2 = x + attend(q, k, v).transpose(1, 2).reshape(b, s, dm) @ wo
            h2 = F.rms_norm(x2, (dm,), g2, eps)
            return x2 + (F.silu(h2 @ wg) * (h2 @ wu)) @ wd

        def written(q, k, v):
            n = q.shape[-2]
            keep = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
            s = ((q @ k.transpose(-1, -2)) * scale).masked_fill(~keep, float("-inf"))
            return torch.softmax(s, dim=-1) @ v

        def fused(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)

        return (lambda *xs: block(*xs, written)), {"sdpa": lambda *xs: block(*xs, fused)}
    if name.startswith("block_"):
        # A pre-norm transformer block (bench/gpu/attention/block_*.ir): eager with the
        # attention written out, and the same block with SDPA as the extra baseline.
        eps = rmsnorm_eps(path)
        scale = attention_scale(path)
        heads = 16

        def block(x, g1, wq, wk, wv, wo, g2, w1, w2, attend):
            b, s, dm = x.shape
            h = F.rms_norm(x, (dm,), g1, eps)
            split = lambda t: t.reshape(b, s, heads, dm // heads).transpose(1, 2)
            o = attend(split(h @ wq), split(h @ wk), split(h @ wv))
            x2 = x + o.transpose(1, 2).reshape(b, s, dm) @ wo
            return x2 + F.gelu(F.rms_norm(x2, (dm,), g2, eps) @ w1) @ w2

        def written(q, k, v):
            return torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1) @ v

        def fused(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, scale=scale)

        return (lambda *xs: block(*xs, written)), {"sdpa": lambda *xs: block(*xs, fused)}
    if name in ATTENTIONS:
        scale = attention_scale(path)
        causal = "causal" in name
        # A sliding window (Mistral's): keys at most `window - 1` before the query, causal.
        window = attention_window(path) if "window" in name else None

        def band(n, device):
            i = torch.arange(n, device=device)
            d = i[:, None] - i[None, :]
            return (d >= 0) & (d < window)

        def heads(q, k, v):
            # [B, Hkv, G, S, D] queries over [B, Hkv, 1, S, D] keys/values (grouped-query) as
            # SDPA's [B, H, S, D] / [B, Hkv, S, D]: views of the same memory.
            if q.dim() == 5:
                b, hk, g, sq, d = q.shape
                return q.reshape(b, hk * g, sq, d), k.squeeze(2), v.squeeze(2), q.shape
            return q, k, v, q.shape

        def eager(q, k, v):
            q, k, v, shape = heads(q, k, v)
            if k.shape[1] != q.shape[1]:
                k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
                v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
            s = (q @ k.transpose(-1, -2)) * scale
            if causal:
                n = s.shape[-1]
                mask = torch.ones(n, n, dtype=torch.bool, device=s.device).tril()
                s = s.masked_fill(~mask, float("-inf"))
            if window is not None:
                s = s.masked_fill(~band(s.shape[-1], s.device), float("-inf"))
            return (torch.softmax(s, dim=-1) @ v).reshape(shape)

        def sdpa(q, k, v):
            q, k, v, shape = heads(q, k, v)
            # A window is an explicit boolean mask (SDPA has no window argument; the flash
            # backend then declines and the memory-efficient one runs).
            mask = band(q.shape[-2], q.device) if window is not None else None
            o = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, scale=scale, is_causal=causal,
                enable_gqa=k.shape[1] != q.shape[1]
            )
            return o.reshape(shape)

        return eager, {"sdpa": sdpa}
    raise ValueError(f"no PyTorch version of workload {name}")


def reference(name, path, xs):
    """The float64 reference of a workload."""
    d = [x.double() for x in xs]
    if name.startswith("prenorm_"):
        eps = rmsnorm_eps(path)
        h = d[0] + d[1]
        return h, h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * d[2]
    if name in ("rmsnorm", "rmsnorm_gemm") or name.startswith("rmsnorm_"):
        eps = rmsnorm_eps(path)
        n = d[0] * torch.rsqrt(d[0].pow(2).mean(-1, keepdim=True) + eps) * d[1]
        return n @ d[2] if name == "rmsnorm_gemm" else n
    if name in POINTWISE:
        return graph_fn(path, exact=True)(*d)
    eager, _ = workload_fns(name, path)
    if name in ATTENTIONS and not name.startswith("block_"):
        # One (batch, head) slice at a time: a 16k-token score matrix in float64 is 2 GiB a
        # head (dims 0 and 1 index the same heads of q, k and v, grouped-query included).
        b, h = xs[0].shape[0], xs[0].shape[1]
        return torch.cat(
            [torch.cat([eager(*(x[i:i + 1, j:j + 1] for x in d)) for j in range(h)], 1)
             for i in range(b)], 0)
    return eager(*d)


def flops_and_bytes(name, params, results):
    """The work the floor is computed from: flops (a multiply-add counts 2) and the bytes of
    every input read once and every output written once."""
    size = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i32": 4, "i64": 8, "i1": 1}
    nbytes = sum(math.prod(s) * size[d] for _, s, d in params) + sum(
        math.prod(s) * size[d] for s, d in results
    )
    shapes = {n: s for n, s, _ in params}
    if name in GEMMS:
        text = workload_path(name).read_text()
        a, b = shapes["a"], shapes["b"]
        m, k = (a[-1], a[-2]) if "transpose_a = true" in text else (a[-2], a[-1])
        n = b[-2] if "transpose_b = true" in text else b[-1]
        batch = math.prod(s[:-2]) if len(s := (a if len(a) >= len(b) else b)) > 2 else 1
        flops = 2 * m * n * k * batch
    elif name.startswith("gemm") or name == "rmsnorm_gemm":
        a, b = list(shapes.values())[0], list(shapes.values())[-1]
        if name == "gemm_bias_relu":
            b = shapes["b"]
        m, k = a[-2], a[-1]
        n = b[-2] if name == "gemm_bt" else b[-1]
        flops = 2 * m * n * k
    elif name == "matmul_divide_exp":
        b, h, s, dd = shapes["q"]
        flops = 2 * b * h * s * s * dd
    elif name.startswith("block_llama"):
        b, s, dm = shapes["x"]
        kv, f, dd = shapes["wk"][-1], shapes["wg"][-1], shapes["cos"][-1]
        # Q and O projections, K and V (grouped), gate, up and down, and the causal
        # attention's two products (half the scores).
        flops = 2 * b * s * (2 * dm * dm + 2 * dm * kv + 3 * dm * f) + 2 * b * s * s * dm
    elif name.startswith("block_"):
        b, s, dm = shapes["x"]
        f = shapes["w1"][-1]
        # Q, K, V, O projections, the MLP, and the attention's two products.
        flops = 2 * b * s * (4 * dm * dm + 2 * dm * f) + 4 * b * s * s * dm
    elif name.startswith("attention") or name in ATTENTIONS:
        q, k = shapes["q"], shapes["k"]
        sq, sk, dd = q[-2], k[-2], q[-1]
        flops = 4 * math.prod(q[:-2]) * sq * sk * dd
        if "causal" in name:
            flops //= 2
        if "window" in name:
            w = attention_window(workload_path(name))
            kept = sum(min(i + 1, w) for i in range(sq))
            flops = 4 * math.prod(q[:-2]) * kept * dd
    else:
        flops = 0
    return flops, nbytes


def make_inputs(params, seed, folder):
    """Seeded inputs on the GPU and their .npy files (bf16 as float32 of the rounded values)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    xs, specs = [], []
    for name, shape, dtype in params:
        tdt = DTYPES[dtype]
        if tdt.is_floating_point:
            x = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float32).to(tdt)
        elif tdt == torch.bool:
            x = torch.randint(0, 2, shape, generator=gen, device="cuda").bool()
        else:
            x = torch.randint(-8, 9, shape, generator=gen, device="cuda", dtype=tdt)
        host = x.float() if tdt == torch.bfloat16 else x
        arr = host.cpu().numpy()
        p = folder / f"{name}.npy"
        np.save(p, arr)
        xs.append(x)
        specs.append(f"{name}={p}")
    return xs, specs


def errors(out, ref):
    """(||out - ref|| / ||ref||, max abs error, count of NaN/Inf where ref is finite), in f64;
    for a workload of several results (tuples), the worst of each."""
    if isinstance(out, (tuple, list)):
        each = [errors(o, r) for o, r in zip(out, ref)]
        return max(e[0] for e in each), max(e[1] for e in each), sum(e[2] for e in each)
    o, r = out.double(), ref.double()
    bad = int((~torch.isfinite(o) & torch.isfinite(r)).sum())
    fin = torch.isfinite(o) & torch.isfinite(r)
    diff = torch.where(fin, o - r, torch.zeros_like(o))
    rn = torch.linalg.vector_norm(torch.where(fin, r, torch.zeros_like(r)))
    rel = float(torch.linalg.vector_norm(diff) / rn) if rn > 0 else float(torch.linalg.vector_norm(diff))
    return rel, float(diff.abs().max()), bad


def bench_ms(fn, quick):
    warmup, rep = (5, 20) if quick else (25, 100)
    med, p20, p80 = triton.testing.do_bench(fn, warmup=warmup, rep=rep, quantiles=[0.5, 0.2, 0.8])
    return med


def run_cmd(cmd, timeout, stderr=None):
    """The command's standard output; its standard error appended to `stderr` when given."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-12:]
        raise RuntimeError(f"irc {cmd[1]} exited {p.returncode}: " + " | ".join(tail))
    if stderr is not None:
        stderr.append(p.stderr)
    return p.stdout


def load_npy(path, dtype):
    arr = np.load(path)
    t = torch.from_numpy(arr).cuda()
    return t.to(DTYPES[dtype])


def run_workload(name, args, tmp):
    path = workload_path(name)
    params, results = signature(path)
    flops, nbytes = flops_and_bytes(name, params, results)
    floor = max(flops / (args.peak_tflops * 1e12), nbytes / (args.peak_gbps * 1e9)) * 1e3
    row = {"workload": name, "floor_ms": floor, "flops": flops, "min_bytes": nbytes}
    folder = tmp / name
    folder.mkdir(parents=True, exist_ok=True)
    xs, specs = make_inputs(params, args.seed, folder)
    eager, extra = workload_fns(name, path)
    ref = reference(name, path, xs)
    with torch.no_grad():
        out = eager(*xs)
        row["eager_err"] = errors(out, ref)[0]
        del out
        row["eager_ms"] = bench_ms(lambda: eager(*xs), args.quick)
        for label, fn in extra.items():
            row[f"{label}_ms"] = bench_ms(lambda: fn(*xs), args.quick)
        if not args.no_compile:
            try:
                # Static shapes, compiled afresh: rows that share a function (the same lambda
                # for every softmax size) would otherwise recompile with dynamic shapes after the
                # first size (dynamo's automatic dynamic shapes) and time a generic kernel.
                torch._dynamo.reset()
                compiled = torch.compile(eager, dynamic=False)
                compiled(*xs)
                row["compile_ms"] = bench_ms(lambda: compiled(*xs), args.quick)
            except Exception as e:  # a baseline failing is recorded, not fatal
                row["compile_error"] = str(e).splitlines()[0][:200]
    flags = [a for s in specs for a in ("--input", s)]
    irc = str(args.irc)
    # The kernels' configurations: each template's heuristic, or with --tune K those `irc tune`
    # measures best among the heuristic's and the K best estimated (a cache of this run).
    cache = ["--no-tune-cache"]
    if args.tune:
        cache = ["--tune-cache", str(folder / "tune.json")]
        try:
            run_cmd([irc, "tune", str(path), "--arch", args.arch, "--top-k", str(args.tune),
                     *cache], args.timeout)
        except Exception as e:
            row["irc_tune_error"] = str(e)[:600]
    flags += cache
    # The CUDA backend's columns are `irc_*`; with --mlir, the MLIR backend's are `mlir_*`.
    backends = [("irc", "cuda")] + ([("mlir", "mlir")] if args.mlir else [])
    for key, backend in backends:
        try:
            outdir = folder / f"{key}-out"
            run_cmd([irc, "run", str(path), "--device", "gpu", "--arch", args.arch,
                     "--backend", backend, *flags, "--save-outputs", str(outdir)], args.timeout)
            got = [load_npy(outdir / f"out{i}.npy", d) for i, (_, d) in enumerate(results)]
            rel, mx, bad = errors(got[0] if len(got) == 1 else got, ref)
            row.update({f"{key}_err": rel, f"{key}_max_abs": mx, f"{key}_nonfinite": bad})
            tol = 1e-2 if results[0][1] in ("f16", "bf16") else 1e-4
            # Correct: within the dtype's tolerance, or no further from float64 than PyTorch
            # eager is (a softmax over 16M f16 elements is all subnormals, for either).
            row[f"{key}_correct"] = bad == 0 and (rel <= tol or rel <= 1.25 * row["eager_err"])
        except Exception as e:
            row[f"{key}_run_error"] = str(e)[:600]
        try:
            rep = ["--warmup", "5", "--rep", "20"] if args.quick else []
            err = []
            text = run_cmd([irc, "bench", str(path), "--json", "--arch", args.arch,
                            "--backend", backend, *flags, *rep, "--explain",
                            "--peak-tflops", str(args.peak_tflops),
                            "--peak-gbps", str(args.peak_gbps)],
                           args.timeout, err)
            # Each kernel's configuration and where it came from (`--explain`), in the JSON.
            row[f"{key}_configs"] = [l[len("irc: config: "):] for l in err[0].splitlines()
                                     if l.startswith("irc: config: ")]
            b = json.loads(text.strip().splitlines()[-1])
            r = b["report"]
            row.update({f"{key}_ms": r["timing"]["median_ms"], f"{key}_p20_ms": r["timing"]["p20_ms"],
                        f"{key}_p80_ms": r["timing"]["p80_ms"], f"{key}_kernels": b["kernels"],
                        f"{key}_flops": r["flops"], f"{key}_min_bytes": r["min_bytes"]})
        except Exception as e:
            row[f"{key}_bench_error"] = str(e)[:600]
    baselines = [row[k] for k in ("eager_ms", "compile_ms", "sdpa_ms") if k in row]
    row["best_baseline_ms"] = min(baselines)
    if "irc_ms" in row:
        row["ratio"] = row["irc_ms"] / row["best_baseline_ms"]
        row["pct_of_floor"] = 100.0 * floor / row["irc_ms"]
    del xs, ref
    torch.cuda.empty_cache()
    return row


def fmt(v, spec=".3f"):
    return "–" if v is None else format(v, spec)


def markdown(rows, meta):
    lines = [
        f"# irc GPU benchmark, {meta['date']}, {meta['gpu']}",
        "",
        f"torch {meta['torch']}, triton {meta['triton']}, irc `{meta['irc_version']}`, arch {meta['arch']}; "
        f"`triton.testing.do_bench` medians in ms (L2 flushed); floor = max(flops / {meta['peak_tflops']} TFLOP/s, "
        f"bytes / {meta['peak_gbps']} GB/s); error = ||out - ref|| / ||ref|| against float64 PyTorch "
        "(correct: at most 1e-2 for f16/bf16 results, 1e-4 otherwise, or at most 1.25x eager's error)"
        + (f"; irc's kernels tuned by `irc tune --top-k {meta['tune']}`." if meta.get("tune")
           else "; irc's kernels at their templates' heuristic configurations."),
        "",
        "| workload | floor | eager | torch.compile | SDPA | irc | irc / best | % of floor | irc TFLOP/s | irc error | irc max abs | eager error | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        errs = [r[k] for k in ("irc_run_error", "irc_bench_error", "error") if k in r]
        if errs:
            status = "FAILED: " + errs[0].replace("|", "/")[:160]
        elif not r.get("irc_correct", False):
            status = "WRONG" + (f" ({r['irc_nonfinite']} NaN/Inf)" if r.get("irc_nonfinite") else "")
        else:
            ok = r["ratio"] <= 1.0 and r["irc_ms"] <= 1.15 * r["floor_ms"]
            status = "goal met" if ok else "ok"
        tflops = r["flops"] / (r["irc_ms"] * 1e9) if r.get("flops") and r.get("irc_ms") else None
        lines.append(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                r["workload"], fmt(r.get("floor_ms")), fmt(r.get("eager_ms")),
                fmt(r.get("compile_ms")), fmt(r.get("sdpa_ms")), fmt(r.get("irc_ms")),
                fmt(r.get("ratio"), ".2f"), fmt(r.get("pct_of_floor"), ".1f"), fmt(tflops, ".0f"),
                fmt(r.get("irc_err"), ".2e"), fmt(r.get("irc_max_abs"), ".3g"),
                fmt(r.get("eager_err"), ".2e"), status,
            )
        )
    ratios = [r["ratio"] for r in rows if r.get("ratio") and r.get("irc_correct")]
    if len(ratios) > 1:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        lines += ["", f"Geometric mean of irc / best over the {len(ratios)} correct rows: "
                  f"{geo:.2f}; worst {max(ratios):.2f}."]
    if any("mlir_ms" in r or "mlir_run_error" in r for r in rows):
        lines += [
            "",
            "MLIR backend (`--backend mlir`: the same kernels through MLIR, side by side with the CUDA backend):",
            "",
            "| workload | irc CUDA | irc MLIR | MLIR / CUDA | MLIR error | MLIR max abs | status |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            errs = [r[k] for k in ("mlir_run_error", "mlir_bench_error") if k in r]
            if errs:
                status = "FAILED: " + errs[0].replace("|", "/")[:160]
            elif not r.get("mlir_correct", False):
                status = "WRONG" + (f" ({r['mlir_nonfinite']} NaN/Inf)" if r.get("mlir_nonfinite") else "")
            else:
                status = "ok"
            ratio = r["mlir_ms"] / r["irc_ms"] if "mlir_ms" in r and "irc_ms" in r else None
            lines.append(
                "| {} | {} | {} | {} | {} | {} | {} |".format(
                    r["workload"], fmt(r.get("irc_ms")), fmt(r.get("mlir_ms")), fmt(ratio, ".2f"),
                    fmt(r.get("mlir_err"), ".2e"), fmt(r.get("mlir_max_abs"), ".3g"), status,
                )
            )
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", choices=WORKLOADS + REDUCTIONS + GEMMS + ATTENTIONS + POINTWISE,
                    help="run only this workload (repeatable)")
    ap.add_argument("--suite", choices=sorted(SUITES), default="headline",
                    help="which list to run: the MISSION.md headline rows (default), issue 17's "
                         "reductions, issue 12's GEMM shape classes, or all")
    ap.add_argument("--quick", action="store_true", help="fewer timing repetitions")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--irc", type=Path, default=REPO / ".device-bin" / "irc")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--mlir", action="store_true",
                    help="also run and time the MLIR backend (irc built by bench/gpu/build.sh --mlir)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", help="the results file's name after the date (default: the GPU's)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds for each irc command")
    ap.add_argument("--tune", type=int, metavar="K",
                    help="time irc with the configurations `irc tune --top-k K` picks for each "
                         "row (default: each template's heuristic, no tuning cache read)")
    ap.add_argument("--peak-tflops", type=float, default=737.0)
    ap.add_argument("--peak-gbps", type=float, default=3006.0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA GPU visible to PyTorch")
    try:
        irc_version = run_cmd([str(args.irc), "--version"], 30).strip()
    except Exception as e:
        irc_version = f"unavailable ({e})"
    gpu = torch.cuda.get_device_name()
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "gpu": gpu, "torch": torch.__version__, "triton": triton.__version__,
        "irc_version": irc_version, "arch": args.arch, "tune": args.tune,
        "peak_tflops": args.peak_tflops, "peak_gbps": args.peak_gbps,
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="irc-bench-") as tmp:
        for name in args.only or SUITES[args.suite]:
            t0 = time.time()
            try:
                row = run_workload(name, args, Path(tmp))
            except Exception as e:
                traceback.print_exc()
                row = {"workload": name, "error": f"{type(e).__name__}: {e}"[:600]}
            rows.append(row)
            print(f"{name}: {time.time() - t0:.1f} s " + json.dumps(row), flush=True)
    md = markdown(rows, meta)
    print(md)
    base = Path(os.environ["OUT"]) if os.environ.get("OUT") else REPO
    dest = base / "bench" / "results"
    dest.mkdir(parents=True, exist_ok=True)
    base_stem = f"{meta['date']}-{re.sub(r'[^A-Za-z0-9._-]+', '-', args.name or gpu)}"
    stem, n = base_stem, 1
    while (dest / f"{stem}.md").exists():
        n += 1
        stem = f"{base_stem}-{n}"
    (dest / f"{stem}.md").write_text(md)
    (dest / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"written {dest / stem}.md and .json")


if __name__ == "__main__":
    main()
