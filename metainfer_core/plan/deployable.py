"""A deployable plan: the run folder's model on the execution path plan.json names.

    from metainfer_core.plan.deployable import load_plan
    plan = load_plan("artifacts/runs/<run>")
    outputs = plan({"images": x})          # list of arrays, in the graph's output order

The run folder holds model.onnx (the chosen graph; every runtime reads it) and plan.json's
`execution_path`: the runtime, its precision and the settings it was verified with (threads,
graph optimisation level, performance hint); the runtime's own module loads it (its `load`,
metainfer_core/backends/runtimes/). A plan adapted over a declared shape range
(model.shape_range) runs any shape inside it, and refuses one outside it naming the input, the
axis and the range."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx

from metainfer_core.backends.base import Backend, Compiled
from metainfer_core.backends.paths import ExecutionPath, default_path
from metainfer_core.backends.runtimes import find
from metainfer_core.errors import MetaInferError
from metainfer_core.normalize.shape_range import Ranges, from_json, outside
from metainfer_core.plan.bucketed import BUCKETS_FILE, BucketedPlan, load_buckets
from metainfer_core.plan.record import read_plan

_SETTINGS = ("providers", "intra_op_threads", "graph_optimization_level", "performance_hint", "inference_precision")


def path_record(backend: Backend, model: onnx.ModelProto) -> dict[str, Any]:
    """plan.json's `execution_path`: which runtime runs `model`, in which precision, with which settings."""
    path = ExecutionPath.of(model)
    runner = backend.path_backend(path) if hasattr(backend, "path_backend") else backend
    settings = {k: runner.spec[k] for k in _SETTINGS if k in runner.spec}
    runtime = find(path.runtime)
    if runtime is not None and runtime.sets_precision:
        settings["inference_precision"] = path.precision
    return {**path.as_dict(), "label": path.label, "version": runner.info.runtime, "default": path.is_default,
            "settings": settings}


class Deployed:
    """A ready inference callable on the plan's execution path."""

    def __init__(self, compiled: Compiled, path: dict[str, Any], inputs: list[str], output_names: list[str] = (),
                 ranges: Ranges | None = None):
        """ranges: the declared shape range the plan was verified over; run() refuses shapes
        outside it (time_once does not check: it times the model alone)."""
        self.compiled, self.path, self.inputs, self.ranges = compiled, path, inputs, ranges or {}
        self.output_names = list(output_names)

    def __call__(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.run(feeds)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        self._check(feeds)
        return self.compiled.run(feeds)

    def time_once(self, feeds: dict[str, np.ndarray]) -> float:
        return self.compiled.time_once(feeds)

    def _check(self, feeds: dict[str, np.ndarray]) -> None:
        if self.ranges:
            problem = outside(self.ranges, {k: tuple(np.shape(v)) for k, v in feeds.items()})
            if problem:
                raise MetaInferError(problem)


def load_plan(run_folder: str | Path, threads: int | None = None) -> Deployed | BucketedPlan:
    """The run folder's plan compiled on its execution path (`threads`: override the verified
    intra-op thread count, e.g. 0 for all cores); for a folder of buckets (buckets.json), the
    plan that pads each input to its bucket (plan/bucketed.py)."""
    folder = Path(run_folder)
    if (folder / BUCKETS_FILE).is_file():    # a static-shape target's buckets, one plan each
        return load_buckets(folder, load_plan, threads)
    plan_file, model_file = folder / "plan.json", folder / "model.onnx"
    if not plan_file.is_file() or not model_file.is_file():
        raise MetaInferError(f"{folder} is not an adapt run folder: it needs plan.json and model.onnx (flows/adapt.py "
                             "writes both under paths.artifacts/runs/<run>).")
    plan = read_plan(plan_file)
    record = plan.execution_path or {**default_path().as_dict(), "settings": {}}
    shapes = plan.shapes or {}
    ranges = from_json(shapes["range"]) if shapes.get("declared") and shapes.get("range") else None
    spec = {"memory_limit_bytes": 0, **record.get("settings", {})}
    if threads is not None:
        spec["intra_op_threads"] = threads
    model = onnx.load(str(model_file))
    runtime = find(record["runtime"])
    if runtime is None:
        raise MetaInferError(f"{plan_file} names execution path {record['runtime']!r}, which this version cannot load.")
    compiled = runtime.load(model, ExecutionPath(record["runtime"], record.get("precision", "f32")), spec)
    inits = {i.name for i in model.graph.initializer}
    return Deployed(compiled, record, [i.name for i in model.graph.input if i.name not in inits],
                    [o.name for o in model.graph.output], ranges)
