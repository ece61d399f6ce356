#!/usr/bin/env python3
"""Exports the ONNX backend node tests of every op irc's importer claims as fixtures.

For each test case that `onnx.backend.test.case.node.collect_testcases()` generates (the
cases behind ONNX's own backend test data), attributed to the op of its single node (a
function-expanded `_expanded` case to the op it expands), and for each op in the table of
crates/onnx/src/ops.rs, this writes

    tests/onnx_node/<case>/model.onnx
    tests/onnx_node/<case>/input_<i>.pb, output_<i>.pb   (TensorProto, the first data set)

and tests/onnx_node/MANIFEST.tsv (case, op). Cases are left out (and listed with the reason
in tests/onnx_node/SKIPPED.tsv) when they are larger than 100 KB, declare an ai.onnx opset
older than 13, have non-tensor inputs or outputs, or (for expanded cases) use ops irc does
not claim. The fixtures are committed, so `cargo test` needs no Python; rerun this after
adding an op to the table:

    python3 -m venv .venv-onnx && .venv-onnx/bin/pip install onnx numpy
    .venv-onnx/bin/python scripts/onnx_node_tests.py
"""
import os
import re
import shutil
import warnings

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.case.node import collect_testcases

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "onnx_node")
TABLE = os.path.join(ROOT, "crates", "onnx", "src", "ops.rs")
MAX_BYTES = 100_000
MIN_OPSET = 13


def claimed_ops():
    text = open(TABLE).read()
    return sorted(set(re.findall(r'^\s*"(\w+)" => h::', text, re.M)))


def opset(model):
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return None


def tensor_bytes(a):
    if isinstance(a, onnx.TensorProto):
        return a.SerializeToString()
    return numpy_helper.from_array(np.asarray(a)).SerializeToString()


def main():
    claimed = set(claimed_ops())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    # The op of each single-node case, so expanded cases can be attributed to it.
    op_of = {}
    for c in cases:
        nodes = c.model.graph.node
        if len(nodes) == 1 and not c.name.endswith("_expanded"):
            op_of[c.name] = nodes[0].op_type
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    manifest, skipped = [], []
    total_bytes = 0
    for c in sorted(cases, key=lambda c: c.name):
        base = re.sub(r"_expanded(_ver\d+)?$", "", c.name)
        op = op_of.get(base)
        if op not in claimed:
            continue
        ops_used = {n.op_type for n in c.model.graph.node}
        if not ops_used <= claimed:
            skipped.append((c.name, op, "uses ops irc does not claim: " + ", ".join(sorted(ops_used - claimed))))
            continue
        v = opset(c.model)
        if v is None or v < MIN_OPSET:
            skipped.append((c.name, op, f"opset {v} is older than {MIN_OPSET}"))
            continue
        if not c.data_sets:
            skipped.append((c.name, op, "no data set"))
            continue
        inputs, outputs = c.data_sets[0]
        if not all(isinstance(a, (np.ndarray, np.generic, onnx.TensorProto)) for a in list(inputs) + list(outputs)):
            skipped.append((c.name, op, "non-tensor inputs or outputs"))
            continue
        try:
            blobs = [("model.onnx", c.model.SerializeToString())]
            blobs += [(f"input_{i}.pb", tensor_bytes(a)) for i, a in enumerate(inputs)]
            blobs += [(f"output_{i}.pb", tensor_bytes(a)) for i, a in enumerate(outputs)]
        except Exception as e:  # dtypes numpy_helper cannot write
            skipped.append((c.name, op, f"cannot serialize: {e}"))
            continue
        size = sum(len(b) for _, b in blobs)
        if size > MAX_BYTES:
            skipped.append((c.name, op, f"{size} bytes, over the {MAX_BYTES} limit"))
            continue
        d = os.path.join(OUT, c.name)
        os.makedirs(d)
        for name, b in blobs:
            with open(os.path.join(d, name), "wb") as f:
                f.write(b)
        manifest.append((c.name, op))
        total_bytes += size
    with open(os.path.join(OUT, "MANIFEST.tsv"), "w") as f:
        f.write(f"# onnx {onnx.__version__}: case\top (written by scripts/onnx_node_tests.py)\n")
        for name, op in manifest:
            f.write(f"{name}\t{op}\n")
    with open(os.path.join(OUT, "SKIPPED.tsv"), "w") as f:
        f.write("# cases of claimed ops not exported: case\top\treason\n")
        for name, op, why in skipped:
            f.write(f"{name}\t{op}\t{why}\n")
    print(f"{len(manifest)} cases ({total_bytes} bytes) for {len({o for _, o in manifest})} ops; "
          f"{len(skipped)} skipped (tests/onnx_node/SKIPPED.tsv)")


if __name__ == "__main__":
    main()
