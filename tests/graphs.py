"""Tiny hand-built graphs for unit tests of kernels, backends and actions."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model_of(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "test", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return onnx.shape_inference.infer_shapes(m)


def conv_chain(cin: int = 8, cout: int = 16, size: int = 16, extra_op: str | None = None, seed: int = 0) -> onnx.ModelProto:
    """x -> Conv(3x3) -> Relu [-> extra_op] -> y"""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((cout, cin, 3, 3)) * 0.2).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "B")
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r" if extra_op else "y"], name="relu")]
    if extra_op:
        nodes.append(helper.make_node(extra_op, ["r"], ["y"], name="extra"))
    return model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, size, size])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, size, size])], [w, b])


def matmul(m: int = 64, k: int = 128, n: int = 64, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((k, n)) * 0.1).astype(np.float32), "W")
    return model_of([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], [w])
