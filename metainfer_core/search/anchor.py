"""The anchor of the search's latency estimates: the unchanged model timed on the target once,
before the search. The predictor learns kernels; their sum can miss the whole model by a
factor (per-run overhead, kernels it never saw on a fresh store), the same factor for every
plan of that graph family, so predictions are scaled by measured / predicted for the default:
the default is predicted as measured and each plan keeps its predicted ratio to it (the ranking
is unchanged, the absolute numbers the budget and the report use are the target's).

Timed as verify times (warm, interleaved rounds of one run each, the median), over about a
second whatever the model's size: a fast model's rounds are single runs of tens of
microseconds, and ten of them (the former cap, a fraction of a millisecond in all) moved by
far more than an anchor may between two timings of the same graph; a fresh session's first runs (allocator growth)
are slower than the later ones verify times, so a few warm-up runs come first."""
from __future__ import annotations

import numpy as np
import onnx

from metainfer_core.backends.base import Backend
from metainfer_core.backends.timing import interleaved, runs_per_sample, settle_runs, warm_up

TIMED_MS = 1000.0      # timed runs aim at about this much in all
# a lossy graph's family timed during the search: an anchor needs ~10 %, and these seconds come
# out of the search's budget (timed as long as the default, a model with many families spent
# a large part of its budget on them; docs/decisions/2026-12-05-measured-reasons-from-docstrings.md)
FAMILY_TIMED_MS = 300.0
MIN_ROUNDS, MAX_ROUNDS = 3, 200


def measured_default_ms(backend: Backend, model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                        timed_ms: float = TIMED_MS) -> float:
    """`model`'s median warm latency on `backend`'s default path (ms), its timed runs about
    `timed_ms` in all."""
    compiled = backend.compile(model)
    run_ms = warm_up(compiled, feeds)
    settle = settle_runs(backend)
    rounds = int(max(MIN_ROUNDS, min(MAX_ROUNDS, timed_ms / (run_ms * runs_per_sample(run_ms, settle)))))
    samples = interleaved([compiled], [feeds], rounds, settle)[0]
    return float(np.median(samples))
