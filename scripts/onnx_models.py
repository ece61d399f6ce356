#!/usr/bin/env python3
"""Writes small hand-built ONNX models (onnx.helper) and their numpy references into
tests/onnx_models/, for crates/driver/tests/onnx.rs:

- transformer_block: pre-norm decoder block (LayerNormalization, multi-head attention with
  a causal mask applied with Where, Softmax, a GELU MLP written with Erf, residuals), with
  weights as initializers; the reference is computed here in float64 numpy;
- logic: And, Or, Xor, Not (their ONNX node tests are opset 7, older than irc imports);
- bad files: truncated.onnx, opset9.onnx, unsupported_op.onnx, dynamic_dim.onnx,
  external_data.onnx (its initializer's data file, weights.bin, is missing).

    .venv-onnx/bin/python scripts/onnx_models.py
"""
import math
import os

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "onnx_models")
rng = np.random.default_rng(15)
OPSET = [h.make_opsetid("", 17)]


def save(model, name):
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(OUT, name))


def init(name, a):
    return nh.from_array(np.asarray(a), name)


def layernorm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def transformer_block():
    S, D, H = 8, 32, 4
    Dh = D // H
    f32 = np.float32
    w = {
        "ln1.w": 1 + 0.1 * rng.standard_normal(D), "ln1.b": 0.1 * rng.standard_normal(D),
        "attn.wq": rng.standard_normal((D, D)) / math.sqrt(D),
        "attn.wk": rng.standard_normal((D, D)) / math.sqrt(D),
        "attn.wv": rng.standard_normal((D, D)) / math.sqrt(D),
        "attn.wo": rng.standard_normal((D, D)) / math.sqrt(D),
        "ln2.w": 1 + 0.1 * rng.standard_normal(D), "ln2.b": 0.1 * rng.standard_normal(D),
        "mlp.w1": rng.standard_normal((D, 4 * D)) / math.sqrt(D),
        "mlp.b1": 0.1 * rng.standard_normal(4 * D),
        "mlp.w2": rng.standard_normal((4 * D, D)) / math.sqrt(4 * D),
        "mlp.b2": 0.1 * rng.standard_normal(D),
    }
    w = {k: v.astype(f32) for k, v in w.items()}
    consts = {
        "heads_shape": np.array([1, S, H, Dh], np.int64),
        "model_shape": np.array([1, S, D], np.int64),
        "scale": np.array(1 / math.sqrt(Dh), f32),
        "neg_inf": np.array(-np.inf, f32),
        "sqrt2": np.array(math.sqrt(2), f32), "one": np.array(1, f32), "half": np.array(0.5, f32),
        "ones_ss": np.ones((S, S), f32),
    }
    N = h.make_node
    nodes = [
        N("LayerNormalization", ["x", "ln1.w", "ln1.b"], ["h1"], name="ln1", axis=-1, epsilon=1e-5),
        N("MatMul", ["h1", "attn.wq"], ["q0"], name="q_proj"),
        N("MatMul", ["h1", "attn.wk"], ["k0"], name="k_proj"),
        N("MatMul", ["h1", "attn.wv"], ["v0"], name="v_proj"),
        N("Reshape", ["q0", "heads_shape"], ["q1"]), N("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
        N("Reshape", ["k0", "heads_shape"], ["k1"]), N("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]),
        N("Reshape", ["v0", "heads_shape"], ["v1"]), N("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]),
        N("MatMul", ["q", "kt"], ["s0"], name="scores"),
        N("Mul", ["s0", "scale"], ["s1"]),
        # The causal mask: lower triangle of ones, compared to build a boolean.
        N("Trilu", ["ones_ss"], ["tri"], upper=0),
        N("Cast", ["tri"], ["mask"], to=T.BOOL),
        N("Where", ["mask", "s1", "neg_inf"], ["s2"], name="causal_mask"),
        N("Softmax", ["s2"], ["p"], axis=-1),
        N("MatMul", ["p", "v"], ["o0"], name="attn_v"),
        N("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
        N("Reshape", ["o1", "model_shape"], ["o2"]),
        N("MatMul", ["o2", "attn.wo"], ["o3"], name="o_proj"),
        N("Add", ["x", "o3"], ["r1"], name="residual1"),
        N("LayerNormalization", ["r1", "ln2.w", "ln2.b"], ["h2"], name="ln2", axis=-1, epsilon=1e-5),
        N("MatMul", ["h2", "mlp.w1"], ["m0"]), N("Add", ["m0", "mlp.b1"], ["m1"]),
        # GELU as exported by torch.onnx before opset 20: x · 0.5 · (1 + erf(x / √2)).
        N("Div", ["m1", "sqrt2"], ["g0"]), N("Erf", ["g0"], ["g1"]), N("Add", ["g1", "one"], ["g2"]),
        N("Mul", ["m1", "g2"], ["g3"]), N("Mul", ["g3", "half"], ["g4"]),
        N("MatMul", ["g4", "mlp.w2"], ["m2"]), N("Add", ["m2", "mlp.b2"], ["m3"]),
        N("Add", ["r1", "m3"], ["y"], name="residual2"),
    ]
    inits = [init(k, v) for k, v in list(w.items()) + list(consts.items())]
    g = h.make_graph(nodes, "transformer_block",
                     [h.make_tensor_value_info("x", T.FLOAT, ["batch", S, D])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["batch", S, D])], inits)
    save(h.make_model(g, opset_imports=OPSET), "transformer_block.onnx")

    x = rng.standard_normal((1, S, D)).astype(f32)
    d = {k: v.astype(np.float64) for k, v in w.items()}
    X = x.astype(np.float64)
    h1 = layernorm(X, d["ln1.w"], d["ln1.b"])
    heads = lambda t: t.reshape(1, S, H, Dh).transpose(0, 2, 1, 3)
    q, k, v = heads(h1 @ d["attn.wq"]), heads(h1 @ d["attn.wk"]), heads(h1 @ d["attn.wv"])
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(Dh)
    s = np.where(np.tril(np.ones((S, S))) != 0, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = (p @ v).transpose(0, 2, 1, 3).reshape(1, S, D) @ d["attn.wo"]
    r1 = X + o
    m = layernorm(r1, d["ln2.w"], d["ln2.b"]) @ d["mlp.w1"] + d["mlp.b1"]
    erf = np.vectorize(math.erf)
    m = m * 0.5 * (1 + erf(m / math.sqrt(2)))
    y = r1 + m @ d["mlp.w2"] + d["mlp.b2"]
    np.save(os.path.join(OUT, "transformer_block.x.npy"), x)
    np.save(os.path.join(OUT, "transformer_block.y.npy"), y.astype(f32))


def logic():
    N = h.make_node
    nodes = [N("And", ["a", "b"], ["and"]), N("Or", ["a", "b"], ["or"]),
             N("Xor", ["a", "b"], ["xor"]), N("Not", ["a"], ["not"])]
    vi = lambda n, s: h.make_tensor_value_info(n, T.BOOL, s)
    g = h.make_graph(nodes, "logic", [vi("a", [3, 4]), vi("b", [4])],
                     [vi("and", [3, 4]), vi("or", [3, 4]), vi("xor", [3, 4]), vi("not", [3, 4])])
    save(h.make_model(g, opset_imports=OPSET), "logic.onnx")
    a = rng.integers(0, 2, (3, 4)).astype(bool)
    b = rng.integers(0, 2, (4,)).astype(bool)
    np.save(os.path.join(OUT, "logic.a.npy"), a)
    np.save(os.path.join(OUT, "logic.b.npy"), b)
    for name, r in [("and", a & b), ("or", a | b), ("xor", a ^ b), ("not", ~a)]:
        np.save(os.path.join(OUT, f"logic.{name}.npy"), r)


def bad_files():
    vi = lambda n, s: h.make_tensor_value_info(n, T.FLOAT, s)
    relu = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "relu", [vi("x", [4])], [vi("y", [4])])
    whole = h.make_model(relu, opset_imports=OPSET).SerializeToString()
    with open(os.path.join(OUT, "truncated.onnx"), "wb") as f:
        f.write(whole[: len(whole) // 2])
    save(h.make_model(relu, opset_imports=[h.make_opsetid("", 9)]), "opset9.onnx")
    det = h.make_graph([h.make_node("Relu", ["x"], ["r"], name="act"),
                        h.make_node("Det", ["r"], ["y"], name="pick")],
                       "unsupported", [vi("x", [2, 4, 4])], [vi("y", [2])])
    save(h.make_model(det, opset_imports=OPSET), "unsupported_op.onnx")
    dyn = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "dyn",
                       [vi("x", ["batch", 4])], [vi("y", ["batch", 4])])
    save(h.make_model(dyn, opset_imports=OPSET), "dynamic_dim.onnx")
    w = nh.from_array(np.ones(4, np.float32), "w")
    w.ClearField("float_data")
    w.ClearField("raw_data")
    w.data_location = T.EXTERNAL
    w.external_data.add(key="location", value="weights.bin")
    ext = h.make_graph([h.make_node("Add", ["x", "w"], ["y"])], "ext", [vi("x", [4])],
                       [vi("y", [4])], [w])
    onnx.save(h.make_model(ext, opset_imports=OPSET), os.path.join(OUT, "external_data.onnx"))


def main():
    # Rewrites its own files; hf/ (scripts/export_models.py --size tiny) is left alone.
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if os.path.isfile(os.path.join(OUT, f)):
            os.remove(os.path.join(OUT, f))
    transformer_block()
    logic()
    bad_files()


if __name__ == "__main__":
    main()
