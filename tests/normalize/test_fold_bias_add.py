from onnx import helper

from metainfer_core.normalize.passes import fold_bias_add

from .graphs import assert_rewrite, const, model, op_types, value, weights


def _conv_add(bias_shape, conv_inputs=("x", "W", "B")):
    nodes = [
        helper.make_node("Conv", list(conv_inputs), ["c"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["bias", "c"], ["y"]),
    ]
    inits = [const("W", weights([4, 3, 1, 1])), const("B", weights([4], 1)), const("bias", weights(bias_shape, 2))]
    return model(nodes, [value("x", [1, 3, 5, 5])], [value("y", None)], inits)


def test_conv_plus_channel_bias_becomes_conv_bias():
    before = _conv_add([4, 1, 1])
    after, changes = fold_bias_add.run(before)
    assert changes == 1
    assert_rewrite(before, after, ["Conv"])


def test_conv_without_bias_takes_a_4d_channel_bias():
    before = _conv_add([1, 4, 1, 1], conv_inputs=("x", "W"))
    after, changes = fold_bias_add.run(before)
    assert changes == 1
    assert_rewrite(before, after, ["Conv"])


def test_conv_plus_spatial_tensor_is_left_alone():
    before = _conv_add([1, 4, 5, 5])
    after, changes = fold_bias_add.run(before)
    assert changes == 0
    assert op_types(after) == ["Conv", "Add"]


def _matmul_add(x_shape):
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    inits = [const("W", weights([3, 5])), const("b", weights([5], 1))]
    return model(nodes, [value("x", x_shape)], [value("y", None)], inits)


def test_2d_matmul_plus_bias_becomes_gemm():
    before = _matmul_add([2, 3])
    after, changes = fold_bias_add.run(before)
    assert changes == 1
    assert_rewrite(before, after, ["Gemm"])


def test_batched_matmul_plus_bias_is_left_alone():
    before = _matmul_add([4, 2, 3])
    after, changes = fold_bias_add.run(before)
    assert changes == 0
    assert op_types(after) == ["MatMul", "Add"]


def test_grouped_conv_transpose_plus_channel_bias_becomes_its_bias():
    nodes = [
        helper.make_node("ConvTranspose", ["x", "W"], ["c"], kernel_shape=[2, 2], strides=[2, 2], group=2),
        helper.make_node("Add", ["c", "bias"], ["y"]),
    ]
    inits = [const("W", weights([4, 3, 2, 2])), const("bias", weights([1, 6, 1, 1], 2))]  # 2 groups x 3 = 6 outputs
    before = model(nodes, [value("x", [1, 4, 3, 3])], [value("y", None)], inits)
    after, changes = fold_bias_add.run(before)
    assert changes == 1
    assert_rewrite(before, after, ["ConvTranspose"])
