import numpy as np
import pytest
from onnx import TensorProto, helper

from metainfer_core.normalize import normalize
from metainfer_core.normalize.opset import to_canonical_opset
from metainfer_core.normalize.passes import softmax_axis

from .graphs import assert_rewrite, const, model, op_types, value


def _wrapped(op: str, x_shape: list, axis: int = -1) -> tuple:
    """What the version converter makes of an opset-11 softmax over the last axis:
    Flatten(x) -> op -> Reshape(x, Shape(x))."""
    nodes = [
        helper.make_node("Flatten", ["x"], ["flat"], axis=len(x_shape) - 1 if axis == -1 else axis),
        helper.make_node(op, ["flat"], ["soft"], axis=-1),
        helper.make_node("Shape", ["x"], ["x_shape"]),
        helper.make_node("Reshape", ["soft", "x_shape"], ["y"]),
    ]
    return model(nodes, [value("x", x_shape)], [value("y", None)])


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_flatten_wrapper_around_a_last_axis_softmax_goes(op):
    before = _wrapped(op, ["N", 4, 5])
    after, changes = softmax_axis.run(before)
    assert changes == 1
    assert_rewrite(before, after, [op])
    assert after.graph.node[0].input[0] == "x" and after.graph.node[0].output[0] == "y"


def test_wrapper_with_a_constant_target_shape_goes():
    nodes = [
        helper.make_node("Flatten", ["x"], ["flat"], axis=2),
        helper.make_node("Softmax", ["flat"], ["soft"], axis=1),
        helper.make_node("Reshape", ["soft", "s"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    before = model(nodes, [value("x", [2, 4, 5])], [value("y", None)], [const("s", np.array([2, 4, 5], np.int64))])
    after, changes = softmax_axis.run(before)
    assert changes == 1
    assert_rewrite(before, after, ["Softmax", "Relu"])


def test_softmax_over_several_flattened_axes_stays():
    before = _wrapped("Softmax", [2, 4, 5], axis=1)  # normalises over 4*5 values: no single-axis spelling
    after, changes = softmax_axis.run(before)
    assert changes == 0 and op_types(after) == op_types(before)


def test_two_dimensional_input_loses_the_flatten():
    nodes = [helper.make_node("Flatten", ["x"], ["flat"], axis=1), helper.make_node("Softmax", ["flat"], ["y"])]
    before = model(nodes, [value("x", ["N", 7])], [value("y", None)])
    after, changes = softmax_axis.run(before)
    assert changes == 1
    assert_rewrite(before, after, ["Softmax"])


def test_opset_11_softmax_after_a_runtime_reshape_comes_out_as_one_op():
    """The converter cannot tell the rank of a Reshape to a computed shape (as in PP-OCR's
    recognizer), so it wraps the Softmax; once shapes are inferred, the wrapper goes."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["s_float"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["s_float"], ["s_int"], to=TensorProto.INT64),
        helper.make_node("Slice", ["s_int", "zero", "one"], ["n"]),
        helper.make_node("Concat", ["n", "heads"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Softmax", ["r"], ["y"], axis=2),
    ]
    inits = [const("zero", np.array([0])), const("one", np.array([1])), const("heads", np.array([4, 5]))]
    graph = helper.make_graph(nodes, "g", [value("x", ["N", 20])], [value("y", ["N", 4, 5])], inits)
    before = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    assert op_types(to_canonical_opset(before)[0])[-3:] == ["Flatten", "Softmax", "Reshape"]
    for shapes in (None, {"x": [3, 20]}):  # Shape(r) as the target, then a folded constant
        result = normalize(before, input_shapes=shapes)
        assert "Flatten" not in op_types(result.model) and op_types(result.model)[-1] == "Softmax"
        assert result.max_abs_err["y"] < 1e-6
