from onnx import helper

from metainfer_core.ir.graph_utils import attr_value
from metainfer_core.normalize.passes import cancel_transposes

from .graphs import assert_rewrite, model, op_types, value


def test_inverse_pair_cancels():
    before = model(
        [
            helper.make_node("Transpose", ["x"], ["t1"], perm=[0, 2, 3, 1]),
            helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 3, 1, 2]),
            helper.make_node("Relu", ["t2"], ["y"]),
        ],
        [value("x", [1, 2, 3, 4])],
        [value("y", [1, 2, 3, 4])],
    )
    after, changes = cancel_transposes.run(before)
    assert changes == 1
    assert_rewrite(before, after, ["Relu"])


def test_chain_composes_into_one_and_shared_first_stays():
    before = model(
        [
            helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 0, 2]),
            helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 2, 1]),
            helper.make_node("Transpose", ["t2"], ["y"]),  # no perm: reverses the axes
            helper.make_node("Relu", ["t1"], ["z"]),
        ],
        [value("x", [2, 3, 4])],
        [value("y", None), value("z", None)],
    )
    after, changes = cancel_transposes.run(before)
    assert changes == 2
    assert_rewrite(before, after, ["Transpose", "Transpose", "Relu"])
    merged = after.graph.node[1]
    assert merged.input[0] == "x" and attr_value(merged, "perm") == [0, 2, 1]


def test_cancelling_pair_between_input_and_output_stays():
    before = model(
        [
            helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 0]),
            helper.make_node("Transpose", ["t1"], ["y"], perm=[1, 0]),
        ],
        [value("x", [2, 3])],
        [value("y", [2, 3])],
    )
    after, changes = cancel_transposes.run(before)
    assert changes == 0
    assert op_types(after) == ["Transpose", "Transpose"]
