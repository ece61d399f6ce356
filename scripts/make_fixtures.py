#!/usr/bin/env python3
"""Writes the interpreter's test fixtures: small graphs with inputs and expected outputs
computed independently with numpy (float64 where PyTorch computes in op math, rounded to the
result dtype at each op output, as PyTorch does).

Run from the repository root: python3 scripts/make_fixtures.py  (needs numpy).
The fixtures are committed; tests/interp.rs reads them.
"""
import math
import os
import shutil
import numpy as np

ROOT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures")
rng = np.random.default_rng(20261121)
erf = np.vectorize(math.erf)


def normal(shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def ty(a, name=None):
    d = {np.float16: "f16", np.float32: "f32", np.float64: "f64", np.int32: "i32",
         np.int64: "i64", np.bool_: "i1"}[a.dtype.type]
    dims = "".join(f"{s}x" for s in a.shape)
    return f"tensor<{dims}{d}>"


def case(name, body, inputs, outputs):
    d = os.path.join(ROOT, name)
    os.makedirs(d)
    params = ", ".join(f"%{n}: {ty(a)}" for n, a in inputs)
    res = [ty(o) for o in outputs]
    res_s = res[0] if len(res) == 1 else "(" + ", ".join(res) + ")"
    with open(os.path.join(d, "graph.ir"), "w") as f:
        f.write(f"graph @{name}({params}) -> {res_s} {{\n{body}\n}}\n")
    for i, (_, a) in enumerate(inputs):
        np.save(os.path.join(d, f"in{i}.npy"), a)
    for i, o in enumerate(outputs):
        np.save(os.path.join(d, f"out{i}.npy"), o)


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)

    a = normal((2, 1, 5, 7), np.float32); b = normal((3, 7, 4), np.float32)
    case("matmul_batch_broadcast", "  %c = matmul %a, %b\n  return %c", [("a", a), ("b", b)],
         [np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)])

    a = normal((6, 8), np.float16); b = normal((5, 8), np.float16)
    case("matmul_f16_transpose_b", "  %c = matmul %a, %b {transpose_b = true}\n  return %c",
         [("a", a), ("b", b)], [(a.astype(np.float64) @ b.astype(np.float64).T).astype(np.float16)])

    a = normal((7,), np.float32); b = normal((7, 3), np.float32)
    case("matmul_vector_matrix", "  %c = matmul %a, %b\n  return %c", [("a", a), ("b", b)],
         [(a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)])

    x = normal((3, 5, 4), np.float32)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    case("softmax_middle_axis", "  %y = softmax %x {axis = 1}\n  return %y", [("x", x)],
         [(e / e.sum(axis=1, keepdims=True)).astype(np.float32)])

    x = normal((4, 6), np.float32); w = normal((6,), np.float32); bb = normal((6,), np.float32)
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True); var = ((x64 - mu) ** 2).mean(-1, keepdims=True)
    case("layernorm_affine", "  %y = layernorm %x, %w, %b {eps = 1e-5}\n  return %y",
         [("x", x), ("w", w), ("b", bb)], [((x64 - mu) / np.sqrt(var + 1e-5) * w + bb).astype(np.float32)])

    x = normal((5, 16), np.float16); w = normal((16,), np.float16)
    x64 = x.astype(np.float64)
    r = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * w.astype(np.float64)
    case("rmsnorm_f16", "  %y = rmsnorm %x, %w {axis = -1, eps = 1e-6}\n  return %y",
         [("x", x), ("w", w)], [r.astype(np.float16)])

    x = normal((3, 4, 5), np.float32)
    case("reduce_sum_keepdims", "  %y = reduce_sum %x {axes = [0, -1], keepdims = true}\n  return %y",
         [("x", x)], [x.astype(np.float64).sum(axis=(0, 2), keepdims=True).astype(np.float32)])

    x = rng.integers(-100, 100, (4, 6)).astype(np.int32)
    case("reduce_max_min_i32",
         "  %m = reduce_max %x {axes = [1]}\n  %n = reduce_min %x\n  return %m, %n",
         [("x", x)], [x.max(axis=1), np.array(x.min(), dtype=np.int32)])

    a = normal((4, 1, 3), np.float16); b = normal((5, 1), np.float16)
    case("add_broadcast_f16", "  %c = add %a, %b\n  return %c", [("a", a), ("b", b)],
         [(a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)])

    x = normal((3, 7), np.float32); x64 = x.astype(np.float64)
    case("activations",
         "  %g = gelu %x\n  %s = silu %x\n  %t = tanh %x\n  %q = sigmoid %x\n  return %g, %s, %t, %q",
         [("x", x)],
         [(0.5 * x64 * (1 + erf(x64 / math.sqrt(2)))).astype(np.float32),
          (x64 / (1 + np.exp(-x64))).astype(np.float32),
          np.tanh(x64).astype(np.float32),
          (1 / (1 + np.exp(-x64))).astype(np.float32)])

    x = rng.integers(-50, 50, (2, 3, 4)).astype(np.int64)
    case("views_i64",
         "  %t = transpose %x {perm = [2, 0, 1]}\n  %r = reshape %t {shape = [4, -1]}\n"
         "  %b = broadcast %r {shape = [2, 4, 6]}\n  return %b",
         [("x", x)], [np.broadcast_to(np.transpose(x, (2, 0, 1)).reshape(4, 6), (2, 4, 6)).copy()])

    x = (normal((9,), np.float32) * 5).astype(np.float32)
    case("casts", "  %i = cast %x {dtype = i32}\n  %h = cast %x {dtype = f16}\n  %b = cast %i {dtype = i1}\n  return %i, %h, %b",
         [("x", x)], [np.trunc(x).astype(np.int32), x.astype(np.float16), np.trunc(x).astype(np.int32) != 0])

    a = np.abs(normal((3, 4), np.float64)) + 0.5; b = normal((4,), np.float64)
    case("pow_div_f64", "  %p = pow %a, %b\n  %d = div %p, %a\n  %m = max %d, %a\n  return %m",
         [("a", a), ("b", b)], [np.maximum(np.power(a, b) / a, a)])

    x = normal((2, 3), np.float32)
    case("constant_array",
         "  %c = constant {value = [[1.5, -2.0, 0.25], [4.0, 0.0, -1.0]]} : tensor<2x3xf32>\n"
         "  %y = mul %x, %c\n  return %y",
         [("x", x)], [(x * np.array([[1.5, -2.0, 0.25], [4.0, 0.0, -1.0]], dtype=np.float32))])

    # Ops v2: indexing, selection, comparisons, iota, erf.
    x = normal((3, 5, 4), np.float32); i = np.array([[4, -1], [0, -5]], dtype=np.int64)
    case("gather_negative_indices", "  %y = gather %x, %i {axis = 1}\n  return %y",
         [("x", x), ("i", i)], [np.take(x, i, axis=1)])

    x = rng.integers(-9, 9, (6, 7)).astype(np.int32)
    case("slice_steps",
         "  %a = slice %x {starts = [1, -1], ends = [100, -9223372036854775808], steps = [2, -2]}\n"
         "  %b = slice %x {axes = [-1], starts = [2], ends = [5]}\n  return %a, %b",
         [("x", x)], [x[1::2, ::-2].copy(), x[:, 2:5].copy()])

    a = rng.integers(-9, 9, (2, 1, 3)).astype(np.int64); b = rng.integers(-9, 9, (2, 4, 3)).astype(np.int64)
    case("concat_three", "  %y = concat %a, %b, %a {axis = -2}\n  return %y",
         [("a", a), ("b", b)], [np.concatenate([a, b, a], axis=1)])

    a = normal((4, 5), np.float16); b = normal((5,), np.float16)
    a[0, 0] = np.nan
    outs = [np.equal(a, b), np.not_equal(a, b), np.less(a, b), np.less_equal(a, b),
            np.greater(a, b), np.greater_equal(a, b)]
    case("comparisons_f16",
         "  %e = eq %a, %b\n  %n = ne %a, %b\n  %l = lt %a, %b\n  %le = le %a, %b\n"
         "  %g = gt %a, %b\n  %ge = ge %a, %b\n  return %e, %n, %l, %le, %g, %ge",
         [("a", a), ("b", b)], outs)

    c = rng.integers(0, 2, (3, 1)).astype(np.bool_); a = normal((3, 4), np.float32)
    b = normal((4,), np.float32)
    case("select_broadcast", "  %y = select %c, %a, %b\n  return %y",
         [("c", c), ("a", a), ("b", b)], [np.where(c, a, b)])

    x = normal((2, 3), np.float32); x64 = x.astype(np.float64)
    case("iota_erf",
         "  %i = iota {axis = 1} : tensor<2x3xi64>\n  %f = iota {axis = -2} : tensor<2x3xf32>\n"
         "  %e = erf %x\n  %y = add %e, %f\n  return %i, %y",
         [("x", x)],
         [np.broadcast_to(np.arange(3, dtype=np.int64), (2, 3)).copy(),
          (erf(x64).astype(np.float32) + np.arange(2, dtype=np.float32)[:, None]).astype(np.float32)])

    # Sine and cosine (Llama's rotary tables): f32, and f16 computed in f32 and rounded once.
    x = (4 * normal((3, 4), np.float32)).astype(np.float32); h = normal((5,), np.float16)
    case("sin_cos",
         "  %s = sin %x\n  %c = cos %x\n  %hs = sin %h\n  %hc = cos %h\n  return %s, %c, %hs, %hc",
         [("x", x), ("h", h)],
         [np.sin(x.astype(np.float64)).astype(np.float32), np.cos(x.astype(np.float64)).astype(np.float32),
          np.sin(h.astype(np.float64)).astype(np.float16), np.cos(h.astype(np.float64)).astype(np.float16)])


if __name__ == "__main__":
    main()
