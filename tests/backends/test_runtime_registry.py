"""The runtime registry: a runtime declared in one module is found by the registry, by execution
paths, the missing-package report, the host backend, the peak-memory probe, plan.json's path
record and the deploy loader (a stub declared here, registered for one test at a time); the two
real runtimes are registered with their declared facts."""
from __future__ import annotations

import json

import numpy as np
import pytest

from metainfer_core.backends import create_backend
from metainfer_core.backends import peak_probe
from metainfer_core.backends.base import Backend, Compiled, TargetInfo, Timing
from metainfer_core.backends.paths import DEFAULT_PATH, PRECISIONS, RUNTIMES, ExecutionPath, missing_paths, offered_paths
from metainfer_core.backends.runtimes import (Runtime, default_runtime, find, precisions, register, runtime_for_form,
                                              runtime_names, runtime_of, runtimes, unregister)
from metainfer_core.errors import MetaInferError
from metainfer_core.plan.deployable import load_plan, path_record
from metainfer_core.zoo import build

from plan_content import plan_content

HOST = {"providers": ["CPUExecutionProvider"], "intra_op_threads": 1, "memory_limit_bytes": 1 << 33}


class StubCompiled(Compiled):
    compile_s = 0.0

    def __init__(self, backend: Backend):
        self.backend = backend

    def run(self, feeds):
        return [np.zeros(1, np.float32)]

    def time_once(self, feeds):
        return 1.0

    def peak_memory(self, feeds):
        return 0


class StubBackend(Backend):
    @property
    def info(self):
        return TargetInfo(self.name, self.measurement, "fw", f"precision={self.spec['inference_precision']}",
                          "stub-1.0", int(self.spec["memory_limit_bytes"]), None, ("float32",), (), "NCHW", False, 1)

    def compile(self, model):
        return StubCompiled(self)

    def benchmark(self, model, reps, warmup):
        return Timing.from_samples([1.0])


@pytest.fixture
def stub():
    """A runtime declared as a runtime module declares one, unregistered after the test."""
    events: list[str] = []

    @register
    class StubRuntime(Runtime):
        name = "stub"
        packages = ("json",)
        precisions = ("f32", "f16", "bf16")
        sets_precision = True
        native_int8_forms = ("stub-form",)

        def cpu_precisions(self):
            return {"f32", "f16"}

        def backend(self, path, name, measurement, spec, seed=0):
            return StubBackend(name, measurement, {**spec, "inference_precision": path.precision}, seed)

        def peak_session(self, options):
            events.append(f"loaded {options['setting']}")

            def open_session(model_path, feeds):
                events.append(f"opened {sorted(feeds)}")
                return lambda run_feeds: events.append("ran")
            return open_session

    runtime = runtime_of("stub")
    runtime.events = events
    yield runtime
    unregister("stub")
    assert find("stub") is None


def test_a_stub_runtime_registers_itself_and_the_registry_finds_it(stub):
    assert find("stub") is stub and isinstance(stub, Runtime)
    assert "stub" in runtime_names() and stub in runtimes()
    assert runtime_names()[0] == default_runtime().name          # the default first, the rest by name
    assert runtime_for_form("stub-form") is stub and runtime_for_form("no-such-form") is None
    assert stub.installed()
    assert set(precisions()) >= {"f32", "f16", "bf16"}


def test_execution_paths_parse_label_and_offer_the_stub(stub):
    path = ExecutionPath.parse("stub:f16")
    assert path == ExecutionPath("stub", "f16") and path.label == "stub:f16" and path.lossy and not path.is_default
    spec = {"execution_paths": {"stub": {"precisions": ["f32", "f16", "bf16"]}}}
    assert [p.label for p in offered_paths(spec)] == [DEFAULT_PATH.label, "stub:f32", "stub:f16", "stub:bf16"]
    assert missing_paths(spec) == []


def test_missing_packages_are_reported_and_their_paths_not_offered(stub, monkeypatch):
    monkeypatch.setattr(type(stub), "packages", ("json", "no_such_package_for_the_stub"))
    spec = {"execution_paths": {"stub": {"precisions": ["f32"]}, "undeclared_runtime": {}}}
    assert missing_paths(spec) == ["no_such_package_for_the_stub", "undeclared_runtime"]
    assert offered_paths(spec) == [DEFAULT_PATH]


