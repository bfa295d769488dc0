"""Tensors ONNX shape inference cannot follow (a Loop's carried value, ORT contrib ops) get their
types from one ONNX Runtime run, so such models normalize instead of failing the completeness
check; exact shapes with static inputs, rank only with symbolic ones."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from metainfer_core.errors import MetaInferError
from metainfer_core.normalize import normalize
from metainfer_core.ir.graph_utils import tensor_shapes
from metainfer_core.normalize.shapes import check_complete, fill_from_run, incomplete_tensors, infer_shapes


def _weights(*shapes):
    rng = np.random.default_rng(0)
    return [nh.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), f"W{i}") for i, s in enumerate(shapes)]


def loop_model() -> onnx.ModelProto:
    """img -> Conv -> Relu -> Flatten -> MatMul -> Loop(3 x relu(v @ W)) -> Softmax; the body reads
    W from the outer scope."""
    body = h.make_graph(
        [h.make_node("Identity", ["c_in"], ["c_out"]), h.make_node("MatMul", ["v_in", "W1"], ["m"]),
         h.make_node("Relu", ["m"], ["v_out"])], "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
         h.make_tensor_value_info("v_in", T.FLOAT, None)],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("v_out", T.FLOAT, None)])
    nodes = [h.make_node("Conv", ["img", "W0"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["r"]),
             h.make_node("Flatten", ["r"], ["f"]), h.make_node("MatMul", ["f", "W2"], ["p"]),
             h.make_node("Loop", ["N", "T"] + ["p"], ["lo"], body=body), h.make_node("Softmax", ["lo"], ["y"])]
    inits = _weights((4, 3, 3, 3), (16, 16), (256, 16)) + [nh.from_array(np.array(3, np.int64), "N"),
                                                          nh.from_array(np.array(True), "T")]
    g = h.make_graph(nodes, "loop", [h.make_tensor_value_info("img", T.FLOAT, [1, 3, 8, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def contrib_model(batch) -> onnx.ModelProto:
    """MatMul -> com.microsoft BiasGelu -> MatMul -> com.microsoft Gelu (ORT-optimized exports)."""
    w, b = _weights((32, 32), (32,))
    nodes = [h.make_node("MatMul", ["x", "W0"], ["mm"]),
             h.make_node("BiasGelu", ["mm", "W1"], ["g"], domain="com.microsoft"),
             h.make_node("MatMul", ["g", "W0"], ["mm2"]), h.make_node("Gelu", ["mm2"], ["y"], domain="com.microsoft")]
    g = h.make_graph(nodes, "contrib", [h.make_tensor_value_info("x", T.FLOAT, [batch, 32])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], [w, b])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13), h.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def test_loop_carried_value_gets_its_shape_from_a_run():
    inferred = infer_shapes(loop_model())
    assert "lo" in incomplete_tensors(inferred)          # ONNX inference leaves the Loop output untyped
    with pytest.raises(MetaInferError, match="'lo'"):
        check_complete(inferred)
    result = normalize(loop_model())
    shapes = tensor_shapes(result.model.graph)
    assert shapes["lo"] == [1, 16] and shapes["y"] == [1, 16]
    assert result.max_abs_err["y"] <= 1e-5
    assert any(e["pass"] == "shapes_from_run" and "lo" in e["tensors"] for e in result.log)
    onnx.checker.check_model(result.model, full_check=True)


def test_contrib_ops_normalize_with_static_and_symbolic_batch():
    static = normalize(contrib_model(4))
    assert tensor_shapes(static.model.graph)["g"] == [4, 32]
    assert static.max_abs_err["y"] <= 1e-5
    symbolic, filled = fill_from_run(infer_shapes(contrib_model("batch")))
    assert "g" in filled
    check_complete(symbolic)
    assert tensor_shapes(symbolic.graph)["g"] == [None, None]       # rank only: one run's sizes prove nothing


def test_a_model_runtime_cannot_run_keeps_the_completeness_error():
    m = contrib_model(4)
    m.graph.node[1].op_type = "NoSuchContribOp"
    model, filled = fill_from_run(infer_shapes(m))
    assert filled == []
    with pytest.raises(MetaInferError, match="unknown"):
        check_complete(model)
