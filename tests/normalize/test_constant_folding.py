import numpy as np
from onnx import TensorProto, helper

from metainfer_core.normalize.passes import constant_folding

from .graphs import assert_rewrite, const, model, op_types, value


def _constant(name, array):
    return helper.make_node("Constant", [], [name], value=const(name, array))


def test_constant_nodes_and_their_arithmetic_become_initializers():
    before = model(
        [
            _constant("a", np.full([3], 2.0, np.float32)),
            _constant("b", np.arange(3, dtype=np.float32)),
            helper.make_node("Mul", ["a", "b"], ["m"]),
            helper.make_node("Add", ["x", "m"], ["y"]),
        ],
        [value("x", [2, 3])],
        [value("y", [2, 3])],
    )
    after, changes = constant_folding.run(before)
    assert changes == 3
    assert_rewrite(before, after, ["Add"])
    assert [t.name for t in after.graph.initializer] == ["m"]


def test_shape_arithmetic_on_a_static_input_folds():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "zero"], ["b1"]),
        helper.make_node("Concat", ["b1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [const("zero", np.array(0, np.int64)), const("minus_one", np.array([-1], np.int64))]
    before = model(nodes, [value("x", [2, 3, 4])], [value("y", [2, 12])], inits)
    after, changes = constant_folding.run(before)
    assert changes == 4
    assert_rewrite(before, after, ["Reshape"])


def test_random_and_large_results_are_not_folded():
    nodes = [
        helper.make_node("RandomNormal", [], ["r"], shape=[2]),
        helper.make_node("ConstantOfShape", ["big_shape"], ["big"]),
        helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0),
        helper.make_node("Add", ["r", "s"], ["y"]),
    ]
    before = model(nodes, [], [value("y", [2])], [const("big_shape", np.array([2000, 1000], np.int64))])
    after, changes = constant_folding.run(before)
    assert changes == 0
    assert op_types(after) == op_types(before)


def test_folded_graph_output_keeps_its_name():
    before = model(
        [_constant("c", np.ones([2], np.float32)), helper.make_node("Neg", ["c"], ["y"]), helper.make_node("Abs", ["x"], ["z"])],
        [value("x", [2], TensorProto.FLOAT)],
        [value("y", [2]), value("z", [2])],
    )
    after, changes = constant_folding.run(before)
    assert changes == 2
    assert_rewrite(before, after, ["Abs"])
    assert [t.name for t in after.graph.initializer] == ["y"]
