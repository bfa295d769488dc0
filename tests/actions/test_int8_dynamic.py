"""int8_dynamic: ONNX Runtime's dynamic quantization of the MatMul/Gemm nodes in scope (the
three checks: op types, accuracy effect against ONNX Runtime's fp32 run, full checker)."""
from __future__ import annotations

from collections import Counter

import onnx

from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.actions import ACTIONS, Site
from metainfer_core.backends import create_backend
from metainfer_core.normalize import normalize
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.zoo import build

from twins import HOST_SPEC as SPEC, backend

DYN = ACTIONS["int8_dynamic"]


def cpu_info():
    return create_backend("metainfer_core.backends.host.HostBackend", "cpu", "measured",
                          {**SPEC, "dtypes": ["float32", "int8"], "quantization": ["QDQ", "dynamic"]}).info


def test_quantizes_the_site_matmuls_with_run_time_scales():
    m = normalize(build("bert_tiny", seed=0), None).model
    info = cpu_info()
    params = DYN.with_defaults({})
    site = DYN.sites(m, params, info)[0]
    assert DYN.legal(m, site, params, info) is None
    out = DYN.apply(m, site, params, None)
    onnx.checker.check_model(out, full_check=True)
    ops = Counter(n.op_type for n in out.graph.node)
    assert ops["MatMulInteger"] == len(site.nodes) and ops["DynamicQuantizeLinear"] >= 1
    feeds = [random_feeds(m, seed=i) for i in range(2)]
    loss = plan_loss(run_cpu(m, feeds), run_cpu(out, feeds))
    assert 0 < loss < 1e-2
    assert DYN.legal(out, site, params, info) == "the graph is already quantized"          # lossy steps do not stack
    assert ACTIONS["int8"].legal(out, site, ACTIONS["int8"].with_defaults({}), info) == "the graph is already quantized"


def test_one_node_alone_and_illegal_without_a_dynamic_int8_path():
    m = normalize(build("mlp", seed=0), None).model
    info = cpu_info()
    site = DYN.sites(m, DYN.with_defaults({}), info)[0]
    one = DYN.apply(m, Site(site.nodes[:1], "probe"), DYN.with_defaults({}), None)
    assert Counter(n.op_type for n in one.graph.node)["MatMulInteger"] == 1       # the probe the sensitivity runs
    fpga = backend("fpga").info
    assert "dynamically quantized" in DYN.legal(m, site, DYN.with_defaults({}), fpga)
