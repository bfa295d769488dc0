"""The fingerprint at the thread counts that matter: where several requests share the cores, the
default path offers sessions of other thread counts than a request's (serving/options.py), and
the graph's kernels are measured at each of those too. A backend's threads are part of its
fingerprint version, so each count's records live under a version of their own, beside the
reference (the request's threads), for the predictor to learn how kernel costs scale with
threads (predictor/model/thread_scaling.py)."""
from __future__ import annotations

import time
from typing import Callable

import numpy as np
import onnx

from metainfer_core.backends.base import Backend, Compiled
from metainfer_core.backends.paths import default_path
from metainfer_core.backends.runtimes import runtime_of
from metainfer_core.fingerprint.library import FingerprintLibrary
from metainfer_core.fingerprint.profiler import profile
from metainfer_core.ir.graph_hash import graph_hash
from metainfer_core.serving.options import threads_only


def counts_that_matter(cores: int, concurrency: int, reference: int) -> list[int]:
    """The intra-op threads of the default path's sessions-and-threads settings for this load,
    less the reference's (already measured): [] for one request at a time."""
    if concurrency <= 1:
        return []
    offered = runtime_of(default_path().runtime).serving_options(cores, concurrency)
    return sorted({int(o["intra_op_threads"]) for o in offered if threads_only(o)} - {reference})


def at_threads(backend: Backend, threads: int) -> Backend:
    """The same target with `threads` intra-op threads (a fingerprint version of its own)."""
    return type(backend)(name=backend.name, measurement=backend.measurement,
                         spec={**backend.spec, "intra_op_threads": threads}, seed=backend.seed)


WHOLE_ROUNDS = 60      # the graph timed whole at both counts, alternating, this many times each...
WHOLE_MIN_ROUNDS = 10  # ...or, for a slow graph, at least this many within WHOLE_MAX_S
WHOLE_MAX_S = 10.0


def profile_threads(backend: Backend, library: FingerprintLibrary, model: onnx.ModelProto, name: str,
                    feeds: dict[str, np.ndarray], threads: list[int], reps: int, warmup: int,
                    progress: Callable[[str], None] = print) -> None:
    """`model`'s kernels (at its own shapes) measured at each of `threads`, and the graph timed
    whole there and at the reference (the backend's threads), alternating run by run; what a
    version already holds is not measured again."""
    key = graph_hash(model)
    reference = backend.info.fingerprint_version
    for t in threads:
        t0 = time.perf_counter()
        other = at_threads(backend, t)
        r = profile(other, library, [model], [1], reps, warmup)
        whole = library.thread_runs(other.info.fingerprint_version, reference, key)
        if not whole:
            at, ref = timed_alternately(other.compile(model), backend.compile(model), feeds, warmup)
            library.add_thread_run(other.info, reference, name, key, at, ref)
            whole = [{"median_ms": at, "reference_ms": ref}]
        progress(f"profile: at {t} thread{'s' if t != 1 else ''} (sessions under the load): {r.measured} kernels "
                 f"measured, {r.reused} reused ({r.fingerprint_version}), the graph {whole[-1]['median_ms']:.4g} ms "
                 f"against {whole[-1]['reference_ms']:.4g} ms at the request's threads, "
                 f"in {time.perf_counter() - t0:.1f}s")


def timed_alternately(a: Compiled, b: Compiled, feeds: dict[str, np.ndarray], warmup: int) -> tuple[float, float]:
    """(median ms of a, of b), run one after the other WHOLE_ROUNDS times, fewer past
    WHOLE_MAX_S (a shared machine's drift weighs on both alike)."""
    for _ in range(max(1, warmup)):
        a.run(feeds)
        b.run(feeds)
    ta, tb = [], []
    t0 = time.perf_counter()
    while len(ta) < WHOLE_ROUNDS and (len(ta) < WHOLE_MIN_ROUNDS or time.perf_counter() - t0 < WHOLE_MAX_S):
        ta.append(a.time_once(feeds))
        tb.append(b.time_once(feeds))
    return float(np.median(ta)), float(np.median(tb))
