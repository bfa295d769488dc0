"""A serving setting's load predicted before it is served: sessions of some intra-op threads
(serving/options.threads_only) on the path whose kernels the fingerprint measured at those
threads. Every request in flight has a slot (serving/pool.py: a session takes concurrent
calls), so all `concurrency` run at once, each in `latency at its threads` (the plan's latency
at the request's threads times how it scales with threads: predictor/model/thread_scaling.py),
slowed where the threads they keep busy (each call's own, and each session's other pool
threads) outnumber the cores."""
from __future__ import annotations

import math
from dataclasses import dataclass

from metainfer_core.serving.options import Setting, split_setting


@dataclass(frozen=True)
class PredictedLoad:
    """The figures a load would show, predicted (the interface of serving/load.LoadFigures that
    the score reads: requests per second and a latency percentile)."""
    service_ms: float
    throughput_per_s: float
    latency_ms: float

    def percentile(self, q: float) -> float:
        return self.latency_ms      # a prediction has no spread: every percentile is the mean

    def as_dict(self, q: float | None = None) -> dict[str, float]:
        return {"predicted_throughput_per_s": self.throughput_per_s, "predicted_latency_ms": self.latency_ms}


def predict_load(setting: Setting, latency_at: float, cores: int, concurrency: int) -> PredictedLoad:
    """`latency_at`: one request's latency (ms) alone on a session of the setting's threads."""
    sessions, rest = split_setting(setting)
    threads = int(rest["intra_op_threads"])
    busy = concurrency + sessions * (threads - 1)
    service = latency_at * max(1.0, busy / max(1, cores))
    return PredictedLoad(service, concurrency / service * 1e3 if service > 0 else math.inf, service)
