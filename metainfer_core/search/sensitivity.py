"""Accuracy loss of a low-precision plan, estimated without running the plan.

Once per model and lossy variant (fp16, bf16, int8 with its quantization parameters), each
quantizable node is put alone in low precision and the model run on the validation inputs:
its loss against the fp32 reference (the run's accuracy metric, 1 - cosine similarity by
default) is that node's sensitivity. A
plan's loss is then the sum of the sensitivities of the nodes its lossy steps lower. Summing
is sound to first order: 1 - cos(y, y + e) ~ |e_perp|^2 / (2 |y|^2), and the squared norms of
independent rounding errors add. A probe rounds the node's inputs and output while the plan
rounds each tensor once, however many lowered nodes touch it, so a node's share is weighted by
how many lowered nodes share its tensors. Models with more quantizable nodes than the probe budget (`max_probes`,
and fewer on large graphs: each probe runs the whole graph) are probed in that many contiguous
blocks, each block's loss shared evenly by its nodes.

The search ranks by these estimates; its best candidates get an exact check (a real run), and
verify measures the chosen few on the target anyway."""
from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np
import onnx

from metainfer_core.accuracy import plan_loss, run_cpu
from metainfer_core.actions import ACTIONS, ActionContext, Site, Step
from metainfer_core.actions.base import origins

MAX_PROBES = 48
PROBE_NODE_BUDGET = 6000        # probes x graph nodes per variant: a probe runs the whole graph
MIN_PROBES = 8


class Sensitivity:
    def __init__(self, model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]],
                 reference: list[list[np.ndarray]], ctx: ActionContext, max_probes: int = MAX_PROBES,
                 loss_fn: Callable = plan_loss):
        self.model, self.feeds, self.reference, self.ctx = model, feeds, reference, ctx
        self.loss_fn = loss_fn
        self.max_probes = max_probes
        self.tables: dict[tuple, dict[str, float]] = {}
        self.probes = 0
        self.seconds = 0.0
        self._touch: dict[str, set[str]] | None = None

    @staticmethod
    def variant(kind: str, params: dict) -> tuple:
        """What changes a node's numerics: the precision and its parameters, not the scope."""
        return (kind,) + tuple(sorted((k, v) for k, v in params.items() if k != "scope"))

    def table(self, kind: str, params: dict) -> dict[str, float]:
        key = self.variant(kind, params)
        if key not in self.tables:
            t0 = time.perf_counter()
            self.tables[key] = self._measure(kind, params)
            self.seconds += time.perf_counter() - t0
        return self.tables[key]

    def _measure(self, kind: str, params: dict) -> dict[str, float]:
        action = ACTIONS[kind]
        probe_params = dict(params, scope="all") if "scope" in action.params else dict(params)
        sites = action.sites(self.model, probe_params, self.ctx.target)
        nodes = list(sites[0].nodes) if sites else []
        if not nodes:
            return {}
        budget = max(MIN_PROBES, PROBE_NODE_BUDGET // max(len(self.model.graph.node), 1))
        n_blocks = min(len(nodes), self.max_probes, budget)
        per_node: dict[str, float] = {}
        for block in np.array_split(np.array(nodes, dtype=object), n_blocks):
            block = tuple(str(b) for b in block)
            try:
                lowered = action.apply(self.model, Site(block, "probe"), probe_params, self.ctx)
                loss = self.loss_fn(self.reference, run_cpu(lowered, self.feeds))
            except Exception:  # noqa: BLE001 - a node the rewrite refuses alone adds no estimate
                continue
            self.probes += 1
            for name in block:
                per_node[name] = loss / len(block)
        return per_node

    def _touches(self) -> dict[str, set[str]]:
        if self._touch is None:
            inits = {i.name for i in self.model.graph.initializer}
            self._touch = {n.name: {t for t in list(n.input) + list(n.output) if t and t not in inits}
                           for n in self.model.graph.node}
        return self._touch

    def estimate(self, steps: tuple[Step, ...]) -> float:
        """Sum of the lowered nodes' sensitivities. A probe rounds the node's inputs and its
        output; in the plan each tensor is rounded once however many lowered nodes touch it, so
        each node's share is weighted by the mean of 1/(lowered nodes touching the tensor)."""
        touch = self._touches()
        total = 0.0
        for s in steps:
            if not ACTIONS[s.kind].lossy:
                continue
            table = self.table(s.kind, dict(s.params))
            covered = {o for name in s.site.nodes for o in origins(name)} & set(table)
            count: dict[str, int] = {}
            for n in covered:
                for t in touch.get(n, ()):
                    count[t] = count.get(t, 0) + 1
            for n in covered:
                ts = touch.get(n) or {""}
                total += table[n] * sum(1.0 / count.get(t, 1) for t in ts) / len(ts)
        return total if math.isfinite(total) else 1.0
