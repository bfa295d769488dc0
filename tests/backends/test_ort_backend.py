"""The measured backend on this machine's ONNX Runtime CPU provider."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.backends import create_backend
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.zoo import build

from graphs import conv_chain, matmul

CPU_SPEC = {"providers": ["CPUExecutionProvider"], "intra_op_threads": 1, "memory_limit_bytes": 1 << 33,
            "dtypes": ["float32", "float16", "int8"], "quantization": ["QDQ"]}


@pytest.fixture
def cpu():
    return create_backend("metainfer_core.backends.ort_backend.OrtBackend", "cpu", "measured", CPU_SPEC)


def test_info_versions(cpu):
    info = cpu.info
    assert info.runtime == f"onnxruntime-{ort.__version__}" and info.measurement == "measured"
    assert "threads=1" in info.driver
    other = create_backend("metainfer_core.backends.ort_backend.OrtBackend", "cpu", "measured",
                           dict(CPU_SPEC, intra_op_threads=2))
    assert other.info.fingerprint_version != info.fingerprint_version   # thread setting = new version


def test_benchmark_reports_order_statistics(cpu):
    t = cpu.benchmark(matmul(128, 256, 128), reps=15, warmup=3)
    assert t.reps == 15 and 0 < t.p10_ms <= t.median_ms <= t.p90_ms
    assert not t.fallback


def test_benchmark_scales_with_work(cpu):
    small = cpu.benchmark(matmul(32, 64, 32), reps=15, warmup=3).median_ms
    large = cpu.benchmark(matmul(512, 512, 512), reps=15, warmup=3).median_ms
    assert large > 5 * small


def test_fp16_on_cpu_is_flagged_as_fallback(cpu):
    m = conv_chain()
    site = ACTIONS["fp16"].sites(m, {"scope": "all"}, cpu.info)[0]
    half = ACTIONS["fp16"].apply(m, site, {"scope": "all"}, ActionContext())
    assert cpu.benchmark(half, reps=5, warmup=1).fallback


def test_only_graphs_holding_float16_are_probed_for_fallback():
    from onnx import TensorProto, helper
    from metainfer_core.backends.ort_backend import _holds_float16

    m = conv_chain()
    assert not _holds_float16(m)
    half = ACTIONS["fp16"].apply(m, ACTIONS["fp16"].sites(m, {"scope": "all"}, None)[0], {"scope": "all"}, ActionContext())
    assert _holds_float16(half)
    # float32 in and out, float16 only inside: found by its Cast
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    inner = helper.make_graph([helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
                               helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT)], "inner", [x], [y])
    assert _holds_float16(helper.make_model(inner))


def test_compile_run_time_and_memory(cpu):
    m = build("resnet_tiny")
    feeds = random_feeds(m)
    c = cpu.compile(m)
    assert c.compile_s > 0
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(c.run(feeds)[0], ref[0], rtol=1e-5, atol=1e-6)
    assert c.time_once(feeds) > 0
    weights = sum(np.prod(i.dims) * 4 for i in m.graph.initializer)
    assert c.peak_memory(feeds) > weights / 2        # at least the weights had to be resident


def test_node_times_from_profiler(cpu):
    m = build("mlp")
    times = cpu.compile(m).node_times_us(random_feeds(m), runs=3)
    assert times and all(v >= 0 for v in times.values())
