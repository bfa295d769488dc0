import numpy as np
from onnx import TensorProto, helper

from metainfer_core.normalize.passes import eliminate_identity

from .graphs import assert_rewrite, const, if_node, model, op_types, value


def test_identities_go_and_graph_output_keeps_its_name():
    before = model(
        [
            helper.make_node("Identity", ["x"], ["a"]),
            helper.make_node("Relu", ["a"], ["b"]),
            helper.make_node("Identity", ["b"], ["y"]),
        ],
        [value("x", [2, 3])],
        [value("y", [2, 3])],
    )
    after, changes = eliminate_identity.run(before)
    assert changes == 2
    assert_rewrite(before, after, ["Relu"])
    assert after.graph.node[0].output[0] == "y"


def test_dropout_goes_unless_its_mask_is_used():
    nodes = [
        helper.make_node("Dropout", ["x", "ratio"], ["d", "unused_mask"]),
        helper.make_node("Dropout", ["d"], ["e", "mask"]),
        helper.make_node("Relu", ["e"], ["y"]),
    ]
    before = model(
        nodes,
        [value("x", [4])],
        [value("y", [4]), value("mask", [4], TensorProto.BOOL)],
        [const("ratio", np.float32(0.5))],
    )
    after, changes = eliminate_identity.run(before)
    assert changes == 1
    assert_rewrite(before, after, ["Dropout", "Relu"])


def test_input_to_output_identity_stays():
    before = model([helper.make_node("Identity", ["x"], ["y"])], [value("x", [2])], [value("y", [2])])
    after, changes = eliminate_identity.run(before)
    assert changes == 0
    assert op_types(after) == ["Identity"]


def test_subgraph_reading_the_identity_output_reads_its_source():
    before = model(
        [helper.make_node("Identity", ["x"], ["t"]), if_node("c", ("t", "t"), "y", [2, 3])],
        [value("x", [2, 3]), value("c", [], TensorProto.BOOL)],
        [value("y", [2, 3])],
    )
    after, changes = eliminate_identity.run(before)
    assert changes == 1
    assert_rewrite(before, after, ["If"])
    branches = after.graph.node[0].attribute
    assert [n.input[0] for a in branches for n in a.g.node] == ["x", "x"]