def test_the_host_backend_offers_what_the_cpu_has_and_builds_the_runtimes_backend(stub):
    spec = {**HOST, "execution_paths": {"stub": {"precisions": ["f32", "f16", "bf16"], "own_setting": 7}}}
    host = create_backend("metainfer_core.backends.host.HostBackend", "cpu", "measured", spec)
    assert [p.label for p in host.paths] == [DEFAULT_PATH.label, "stub:f32", "stub:f16"]    # no bf16 datapath
    assert host.info.extra["execution_paths"] == [DEFAULT_PATH.label, "stub:f32", "stub:f16"]
    runner = host.path_backend(ExecutionPath("stub", "f16"))
    assert isinstance(runner, StubBackend) and runner.spec["own_setting"] == 7
    assert runner.spec["inference_precision"] == "f16" and host.path_backend(ExecutionPath("stub", "f16")) is runner
    with pytest.raises(ValueError, match="not offered"):
        host.path_backend(ExecutionPath("stub", "bf16"))
    model = build("mlp", seed=0)
    ExecutionPath("stub", "f16").write_to(model)
    assert isinstance(host.compile(model), StubCompiled)
    record = path_record(host, model)                          # plan.json's execution_path
    assert record["runtime"] == "stub" and record["version"] == "stub-1.0"
    assert record["settings"]["inference_precision"] == "f16"   # a runtime with a precision setting records it


def test_the_peak_probe_opens_the_runtimes_session_after_loading_it(stub, tmp_path, capsys):
    np.savez(tmp_path / "feeds.npz", x=np.ones((2, 3), np.float32))
    (tmp_path / "options.json").write_text(json.dumps({"runtime": "stub", "setting": "s"}))
    (tmp_path / "model.onnx").write_bytes(b"")
    peak_probe.main(str(tmp_path / "model.onnx"), str(tmp_path / "feeds.npz"), str(tmp_path / "options.json"))
    assert stub.events == ["loaded s", "opened ['x']", "ran"]
    assert int(capsys.readouterr().out.strip()) >= 0


def test_the_deploy_loader_loads_a_plan_on_the_runtime_plan_json_names(stub, tmp_path):
    import onnx

    onnx.save(build("mlp", seed=0), str(tmp_path / "model.onnx"))
    path = {"runtime": "stub", "precision": "f16", "settings": {"intra_op_threads": 2}}
    (tmp_path / "plan.json").write_text(json.dumps(plan_content(execution_path=path)))
    plan = load_plan(tmp_path, threads=0)
    assert isinstance(plan.compiled, StubCompiled) and plan.path == path
    assert plan.compiled.backend.spec == {"memory_limit_bytes": 0, "intra_op_threads": 0, "inference_precision": "f16"}


def test_a_runtime_declared_twice_and_an_undeclared_one_are_refused(stub):
    class Other(Runtime):
        name = "stub"

        def backend(self, path, name, measurement, spec, seed=0): ...

        def peak_session(self, options): ...

    with pytest.raises(ValueError, match="declared twice"):
        register(Other)
    assert find("no_such_runtime") is None and ExecutionPath("no_such_runtime").label == "no_such_runtime:f32"
    with pytest.raises(MetaInferError, match="no_such_runtime"):
        runtime_of("no_such_runtime")


def test_the_two_host_runtimes_declare_their_facts():
    ort, ov = runtime_of("onnxruntime"), runtime_of("openvino")
    assert RUNTIMES == runtime_names() == ("onnxruntime", "openvino")
    assert PRECISIONS == ("f32", "bf16", "f16")
    assert default_runtime() is ort and DEFAULT_PATH == ExecutionPath() == ExecutionPath("onnxruntime", "f32")
    assert (ort.packages, ort.precisions, ort.sets_precision, ort.native_int8_forms) == (("onnxruntime",), ("f32",),
                                                                                         False, ())
    assert (ov.packages, ov.precisions, ov.sets_precision, ov.default) == (("openvino",), ("f32", "bf16", "f16"),
                                                                           True, False)
    assert runtime_for_form("inputs") is ov
    assert ExecutionPath("onnxruntime", "bf16").label == "onnxruntime"          # no precision setting
    assert ExecutionPath("openvino", "bf16").label == "openvino:bf16"
    assert ort.cpu_precisions() == {"f32"} and ort.installed()


def test_the_host_runtimes_build_their_backends_and_report_this_cpu():
    from metainfer_core.backends.ort_backend import OrtBackend

    ort = runtime_of("onnxruntime").backend(DEFAULT_PATH, "cpu", "measured", HOST, seed=3)
    assert type(ort) is OrtBackend and ort.seed == 3 and ort.spec == HOST
    if not runtime_of("openvino").installed():
        pytest.skip("openvino is not installed")
    from metainfer_core.backends.ov_backend import OpenVinoBackend, device_precisions

    ov = runtime_of("openvino")
    assert ov.cpu_precisions() == device_precisions() and "f32" in ov.cpu_precisions()
    backend = ov.backend(ExecutionPath("openvino", "bf16"), "cpu", "measured", HOST)
    assert type(backend) is OpenVinoBackend and backend.spec == {**HOST, "inference_precision": "bf16"}
