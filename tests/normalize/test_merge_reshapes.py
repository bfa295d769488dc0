import numpy as np
from onnx import helper

from metainfer_core.normalize.passes import merge_reshapes

from .graphs import assert_rewrite, const, model, op_types, value


def _reshapes(first, second, x_shape=(2, 3, 4)):
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["r"]), helper.make_node("Reshape", ["r", "s2"], ["y"])]
    inits = [const("s1", np.array(first, np.int64)), const("s2", np.array(second, np.int64))]
    return model(nodes, [value("x", list(x_shape))], [value("y", None)], inits)


def test_reshape_chain_becomes_one():
    before = _reshapes([6, 4], [4, -1])
    after, changes = merge_reshapes.run(before)
    assert changes == 1
    assert_rewrite(before, after, ["Reshape"])
    assert after.graph.node[0].input[0] == "x"


def test_zero_in_the_final_shape_keeps_both():
    before = _reshapes([6, 4], [0, 2, 2])
    after, changes = merge_reshapes.run(before)
    assert changes == 0
    assert op_types(after) == ["Reshape", "Reshape"]


def test_reshape_back_to_the_input_shape_disappears():
    before = model(
        [
            helper.make_node("Reshape", ["x", "s1"], ["r"]),
            helper.make_node("Reshape", ["r", "s2"], ["r2"]),
            helper.make_node("Relu", ["r2"], ["y"]),
        ],
        [value("x", [2, 3, 4])],
        [value("y", None)],
        [const("s1", np.array([6, 4], np.int64)), const("s2", np.array([2, 3, -1], np.int64))],
    )
    after, changes = merge_reshapes.run(before)
    assert changes == 2  # merged, then the merged Reshape is a no-op on x
    assert_rewrite(before, after, ["Relu"])
