"""Beam search over action sequences. Each level expands every beam state by every legal
(action, parameter choice, site); equivalent graphs are merged by hash; candidates that break
a hard constraint are pruned; the best `beam_width` by score go on. Actions enable each
other: a rewrite at one level can open sites at the next."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import onnx

from metainfer_core.actions import ACTIONS, ActionContext, Step
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.evaluate import Evaluator


@dataclass
class SearchResult:
    default: Candidate
    top: list[Candidate]                 # best first, within hard constraints, default excluded
    evaluated: int = 0
    pruned: dict[str, int] = field(default_factory=dict)     # reason -> count
    illegal: dict[str, str] = field(default_factory=dict)    # action -> last reason
    failed: dict[str, str] = field(default_factory=dict)     # action -> error from apply
    levels: int = 0
    search_s: float = 0.0
    stopped_by_budget: bool = False


def _expansions(state: Candidate, space: dict[str, dict[str, Any]], ctx: ActionContext, result: SearchResult):
    for name, domain in space.items():
        action = ACTIONS[name]
        for params in action.choices(domain):
            for site in action.sites(state.model, params, ctx.target):
                reason = action.legal(state.model, site, params, ctx.target)
                if reason:
                    result.illegal[name] = reason
                    continue
                yield action, params, site


def beam_search(default_model: onnx.ModelProto, space: dict[str, dict[str, Any]], evaluator: Evaluator,
                ctx: ActionContext, beam_width: int, depth: int, top_k: int, time_budget_s: float,
                progress: Callable[[int, int, float], None] | None = None) -> SearchResult:
    t0 = time.perf_counter()
    default = Candidate(default_model)
    evaluator.set_baseline(default)
    result = SearchResult(default=default, top=[])
    seen = {default.key}
    pool: list[Candidate] = []
    beam = [default]
    for level in range(1, depth + 1):
        frontier: list[Candidate] = []
        for state in beam:
            for action, params, site in _expansions(state, space, ctx, result):
                if time.perf_counter() - t0 > time_budget_s:
                    result.stopped_by_budget = True
                    break
                try:
                    model = action.apply(state.model, site, params, ctx)
                except Exception as exc:  # noqa: BLE001 - a rewrite refusing a graph prunes that branch only
                    result.failed[action.name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                    continue
                cand = Candidate(model, state.steps + (Step(action.name, site, tuple(sorted(params.items()))),))
                if cand.key in seen:
                    continue
                seen.add(cand.key)
                evaluator.evaluate(cand)
                result.evaluated += 1
                if cand.violation:
                    reason = cand.violation.split(":")[0]
                    result.pruned[reason] = result.pruned.get(reason, 0) + 1
                    continue
                frontier.append(cand)
        result.levels = level
        if not frontier:
            break
        frontier.sort(key=lambda c: c.score)
        beam = frontier[:beam_width]
        pool.extend(frontier)
        if progress:
            progress(level, len(frontier), min(c.score for c in pool))
        if result.stopped_by_budget:
            break
    pool.sort(key=lambda c: c.score)
    result.top = [c for c in pool if c.score < default.score][:top_k]
    result.search_s = time.perf_counter() - t0
    return result
