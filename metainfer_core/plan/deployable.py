"""A deployable plan: the run folder's model on the execution path plan.json names.

    from metainfer_core.plan.deployable import load_plan
    plan = load_plan("artifacts/runs/<run>")
    outputs = plan({"images": x})          # list of arrays, in the graph's output order

The run folder holds model.onnx (the chosen graph; every runtime reads it) and plan.json's
`execution_path`: the runtime, its precision and the settings it was verified with (threads,
graph optimisation level, performance hint); the runtime's own module loads it (its `load`,
metainfer_core/backends/runtimes/). Where the plan was chosen for several requests at once
(serving=throughput), plan.json's `serving.setting` (sessions, threads, streams) is how it is
served, and run() may be called from that many threads at once. A plan adapted over a declared shape range
(model.shape_range) runs any shape inside it, and refuses one outside it naming the input, the
axis and the range."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx

from metainfer_core.backends.base import Backend, Compiled
from metainfer_core.backends.paths import ExecutionPath, default_path
from metainfer_core.backends.runtimes import find
from metainfer_core.errors import MetaInferError
from metainfer_core.normalize.shape_range import Ranges, from_json, outside
from metainfer_core.plan.bucketed import BUCKETS_FILE, BucketedPlan, load_buckets
from metainfer_core.plan.plan_file import read_plan
from metainfer_core.serving.options import split_setting
from metainfer_core.serving.batching import BatchingPool
from metainfer_core.serving.pool import Pool, open_pool

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
    """A ready inference callable on the plan's execution path. run() may be called from several
    threads at once: where plan.json records a serving setting for several requests at once
    (decide/serve.py), the requests are served by a pool of that setting (serving/pool.py:
    its sessions or infer requests, one per request in flight), opened on the first call."""

    def __init__(self, compiled: Compiled, path: dict[str, Any], inputs: list[str], output_names: list[str] = (),
                 ranges: Ranges | None = None, serving: dict[str, Any] | None = None,
                 compile_one: Callable[[dict[str, Any]], Compiled] | None = None):
        """ranges: the declared shape range the plan was verified over; run() refuses shapes
        outside it (time_once does not check: it times the model alone). serving: plan.json's
        `serving` (its `setting` and `concurrency`); compile_one(overrides): another session of
        the plan with the setting's keys over its own."""
        self.compiled, self.path, self.inputs, self.ranges = compiled, path, inputs, ranges or {}
        self.output_names = list(output_names)
        self.serving = serving or {}
        self._compile_one = compile_one
        self._pools: dict[tuple | None, Pool | BatchingPool] = {}
        self._lock = threading.Lock()

    def __call__(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.run(feeds)

    @property
    def pooled(self) -> bool:
        """Served by a pool of the recorded setting (several requests at once), not one session."""
        return self._compile_one is not None

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        self._check(feeds)
        if self._compile_one is None:
            return self.compiled.run(feeds)
        return self.pool(feeds).run(feeds)

    def pool(self, feeds: dict[str, np.ndarray]) -> Pool | BatchingPool:
        """The pool serving `feeds`' shapes (one for all shapes, unless the runtime compiles per shape)."""
        key = tuple((k, np.shape(v)) for k, v in sorted(feeds.items())) if self.compiled.compiles_per_shape else None
        pool = self._pools.get(key)
        if pool is None:
            with self._lock:
                pool = self._pools.get(key)
                if pool is None:
                    pool = self._pools[key] = open_pool(self._compile_one, self.serving.get("setting") or {},
                                                        int(self.serving.get("concurrency") or 1), feeds,
                                                        first=self.compiled)
        return pool

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
    serving = dict(plan.serving or {})
    sessions, overrides = split_setting(serving.get("setting") or {})
    if threads is not None:
        spec["intra_op_threads"] = threads
        overrides.pop("intra_op_threads", None)
        serving["setting"] = {**serving.get("setting", {}), "sessions": sessions, **overrides}
        serving["setting"].pop("intra_op_threads", None)
    model = onnx.load(str(model_file))
    runtime = find(record["runtime"])
    if runtime is None:
        raise MetaInferError(f"{plan_file} names execution path {record['runtime']!r}, which this version cannot load.")
    path = ExecutionPath(record["runtime"], record.get("precision", "f32"))

    def compile_one(over: dict[str, Any]) -> Compiled:
        return runtime.load(model, path, {**spec, **over})

    pooled = sessions > 1 or int(serving.get("concurrency") or 1) > 1
    inits = {i.name for i in model.graph.initializer}
    deployed = Deployed(compile_one(overrides), record, [i.name for i in model.graph.input if i.name not in inits],
                        [o.name for o in model.graph.output], ranges, serving, compile_one if pooled else None)
    if pooled and not deployed.compiled.compiles_per_shape:
        deployed.pool({})       # its sessions compiled now, not by the first requests
    return deployed
