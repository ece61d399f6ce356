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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cache_hint_probe  # noqa: E402

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
    cache_hint_probe.time_variants(sys.argv[1:], VARIANTS, 1e-3, rep=200)


if __name__ == "__main__":
    main()
