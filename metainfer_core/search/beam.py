"""Beam search over action sequences. Each level expands every beam state by every legal
expansion; equivalent graphs are merged by their canonical hash; candidates that break a hard
constraint are pruned; the best `beam_width` by score go on. The dive to full depth along the
best child comes first, so a budget that ends early has still scored combinations; then the
widening. A state over the device's memory limit stays expandable (a later tiling, buffer reuse
or int8 step may bring it under; over the limit it is never returned). At the end, the
finalists: the top, exact-checked, and the explored (search/finalists.py)."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import onnx

from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.search.budget import Budget
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.clock import WALL, Clock
from metainfer_core.search.evaluate import Evaluator
from metainfer_core.search.expander import Expander
from metainfer_core.search.finalists import exact_top, explored, twins_last
from metainfer_core.search.score import gains


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
    duplicates: int = 0
    timings: dict[str, float] = field(default_factory=dict)  # where the search's own time went
    leanest: Candidate | None = None     # the plan with the least peak memory among those over the limit
    depth: int = 0                       # the configured depth (levels: the deepest one reached)
    skipped: int = 0                     # expansions left out because they would not fit the budget
    dive_stalled_at: int = 0             # the dive's level where no child was predicted to gain (0: it did not stall)
    log: list[dict] = field(default_factory=list)   # every expansion made or pruned, in order (search_log.json)


def depth_reasons(levels: int, depth: int, stopped_by_budget: bool, dive_stalled_at: int, skipped: int = 0) -> str:
    """Why the search went as deep as it did, for its summary line: " (...)" or nothing."""
    why = ([f"{skipped} expansions left out: they would have ended past the budget"] if skipped else
           # it had time left, yet stopped short of its configured depth
           ["the action space ends there: no deeper plan is legal or new"] if levels < depth and not stopped_by_budget
           else [])
    if dive_stalled_at:
        why.append(f"past depth {dive_stalled_at} no step was predicted to gain: the dive went on with "
                   "steps that measure nothing new")
    return f" ({'; '.join(why)})" if why else ""


def beam_search(default_model: onnx.ModelProto, space: dict[str, dict[str, Any]], evaluator: Evaluator,
                ctx: ActionContext, beam_width: int, depth: int, top_k: int, time_budget_s: float,
                progress: Callable[..., None] | None = None, explore: int = 0,
                explore_round_ms: float = float("inf"), clock: Clock = WALL) -> SearchResult:
    """explore: beyond the top_k, verify the best plan of up to this many kinds the top lacks,
    even when ranked below the default; explore_round_ms: what the explored plans may add to one
    verify round, at their predicted latencies. clock: the budget's (a fake one in tests)."""
    default = Candidate(default_model)
    lossy = any(ACTIONS[a].lossy for a in space)
    budget = Budget(clock, time_budget_s, lossy)
    evaluator.set_baseline(default)
    budget.fresh_s = evaluator.fresh_cost_prior_s(lossy)        # priced once the default is scored
    result = SearchResult(default=default, top=[], depth=depth)
    run = Expander(result, evaluator, space, ctx, budget)
    keep = 4 * max(beam_width, top_k)       # the pool keeps the best few only (graphs are large)

    def report(level: int, frontier: list[Candidate], beam_size: int, pool: list[Candidate]) -> None:
        if progress:        # (level, new candidates within the bounds, best score[, beam size])
            best = min((c.score for c in pool), default=float("nan"))
            args = (level, len(frontier), best, beam_size)
            progress(*args[:_arity(progress)])

    pool = _best([], run.unchanged_on_paths(), keep)
    pool = _dive(run, default, depth, pool, keep, report)
    # the widening: the beam from the root over the whole budget, the dive's children re-used
    beam = [default]
    for level in range(1, depth + 1):
        if budget.out_of_time():
            break
        frontier, stepping = run.expand(beam, level, until=budget.deadline)
        if not frontier and not stepping:
            break
        beam = run.ranked(frontier + stepping)[:beam_width]
        pool = _best(pool, frontier, keep)
        report(level, frontier, len(beam), pool)
    result.skipped = len(run.skipped)
    result.top = exact_top(twins_last(pool, run.made_at), default, evaluator, top_k, result, budget.past_end)
    result.top += explored(run.best_of_kind, result.top, evaluator, explore, explore_round_ms, result, budget.past_end)
    result.stopped_by_budget |= budget.stopped
    result.search_s = budget.spent()
    result.timings = {k: round(v, 4) for k, v in {**run.timings, **evaluator.timings, "total_s": result.search_s}.items()}
    if evaluator.sensitivity is not None:
        result.timings["sensitivity_probes"] = evaluator.sensitivity.probes
    result.timings["apply_by_action_s"] = {k: round(v, 3) for k, v in sorted(run.per_action.items(), key=lambda kv: -kv[1])}
    return result


def _dive(run: Expander, default: Candidate, depth: int, pool: list[Candidate], keep: int, report) -> list[Candidate]:
    """One state per level, its children scored cheapest-first within the level's slice of the
    dive's share; a state with no child to grow hands the level to the next best state of the
    level before (a dead end must not end the dive early). Returns the pool."""
    budget = run.budget
    state, level, alternatives = default, 1, []
    while level <= depth:
        coasting = bool(run.result.dive_stalled_at)
        until = budget.slice_end(budget.dive_end, depth - level + 1)
        frontier, stepping = run.expand([state], level, until=until, defer_directives=level < depth,
                                        warm_only=coasting, first_only=coasting)
        nxt = run.growable(frontier + stepping, last=level == depth)
        if coasting and not nxt and not budget.out_of_time():
            # nothing warm grows (a whole precision over the bound): the level may measure after
            # all (a partial lowering); children made already cost nothing
            frontier, stepping = run.expand([state], level, until=until, defer_directives=level < depth)
            nxt = run.growable(frontier + stepping, last=level == depth)
        pool = _best(pool, frontier, keep)
        if frontier:
            report(level, frontier, 1, pool)
        if budget.out_of_time():
            break
        if not nxt:
            if not alternatives:
                break
            state = alternatives.pop(0)
            continue
        if level < depth and not coasting and not gains(run.rank(nxt[0]), run.rank(state)):
            # no child is predicted to gain: the dive still goes to full depth (the predictor's
            # resolution is coarser than a step's effect), but coasting, on warm steps, so the
            # widening keeps the time for what measures
            run.result.dive_stalled_at = level
        state, alternatives, level = nxt[0], nxt[1:], level + 1
    return pool


def _best(pool: list[Candidate], new: list[Candidate], keep: int) -> list[Candidate]:
    """The best `keep` of both, each plan once."""
    merged = {id(c): c for c in pool + new}
    return sorted(merged.values(), key=lambda c: c.score)[:keep]


def _arity(fn: Callable) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 3
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return 4
    return min(4, sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)))
