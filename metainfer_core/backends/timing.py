"""Timing several compiled graphs side by side on one machine: interleaved rounds of warm runs.

Rounds interleave the graphs (A B C, B C A, C A B ...) so a shared machine's drift, and the
position within a round, hit all alike. Within a round each graph first runs `settle` times
untimed, right before its timed run: on ONNX Runtime the first run after another graph's is a
cold one (weights and activations evicted from the caches) and costs up to several times a
back-to-back run, the second and third runs after a switch close to back to back
(docs/decisions/2026-12-05-measured-reasons-from-docstrings.md). Cold
runs misjudge plans: they hide most of int8's gain over fp32 and show an fp16 copy faster than
the fp32 graph where back to back both take the same; they also disagree with warm
micro-benchmarks. Inference serving runs back to back, so a latency here
is a warm one. A modeled target has no caches: it gets no settle runs (settle_runs). Nor does a
graph whose run takes longer than SETTLE_BELOW_MS: what a cold run adds is the caches' refill, a
fraction of a millisecond to a few, lost in the noise of a long run (a slow model and its
OpenVINO plan time alike with 0 or 2 settle runs), while settle runs would triple its timing."""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from metainfer_core.backends.base import Backend, Compiled

SETTLE = 2      # untimed runs before each timed one (a third run is close to back to back)
SETTLE_BELOW_MS = 50.0      # ...for graphs that run faster than this
REPS_BUDGET_MS = 120     # a micro-benchmark's timed runs aim at about this much in all...
MIN_REPS = 7             # ...but never fewer runs than this (the median and p10/p90 need a few)
WARMUP_BUDGET_MS = 50


def scaled_reps(reps: int, warmup: int, run_ms: float) -> tuple[int, int]:
    """(timed runs, warm-up runs) for a kernel that takes `run_ms`: a 100 ms kernel needs far
    fewer than 30 repetitions for a stable median, a 10 us one keeps them all."""
    run_ms = max(run_ms, 1e-6)
    return (max(min(reps, MIN_REPS), min(reps, int(REPS_BUDGET_MS / run_ms))),
            max(0, min(warmup, int(WARMUP_BUDGET_MS / run_ms))))


WARM_MS = 100.0        # a fresh session's warm-up runs aim at about this much...
MIN_WARM = 3           # ...and are never fewer than this


def warm_up(compiled: Compiled, feeds: dict[str, np.ndarray]) -> float:
    """Runs a freshly compiled graph until it is warm; its median warm run (ms). A fresh
    session's first runs (allocator growth) are slower than the later ones verify times."""
    t0 = time.perf_counter()
    compiled.run(feeds)
    first_ms = max((time.perf_counter() - t0) * 1e3, 1e-3)
    warm = [compiled.time_once(feeds) for _ in range(max(MIN_WARM, int(WARM_MS / first_ms)))]
    return max(float(np.median(warm)), 1e-3)


def settle_runs(backend: Backend) -> int:
    return SETTLE if backend.info.measurement == "measured" else 0


def runs_per_sample(run_ms: float, settle: int = SETTLE) -> int:
    """Runs one timed sample of a graph that takes `run_ms` costs in interleaved(): its settle
    runs, if it gets them, and the timed one."""
    return 1 + (settle if run_ms < SETTLE_BELOW_MS else 0)


def interleaved(compiled: Sequence[Compiled | None], feeds: Sequence[dict[str, np.ndarray]], rounds: int,
                settle: int, deadline: float | None = None, min_rounds: int = 1) -> list[list[float]]:
    """Timed samples (ms) per graph, one per round; a None graph gets none. Round r starts at
    the r-th live graph. A graph's settle runs stop once its timed run takes SETTLE_BELOW_MS.
    deadline (time.perf_counter()): no round is begun that would likely end past it, once
    min_rounds are done."""
    live = [i for i, c in enumerate(compiled) if c is not None]
    samples: list[list[float]] = [[] for _ in compiled]
    t_start = time.perf_counter()
    for r in range(rounds):
        now = time.perf_counter()
        if deadline is not None and r >= min_rounds and now + (now - t_start) / max(r, 1) > deadline:
            break
        k = r % len(live) if live else 0
        for i in live[k:] + live[:k]:
            c, f = compiled[i], feeds[i]
            for _ in range(runs_per_sample(samples[i][-1] if samples[i] else 0.0, settle) - 1):
                c.time_once(f)
            samples[i].append(c.time_once(f))
    return samples
