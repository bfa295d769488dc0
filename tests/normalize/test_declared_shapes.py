"""Declared shapes are hints (issue 20): an output or value_info whose declared shape the graph
contradicts (a PyTorch CRNN declares [1, 'seqlen'] for a rank-3 output) is replaced by what the
graph computes, with a warning naming the tensor, instead of failing shape inference."""
from __future__ import annotations

import numpy as np
import pytest
import onnx
from onnx import TensorProto, helper

from metainfer_core.normalize import normalize
from metainfer_core.ir.graph_utils import tensor_shapes
from metainfer_core.normalize.declared import reconcile_with_run

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


# One test per way an exporter computes the shape a stale declaration contradicts (issue 30).

def _reshaped_by_arithmetic(declared_output, width="W"):  # type: ignore[no-untyped-def]
    """x [1, W, 8] -> MatMul -> [1, W, 16] -> Reshape to [T, 1, C], the target built from
    Shape/Gather/Unsqueeze/Concat of the tensor itself (a PyTorch CRNN's view(T, b, -1) export)."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]),
             helper.make_node("Shape", ["m"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["t"], axis=0),
             helper.make_node("Gather", ["s", "two"], ["c"], axis=0),
             helper.make_node("Unsqueeze", ["t", "zero_axis"], ["t1"]),
             helper.make_node("Unsqueeze", ["c", "zero_axis"], ["c1"]),
             helper.make_node("Concat", ["t1", "ones", "c1"], ["target"], axis=0),
             helper.make_node("Reshape", ["m", "target"], ["y"], name="reshape")]
    inits = [const("W", weights([8, 16])), const("one", np.array(1, np.int64)), const("two", np.array(2, np.int64)),
             const("zero_axis", np.array([0], np.int64)), const("ones", np.array([1], np.int64))]
    graph = helper.make_graph(nodes, "crnn", [value("x", [1, width, 8])], [declared_output], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_a_reshape_target_from_shape_arithmetic_with_bound_inputs_is_repaired():
    # the CRNN case of issue 30: exit 2 "Inferred shape and existing shape differ in rank: (3) vs (2)"
    result = normalize(_reshaped_by_arithmetic(value("y", [1, "seqlen"])), input_shapes={"x": [1, 24, 8]})
    assert tensor_shapes(result.model.graph)["y"] == [24, 1, 16]
    assert any("'y'" in w and "[1, seqlen]" in w for w in result.warnings)
    onnx.checker.check_model(result.model, full_check=True)


def test_a_wrong_size_behind_arithmetic_inference_cannot_follow_is_caught_by_a_run():
    # Shape -> Cast -> Div -> Cast: ONNX data propagation stops at Div, so inference knows the rank
    # only; the declared size 99 is contradicted by what ONNX Runtime computes
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["sf", "two"], ["half"]),
             helper.make_node("Cast", ["half"], ["target"], to=TensorProto.INT64),
             helper.make_node("ConstantOfShape", ["target"], ["y"])]
    graph = helper.make_graph(nodes, "div", [value("x", [4, 8])], [value("y", [2, 99])],
                              [const("two", np.array([2.0], np.float32))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    result = normalize(m)
    assert tensor_shapes(result.model.graph)["y"] == [2, 4]
    assert len(result.warnings) == 1 and "ONNX Runtime" in result.warnings[0]


def _contrib(declared_output, declared_value_info=(), batch=4):  # type: ignore[no-untyped-def]
    """x -> MatMul -> com.microsoft Gelu -> MatMul: ONNX inference gives the contrib op's output no type."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"]),
             helper.make_node("Gelu", ["mm"], ["g"], domain="com.microsoft"),
             helper.make_node("MatMul", ["g", "W"], ["y"])]
    graph = helper.make_graph(nodes, "contrib", [value("x", [batch, 16])], [declared_output],
                              [const("W", weights([16, 16]))], value_info=list(declared_value_info))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def test_a_declaration_only_a_run_can_check_is_replaced_before_inference_relies_on_it():
    # the stale value_info of the contrib op's output would otherwise give the MatMul after it rank 3
    result = normalize(_contrib(value("y", [1, "seqlen", 16]), [value("g", [4, 1, 16])]))
    assert tensor_shapes(result.model.graph)["y"] == [4, 16]
    assert {w.split("'")[1] for w in result.warnings} == {"g", "y"}


def test_with_symbolic_inputs_a_run_checks_only_the_rank():
    # one run's sizes say nothing about another input size's: the rank is replaced, the sizes left open
    result = normalize(_contrib(value("y", ["n"]), batch="batch"))
    assert len(tensor_shapes(result.model.graph)["y"]) == 2
    assert len(result.warnings) == 1 and "'y'" in result.warnings[0]


def test_strict_inference_repairs_a_declaration_a_rewrite_exposed_and_still_refuses_real_errors():
    # the declaration is checked again wherever strict inference fails (after the opset upgrade,
    # after constant folding): here it is met first at the strict check
    from metainfer_core.errors import MetaInferError
    from metainfer_core.normalize.pipeline import _strict_inference

    warnings: list[str] = []
    log: list[dict] = []
    fixed = _strict_inference(_crnn_head(value("y", [1, "seqlen"])), 0, None, warnings, log, 2)
    assert tensor_shapes(fixed.graph)["y"] == [24, 1, 16]
    assert len(warnings) == 1 and log[0]["pass"] == "declared_shapes" and log[0]["round"] == 2
    broken = _crnn_head(value("y", [24, 1, 16]))
    broken.graph.input[0].CopyFrom(value("x", [24, 9]))  # MatMul [24, 9] x [8, 16]: not a stale declaration
    with pytest.raises(MetaInferError, match="Shape inference"):
        _strict_inference(broken, 0, None, [], [], 1)


def test_a_stale_value_info_inside_an_if_branch_is_replaced():
    # strict inference checks If/Loop bodies too: a body's stale declaration must not stop it
    then_branch = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["tm"]), helper.make_node("Relu", ["tm"], ["t"])],
                                    "then", [], [value("t", [4, 16])], value_info=[value("tm", [1, 4, 99])])
    else_branch = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["em"]), helper.make_node("Neg", ["em"], ["e"])],
                                    "else", [], [value("e", [4, 16])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    graph = helper.make_graph(nodes, "branches", [value("x", [4, 8])], [value("y", [4, 16])],
                              [const("W", weights([8, 16])), const("zero", np.array(0, np.float32))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    result = normalize(m)
    assert len(result.warnings) == 1 and "subgraph 'tm'" in result.warnings[0] and "[4, 16]" in result.warnings[0]
