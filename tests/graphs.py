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


def tagger(path, table_rows=64):
    """ids, mask [batch, seq] -> embedding (a table of `table_rows` positions added by index) ->
    masked mean over seq -> Gemm: the position table limits seq to `table_rows`."""
    rng = np.random.default_rng(0)
    emb = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "emb")
    pos = numpy_helper.from_array(rng.standard_normal((table_rows, 8)).astype(np.float32), "pos")
    w = numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "w")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    zero = numpy_helper.from_array(np.array([0], np.int64), "zero")
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"]),
             helper.make_node("Shape", ["ids"], ["shp"]),
             helper.make_node("Slice", ["shp", "one", "axes_end", "zero"], ["seq"]),
             helper.make_node("Squeeze", ["seq", "zero"], ["seq_s"]),
             helper.make_node("Range", ["zero_s", "seq_s", "one_s"], ["positions"]),
             helper.make_node("Gather", ["pos", "positions"], ["p"]),
             helper.make_node("Add", ["e", "p"], ["ep"]),
             helper.make_node("Cast", ["mask"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["mf", "minus1"], ["m3"]),
             helper.make_node("Mul", ["ep", "m3"], ["masked"]),
             helper.make_node("ReduceMean", ["masked"], ["pooled"], axes=[1], keepdims=0),
             helper.make_node("MatMul", ["pooled", "w"], ["y"])]
    inits = [emb, pos, w, axes, zero, one,
             numpy_helper.from_array(np.array([2], np.int64), "axes_end"),
             numpy_helper.from_array(np.array(0, np.int64), "zero_s"),
             numpy_helper.from_array(np.array(1, np.int64), "one_s"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    graph = helper.make_graph(nodes, "tagger",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
                               helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path
