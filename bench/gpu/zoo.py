#!/usr/bin/env python3
"""A zoo of timm image models through irc on the GPU: each model (random weights, no network)
is exported to ONNX at batch 1 with its default input size (TorchScript exporter, opset 17),
imported with `irc import`, run with `irc run --device gpu --check` (against irc's reference
interpreter) on a seeded input, and its output compared with PyTorch eager's (float32). One row
per model, whatever fails: a coverage check of the importer and the kernels on architectures
the committed fixtures do not have.

    python3 bench/gpu/zoo.py --irc .device-bin/irc [--models a,b,...] [--out DIR] [--timeout S]

Writes DIR/zoo.md (default: $OUT or .) and prints each row as it finishes.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

MODELS = [
    "resnet18", "mobilenetv3_small_100", "efficientnet_b0", "convnext_atto", "regnetx_002",
    "densenet121", "inception_v3", "swin_tiny_patch4_window7_224", "deit_tiny_patch16_224",
    "ghostnet_100", "levit_128s", "poolformer_s12", "mobilevit_xxs", "hrnet_w18_small",
    "dla34", "pvt_v2_b0", "efficientformer_l1", "repvgg_a0", "lcnet_050",
]


def row(name, irc, work, timeout):
    import timm
    out = {"model": name}
    torch.manual_seed(0)
    try:
        model = timm.create_model(name, pretrained=False, num_classes=10).eval()
        size = model.pretrained_cfg.get("input_size", (3, 224, 224))
        x = torch.randn(1, *size)
        with torch.no_grad():
            ref = model(x)
            if isinstance(ref, (tuple, list)):
                ref = ref[0]
        onnx = os.path.join(work, f"{name}.onnx")
        kwargs = dict(input_names=["x"], output_names=["out0"], opset_version=17, do_constant_folding=True)
        try:
            torch.onnx.export(model, (x,), onnx, dynamo=False, **kwargs)
        except TypeError:
            torch.onnx.export(model, (x,), onnx, **kwargs)
        np.save(os.path.join(work, f"{name}.x.npy"), x.numpy())
    except Exception as e:  # noqa: BLE001 - recorded
        out["export"] = f"FAIL: {str(e).strip().splitlines()[-1][:100] if str(e).strip() else type(e).__name__}"
        return out
    out["export"] = "ok"
    ir = os.path.join(work, f"{name}.ir")
    p = subprocess.run([irc, "import", onnx, "-o", ir], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        out["import"] = "FAIL: " + (p.stderr.strip().splitlines() or ["?"])[0][:160]
        return out
    out["import"] = "ok"
    res = os.path.join(work, f"{name}.irc")
    t0 = time.time()
    try:
        p = subprocess.run([irc, "run", ir, "--device", "gpu", "--check", "--input",
                            f"x={os.path.join(work, name + '.x.npy')}", "--save-outputs", res],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        out["run"] = f"FAIL: timeout after {timeout} s"
        return out
    out["run_s"] = round(time.time() - t0, 1)
    got = os.path.join(res, "out0.npy")
    if not os.path.exists(got):
        err = [l for l in (p.stderr + p.stdout).splitlines() if "error" in l.lower()] or (p.stderr + p.stdout).splitlines()[-1:]
        out["run"] = "FAIL: " + (err[0][:160] if err else "?")
        return out
    out["run"] = "ok"
    out["check"] = "ok" if p.returncode == 0 else ("MISMATCH" if "MISMATCH" in p.stdout + p.stderr else f"rc {p.returncode}")
    a = np.load(got).astype(np.float64)
    b = ref.numpy().astype(np.float64)
    out["rel_err"] = f"{np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30):.2e}" if a.shape == b.shape else f"shape {a.shape} vs {b.shape}"
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--irc", default=".device-bin/irc")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--timeout", type=int, default=180)
    ap.add_argument("--budget", type=int, default=0, help="stop starting models after this many seconds")
    a = ap.parse_args()
    irc = os.path.abspath(a.irc)
    rows = []
    start = time.time()
    with tempfile.TemporaryDirectory() as work:
        for name in a.models.split(","):
            if a.budget and time.time() - start > a.budget:
                rows.append({"model": name, "export": "skipped (budget)"})
                continue
            r = row(name, irc, work, a.timeout)
            rows.append(r)
            print(json.dumps(r), flush=True)
    import timm
    lines = [f"# timm zoo through irc (torch {torch.__version__}, timm {timm.__version__})", "",
             "Random weights, batch 1, default input size, float32; `irc run --device gpu --check` "
             "against irc's interpreter; rel. error against PyTorch eager.", "",
             "| model | export | import | run | check | rel. error | run s |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| " + " | ".join(str(r.get(k, "-")) for k in
                                         ("model", "export", "import", "run", "check", "rel_err", "run_s")) + " |")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "zoo.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
