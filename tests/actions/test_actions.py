"""What every action shares: declared parameters and search domains, sites only where it can
apply, never editing its input, and the three checks on the rewrites that predate the rest
(Conv+BN fusion, transpose cancellation, fusion groups)."""
from __future__ import annotations

import sys

import pytest
from onnx import TensorProto, helper

from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.actions.base import Param
from metainfer_core.ir.directives import FUSION_KEY
from metainfer_core.ir.kernels import group_kernels
from metainfer_core.normalize import normalize
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.zoo import build

from action_checks import apply, ops, same_numerics
from twins import backend
from graphs import conv_chain, model_of

SPEC_CLASSES = {"conv_bn_fusion", "conv_merge", "transpose_cancel", "layout", "fuse_chain", "fp16", "bf16", "int8",
                "tiling", "memory_reuse", "schedule", "binding", "int8_dynamic",   # binding: the ninth class
                "recurrent"}     # operator replacement: recurrences written as loops


def test_the_action_space_covers_the_nine_classes():
    assert set(ACTIONS) == SPEC_CLASSES
    for a in ACTIONS.values():      # one file per action; its docstring states the rewrite and whether it loses
        doc = sys.modules[type(a).__module__].__doc__ or ""
        assert ("(lossy" in doc) == a.lossy and ("(lossless" in doc) != a.lossy, a.name
        for p in a.params.values():
            assert p.default in p.domain and p.description


def test_param_rejects_a_default_outside_its_domain():
    with pytest.raises(ValueError, match="not in its search domain"):
        Param(3, (1, 2), "x")


def test_conv_bn_fusion_folds_its_site_only():
    m = build("resnet_tiny")
    sites = ACTIONS["conv_bn_fusion"].sites(m, {}, backend("gpu").info)
    assert len(sites) == ops(m)["BatchNormalization"] > 1
    out, feeds = apply("conv_bn_fusion", m, {}, site=1)
    assert ops(out)["BatchNormalization"] == len(sites) - 1 and ops(out)["Conv"] == ops(m)["Conv"]
    assert sites[1].nodes[1] not in {n.name for n in out.graph.node} and sites[0].nodes[1] in {n.name for n in out.graph.node}
    same_numerics(m, out, feeds)


def test_transpose_cancel():
    m = model_of([helper.make_node("Transpose", ["x"], ["t"], name="t1", perm=[0, 2, 3, 1]),
                  helper.make_node("Transpose", ["t"], ["u"], name="t2", perm=[0, 3, 1, 2]),
                  helper.make_node("Relu", ["u"], ["y"], name="r")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 6])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 6])])
    assert [s.nodes for s in ACTIONS["transpose_cancel"].sites(m, {}, backend("gpu").info)] == [("t1", "t2")]
    out, feeds = apply("transpose_cancel", m, {})
    assert [n.op_type for n in out.graph.node] == ["Relu"]
    same_numerics(m, out, feeds)


def test_fuse_chain_marks_groups_without_changing_math():
    m = conv_chain(extra_op="Sigmoid")
    out, feeds = apply("fuse_chain", m, {"max_depth": 4, "span": "epilogue"})
    assert [n.op_type for n in out.graph.node] == ["Conv", "Relu", "Sigmoid"]
    assert len({p.value for n in out.graph.node for p in n.metadata_props}) == 1
    same_numerics(m, out, feeds)


def test_fuse_chain_respects_depth_and_op_set():
    m = conv_chain(extra_op="Tanh")
    fpga = backend("fpga").info                      # Tanh is not in its op set
    params = {"max_depth": 8, "span": "epilogue"}
    site = ACTIONS["fuse_chain"].sites(m, params, fpga)[0]
    assert "extra" not in site.nodes
    assert ACTIONS["fuse_chain"].legal(m, site, params, backend("asic").info)   # asic fuses 2 at most
    cpu_like = backend("gpu", max_fusion_depth=1).info
    assert ACTIONS["fuse_chain"].legal(m, site, {"max_depth": 2, "span": "epilogue"}, cpu_like)


def test_layer_fusion_runs_through_convolutions_where_the_device_pipelines_layers():
    m = normalize(build("mobilenet_v2_tiny"), None).model
    layers = {"max_depth": 8, "span": "layers"}
    out, feeds = apply("fuse_chain", m, layers, target="fpga")
    fused = [k for k in group_kernels(out) if k.op_type.count("Conv") > 1]
    assert fused and max(len(k.op_type.split("+")) for k in fused) <= 8
    same_numerics(m, out, feeds)
    site = ACTIONS["fuse_chain"].sites(m, {"max_depth": 4, "span": "layers"}, backend("gpu").info)[0]
    assert "does not fuse consecutive layers" in ACTIONS["fuse_chain"].legal(m, site, {"max_depth": 4, "span": "layers"},
                                                                             backend("gpu").info)


def test_fusion_tags_stay_unique_when_fusing_again():
    m = conv_chain(extra_op="Sigmoid")
    for n in m.graph.node[2:]:
        n.metadata_props.add(key=FUSION_KEY, value="fg1")      # a group made earlier, labelled fg1
    m.graph.node[0].name = "conv"
    out, _ = apply("fuse_chain", m, {"max_depth": 2, "span": "epilogue"})
    tags = {n.name: next(p.value for p in n.metadata_props if p.key == FUSION_KEY) for n in out.graph.node}
    assert tags["conv"] == tags["relu"] != tags["extra"]


@pytest.mark.parametrize("name", sorted(SPEC_CLASSES))
def test_actions_never_mutate_their_input(name):
    m = normalize(build("resnet_tiny"), None).model
    before = m.SerializeToString()
    info = backend("npu" if name in ("int8", "schedule") else "gpu").info
    for params in ACTIONS[name].choices()[:4]:
        for site in ACTIONS[name].sites(m, params, info):
            ACTIONS[name].apply(m, site, params, ActionContext(target=info, calibration_feeds=[random_feeds(m)]))
    assert m.SerializeToString() == before
