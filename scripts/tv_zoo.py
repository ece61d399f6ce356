#!/usr/bin/env python3
"""A zoo of torchvision models through irc: each model builder (classification, segmentation,
video, optical flow, and detection where its export is a plain tensor graph) is built with
random weights (`weights=None`, seeded, eval mode; a zero-initialized head redrawn, and the
convolutions redrawn with He's initialization where the output would otherwise not depend on
the input) at a small valid input size, exported to
ONNX (the dynamo exporter at opset 18, or the TorchScript one at opset 17 where the dynamo one
fails; `--exporter` picks one), imported with `irc import` and run on the CPU by irc's
reference interpreter, and its first output compared with PyTorch eager's (float32). One row
per model, whatever fails and where: a coverage check of the importer on convolutional,
attention and video architectures the committed fixtures do not have.

    python3 scripts/tv_zoo.py --irc target/release/irc [--models a,b,...]
                              [--exporter auto|dynamo|torchscript] [--out DIR] [--timeout S]

Needs torch, torchvision and onnx (onnxscript for the dynamo exporter). Writes DIR/tv_zoo.md
(default: $OUT or .) and prints each row as it finishes. A row's `export` fails where PyTorch's
exporter does (or is `not plain` where the exported graph has ops whose results' shapes depend
on the data: a detection model's NonMaxSuppression, a Loop); `import`, `run` and the error are
irc's. A run past `--timeout` seconds is recorded as a timeout.
"""
import argparse
import os
import re
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo_common import irc_import, irc_run_and_compare, run_rows, within  # noqa: E402

# (builder, input shape, extra builder arguments); several inputs as a list of shapes. Sizes
# are the smallest the architecture allows, or 64x64 (4 frames of 32x32 for video).
CLS = [
    ("alexnet", (1, 3, 64, 64)), ("vgg11", (1, 3, 32, 32)), ("resnet18", (1, 3, 64, 64)),
    ("resnext50_32x4d", (1, 3, 64, 64)), ("wide_resnet50_2", (1, 3, 64, 64)),
    ("squeezenet1_0", (1, 3, 64, 64)), ("squeezenet1_1", (1, 3, 64, 64)),
    ("densenet121", (1, 3, 64, 64)), ("inception_v3", (1, 3, 75, 75)),
    ("googlenet", (1, 3, 64, 64)), ("shufflenet_v2_x0_5", (1, 3, 64, 64)),
    ("mobilenet_v2", (1, 3, 64, 64)), ("mobilenet_v3_small", (1, 3, 64, 64)),
    ("mnasnet0_5", (1, 3, 64, 64)), ("efficientnet_b0", (1, 3, 64, 64)),
    ("efficientnet_v2_s", (1, 3, 64, 64)), ("regnet_x_400mf", (1, 3, 64, 64)),
    ("regnet_y_400mf", (1, 3, 64, 64)), ("convnext_tiny", (1, 3, 64, 64)),
    ("vit_b_16", (1, 3, 64, 64), {"image_size": 64}), ("swin_t", (1, 3, 64, 64)),
    ("swin_v2_t", (1, 3, 64, 64)), ("maxvit_t", (1, 3, 224, 224)),
]
SEG = [
    ("fcn_resnet50", (1, 3, 64, 64)), ("deeplabv3_mobilenet_v3_large", (1, 3, 64, 64)),
    ("lraspp_mobilenet_v3_large", (1, 3, 64, 64)),
]
VIDEO = [
    ("r3d_18", (1, 3, 4, 32, 32)), ("mc3_18", (1, 3, 4, 32, 32)),
    ("r2plus1d_18", (1, 3, 4, 32, 32)), ("s3d", (1, 3, 16, 224, 224)),
    ("mvit_v2_s", (1, 3, 16, 224, 224)),
]
FLOW = [("raft_small", [(1, 3, 128, 128), (1, 3, 128, 128)], {"num_flow_updates": 2})]
DETECTION = [
    ("fasterrcnn_mobilenet_v3_large_320_fpn", (1, 3, 128, 128)),
    ("ssdlite320_mobilenet_v3_large", (1, 3, 128, 128)),
]
MODELS = {m[0]: (kind,) + m[1:] for kind, ms in
          [("cls", CLS), ("seg", SEG), ("video", VIDEO), ("flow", FLOW), ("det", DETECTION)]
          for m in ms}

