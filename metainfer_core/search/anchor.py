"""The anchor of the search's latency estimates: the unchanged model timed on the target once,
before the search. The predictor learns kernels; their sum can miss the whole model by a
factor (per-run overhead, kernels it never saw on a fresh store), the same factor for every
plan of that graph family, so predictions are scaled by measured / predicted for the default:
the default is predicted as measured and each plan keeps its predicted ratio to it (the ranking
is unchanged, the absolute numbers the budget and the report use are the target's)."""
from __future__ import annotations

import time

import numpy as np
import onnx

from metainfer_core.backends.base import Backend
from metainfer_core.backends.timing import interleaved, settle_runs

TIMED_MS = 1000.0      # timed runs aim at about this much in all
MAX_ROUNDS = 10


def measured_default_ms(backend: Backend, model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> float:
    """The default plan's median latency on `backend` (ms): one warm-up run, then a few timed
    rounds (fewer for a slow model, at least 2)."""
    compiled = backend.compile(model)
    t0 = time.perf_counter()
    compiled.run(feeds)
    first_ms = (time.perf_counter() - t0) * 1e3
    rounds = int(max(2, min(MAX_ROUNDS, TIMED_MS / max(first_ms, 1e-3))))
    samples = interleaved([compiled], [feeds], rounds, settle_runs(backend))[0]
    return float(np.median(samples))
