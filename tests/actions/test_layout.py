"""Layout transformation NCHW -> NHWC: channels-last regions with Transposes at the boundary,
layout-sensitive ops wrapped by adapters the kernel grouper folds into channels-last kernels."""
from __future__ import annotations

from metainfer_core.actions import ACTIONS
from metainfer_core.ir.directives import LAYOUT_KEY, node_meta
from metainfer_core.ir.kernels import group_kernels, is_adapter
from metainfer_core.normalize import normalize
from metainfer_core.zoo import build

from action_checks import apply, ops, same_numerics
from twins import backend


def test_resnet_runs_channels_last_with_transposes_only_at_the_boundary():
    m = normalize(build("resnet_tiny"), None).model
    out, feeds = apply("layout", m, {"layout": "NHWC"})
    same_numerics(m, out, feeds, rtol=0, atol=0)                 # transposes move values, nothing else
    boundary = [n for n in out.graph.node if n.op_type == "Transpose" and not is_adapter(n)]
    assert len(boundary) == 2                                    # the input in, the pooled features out
    sensitive = [n for n in out.graph.node if n.op_type in ("Conv", "MaxPool", "GlobalAveragePool")]
    assert all(node_meta(n, LAYOUT_KEY) == "NHWC" for n in sensitive)
    kernels = group_kernels(out)
    assert len(kernels) == len(group_kernels(m)) + len(boundary)  # adapters add no kernel
    conv = next(k for k in kernels if k.op_type == "Conv")
    assert conv.layout == "NHWC" and conv.in_shapes[0][1] == 3    # logical NCHW shapes, channels-last storage
    assert ops(out)["Add"] == ops(m)["Add"] and ops(out)["Relu"] == ops(m)["Relu"]


def test_concat_moves_its_axis_and_per_channel_constants_follow():
    m = normalize(build("unet_tiny"), None).model
    out, feeds = apply("layout", m, {"layout": "NHWC"})
    same_numerics(m, out, feeds, rtol=0, atol=0)
    m2 = normalize(build("efficientnet_tiny"), None).model
    out2, feeds2 = apply("layout", m2, {"layout": "NHWC"})
    same_numerics(m2, out2, feeds2, rtol=0, atol=0)


def test_only_where_the_device_prefers_it_and_once():
    m = normalize(build("resnet_tiny"), None).model
    for target in ("asic", "cpu"):
        info = backend("gpu", preferred_layout="NCHW").info if target == "cpu" else backend(target).info
        site = ACTIONS["layout"].sites(m, {"layout": "NHWC"}, info)[0]
        assert "prefers NCHW" in ACTIONS["layout"].legal(m, site, {"layout": "NHWC"}, info)
    out, _ = apply("layout", m, {"layout": "NHWC"})
    assert not ACTIONS["layout"].sites(out, {"layout": "NHWC"}, backend("gpu").info)


def test_transpose_cancel_leaves_the_adapters_alone():
    m = normalize(build("mobilenet_v2_tiny"), None).model          # project conv feeds the next expand conv
    out, feeds = apply("layout", m, {"layout": "NHWC"})
    assert ops(out)["Transpose"] >= 2 and not ACTIONS["transpose_cancel"].sites(out, {}, backend("gpu").info)


def test_the_simulator_rewards_the_preferred_layout():
    m = normalize(build("resnet_tiny"), None).model
    out, _ = apply("layout", m, {"layout": "NHWC"})
    gpu = backend("gpu")
    assert gpu.compile(out).base_us < gpu.compile(m).base_us
