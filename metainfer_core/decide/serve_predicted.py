"""The predictor's part in the serving verdict: each plan's sessions-and-threads settings
(serving/options.threads_only) on the path the fingerprint measures scored before any is
served, from the plan's verified latency and how its kernels' costs scale with threads
(predictor/model/thread_scaling.py, learned from the fingerprint at the thread counts that
matter); of those, the best few per plan are served under the load (serving.predicted_best),
the others recorded with their prediction. Where the fingerprint holds no thread scaling
(a first run, a modeled target) every setting is served."""
from __future__ import annotations

from typing import Callable

import onnx

from metainfer_core.backends.base import Backend
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.fingerprint.library import FingerprintLibrary
from metainfer_core.fingerprint.thread_counts import at_threads, counts_that_matter
from metainfer_core.ir.graph_hash import graph_hash
from metainfer_core.predictor.model.thread_scaling import KernelCosts, ThreadScaling
from metainfer_core.serving.options import Setting, threads_only
from metainfer_core.serving.predicted import PredictedLoad, predict_load

Predict = Callable[[str, Setting], "PredictedLoad | None"]


def learned_scaling(library: FingerprintLibrary, backend: Backend, serving, default: onnx.ModelProto
                    ) -> tuple[ThreadScaling | None, dict[int, float]]:
    """(the thread scaling of this target's fingerprint at the counts this load's settings use,
    {threads: the default graph's whole latency there over at the reference} where timed)."""
    threads = counts_that_matter(serving.cores, serving.concurrency, serving.request_threads)
    if not threads:
        return None, {}
    reference = backend.info.fingerprint_version
    versions = {t: at_threads(backend, t).info.fingerprint_version for t in threads}
    scaling = ThreadScaling.learn(serving.request_threads, library.records(reference),
                                  {t: library.records(v) for t, v in versions.items()})
    whole = {}
    for t, v in versions.items():
        runs = library.thread_runs(v, reference, graph_hash(default))
        if runs:
            whole[t] = runs[-1]["median_ms"] / runs[-1]["reference_ms"]
    return scaling, whole


def setting_predictor(scaling: ThreadScaling, plans: dict[str, tuple[onnx.ModelProto, float]], serving,
                      costs: KernelCosts | None = None, whole: dict[int, float] | None = None) -> Predict:
    """predict(label, setting): the load the setting would serve for plan `label`, or None where
    it is not predicted (not sessions and threads alone, or a path the fingerprint did not
    measure). `plans`: {label: (model, its latency one request at a time at the reference
    threads)}, the default's under "default"; `whole`: the default graph's measured whole ratio
    per thread count. A kernel's micro-benchmark pays the pool's wake-up alone, which a graph
    shares: where the default graph was timed whole at a count, a plan's ratio is that, times
    its kernels' ratio over the default's (how it scales apart from the default)."""
    kernels: dict[tuple[str, int], float] = {}

    def kernel_ratio(label: str, t: int) -> float:
        if (label, t) not in kernels:
            kernels[(label, t)] = scaling.plan_ratio(plans[label][0], t, costs)
        return kernels[(label, t)]

    def ratio(label: str, t: int) -> float:
        if whole and t in whole:
            return whole[t] * kernel_ratio(label, t) / (kernel_ratio("default", t) or kernel_ratio(label, t))
        return kernel_ratio(label, t)

    def predict(label: str, setting: Setting) -> PredictedLoad | None:
        model, latency_ms = plans[label]
        if not threads_only(setting) or not ExecutionPath.of(model).is_default:
            return None
        return predict_load(setting, latency_ms * ratio(label, int(setting["intra_op_threads"])),
                            serving.cores, serving.concurrency)

    return predict


def stage_predictor(s, backend: Backend, plans: dict[str, tuple[onnx.ModelProto, float]],
                    costs: KernelCosts | None) -> tuple[Predict | None, str]:
    """(the predictor for the serving stage or None, a line saying what it rests on)."""
    scaling, whole = learned_scaling(FingerprintLibrary(s.tracking.fingerprint_db), backend, s.serving,
                                     plans["default"][0])
    if scaling is None:
        return None, "no thread scaling in the fingerprint for these settings' threads: every setting is served"
    graph = "".join(f"; the graph {r:.2f}x as long at {t} threads" for t, r in sorted(whole.items()))
    return setting_predictor(scaling, plans, s.serving, costs, whole), (
        f"sessions-and-threads settings scored from the thread scaling learned on {scaling.pairs} kernels measured "
        f"at {', '.join(map(str, scaling.threads))} and {scaling.reference} threads{graph}; the best "
        f"{s.serving.predicted_best} per plan are served")