# Ops whose results' shapes depend on the data: a graph with one is not a plain tensor graph.
NOT_PLAIN = {"NonMaxSuppression", "Loop", "If", "Scan", "RoiAlign", "NonZero"}


class First(torch.nn.Module):
    """The model with positional tensor inputs and its first output tensor: a segmentation
    model's `out`, RAFT's last flow, a detection model's boxes of the one image."""

    def __init__(self, model, kind, flow_updates=None):
        super().__init__()
        self.model, self.kind, self.flow_updates = model, kind, flow_updates

    def forward(self, *args):
        if self.kind == "det":
            return self.model([args[0][0]])[0]["boxes"]
        if self.kind == "flow":
            return self.model(*args, num_flow_updates=self.flow_updates)[-1]
        out = self.model(*args)
        if isinstance(out, dict):
            return out["out"]
        if isinstance(out, (tuple, list)):
            return out[0]
        return out


def build(name):
    """The model (random weights, seeded, eval mode), wrapped, and its inputs."""
    import torchvision.models as tvm
    import torchvision.models.detection as det
    import torchvision.models.optical_flow as flow
    import torchvision.models.segmentation as seg
    import torchvision.models.video as video
    kind, shapes = MODELS[name][:2]
    extra = dict(MODELS[name][2]) if len(MODELS[name]) > 2 else {}
    torch.manual_seed(0)
    module = {"cls": tvm, "seg": seg, "video": video, "flow": flow, "det": det}[kind]
    kw = {"weights": None}
    if kind in ("seg", "det"):
        kw["weights_backbone"] = None
    updates = extra.pop("num_flow_updates", None)
    kw.update(extra)
    model = getattr(module, name)(**kw).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 and not p.any():  # a zero-initialized head or token (ViT)
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
    shapes = shapes if isinstance(shapes, list) else [shapes]
    inputs = [torch.randn(*s, generator=g) for s in shapes]
    return First(model, kind, updates).eval(), inputs


def sensitive(wrapped, inputs, ref):
    """Whether the output depends on the input: a deep stack of convolutions with small
    initial weights (GoogLeNet's, S3D's) and inference-mode batch norms can shrink the signal
    below float32's resolution, leaving an output that is the last bias alone."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        other = wrapped(*[torch.randn(x.shape, generator=g) for x in inputs])
    return bool((other - ref).norm() > 1e-3 * ref.norm())


def kaiming(model):
    """Convolution weights redrawn as N(0, 2 / fan-in) (He's initialization), seeded."""
    torch.manual_seed(0)
    for m in model.modules():
        if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)):
            torch.nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")


def first_line(e):
    """The line of an error that says what failed: the first naming an unsupported operator or
    a failed guard (the exporters' messages end in a graph dump or a pointer to the stack
    trace), else the last."""
    s = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    lines = [l.strip() for l in s.splitlines() if l.strip()]
    keys = ("Unsupported", "not supported", "Could not", "Error:", "error:")
    said = [l for l in lines if any(k in l for k in keys)]
    line = said[0] if said else (lines[-1] if lines else type(e).__name__)
    line = re.sub(r"^<class '[^']*'>: ", "", line)
    return line[:160].replace("|", "/")


def export(wrapped, args, path, exporter, names):
    """Exports with `exporter` ("dynamo" at opset 18, "torchscript" at opset 17)."""
    import warnings
    kw = dict(input_names=names, output_names=["out0"])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            torch.onnx.export(wrapped, tuple(args), path, dynamo=True, external_data=False,
                              opset_version=18, **kw)
        else:
            torch.onnx.export(wrapped, tuple(args), path, dynamo=False, do_constant_folding=True,
                              opset_version=17, **kw)


