"""What scripts/hf_zoo.py and scripts/tv_zoo.py share: importing an exported model with
`irc import`, running it with `irc run` on saved inputs, and the first output's relative error
against PyTorch's. Each step records its outcome in the row `out` (a dict) under `import`,
`run`, `run_s` and `rel_err`, as the zoo tables print them."""
import json
import os
import subprocess
import tempfile
import time

import numpy as np


def _first_error(text, width):
    lines = [l for l in text.splitlines() if l.strip()]
    err = [l for l in lines if "error" in l.lower()] or lines[-1:]
    return (err[0] if err else "?")[:width].replace("|", "/")


def irc_import(irc, onnx_path, ir, timeout, out, width=240):
    """`irc import ONNX -o IR`; True when it succeeded."""
    try:
        p = subprocess.run([irc, "import", onnx_path, "-o", ir], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        out["import"] = f"FAIL: timeout after {timeout} s"
        return False
    if p.returncode != 0:
        msg = [l for l in p.stderr.splitlines() if l.strip()]
        text = " ".join(msg[:2]) if msg else f"rc {p.returncode}"
        out["import"] = "FAIL: " + text[:width].replace("|", "/")
        return False
    out["import"] = "ok"
    return True


def irc_run_and_compare(irc, ir, inputs, res, ref, timeout, out, extra=(), width=240, t0=None):
    """`irc run IR --input NAME=PATH ... --save-outputs RES [extra]`, then the relative error of
    its first output against the tensor `ref`. `inputs` is a list of (name, path); `t0` the
    time `run_s` counts from (default: now)."""
    cmd = [irc, "run", ir, "--save-outputs", res]
    for name, path in inputs:
        cmd += ["--input", f"{name}={path}"]
    cmd += list(extra)
    t0 = time.time() if t0 is None else t0
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        out["run"] = f"FAIL: timeout after {timeout} s"
        return
    out["run_s"] = round(time.time() - t0, 1)
    got = os.path.join(res, "out0.npy")
    if not os.path.exists(got):
        out["run"] = "FAIL: " + _first_error(p.stderr + p.stdout, width)
        return
    if p.returncode == 0:
        out["run"] = "ok"
    elif "MISMATCH" in p.stdout + p.stderr:
        out["run"] = "MISMATCH"
    else:
        out["run"] = f"rc {p.returncode}"
    x = np.load(got).astype(np.float64)
    y = ref.detach().float().numpy().astype(np.float64)
    out["rel_err"] = (f"{np.linalg.norm(x - y) / max(np.linalg.norm(y), 1e-30):.2e}"
                      if x.shape == y.shape else f"shape {x.shape} vs {y.shape}")


def run_rows(names, row, keep=None):
    """`row(name, work)` for each name, printed as JSON as it finishes, in a temporary folder
    (or `keep`); the rows."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = keep or tmp
        os.makedirs(work, exist_ok=True)
        for name in names:
            r = row(name, work)
            rows.append(r)
            print(json.dumps(r), flush=True)
    return rows


def within(rows, tol):
    """How many rows have a relative error below `tol`."""
    return sum(1 for r in rows if r.get("rel_err", "x")[0].isdigit() and float(r["rel_err"]) < tol)
