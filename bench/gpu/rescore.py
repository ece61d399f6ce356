"""Rewrites a results table of bench/gpu/suite.py against other peaks (the floor and % of floor).

A run made with the default peaks (the H100's 737 TFLOP/s and 3006 GB/s) on another GPU scores
its rows against the wrong floor; the rows keep their flops and bytes, so the floor can be
computed again. Usage (where PyTorch is installed, as suite.py imports it):

    python3 bench/gpu/rescore.py bench/results/NAME.json --peak-tflops 678 --peak-gbps 4273

rewrites NAME.json and NAME.md in place.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import suite  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", type=Path)
    ap.add_argument("--peak-tflops", type=float, required=True)
    ap.add_argument("--peak-gbps", type=float, required=True)
    args = ap.parse_args()
    data = json.loads(args.json.read_text())
    data["meta"]["peak_tflops"] = args.peak_tflops
    data["meta"]["peak_gbps"] = args.peak_gbps
    for r in data["rows"]:
        if "flops" not in r or "min_bytes" not in r:
            continue
        floor = max(r["flops"] / (args.peak_tflops * 1e12), r["min_bytes"] / (args.peak_gbps * 1e9)) * 1e3
        r["floor_ms"] = floor
        if "irc_ms" in r:
            r["pct_of_floor"] = 100.0 * floor / r["irc_ms"]
    args.json.write_text(json.dumps(data, indent=1) + "\n")
    args.json.with_suffix(".md").write_text(suite.markdown(data["rows"], data["meta"]))
    print(f"rescored {args.json} and its .md")


if __name__ == "__main__":
    main()
