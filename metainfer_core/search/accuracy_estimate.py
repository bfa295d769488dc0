"""A candidate's estimated accuracy loss: per-node sensitivity measured once per precision
variant on the default plan (accuracy/sensitivity.py; lossless plans are exact), a loss a
narrowing run measured where there is one (Action.known_loss), the loss an execution path adds.
A plan that cannot beat the default even losing nothing is scored at zero loss until a plan
needs its precision's sensitivity (deferred). Also what actions' narrowing reads
(Action.prepare_search): tables, estimates, and measured losses of lowered graphs."""
from __future__ import annotations

import weakref
from typing import Callable

import numpy as np
import onnx

from metainfer_core.accuracy.metric import run_cpu
from metainfer_core.accuracy.sensitivity import Sensitivity
from metainfer_core.actions import ACTIONS, ActionContext, Step
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.search.clock import Clock
from metainfer_core.search.path_costs import PathCosts


class AccuracyEstimates:
    def __init__(self, feeds: list[dict[str, np.ndarray]], reference, loss_fn: Callable, max_loss: float,
                 lossy: set[str], ctx: ActionContext, max_probes: int, paths: PathCosts | None,
                 kernel_costs: Callable[[], dict[str, float]], timings: dict, clock: Clock):
        self.feeds, self.reference, self.loss_fn, self.max_loss = feeds, reference, loss_fn, max_loss
        self.lossy, self.ctx, self.max_probes, self.paths = lossy, ctx, max_probes, paths
        self.kernel_costs, self.timings, self.clock = kernel_costs, timings, clock
        self.sensitivity: Sensitivity | None = None
        self._measured: dict[tuple, float] = {}     # a narrowing's key -> the loss its run measured

    @property
    def model(self) -> onnx.ModelProto:
        return self.sensitivity.model

    def set_default(self, model: onnx.ModelProto) -> None:
        """Measure on `model` (the same default again keeps its tables) and let each action
        leave in the shared cache what its narrowing reads (held weakly: the cache outlives the
        search)."""
        if self.sensitivity is None or self.sensitivity.model is not model:
            self.sensitivity = Sensitivity(model, self.feeds, self.reference, self.ctx, self.max_probes, self.loss_fn,
                                           self.clock.now)
            self._measured = {}
            if self.paths is not None:      # graphs whose default-path outputs are known need no runs there
                self.paths.know(model, self.reference)
                self.sensitivity.on_run = self.paths.know
        me = weakref.proxy(self)
        for name in sorted(self.lossy):
            ACTIONS[name].prepare_search(self.ctx.cache, me)

    # --- what actions' narrowing reads (Action.prepare_search) -------------------------------
    def table(self, kind: str, params: dict) -> dict[str, float]:
        return self.sensitivity.table(kind, params)

    def estimate(self, steps: tuple[Step, ...]) -> float:
        return self.sensitivity.estimate(steps)

    def measured_loss(self, key: tuple, lowered: Callable[[], onnx.ModelProto]) -> float:
        """The loss of the graph `lowered()` makes, run on its own execution path on the
        validation inputs; remembered under `key`."""
        if key not in self._measured:
            t0 = self.clock.now()
            self._measured[key] = self.loss_of(lowered())
            self.timings["float_fit_s"] += self.clock.now() - t0
        return self._measured[key]

    def known_loss(self, key: tuple) -> float | None:
        return self._measured.get(key)

    def loss_of(self, model: onnx.ModelProto) -> float:
        """`model`'s measured loss, on its own path (runtimes round otherwise than each other)."""
        bound = self.paths is not None and not ExecutionPath.of(model).is_default
        outputs = self.paths.run(model) if bound else run_cpu(model, self.feeds)
        return float(self.loss_fn(self.reference, outputs))

    # --- a candidate's estimate --------------------------------------------------------------
    def estimate_plan(self, c) -> None:
        before = self.sensitivity.seconds
        c.accuracy_loss = self._estimated_loss(c.steps)
        c.accuracy_deferred = False
        self.timings["sensitivity_s"] += self.sensitivity.seconds - before

    def _estimated_loss(self, steps: tuple[Step, ...]) -> float:
        """A plan's loss by the sensitivities; a lone lossy step a narrowing measured has that
        measure instead (the estimate it corrected may run several times off)."""
        lossy = [s for s in steps if s.kind in self.lossy]
        if len(lossy) == 1:
            measured = ACTIONS[lossy[0].kind].known_loss(lossy[0], self)
            if measured is not None:
                return measured
        return self.sensitivity.estimate(steps)

    def knows(self, c) -> bool:
        """Whether every precision `c` lowers to has its sensitivities measured (adding them up is cheap)."""
        return all(self.sensitivity.knows(s.kind, dict(s.params)) for s in c.steps if s.kind in self.lossy)

    def measures_anew(self, action, params: dict) -> bool:
        return action.lossy and self.sensitivity is not None and not self.sensitivity.knows(action.name, params)

    def precision_s(self) -> float:
        """Seconds spent so far measuring precisions: sensitivities and narrowing runs."""
        return (self.sensitivity.seconds if self.sensitivity is not None else 0.0) + self.timings["float_fit_s"]

    def exact(self, c) -> None:
        """Replace an estimated accuracy loss by the measured one (a run on its path)."""
        t0 = self.clock.now()
        c.accuracy_loss = self.loss_of(c.model)
        c.accuracy_exact = True
        self.timings["exact_s"] += self.clock.now() - t0
