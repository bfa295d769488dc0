import pytest
from onnx import helper

from metainfer_core.normalize.passes import fold_conv_bn

from .graphs import assert_rewrite, bn_params, const, model, op_types, value, weights


def _conv_bn(conv_inputs, extra_nodes=(), outputs=("y",), group=1):
    nodes = [
        helper.make_node("Conv", conv_inputs, ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=group),
        helper.make_node("BatchNormalization", ["c", "bn_scale", "bn_shift", "bn_mean", "bn_var"], ["bn"], epsilon=1e-3),
        *extra_nodes,
    ]
    inits = [const("W", weights([4, 4 // group, 3, 3])), const("B", weights([4], seed=2)), *bn_params("bn", 4)]
    return model(nodes, [value("x", [1, 4, 5, 5])], [value(o, None) for o in outputs], inits)


def test_conv_bn_relu_becomes_conv_relu():
    before = _conv_bn(["x", "W", "B"], [helper.make_node("Relu", ["bn"], ["y"])])
    after, changes = fold_conv_bn.run(before)
    assert changes == 1
    assert_rewrite(before, after, ["Conv", "Relu"])


def test_conv_without_bias_into_graph_output_grouped():
    before = _conv_bn(["x", "W"], outputs=("bn",), group=2)
    after, changes = fold_conv_bn.run(before)
    assert changes == 1
    assert_rewrite(before, after, ["Conv"])
    assert after.graph.node[0].output[0] == "bn"


def test_conv_output_read_twice_is_left_alone():
    before = _conv_bn(["x", "W", "B"], [helper.make_node("Add", ["bn", "c"], ["y"])])
    after, changes = fold_conv_bn.run(before)
    assert changes == 0
    assert op_types(after) == ["Conv", "BatchNormalization", "Add"]


def _conv_transpose_bn(group: int, with_bias: bool):
    """ConvTranspose (weights [C_in, M/group, k, k], here C_in 4, M 6) -> BatchNormalization."""
    inputs = ["x", "W", "B"] if with_bias else ["x", "W"]
    nodes = [
        helper.make_node("ConvTranspose", inputs, ["c"], kernel_shape=[2, 2], strides=[2, 2], group=group),
        helper.make_node("BatchNormalization", ["c", "bn_scale", "bn_shift", "bn_mean", "bn_var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["y"]),
    ]
    inits = [const("W", weights([4, 6 // group, 2, 2])), const("B", weights([6], seed=2)), *bn_params("bn", 6)]
    return model(nodes, [value("x", [1, 4, 3, 3])], [value("y", None)], inits)


@pytest.mark.parametrize(("group", "with_bias"), [(1, True), (2, False)])
def test_conv_transpose_bn_folds_per_output_channel(group, with_bias):
    before = _conv_transpose_bn(group, with_bias)
    after, changes = fold_conv_bn.run(before)
    assert changes == 1
    assert_rewrite(before, after, ["ConvTranspose", "Relu"])
