#!/usr/bin/env python3
"""A/B of the reduction space's cache hint (session 34): each graph's reduction kernels at the
heuristic's schedule with plain loads and with `,evict_first` loads, forced through tuning
caches (`force_config.py`), each checked on the GPU against the interpreter (`irc run --check`)
and timed by `irc bench` (L2 flushed) in alternating rounds; prints a markdown table with the
median of each side's medians.

    python3 bench/gpu/hint_ab.py IRC ROUNDS FILE...   (run 251: bench/gpu/reductions/)
"""
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def heuristic(irc, f):
    """The heuristic's reduction points of `f` (without a hint)."""
    p = subprocess.run([irc, "--emit=layout", "--explain", "--no-tune-cache", "--arch", "sm_90a", f],
                       capture_output=True, text=True)
    pts = re.findall(r"\(reduction; [^)]*\): (\S+) \[", p.stderr)
    return sorted({x.replace(",evict_first", "") for x in pts})


def bench(irc, f, cache):
    p = subprocess.run([irc, "bench", f, "--json", "--tune-cache", cache], capture_output=True,
                       text=True)
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])["report"]["timing"]["median_ms"]
    except Exception:
        return float("nan")


def main(argv):
    irc, rounds, files = argv[0], int(argv[1]), argv[2:]
    print("| graph | schedule | plain ms | evict_first ms | ef / plain | checks |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            name = Path(f).stem
            pts = heuristic(irc, f)
            if len(pts) != 1:
                print(f"| {name} | {pts} | | | | skipped: not one reduction schedule |")
                continue
            caches = {}
            for tag, cfg in [("plain", pts[0]), ("ef", pts[0] + ",evict_first")]:
                cache = f"{tmp}/{name}-{tag}.json"
                subprocess.run([sys.executable, str(HERE / "force_config.py"), irc, "reduction@v4",
                                cfg, cache, f], capture_output=True, check=True)
                caches[tag] = cache
            # The plain point is the code every build runs (the corpus checks it): the hinted
            # one is checked here, through both backends.
            checks = []
            for backend in ["cuda", "mlir"]:
                r = subprocess.run([irc, "run", f, "--device", "gpu", "--random", "--check",
                                    "--backend", backend, "--tune-cache", caches["ef"]],
                                   capture_output=True, text=True)
                checks.append(f"{backend} {'ok' if r.returncode == 0 else 'FAILED'}")
                if r.returncode != 0:
                    print(f"    {name} {backend}: " + " | ".join(r.stderr.splitlines()[-3:]),
                          file=sys.stderr)
            times = {tag: [] for tag in caches}
            for _ in range(rounds):
                for tag, cache in caches.items():
                    times[tag].append(bench(irc, f, cache))
            med = {t: statistics.median([x for x in v if x == x] or [float("nan")])
                   for t, v in times.items()}
            print(f"| {name} | {pts[0]} | {med['plain']:.4f} | {med['ef']:.4f} | "
                  f"{med['ef'] / med['plain']:.3f} | {', '.join(checks)} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
