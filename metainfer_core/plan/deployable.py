"""A deployable plan: the run folder's model on the execution path plan.json names.

    from metainfer_core.plan.deployable import load_plan
    plan = load_plan("artifacts/runs/<run>")
    outputs = plan({"images": x})          # list of arrays, in the graph's output order

The run folder holds model.onnx (the chosen graph; both ONNX Runtime and OpenVINO load it) and
plan.json's `execution_path`: the runtime, its precision and the settings it was verified with
(threads, graph optimisation level, performance hint)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx

from metainfer_core.backends.base import Backend, Compiled
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.errors import MetaInferError
from metainfer_core.plan.record import read_plan

_SETTINGS = ("providers", "intra_op_threads", "graph_optimization_level", "performance_hint", "inference_precision")


def path_record(backend: Backend, model: onnx.ModelProto) -> dict[str, Any]:
    """plan.json's `execution_path`: which runtime runs `model`, in which precision, with which settings."""
    path = ExecutionPath.of(model)
    runner = backend.path_backend(path) if hasattr(backend, "path_backend") else backend
    settings = {k: runner.spec[k] for k in _SETTINGS if k in runner.spec}
    if path.runtime == "openvino":
        settings["inference_precision"] = path.precision
    return {**path.as_dict(), "label": path.label, "version": runner.info.runtime, "default": path.is_default,
            "settings": settings}


class Deployed:
    """A ready inference callable on the plan's execution path."""

    def __init__(self, compiled: Compiled, path: dict[str, Any], inputs: list[str]):
        self.compiled, self.path, self.inputs = compiled, path, inputs

    def __call__(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.run(feeds)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.compiled.run(feeds)

    def time_once(self, feeds: dict[str, np.ndarray]) -> float:
        return self.compiled.time_once(feeds)


def load_plan(run_folder: str | Path, threads: int | None = None) -> Deployed:
    """The run folder's plan compiled on its execution path (`threads`: override the verified
    intra-op thread count, e.g. 0 for all cores)."""
    folder = Path(run_folder)
    plan_file, model_file = folder / "plan.json", folder / "model.onnx"
    if not plan_file.is_file() or not model_file.is_file():
        raise MetaInferError(f"{folder} is not an adapt run folder: it needs plan.json and model.onnx (flows/adapt.py "
                             "writes both under paths.artifacts/runs/<run>).")
    record = read_plan(plan_file).execution_path or {"runtime": "onnxruntime", "precision": "f32", "settings": {}}
    spec = {"memory_limit_bytes": 0, **record.get("settings", {})}
    if threads is not None:
        spec["intra_op_threads"] = threads
    model = onnx.load(str(model_file))
    if record["runtime"] == "openvino":
        from metainfer_core.backends.ov_backend import OpenVinoBackend

        backend: Backend = OpenVinoBackend("deploy", "measured", {**spec, "inference_precision": record["precision"]})
    elif record["runtime"] == "onnxruntime":
        from metainfer_core.backends.ort_backend import OrtBackend

        backend = OrtBackend("deploy", "measured", spec)
    else:
        raise MetaInferError(f"{plan_file} names execution path {record['runtime']!r}, which this version cannot load.")
    inits = {i.name for i in model.graph.initializer}
    return Deployed(backend.compile(model), record, [i.name for i in model.graph.input if i.name not in inits])
