"""The fingerprint library (SQLAlchemy) and the profiler that fills it."""
from __future__ import annotations

import threading

import pytest

from metainfer_core.backends import create_backend
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.fingerprint.profiler import kernel_model, profile
from metainfer_core.ir.kernels import group_kernels
from metainfer_core.ir.tensors import tensor_infos
from metainfer_core.zoo import build

from twins import backend
from backends.test_ort_backend import CPU_SPEC


@pytest.fixture
def library(tmp_path):
    return FingerprintLibrary(f"sqlite:///{tmp_path}/fp.db")


def test_profile_measures_once_then_reuses(library):
    fpga = backend("fpga")
    m = build("mlp")
    first = profile(fpga, library, [m], [1, 2], reps=5, warmup=1)
    assert first.measured > 0 and first.reused == 0 and not first.skipped
    second = profile(fpga, library, [m], [1, 2], reps=5, warmup=1)
    assert second.measured == 0 and second.reused == first.measured
    assert len(library.records(first.fingerprint_version)) == first.measured


def test_records_hold_the_measurement_fields(library):
    cpu = create_backend("metainfer_core.backends.ort_backend.OrtBackend", "cpu", "measured", CPU_SPEC)
    rep = profile(cpu, library, [build("mlp")], [1], reps=5, warmup=1)
    rec = library.records(rep.fingerprint_version)[0]
    assert rec["median_ms"] > 0 and rec["p10_ms"] <= rec["median_ms"] <= rec["p90_ms"]
    assert rec["features"]["op_type"] == rec["op_type"] and rec["source"] == "microbench"


def test_firmware_change_is_a_new_version_and_keeps_the_old(library):
    m = build("mlp")
    old = profile(backend("npu"), library, [m], [1], reps=3, warmup=0)
    new = profile(backend("npu", firmware="sim-npu-fw-2.4"), library, [m], [1], reps=3, warmup=0)
    assert old.fingerprint_version != new.fingerprint_version
    assert new.measured == old.measured
    assert set(library.versions("npu")) == {old.fingerprint_version, new.fingerprint_version}
    assert len(library.records(old.fingerprint_version)) == old.measured


def test_concurrent_profiles_do_not_duplicate(tmp_path):
    url = f"sqlite:///{tmp_path}/fp.db"
    FingerprintLibrary(url)     # create the schema once, as the first run would
    reports, errors = [], []

    def work():
        try:
            reports.append(profile(backend("gpu"), FingerprintLibrary(url), [build("mlp")], [1, 2], reps=3, warmup=0))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    recs = FingerprintLibrary(url).records(reports[0].fingerprint_version)
    assert len(recs) == len({r["kernel_key"] for r in recs}) == max(r.measured for r in reports)


def test_kernel_model_scales_batch():
    m = build("resnet_tiny")
    infos = tensor_infos(m)
    k = group_kernels(m, infos)[0]
    km = kernel_model(m, k, infos, batch_scale=4)
    assert km.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 4 * infos[k.inputs[0]].shape[0]


def test_kernel_model_does_not_scale_a_weight_computed_from_constants():
    """A Gemm weight made at run time by ConstantOfShape (old Caffe2 exports; too big to fold)
    carries no batch: at batch 4 only the activation grows, and the kernel runs."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from metainfer_core.ir.tensors import random_feeds

    value = numpy_helper.from_array(np.array([0.02], np.float32), "")
    nodes = [helper.make_node("ConstantOfShape", ["w_shape"], ["w"], value=value),
             helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
                          [numpy_helper.from_array(np.array([16, 32], np.int64), "w_shape"),
                           numpy_helper.from_array(np.ones(16, np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    infos = tensor_infos(m)
    gemm = next(k for k in group_kernels(m, infos) if k.op_type.startswith("Gemm"))
    km = kernel_model(m, gemm, infos, batch_scale=4)
    dims = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in km.graph.input}
    assert dims == {"x": [4, 32], "w": [16, 32]}
    (y,) = ort.InferenceSession(km.SerializeToString()).run(None, random_feeds(km))
    assert y.shape == (4, 16)


def test_profiling_variants_stop_at_their_deadline(settings_for):
    """Rewriting a large graph into every variant took twice the profile's share on a 521-node
    detector: past the deadline no variant is made (the graph itself is always profiled)."""
    import time

    from metainfer_core.backends import backend_for
    from metainfer_core.fingerprint.stage import profiling_variants
    from metainfer_core.prepare.stage import prepare_stage

    s = settings_for("target=cpu", "model=resnet_tiny")
    prepared = prepare_stage(s, False, progress=lambda msg: None)
    assert len(profiling_variants(s, prepared, backend_for(s), deadline=time.perf_counter() + 60)) > 10
    assert len(profiling_variants(s, prepared, backend_for(s), deadline=time.perf_counter())) == 1
