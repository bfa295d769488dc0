"""Scores candidates without running them on the target: latency from the learned cost model
(search/latency.py), peak memory from the liveness planner under the plan's buffer-sharing
policy (through the execution path's fit on measured runs: predictor/model/path_memory.py),
accuracy loss from per-node sensitivity (search/accuracy_estimate.py). Each candidate also gets
its operator binding on a modeled device: which kernels it runs and which fall back to the
host, and why. A candidate bound to another execution path is exact-checked there."""
from __future__ import annotations

from collections import defaultdict
from typing import Callable

import numpy as np
import onnx

from metainfer_core.accuracy.metric import plan_loss
from metainfer_core.accuracy.sensitivity import MAX_PROBES
from metainfer_core.actions import ActionContext
from metainfer_core.actions.base import infos_of, kernels_of
from metainfer_core.backends.base import TargetInfo
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.ir.directives import double_buffered
from metainfer_core.ir.kernels import bind
from metainfer_core.ir.memory import DEFAULT_STRATEGY, model_strategy, plan_memory
from metainfer_core.predictor import CostModel
from metainfer_core.predictor.model.path_memory import MemoryFit
from metainfer_core.search.accuracy_estimate import AccuracyEstimates
from metainfer_core.search.budget import CALIBRATES
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.clock import WALL, Clock
from metainfer_core.search.latency import LatencyEstimates
from metainfer_core.search.path_costs import PathCosts
from metainfer_core.search.score import Weights, memory_base, violation

# a precision's sensitivity costs about this many times the fp32 pass every precision shares
# (a plain run per input, a traced run of twice the graph, the error statistics)
PASSES_PER_PRECISION = 5


