"""Every action: the op types it produces, numerics against ONNX Runtime (lossless actions:
rtol 1e-4 / atol 1e-5; lossy ones: a bounded accuracy loss), and the full ONNX checker."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from metainfer_core.accuracy import plan_loss, run_cpu
from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.tensors import random_feeds
from metainfer_core.zoo import build

from backends.test_simulator import backend
from graphs import conv_chain, model_of

RTOL, ATOL = 1e-4, 1e-5
INT8 = {"scope": "compute", "activation_type": "QUInt8", "weight_type": "QInt8", "per_channel": True,
        "calibrate_method": "MinMax"}


def _apply(name, model, params, target="gpu"):
    info = backend(target).info
    sites = ACTIONS[name].sites(model, params, info)
    assert sites, f"{name} found no site"
    assert ACTIONS[name].legal(model, sites[0], params, info) is None
    feeds = [random_feeds(model, seed=i) for i in range(2)]
    out = ACTIONS[name].apply(model, sites[0], params, ActionContext(target=info, calibration_feeds=feeds))
    onnx.checker.check_model(out, full_check=True)
    return out, feeds


def _same_numerics(a, b, feeds):
    for ra, rb in zip(run_cpu(a, feeds), run_cpu(b, feeds)):
        for x, y in zip(ra, rb):
            np.testing.assert_allclose(y, x, rtol=RTOL, atol=ATOL)


def test_conv_bn_fusion():
    m = build("resnet_tiny")
    out, feeds = _apply("conv_bn_fusion", m, {})
    assert not any(n.op_type == "BatchNormalization" for n in out.graph.node)
    _same_numerics(m, out, feeds)


def test_transpose_cancel():
    from onnx import TensorProto, helper

    m = model_of([helper.make_node("Transpose", ["x"], ["t"], name="t1", perm=[0, 2, 3, 1]),
                  helper.make_node("Transpose", ["t"], ["u"], name="t2", perm=[0, 3, 1, 2]),
                  helper.make_node("Relu", ["u"], ["y"], name="r")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 6])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 6])])
    out, feeds = _apply("transpose_cancel", m, {})
    assert [n.op_type for n in out.graph.node] == ["Relu"]
    _same_numerics(m, out, feeds)


def test_fuse_chain_marks_groups_without_changing_math():
    m = conv_chain(extra_op="Sigmoid")
    out, feeds = _apply("fuse_chain", m, {"max_depth": 4})
    assert [n.op_type for n in out.graph.node] == ["Conv", "Relu", "Sigmoid"]
    assert len({p.value for n in out.graph.node for p in n.metadata_props}) == 1
    _same_numerics(m, out, feeds)


def test_fuse_chain_respects_depth_and_op_set():
    m = conv_chain(extra_op="Tanh")
    fpga = backend("fpga").info                      # Tanh is not in its op set
    site = ACTIONS["fuse_chain"].sites(m, {"max_depth": 8}, fpga)[0]
    assert "extra" not in site.nodes
    assert ACTIONS["fuse_chain"].legal(m, site, {"max_depth": 8}, backend("asic").info)   # asic fuses 2 at most
    cpu_like = backend("gpu", max_fusion_depth=1).info
    assert ACTIONS["fuse_chain"].legal(m, site, {"max_depth": 2}, cpu_like)


def test_fp16_converts_and_stays_close():
    m = build("mobilenet_v2_tiny")
    out, feeds = _apply("fp16", m, {"scope": "all"})
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in out.graph.initializer)
    assert plan_loss(run_cpu(m, feeds), run_cpu(out, feeds)) < 1e-3


def test_int8_quantizes_in_qdq_and_stays_close():
    m = build("resnet_tiny")
    out, feeds = _apply("int8", m, INT8)
    ops = {n.op_type for n in out.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops
    assert plan_loss(run_cpu(m, feeds), run_cpu(out, feeds)) < 0.05


def test_lossy_actions_do_not_stack():
    m = build("mlp")
    half, feeds = _apply("fp16", m, {"scope": "all"})
    assert not ACTIONS["int8"].sites(half, INT8, backend("gpu").info)
    q, _ = _apply("int8", m, INT8)
    assert not ACTIONS["fp16"].sites(q, {"scope": "all"}, backend("gpu").info)


def test_datapath_legality():
    m = build("mlp")
    site = ACTIONS["fp16"].sites(m, {"scope": "all"}, backend("asic").info)[0]
    assert "float16" in ACTIONS["fp16"].legal(m, site, {"scope": "all"}, backend("asic").info)


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_actions_never_mutate_their_input(name):
    m = build("resnet_tiny")
    before = m.SerializeToString()
    params = ACTIONS[name].choices()[0]
    info = backend("gpu").info
    for site in ACTIONS[name].sites(m, params, info):
        ACTIONS[name].apply(m, site, params, ActionContext(target=info, calibration_feeds=[random_feeds(m)]))
    assert m.SerializeToString() == before
