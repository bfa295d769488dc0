"""Candidate plans of a model: the graphs the search can produce from it. Every legal single
action (each parameter choice of the action space, each site) and, up to `depth`, sequences
of them, as the beam search would expand them. The predictor trains and is judged on these,
so it has seen the kind of graph the search will ask about."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from metainfer_core.actions import ActionContext, Step, expand
from metainfer_core.backends.base import TargetInfo


def graph_key(model: onnx.ModelProto) -> str:
    """The bytes of the graph (names and node order count). Not the search's canonical
    graph_hash: the zoo's whole-model runs are stored under these keys, and graph_hash merges
    plans this keeps apart, so switching would orphan them and change the training set."""
    return hashlib.sha1(model.graph.SerializeToString(deterministic=True)).hexdigest()[:16]


@dataclass
class Plan:
    model: onnx.ModelProto
    steps: tuple[Step, ...] = ()

    @property
    def key(self) -> str:
        return graph_key(self.model)

    @property
    def label(self) -> str:
        if not self.steps:
            return "default"
        return " > ".join(s.kind + ("(" + ",".join(f"{k}={v}" for k, v in s.params) + ")" if s.params else "")
                          for s in self.steps)


def candidate_plans(model: onnx.ModelProto, space: dict[str, dict[str, Any]], target: TargetInfo,
                    feeds: list[dict[str, np.ndarray]], depth: int = 2, max_plans: int = 40) -> list[Plan]:
    """The default plan first, then distinct rewritten graphs, breadth first (one action, then
    two...), at most `max_plans` in all. Rewrites that fail are skipped, as the search does; an
    outside quantizer's choices are left out, as profiling leaves them out."""
    ctx = ActionContext(target=target, calibration_feeds=feeds)
    plans = [Plan(model)]
    seen = {plans[0].key}
    frontier = [plans[0]]
    for _ in range(depth):
        nxt: list[Plan] = []
        for state in frontier:
            for action, params, site in expand(state.model, space, target, state.steps[-1] if state.steps else None,
                                               calibrating=False):
                try:
                    out = action.apply(state.model, site, params, ctx)
                except Exception:  # noqa: BLE001 - a rewrite refusing a graph prunes that branch only
                    continue
                plan = Plan(out, state.steps + (Step(action.name, site, tuple(sorted(params.items()))),))
                if plan.key in seen:
                    continue
                seen.add(plan.key)
                nxt.append(plan)
                if len(plans) + len(nxt) >= max_plans:
                    return plans + nxt
        plans.extend(nxt)
        frontier = nxt
    return plans