def row(name, irc, work, a):
    out = {"model": name}
    try:
        wrapped, inputs = build(name)
        with torch.no_grad():
            ref = wrapped(*inputs)
        if wrapped.kind != "det" and not sensitive(wrapped, inputs, ref):
            kaiming(wrapped)
            with torch.no_grad():
                ref = wrapped(*inputs)
            out["init"] = "kaiming"
            if not sensitive(wrapped, inputs, ref):
                out["init"] = "kaiming, output independent of the input"
    except Exception as e:  # noqa: BLE001 - recorded
        out["export"] = "build: " + first_line(e)
        return out
    out["input"] = " ".join("x".join(map(str, x.shape)) for x in inputs)
    names = [f"x{i}" for i in range(len(inputs))]
    onnx_path = os.path.join(work, f"{name}.onnx")
    exporters = ["dynamo", "torchscript"] if a.exporter == "auto" else [a.exporter]
    errors = []
    for ex in exporters:
        try:
            export(wrapped, inputs, onnx_path, ex, names)
            out["exporter"] = ex + (f" ({errors[0][:100]})" if errors else "")
            break
        except Exception as e:  # noqa: BLE001 - recorded
            errors.append(f"{ex}: {first_line(e)}")
    if "exporter" not in out:
        out["export"] = "FAIL: " + "; ".join(errors)[:240]
        return out
    import onnx
    ops = {n.op_type for n in onnx.load(onnx_path, load_external_data=False).graph.node}
    if ops & NOT_PLAIN:
        out["export"] = "not plain: " + ", ".join(sorted(ops & NOT_PLAIN))
        return out
    out["export"] = "ok"
    for n, x in zip(names, inputs):
        np.save(os.path.join(work, f"{name}.{n}.npy"), x.numpy())
    ir = os.path.join(work, f"{name}.ir")
    t0 = time.time()
    if not irc_import(irc, onnx_path, ir, a.timeout, out):
        return out
    inputs = [(n, os.path.join(work, f"{name}.{n}.npy")) for n in names]
    irc_run_and_compare(irc, ir, inputs, os.path.join(work, f"{name}.out"), ref, a.timeout, out,
                        t0=t0)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--irc", default="target/release/irc")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--exporter", choices=["auto", "dynamo", "torchscript"], default="auto",
                    help="auto: dynamo at opset 18, TorchScript at opset 17 where it fails")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--timeout", type=int, default=180, help="seconds for irc's import, run")
    ap.add_argument("--keep", help="keep the exported models and inputs in this folder")
    a = ap.parse_args()
    irc = os.path.abspath(a.irc)
    import torchvision
    rows = run_rows(a.models.split(","), lambda n, work: row(n, irc, work, a), a.keep)
    tol = 1e-4
    ok = within(rows, tol)
    lines = [f"# torchvision zoo through irc (torch {torch.__version__}, torchvision "
             f"{torchvision.__version__}, device cpu)", "",
             "Random weights (seeded), eval mode, float32; exported with "
             + {"auto": "the dynamo exporter at opset 18, or the TorchScript one at opset 17 "
                        "where it fails",
                "dynamo": "the dynamo exporter at opset 18",
                "torchscript": "the TorchScript exporter at opset 17"}[a.exporter]
             + "; run by irc's reference interpreter; rel. error of the first output against "
             "PyTorch eager. "
             f"{ok} of {len(rows)} within {tol:g}. `s`: irc's import and run.", "",
             "| model | input | exporter | export | import | run | rel. error | s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        name = r["model"] + (f" ({r['init']} init)" if "init" in r else "")
        lines.append("| " + " | ".join([name] + [str(r.get(k, "-")) for k in
                                       ("input", "exporter", "export", "import", "run",
                                        "rel_err", "run_s")]) + " |")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "tv_zoo.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
