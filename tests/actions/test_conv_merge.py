"""Adjacent convolution merge: a 1x1 conv folded into the conv before it; sibling convs (and
MatMuls) sharing an input merged into one with a Split."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from metainfer_core.actions import ACTIONS
from metainfer_core.normalize import normalize
from metainfer_core.zoo import build

from action_checks import apply, ops, same_numerics
from twins import backend
from graphs import model_of


def conv_then_pointwise(stride: int = 2):
    """x -> Conv3x3(stride, pad 1, bias) -> Conv1x1(bias) -> Relu -> y"""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n) for n, s in
             (("W1", (12, 6, 3, 3)), ("B1", (12,)), ("W2", (5, 12, 1, 1)), ("B2", (5,)))]
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["a"], name="c1", pads=[1, 1, 1, 1], strides=[stride] * 2),
             helper.make_node("Conv", ["a", "W2", "B2"], ["b"], name="c2"),
             helper.make_node("Relu", ["b"], ["y"], name="r")]
    return model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 10, 10])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 10 // stride, 10 // stride])], inits)


def test_chain_merges_a_pointwise_conv_into_its_producer():
    m = conv_then_pointwise()
    out, feeds = apply("conv_merge", m, {"pattern": "chain"}, target="asic")     # only Conv: legal everywhere
    assert [n.op_type for n in out.graph.node] == ["Conv", "Relu"]
    assert out.graph.node[0].name == "c1&c2"                                       # the merge is named for both
    same_numerics(m, out, feeds)


def test_chain_needs_nothing_between():
    m = conv_then_pointwise()
    m.graph.node.insert(1, helper.make_node("Relu", ["a"], ["a2"], name="between"))
    m.graph.node[2].input[0] = "a2"
    assert not ACTIONS["conv_merge"].sites(m, {"pattern": "chain"}, backend("gpu").info)


def test_siblings_merge_with_a_split_including_a_centred_1x1_shortcut():
    m = normalize(build("resnet_tiny"), None).model            # 3x3/s2 block conv beside its 1x1/s2 shortcut
    out, feeds = apply("conv_merge", m, {"pattern": "siblings"})
    before, after = ops(m), ops(out)
    assert after["Conv"] == before["Conv"] - 3 and after["Split"] == 3
    same_numerics(m, out, feeds)


def test_sibling_matmuls_merge_like_qkv_projections():
    m = normalize(build("bert_tiny"), None).model
    out, feeds = apply("conv_merge", m, {"pattern": "siblings"})
    assert ops(out)["MatMul"] < ops(m)["MatMul"] and ops(out)["Split"] >= 1
    same_numerics(m, out, feeds)


def test_siblings_are_illegal_without_a_split_op():
    m = normalize(build("resnet_tiny"), None).model
    asic = backend("asic").info
    site = ACTIONS["conv_merge"].sites(m, {"pattern": "siblings"}, asic)[0]
    assert "Split" in ACTIONS["conv_merge"].legal(m, site, {"pattern": "siblings"}, asic)
