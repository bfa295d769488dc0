"""Plans served under load side by side: each plan with each serving setting its runtime offers
(serving/options.py), every pool opened and warmed first, then each served for half the time in
one order and half in the reverse one (a slow drift of a shared machine weighs on all alike)."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from metainfer_core.backends.base import Backend
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.backends.runtimes import runtime_of
from metainfer_core.serving.load import LoadFigures, under_load
from metainfer_core.serving.options import Setting
from metainfer_core.serving.pool import Pool, pool_on

Feeds = dict[str, np.ndarray]


def settings_for(model: onnx.ModelProto, cores: int, concurrency: int, rows: int = 1) -> list[Setting]:
    """The serving settings `model`'s execution path offers for this load (`rows`: the most
    rows one call may take, serving/batching.py's batch_rows)."""
    return runtime_of(ExecutionPath.of(model).runtime).serving_options(cores, concurrency, rows)


def path_spec(backend: Backend, model: onnx.ModelProto) -> dict[str, Any]:
    """The settings `model` was verified with on its path (the host backend's path backend)."""
    path = ExecutionPath.of(model)
    runner = backend.path_backend(path) if hasattr(backend, "path_backend") else backend
    return dict(runner.spec)


def serve_all(backend: Backend, models: list[tuple[str, onnx.ModelProto]], settings: dict[str, list[Setting]],
              feeds: Feeds, concurrency: int, duration_s: float) -> dict[str, list[LoadFigures]]:
    """{label: one LoadFigures per setting, in order}; a setting that fails to open or serve has
    its error and no requests."""
    pools: list[tuple[str, int, Pool | None, str | None]] = []
    for label, model in models:
        path = ExecutionPath.of(model)
        runtime, spec = runtime_of(path.runtime), path_spec(backend, model)
        for i, setting in enumerate(settings[label]):
            try:
                pools.append((label, i, pool_on(runtime, path, model, spec, setting, concurrency, feeds), None))
            except Exception as exc:  # noqa: BLE001 - a setting the runtime refuses is reported, not fatal
                pools.append((label, i, None, f"{type(exc).__name__}: {str(exc)[:300]}"))
    out = {label: [LoadFigures() for _ in settings[label]] for label, _ in models}
    for label, i, pool, error in pools:
        if error:
            out[label][i].error = error
    live = [(label, i, pool) for label, i, pool, _ in pools if pool is not None]
    for half in (live, live[::-1]):
        for label, i, pool in half:
            if out[label][i].error:
                continue
            out[label][i] = out[label][i].merged(under_load(pool.run, feeds, concurrency, duration_s / 2))
    return out