class Evaluator:
    def __init__(self, cost_model: CostModel, target: TargetInfo, weights: Weights, max_loss: float,
                 feeds: list[dict[str, np.ndarray]], reference: list[list[np.ndarray]], lossy: set[str],
                 ctx: ActionContext | None = None, max_probes: int = MAX_PROBES, loss_fn: Callable = plan_loss,
                 paths: PathCosts | None = None, anchor_ms: float | None = None,
                 memory: dict[ExecutionPath, MemoryFit] | None = None,
                 timer: Callable[[onnx.ModelProto], float] | None = None, clock: Clock = WALL):
        """anchor_ms: the default plan's latency measured on the target (search/anchor.py): every
        prediction is scaled by it over the default's prediction. memory: per execution path, the
        fit from planned to measured peak (a path without one: as planned). timer: a graph's
        latency on the default path (ms), measured (search/latency.py)."""
        self.cost_model, self.target, self.weights, self.max_loss = cost_model, target, weights, max_loss
        self.feeds, self.lossy, self.paths, self.memory, self.clock = feeds, lossy, paths, memory or {}, clock
        self.anchor_ms = anchor_ms
        self.predicted_default_ms: float | None = None      # before the anchor scaled it
        self.ctx = ctx or ActionContext(target=target, calibration_feeds=feeds)
        self.timings: dict[str, float] = defaultdict(float)
        self.latency = LatencyEstimates(cost_model, target, lossy, paths, timer, self.timings, clock)
        self.accuracy = AccuracyEstimates(feeds, reference, loss_fn, max_loss, lossy, self.ctx, max_probes, paths,
                                          self.latency.kernel_costs, self.timings, clock)
        self.base_latency = 1.0
        self.base_mem = 1
        self.base_score: float | None = None     # the default plan's (set_baseline)
        self.lead: float | None = None           # the best score within the bounds so far (evaluate)
        self.modeled = target.measurement == "modeled"

    @property
    def sensitivity(self):
        return self.accuracy.sensitivity

    @property
    def graph_anchors(self) -> dict[str, float]:
        return self.latency.graph_anchors

    def measure(self, c: Candidate, parent: Candidate | None = None, origin: Candidate | None = None,
                whole: Candidate | None = None) -> Candidate:
        """parent: a candidate with the very same graph (only plan-wide metadata differs), whose
        latency prediction is then reused. origin: the plan `c` is a step from; a lossless step
        keeps its anchor. whole: for a choice lowering part of what it could, the same choice
        lowering it all; its anchor carries over to the part still lowered."""
        t0 = self.clock.now()
        m = c.model
        infos = infos_of(m)
        kernels = kernels_of(m)
        # binding: a measured target runs everything itself; a modeled one binds per kernel
        reasons = bind(kernels, self.target.supported_ops, self.target.dtypes) if self.modeled else [None] * len(kernels)
        on_device = [r is None for r in reasons]
        c.binding = {"device": on_device.count(True),
                     "host": [{"kernel": k.op_type, "nodes": k.node_names[:4], "reason": r}
                              for k, r in zip(kernels, reasons) if r is not None]}
        double = self.modeled and double_buffered(m)
        staging, cost = self.latency.predict(c, kernels, infos, on_device, double, parent, origin, whole)
        inits = {i.name for i in m.graph.initializer}
        plan = plan_memory(kernels, infos, [i.name for i in m.graph.input if i.name not in inits],
                           model_strategy(m, self.target.extra.get("memory_strategy", DEFAULT_STRATEGY)),
                           {o.name for o in m.graph.output}, extra_bytes=staging,
                           streamed_weights=self.latency.transfers.weights_streamed, double_buffer=double)
        c.planned_peak_bytes = plan.peak_bytes
        fit = self.memory.get(ExecutionPath.of(m))
        c.peak_mem_bytes = fit.predict(plan.peak_bytes) if fit is not None else plan.peak_bytes
        self.timings["evaluate_s"] += self.clock.now() - t0
        if any(s.kind in self.lossy for s in c.steps):
            if self.sensitivity is None:
                raise RuntimeError("set_baseline() first: sensitivities are measured on the default plan")
            c.accuracy_exact = False
            c.accuracy_deferred = not self._worth_estimating(c, cost)
            if c.accuracy_deferred:
                c.accuracy_loss = 0.0
                self.timings["estimates_deferred"] += 1
            else:
                self.accuracy.estimate_plan(c)
        if cost is not None:
            c.accuracy_loss += cost.added_loss
            c.accuracy_exact = c.accuracy_exact and not ExecutionPath.of(m).lossy
        return c

    def _worth_estimating(self, c: Candidate, cost) -> bool:
        """Whether `c`'s accuracy estimate is worth what it costs now: always where its
        precisions' sensitivities are measured; else only where the plan could beat the default
        even losing nothing. A plan that cannot is scored at zero loss (a lower bound: it ranks
        below the default either way) and a new precision's sensitivity (traced runs of the whole
        graph) waits for a plan that needs it."""
        if self.base_score is None or self.accuracy.knows(c):
            return True
        added = cost.added_loss if cost is not None else 0.0
        best_case = self.weights.score(c.latency_ms / max(self.base_latency, 1e-9), c.peak_mem_bytes / self.base_mem,
                                       added, c.changes)
        return best_case < self.base_score

    def measuring_s(self) -> float:
        """Seconds spent so far measuring what candidates re-use: sensitivities, path costs and
        graphs timed for their anchor."""
        return self.precision_s() + (self.paths.seconds if self.paths is not None else 0.0) + self.timings["anchors_s"]

    def precision_s(self) -> float:
        return self.accuracy.precision_s()

    def fresh_cost_prior_s(self, lossy: bool = True) -> dict[str, float]:
        """What measuring something new likely costs before any was, per measurement: a new
        execution path a few runs of the default plan per validation input at its predicted
        latency (measured targets); a new precision at least that and, where the search may lower
        precision, a few times what the sensitivities' shared fp32 pass took (measured now: the
        first precision needs it anyway); an outside quantizer's calibration about as much."""
        runs = 0.0 if self.modeled else self.base_latency / 1e3 * (len(self.feeds) + 4)
        shared = self.sensitivity.prepare() if lossy and self.sensitivity is not None else 0.0
        precision = max(runs, PASSES_PER_PRECISION * shared)
        return {"path": runs, "precision": precision, CALIBRATES: precision}

    def measures_anew(self, state: Candidate, action, params: dict) -> str | None:
        """What scoring `action` on `state` would measure anew: "precision" (its sensitivity),
        "path" (an execution path on a graph family), or None."""
        if self.accuracy.measures_anew(action, params):
            return "precision"
        if action.binds_path and self.paths is not None \
                and not self.paths.knows(action.path(action.with_defaults(params)), state.model):
            return "path"
        return None

    def set_baseline(self, default: Candidate) -> None:
        # the same default again (the stage sizes the search, then searches): its tables still hold
        if self.sensitivity is None or self.sensitivity.model is not default.model:
            self.latency.reset(default.model)
        self.accuracy.set_default(default.model)
        self.latency.scale = 1.0
        self.measure(default)
        if self.anchor_ms and default.latency_ms > 0:
            # the default's own prediction scaled is the anchor (a measured target: no path, no staging)
            self.predicted_default_ms = default.latency_ms
            self.latency.scale = self.anchor_ms / default.latency_ms
            default.graph_latency_ms = default.latency_ms = self.anchor_ms
        self.base_latency = default.latency_ms
        self.base_mem = memory_base(default.peak_mem_bytes, self.target.memory_limit_bytes,
                                    self.target.memory_budget, self.weights.memory_floor)
        self.base_score = self.finish(default).score
        self.lead = self.base_score

    def finish(self, c: Candidate) -> Candidate:
        c.score = self.weights.score(c.latency_ms / max(self.base_latency, 1e-9), c.peak_mem_bytes / self.base_mem,
                                     c.accuracy_loss, c.changes)
        c.violation = violation(c.peak_mem_bytes, self.target.memory_limit_bytes, c.accuracy_loss, self.max_loss)
        if c.binding.get("path_error"):
            c.violation = f"execution path: {c.binding['path']} failed ({c.binding['path_error']})"
        return c

    def evaluate(self, c: Candidate, parent: Candidate | None = None, origin: Candidate | None = None,
                 whole: Candidate | None = None) -> Candidate:
        self.finish(self.measure(c, parent, origin, whole))
        if self.latency.claims_the_lead(c, parent, origin, self.lead) and self.latency.time_rewrite(c):
            self.finish(c)
        if not c.violation and self.lead is not None:
            self.lead = min(self.lead, c.score)
        return c

    def reanchor(self, c: Candidate) -> Candidate:
        """Re-score `c` by its anchor where binding its graph (or one of its family) timed it
        after `c` was scored."""
        if self.latency.reanchor(c):
            self.finish(c)
            if c.accuracy_deferred and c.score < self.base_score and ExecutionPath.of(c.model).is_default:
                # scored at zero loss as unable to beat the default, it now can: a plan ranked
                # on a loss never estimated would lead the search into a graph over the bound
                self.accuracy.estimate_plan(c)
                self.finish(c)
        return c

    def exact(self, c: Candidate) -> Candidate:
        """Replace an estimated accuracy loss by the measured one (a run) and re-score."""
        if not c.accuracy_exact:
            self.accuracy.exact(c)
            self.finish(c)
        return c
