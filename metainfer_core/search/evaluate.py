"""Scores candidates without running them on the target: latency from the learned cost model,
peak memory from the liveness planner, accuracy loss from a CPU run of the candidate on the
validation inputs (lossless candidates are exact and skip it)."""
from __future__ import annotations

import numpy as np

from metainfer_core.accuracy import plan_loss, run_cpu
from metainfer_core.backends.base import TargetInfo
from metainfer_core.kernels import group_kernels
from metainfer_core.memory import peak_memory_bytes
from metainfer_core.predictor import CostModel
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.score import Weights, score, violation
from metainfer_core.tensors import input_feeds_spec, tensor_infos


class Evaluator:
    def __init__(self, cost_model: CostModel, target: TargetInfo, weights: Weights, max_loss: float,
                 feeds: list[dict[str, np.ndarray]], reference: list[list[np.ndarray]], lossy: set[str]):
        self.cost_model, self.target, self.weights, self.max_loss = cost_model, target, weights, max_loss
        self.feeds, self.reference, self.lossy = feeds, reference, lossy
        self.base_latency = 1.0
        self.base_mem = 1

    def measure(self, c: Candidate) -> Candidate:
        infos = tensor_infos(c.model)
        kernels = group_kernels(c.model, infos)
        c.latency_ms = self.cost_model.predict_ms(kernels)
        c.peak_mem_bytes = peak_memory_bytes(kernels, infos, list(input_feeds_spec(c.model)))
        if any(s.kind in self.lossy for s in c.steps):
            c.accuracy_loss = plan_loss(self.reference, run_cpu(c.model, self.feeds))
        return c

    def set_baseline(self, default: Candidate) -> None:
        self.measure(default)
        self.base_latency, self.base_mem = default.latency_ms, default.peak_mem_bytes
        self.finish(default)

    def finish(self, c: Candidate) -> Candidate:
        c.score = score(self.weights, c.latency_ms, c.peak_mem_bytes, c.accuracy_loss, c.changes,
                        self.base_latency, self.base_mem)
        c.violation = violation(c.peak_mem_bytes, self.target.memory_limit_bytes, c.accuracy_loss, self.max_loss)
        return c

    def evaluate(self, c: Candidate) -> Candidate:
        return self.finish(self.measure(c))
