from onnx import helper

from metainfer_core.ir.graph_utils import attr_value
from metainfer_core.normalize.passes import layout

from .graphs import assert_rewrite, model, value


def test_identity_permutation_is_dropped():
    before = model(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 1, 2, 3]), helper.make_node("Relu", ["t"], ["y"])],
        [value("x", [1, 2, 3, 4])],
        [value("y", [1, 2, 3, 4])],
    )
    after, changes = layout.run(before)
    assert changes == 1
    assert_rewrite(before, after, ["Relu"])


def test_implicit_reversal_is_spelled_out():
    before = model([helper.make_node("Transpose", ["x"], ["y"])], [value("x", [2, 3, 4])], [value("y", None)])
    after, changes = layout.run(before)
    assert changes == 1
    assert_rewrite(before, after, ["Transpose"])
    assert attr_value(after.graph.node[0], "perm") == [2, 1, 0]


def test_nhwc_round_trip_chain_collapses():
    before = model(
        [
            helper.make_node("Transpose", ["x"], ["nhwc"], perm=[0, 2, 3, 1]),
            helper.make_node("Transpose", ["nhwc"], ["hwcn"], perm=[1, 2, 3, 0]),
            helper.make_node("Transpose", ["hwcn"], ["nchw"], perm=[3, 2, 0, 1]),
            helper.make_node("Relu", ["nchw"], ["y"]),
        ],
        [value("x", [1, 2, 3, 4])],
        [value("y", None)],
    )
    after, changes = layout.run(before)
    assert changes == 2
    assert_rewrite(before, after, ["Relu"])
