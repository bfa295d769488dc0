"""Kernel grouping, FLOPs and the model feature map."""
from __future__ import annotations

from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.ir.features import kernel_features, model_feature_map
from metainfer_core.ir.directives import FUSION_KEY
from metainfer_core.ir.kernels import group_kernels
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.zoo import build

from graphs import conv_chain, matmul


def test_plain_nodes_are_one_kernel_each_with_conv_flops():
    ks = group_kernels(conv_chain(cin=8, cout=16, size=16))
    assert [k.op_type for k in ks] == ["Conv", "Relu"]
    assert ks[0].flops == 2 * 16 * 16 * 16 * 8 * 9
    assert ks[0].bytes_weights == (16 * 8 * 9 + 16) * 4
    assert ks[1].flops == 16 * 16 * 16


def test_matmul_flops():
    (k,) = group_kernels(matmul(64, 128, 32))
    assert k.flops == 2 * 64 * 128 * 32


def test_fusion_marks_make_one_kernel():
    m = conv_chain(extra_op="Sigmoid")
    for n in m.graph.node:
        n.metadata_props.add(key=FUSION_KEY, value="fg0")
    (k,) = group_kernels(m)
    assert k.op_type == "Conv+Relu+Sigmoid" and k.n_ops == 3
    assert k.inputs == ["x"] and k.outputs == ["y"]


def test_qdq_clusters_become_int8_kernels():
    m = conv_chain()
    q = ACTIONS["int8"].apply(m, ACTIONS["int8"].sites(m, {"scope": "all"}, _cpu())[0],
                              {"scope": "all", "activation_type": "QUInt8", "weight_type": "QInt8", "per_channel": True,
                               "calibrate_method": "MinMax"}, ActionContext(calibration_feeds=[random_feeds(m)]))
    kinds = [(k.op_type, k.dtype) for k in group_kernels(q)]
    assert ("Conv", "int8") in kinds
    # the int8 conv kernel reads int8 weights: a quarter of the fp32 bytes (plus scales)
    conv8 = next(k for k in group_kernels(q) if k.op_type == "Conv")
    assert conv8.bytes_weights < 0.5 * group_kernels(m)[0].bytes_weights


def test_kernel_key_depends_on_shape_and_dtype():
    a, b = group_kernels(conv_chain(size=16))[0], group_kernels(conv_chain(size=32))[0]
    assert a.key() != b.key()
    assert a.key() == group_kernels(conv_chain(size=16, seed=5))[0].key()   # weights' values do not matter
    f = kernel_features(a)
    assert f["op_type"] == "Conv" and f["kernel_area"] == 9 and f["out_channels"] == 16


def test_feature_map_patterns():
    fm = model_feature_map(build("resnet_tiny"))
    assert fm["patterns"].get("conv_bn_act", 0) > 0 and fm["patterns"].get("residual_add", 0) > 0
    assert fm["op_histogram"]["Conv"] > 10 and fm["depth"] > 10 and fm["total_flops"] > 0
    assert model_feature_map(build("bert_tiny"))["patterns"].get("attention", 0) >= 2
    assert model_feature_map(build("efficientnet_tiny"))["patterns"].get("squeeze_excite", 0) > 0
    assert model_feature_map(build("mobilenet_v2_tiny"))["patterns"].get("depthwise_separable", 0) > 0


def _cpu():
    from metainfer_core.backends.base import TargetInfo

    return TargetInfo("cpu", "measured", "x", "y", "z", 1 << 33, None, ("float32", "float16", "int8"), ("QDQ",),
                      "NCHW", False, 1)
