"""The binding action: the execution path a plan runs on, recorded in the model's metadata;
the graph is untouched, the host compiles it on that path, and its numerics there are checked
against ONNX Runtime (lossless f32 within RTOL/ATOL, bf16 by its accuracy loss)."""
from __future__ import annotations

import numpy as np
import onnx

from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.actions import ACTIONS
from metainfer_core.backends.ov_backend import device_precisions
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.ir.graph_hash import graph_hash
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.zoo import build

from action_checks import ATOL, RTOL
from twins import backend, host

BINDING = ACTIONS["binding"]


def bind(model, runtime, precision, info):
    params = {"runtime": runtime, "precision": precision}
    site = BINDING.sites(model, params, info)[0]
    assert BINDING.legal(model, site, params, info) is None
    out = BINDING.apply(model, site, params, None)
    onnx.checker.check_model(out, full_check=True)
    return out


def test_binding_keeps_the_graph_and_records_the_path():
    m = build("mobilenet_v2_tiny", seed=0)
    cpu = host()
    precision = "bf16" if "bf16" in device_precisions() else "f32"     # what this CPU offers
    out = bind(m, "openvino", precision, cpu.info)
    assert [n.op_type for n in out.graph.node] == [n.op_type for n in m.graph.node]
    assert ExecutionPath.of(out) == ExecutionPath("openvino", precision) and ExecutionPath.of(m).is_default
    assert graph_hash(out) != graph_hash(m)             # another plan for the search
    assert BINDING.keeps_graph({"runtime": "openvino", "precision": precision})
    assert not BINDING.sites(out, {"runtime": "openvino", "precision": precision}, cpu.info)      # once
    assert not BINDING.sites(m, {"runtime": "onnxruntime", "precision": "bf16"}, cpu.info)     # no such setting


def test_numerics_on_the_bound_path():
    m = build("resnet_tiny", seed=0)
    cpu = host()
    feeds = [random_feeds(m, seed=i) for i in range(2)]
    reference = run_cpu(m, feeds)
    f32 = cpu.compile(bind(m, "openvino", "f32", cpu.info))
    for ref, out in zip(reference, [f32.run(f) for f in feeds]):
        for r, o in zip(ref, out):
            np.testing.assert_allclose(o, r, rtol=RTOL * 10, atol=ATOL * 10)   # another runtime's summation order
    if "bf16" not in device_precisions():        # no bf16 datapath on this CPU: not offered (test_ov_backend)
        return
    bf16 = cpu.compile(bind(m, "openvino", "bf16", cpu.info))
    loss = plan_loss(reference, [bf16.run(f) for f in feeds])
    assert 0 < loss < 1e-2           # lossy: bf16 rounding is real, and small on this graph


def test_illegal_where_the_target_does_not_offer_the_path():
    m = build("mlp", seed=0)
    gpu = backend("gpu").info                            # a modeled target: its own path only
    params = {"runtime": "openvino", "precision": "f32"}
    site = BINDING.sites(m, params, gpu)[0]
    assert "does not offer execution path openvino:f32" in BINDING.legal(m, site, params, gpu)
