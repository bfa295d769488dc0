"""The OpenVINO execution path: the CPU plugin behind the same Backend interface, and the
host backend that routes a bound plan to it."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.actions import ACTIONS
from metainfer_core.backends import create_backend
from metainfer_core.backends.ov_backend import OpenVinoBackend, OvCompiled, device_precisions
from metainfer_core.backends.paths import ExecutionPath, offered_paths
from metainfer_core.ir.directives import PATH_KEY
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.zoo import build

from graphs import conv_chain
from twins import HOST_SPEC

SPEC = HOST_SPEC


@pytest.fixture(scope="module")
def host():
    return create_backend("metainfer_core.backends.host.HostBackend", "cpu", "measured", SPEC)


def test_info_describes_the_plugin_and_gets_its_own_fingerprint_version(host):
    ov = host.path_backend(ExecutionPath("openvino", "f32"))
    info = ov.info
    assert info.runtime.startswith("openvino-") and "plugin=CPU" in info.driver and "caps=" in info.driver
    assert "threads=1" in info.driver and "precision=f32" in info.driver
    offered = [p for p in host.paths if p.runtime == "openvino"]
    versions = {host.info.fingerprint_version} | {host.path_backend(p).info.fingerprint_version for p in offered}
    assert info.fingerprint_version in versions
    assert len(versions) == 1 + len(offered)      # each path (and precision) keeps its records apart
    assert host.info.extra["execution_paths"][0] == "onnxruntime"
    # a precision this CPU has no datapath for (bf16 without AVX512_BF16/AMX) is not offered, and says so
    missing = {"bf16", "f32"} - device_precisions()
    for precision in missing:
        with pytest.raises(ValueError, match="not offered"):
            host.path_backend(ExecutionPath("openvino", precision))


def test_f32_matches_onnx_runtime_and_bf16_stays_close(host):
    model = build("resnet_tiny", seed=0)
    feeds = [random_feeds(model, seed=i) for i in range(2)]
    reference = run_cpu(model, feeds)
    for precision, bound in (("f32", 1e-6), ("bf16", 1e-2)):
        if precision not in device_precisions():      # decided by the CPU, not assumed
            continue
        c = host.path_backend(ExecutionPath("openvino", precision)).compile(model)
        outputs = [c.run(f) for f in feeds]
        assert [o.shape for o in outputs[0]] == [r.shape for r in reference[0]]
        assert plan_loss(reference, outputs) < bound, precision
    c = host.path_backend(ExecutionPath("openvino", "f32")).compile(model)
    np.testing.assert_allclose(c.run(feeds[0])[0], reference[0][0], rtol=1e-3, atol=1e-4)


def test_benchmark_node_times_and_peak_memory():
    ov = OpenVinoBackend("cpu", "measured", {"intra_op_threads": 1, "memory_limit_bytes": 1 << 33,
                                             "inference_precision": "f32"})
    model = conv_chain()
    t = ov.benchmark(model, reps=10, warmup=2)
    assert t.reps == 10 and 0 < t.p10_ms <= t.median_ms <= t.p90_ms and t.peak_mem_bytes > 0
    c = ov.compile(model)
    feeds = random_feeds(model, seed=0)
    times = c.node_times_us(feeds, runs=3)
    assert times and all(v >= 0 for v in times.values())
    assert c.peak_memory(feeds) > 0


def test_host_routes_a_bound_plan_to_openvino(host):
    model = build("mlp", seed=0)
    bound = ACTIONS["binding"].apply(model, ACTIONS["binding"].sites(model, {"runtime": "openvino"}, host.info)[0],
                                     {"runtime": "openvino", "precision": "f32"}, None)
    assert json.loads(dict((p.key, p.value) for p in bound.metadata_props)[PATH_KEY])["runtime"] == "openvino"
    assert isinstance(host.compile(bound), OvCompiled)
    assert not isinstance(host.compile(model), OvCompiled)


def test_a_path_whose_package_is_missing_is_not_offered():
    spec = {"execution_paths": {"openvino": {"precisions": ["f32"]}, "no_such_runtime_pkg": {"precisions": ["f32"]}}}
    labels = [p.label for p in offered_paths(spec)]
    assert labels == ["onnxruntime", "openvino:f32"]


def test_dynamic_batch_is_bound_at_first_run(host):
    model = build("resnet_tiny", seed=0)       # batch dim symbolic
    assert not all(d.HasField("dim_value") for d in model.graph.input[0].type.tensor_type.shape.dim)
    c = host.path_backend(ExecutionPath("openvino", "f32")).compile(model)
    x = random_feeds(model, seed=0)
    assert c.run(x)[0].shape[0] == next(iter(x.values())).shape[0]
    assert c.compile_s > 0
    onnx.checker.check_model(model, full_check=True)
