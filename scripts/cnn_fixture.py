#!/usr/bin/env python3
"""Writes tests/onnx_models/cnn.onnx: a small convolutional network of the ops a CNN export
uses beyond a transformer's (Conv with stride and padding, MaxPool, AveragePool with ceil_mode
and count_include_pad=0, LpPool, Pad in reflect and edge modes, GroupNormalization, Resize
nearest and linear, ConvTranspose, GlobalAveragePool, Flatten, Gemm), seeded random weights, with an input and the output of
ONNX's own reference evaluator (`onnx.reference`) beside it:

    tests/onnx_models/cnn.onnx, cnn.x.npy, cnn.out0.npy

Needs only `onnx` and `numpy` (python3 -m venv .venv-onnx && .venv-onnx/bin/pip install onnx numpy).
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper as h, numpy_helper as nh
from onnx.reference import ReferenceEvaluator

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "onnx_models")


def main():
    rng = np.random.default_rng(7)

    def weight(name, *shape, scale=0.3):
        return nh.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        weight("w1", 8, 3, 3, 3), weight("b1", 8),
        weight("w2", 8, 8, 3, 3, scale=0.2),
        nh.from_array(np.array([0, 0, 1, 2, 0, 0, 1, 2], np.int64), "reflect_pads"),
        nh.from_array(np.array([0, 0, 1, 0, 0, 0, 0, 1], np.int64), "edge_pads"),
        nh.from_array(np.linspace(0.5, 1.5, 8).astype(np.float32), "gn_scale"),
        nh.from_array(np.linspace(-0.2, 0.2, 8).astype(np.float32), "gn_bias"),
        weight("fc_w", 10, 16), weight("fc_b", 10),
        weight("ct_w", 8, 8, 3, 3, scale=0.2), weight("ct_b", 8),
        nh.from_array(np.array([1, 1, 2, 2], np.float32), "up2"),
        nh.from_array(np.array([1, 1], np.int64), "win_starts"),
        nh.from_array(np.array([4, 6], np.int64), "win_ends"),
        nh.from_array(np.array([2, 3], np.int64), "win_axes"),
        nh.from_array(np.array([1, 1, 1.5, 3], np.float32), "up3"),
    ]
    nodes = [
        h.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c1"], ["r1"]),
        h.make_node("MaxPool", ["r1"], ["m1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        h.make_node("Pad", ["m1", "reflect_pads"], ["p1"], mode="reflect"),
        h.make_node("Conv", ["p1", "w2"], ["c2"]),
        h.make_node("AveragePool", ["c2"], ["a1"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1,
                    count_include_pad=0),
        h.make_node("GroupNormalization", ["a1", "gn_scale", "gn_bias"], ["g1"], num_groups=2),
        h.make_node("Pad", ["g1", "edge_pads"], ["p2"], mode="edge"),
        h.make_node("LpPool", ["p2"], ["l1"], kernel_shape=[2, 2], p=2),
        h.make_node("MaxPool", ["p2"], ["m2"], kernel_shape=[2, 2], dilations=[2, 2], ceil_mode=1,
                    strides=[2, 2]),
        h.make_node("Resize", ["l1", "", "up2"], ["u1"], mode="nearest"),
        h.make_node("Resize", ["m2", "", "up3"], ["u2"], mode="linear",
                    coordinate_transformation_mode="half_pixel"),
        # An off-centre window of the upsampled map, so the nearest indices matter to the mean.
        h.make_node("Slice", ["u1", "win_starts", "win_ends", "win_axes"], ["win1"]),
        h.make_node("GlobalAveragePool", ["win1"], ["gl"]),
        h.make_node("GlobalAveragePool", ["u2"], ["gm"]),
        # A decoder's upsampling: 3x3, stride 2, padding 1, output_padding 1 (4x5 -> 8x10).
        h.make_node("ConvTranspose", ["g1", "ct_w", "ct_b"], ["ct"], strides=[2, 2], pads=[1, 1, 1, 1],
                    output_padding=[1, 1]),
        h.make_node("GlobalAveragePool", ["ct"], ["gct"]),
        h.make_node("Add", ["gm", "gct"], ["gm2"]),
        h.make_node("Concat", ["gl", "gm2"], ["gc"], axis=1),
        h.make_node("Flatten", ["gc"], ["f"]),
        h.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1),
    ]
    graph = h.make_graph(nodes, "cnn", [h.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 32, 32])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 21)])
    onnx.checker.check_model(model)
    x = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    y = ReferenceEvaluator(model).run(None, {"x": x})[0]
    onnx.save(model, os.path.join(OUT, "cnn.onnx"))
    np.save(os.path.join(OUT, "cnn.x.npy"), x)
    np.save(os.path.join(OUT, "cnn.out0.npy"), y)
    print("cnn.onnx", y.shape, float(np.abs(y).max()))


if __name__ == "__main__":
    main()
