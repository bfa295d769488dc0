"""Declared shapes are hints (issue 20): an output or value_info whose declared shape the graph
contradicts (a PyTorch CRNN declares [1, 'seqlen'] for a rank-3 output) is replaced by what the
graph computes, with a warning naming the tensor, instead of failing shape inference."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from metainfer_core.normalize import normalize
from metainfer_core.normalize.graph_utils import tensor_shapes
from metainfer_core.normalize.shapes import reconcile_with_run

from .graphs import const, value, weights


def _crnn_head(declared_output, value_info=()):  # type: ignore[no-untyped-def]
    """x [24, 8] -> MatMul -> Reshape to [24, 1, 16] -> Softmax, with a stale declared output."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]),
             helper.make_node("Reshape", ["m", "shape"], ["r"], name="reshape"),
             helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "crnn", [value("x", [24, 8])], [declared_output],
                              [const("W", weights([8, 16])), const("shape", np.array([24, 1, 16], np.int64))],
                              value_info=list(value_info))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_an_output_declared_with_the_wrong_rank_takes_the_inferred_shape():
    result = normalize(_crnn_head(value("y", [1, "seqlen"])))
    assert tensor_shapes(result.model.graph)["y"] == [24, 1, 16]
    assert any("'y'" in w and "[1, seqlen]" in w and "[24, 1, 16]" in w for w in result.warnings)
    assert any(e["pass"] == "declared_shapes" for e in result.log)
    onnx.checker.check_model(result.model, full_check=True)


def test_a_stale_value_info_and_a_wrong_size_are_replaced_too():
    result = normalize(_crnn_head(value("y", [24, 1, 10]), [value("m", [24, 99])]))
    assert tensor_shapes(result.model.graph)["y"] == [24, 1, 16]
    assert {w.split("'")[1] for w in result.warnings} == {"y", "m"}


def test_a_declared_shape_that_agrees_gives_no_warning_and_keeps_its_symbols():
    result = normalize(_crnn_head(value("y", [24, 1, "classes"])))
    assert result.warnings == []


def test_an_output_only_a_run_can_check_takes_the_runs_shape():
    # the declared output says rank 2; what ONNX Runtime computes (as the equivalence check sees) is rank 3
    m = _crnn_head(value("y", [1, "seqlen"]))
    fixed, warnings = reconcile_with_run(m, [{"y": np.zeros((24, 1, 16), np.float32)}])
    assert [d.dim_value for d in fixed.graph.output[0].type.tensor_type.shape.dim] == [24, 1, 16]
    assert len(warnings) == 1 and "'y'" in warnings[0] and "ONNX Runtime" in warnings[0]
    assert reconcile_with_run(fixed, [{"y": np.zeros((24, 1, 16), np.float32)}])[1] == []


def test_a_wrong_declared_dtype_is_replaced():
    result = normalize(_crnn_head(helper.make_tensor_value_info("y", TensorProto.INT64, [24, 1, 16])))
    assert result.model.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert len(result.warnings) == 1
