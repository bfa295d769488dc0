"""The anchor of the search's latency estimates: the unchanged model timed on the target once,
before the search. The predictor learns kernels; their sum can miss the whole model by a
factor (per-run overhead, kernels it never saw on a fresh store), the same factor for every
plan of that graph family, so predictions are scaled by measured / predicted for the default:
the default is predicted as measured and each plan keeps its predicted ratio to it (the ranking
is unchanged, the absolute numbers the budget and the report use are the target's).

Timed as verify times (warm, interleaved rounds of one run each, the median), over about a
second whatever the model's size: a fast model's rounds are single runs of tens of
microseconds, and ten of them (the former cap, a fraction of a millisecond in all) moved by a
fifth between two timings of the same graph; a fresh session's first runs (allocator growth)
are slower than the later ones verify times, so a few warm-up runs come first."""
from __future__ import annotations

import time

import numpy as np
import onnx

from metainfer_core.backends.base import Backend
from metainfer_core.backends.timing import interleaved, runs_per_sample, settle_runs

TIMED_MS = 1000.0      # timed runs aim at about this much in all
WARM_MS = 100.0        # warm-up runs before them aim at this much...
MIN_WARM = 3           # ...and are never fewer than this
MIN_ROUNDS, MAX_ROUNDS = 3, 200


def measured_default_ms(backend: Backend, model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> float:
    """`model`'s median warm latency on `backend`'s default path (ms)."""
    compiled = backend.compile(model)
    t0 = time.perf_counter()
    compiled.run(feeds)
    first_ms = max((time.perf_counter() - t0) * 1e3, 1e-3)
    warm = [compiled.time_once(feeds) for _ in range(max(MIN_WARM, int(WARM_MS / first_ms)))]
    run_ms = max(float(np.median(warm)), 1e-3)
    settle = settle_runs(backend)
    rounds = int(max(MIN_ROUNDS, min(MAX_ROUNDS, TIMED_MS / (run_ms * runs_per_sample(run_ms, settle)))))
    samples = interleaved([compiled], [feeds], rounds, settle)[0]
    return float(np.median(samples))
