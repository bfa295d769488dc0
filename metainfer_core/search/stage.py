"""The search stage: the evaluator (predictor, liveness planner, sensitivity, execution-path
costs) set up for this run, the adaptive switch that skips a search that cannot pay, and the
beam search within the search's share of the budget."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from metainfer_core.actions import ACTIONS, ActionContext, expand
from metainfer_core.backends import Backend
from metainfer_core.backends.paths import ExecutionPath, missing_paths
from metainfer_core.budget import eta
from metainfer_core.errors import MetaInferError
from metainfer_core.fingerprint.library import FingerprintLibrary
from metainfer_core.predictor import CostModel
from metainfer_core.predictor.model.path_memory import MemoryFit
from metainfer_core.prepare.stage import Prepared
from metainfer_core.search.anchor import FAMILY_TIMED_MS, measured_default_ms
from metainfer_core.search.beam import SearchResult, beam_search, depth_reasons
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.clock import WALL, Clock
from metainfer_core.search.evaluate import Evaluator
from metainfer_core.search.path_costs import PathCosts
from metainfer_core.search.score import Weights
from metainfer_core.settings import Settings

Progress = Callable[[str], None]


@dataclass
class SearchOutcome:
    result: SearchResult | None
    skipped_reason: str | None = None
    default: Candidate | None = None
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def search_stage(s: Settings, prepared: Prepared, backend: Backend, cost_model: CostModel,
                 progress: Progress = print, allowance_s: float | None = None, clock: Clock = WALL) -> SearchOutcome:
    """allowance_s: the search's share of budget.total_s (search.time_budget_s caps it too)."""
    from metainfer_core.accuracy.metric import plan_loss

    t0 = clock.now()
    info = backend.info
    weights = Weights.of(s.weights, s.serving.under_load)
    lossy = {n for n, a in ACTIONS.items() if a.lossy}
    ctx = ActionContext(target=info, calibration_feeds=prepared.feeds, cache=prepared.action_cache)
    # a measured target times the unchanged model once: the predictions' anchor (search/anchor.py)
    measured = info.measurement == "measured"
    anchor_ms = measured_default_ms(backend, prepared.model, prepared.feeds[0]) if measured else None
    memory = memory_fits(s, backend) if measured else {}
    evaluator = Evaluator(cost_model, info, weights, s.accuracy.max_loss, prepared.feeds, prepared.reference, lossy,
                          ctx=ctx, loss_fn=getattr(prepared, "loss_fn", None) or plan_loss,
                          paths=path_costs(s, prepared, backend, clock), anchor_ms=anchor_ms, memory=memory, clock=clock,
                          timer=(lambda m: measured_default_ms(backend, m, prepared.feeds[0], FAMILY_TIMED_MS)) if measured else None)
    default = Candidate(prepared.model)
    t_eval = clock.now()
    evaluator.set_baseline(default)
    t_eval = clock.now() - t_eval
    if default.latency_ms < s.search.skip_below_ms:
        reason = (f"default plan predicted at {default.latency_ms:.3g} ms, below search.skip_below_ms="
                  f"{s.search.skip_below_ms}: the search would cost more than it can save")
        progress(f"search: skipped ({reason})")
        return SearchOutcome(None, reason, default, clock.now() - t0)
    # adaptive switch, second part: even a plan at 0 ms saves at most the default's latency on each
    # of the runs the plan will serve; skip when that cannot pay back the expected search time
    # (counted without the run's cache: a narrowing would measure here for nothing)
    n_root = sum(1 for _ in expand(default.model, s.action_space.domains(), info))
    expected_candidates = n_root * (1 + s.search.beam_width * (s.search.depth - 1))
    # what is left of the allowance after measuring the paths and the baseline
    left = allowance_s - (clock.now() - t0) if allowance_s is not None else float("inf")
    budget_s = max(1.0, min(s.search.time_budget_s, left))
    expected_search_s = min(expected_candidates * 2 * t_eval, budget_s)
    saving_s = default.latency_ms * s.search.expected_runs / 1e3
    if n_root and saving_s < expected_search_s:
        reason = (f"default plan predicted at {default.latency_ms:.3g} ms: over search.expected_runs="
                  f"{s.search.expected_runs} runs even a 0 ms plan saves at most {saving_s:.3g} s, below the expected "
                  f"search cost of {expected_search_s:.3g} s ({expected_candidates} candidates at ~{2 * t_eval:.3g} s)")
        progress(f"search: skipped ({reason})")
        return SearchOutcome(None, reason, default, clock.now() - t0,
                             {"expected_search_s": expected_search_s, "possible_saving_s": saving_s})

    def tick(level: int, frontier: int, best: float, beam: int) -> None:
        spent = clock.now() - t0
        # each level expands a beam of the same width: the levels left cost about what these did
        left = min(spent / level * (s.search.depth - level), max(0.0, budget_s - spent)) if level else 0.0
        progress(f"search: depth {level}/{s.search.depth}, beam {beam}/{s.search.beam_width}, {frontier} new "
                 f"candidates within the bounds, best score {f'{best:.4f}' if best == best else 'none yet'} "
                 f"(default {default.score:.4f}), "
                 f"{spent:.1f}s, ~{eta(left)} left")

    progress(f"search: up to {eta(budget_s)} (" + ("its share of budget.total_s" if budget_s < s.search.time_budget_s
                                                else "search.time_budget_s") + ")")
    result = beam_search(prepared.model, s.action_space.domains(), evaluator, ctx, s.search.beam_width, s.search.depth,
                         s.search.top_k, budget_s, tick, explore=s.search.explore,
                         explore_round_ms=EXPLORE_VERIFY_S * 1e3 / max(s.verify.runs, 1), clock=clock)
    best = result.top[0] if result.top else None
    findings = evaluator.sensitivity.findings() if evaluator.sensitivity is not None else []
    for f in findings:
        progress(f"search: {f}")
    progress(f"search: depth {result.levels} of {result.depth} reached"
             + depth_reasons(result.levels, result.depth, result.stopped_by_budget, result.dive_stalled_at,
                             result.skipped)
             + f", {result.evaluated} candidates scored ({result.duplicates} duplicates merged), "
             f"{len(result.top)} better than default, {result.search_s:.1f}s "
             f"(apply {result.timings.get('apply_s', 0):.1f}s, evaluate {result.timings.get('evaluate_s', 0):.1f}s, "
             f"sensitivity {result.timings.get('sensitivity_s', 0):.1f}s"
             + (f"; {int(result.timings['estimates_deferred'])} plans that cannot beat the default scored without "
                "an accuracy estimate" if result.timings.get("estimates_deferred") else "") + ")"
             + (f"; best: {' > '.join(st.kind for st in best.steps)}, {best.binding.get('device', 0)} kernels on the "
                f"device, {len(best.binding.get('host', []))} on the host" if best else
                f"; nothing within the hard bounds (pruned: {result.pruned})" if result.pruned else ""))
    return SearchOutcome(result, None, result.default, clock.now() - t0,
                         {"search_timings": result.timings, "expected_search_s": expected_search_s, "warnings": findings,
                          "possible_saving_s": saving_s,
                          "anchor": {"measured_default_ms": anchor_ms, "predicted_default_ms": evaluator.predicted_default_ms,
                                     "graphs": sorted(round(f, 4) for f in evaluator.graph_anchors.values()),
                                     "graphs_timed": int(evaluator.timings["anchors_timed"]),
                                     "timing_s": round(evaluator.timings["anchors_s"], 2)},
                          "execution_paths": evaluator.paths.measured if evaluator.paths else {},
                          "memory": {p.label: f.as_dict() for p, f in memory.items()}})


EXPLORE_VERIFY_S = 15.0     # what verifying the explored plans may add, at most (predicted)


def memory_fits(s: Settings, backend: Backend) -> dict[ExecutionPath, MemoryFit]:
    """Per execution path of a measured target, planned to measured peak memory fitted on the
    runs verify recorded there (each path's own fingerprint version); paths without runs are left
    out (their plans are predicted as planned)."""
    library = FingerprintLibrary(s.tracking.fingerprint_db)
    out = {}
    labels = {ExecutionPath().label, *(backend.info.extra.get("execution_paths") or [])}
    for path in sorted({ExecutionPath.parse(label) for label in labels}, key=lambda p: p.label):
        if not path.is_default and not hasattr(backend, "path_backend"):
            continue
        info = backend.info if path.is_default else backend.path_backend(path).info
        fit = MemoryFit.fit(library.plan_runs(info.fingerprint_version, source="runtime"))
        if fit.runs:
            out[path] = fit
    return out


def path_costs(s: Settings, prepared: Prepared, backend: Backend, clock: Clock = WALL) -> PathCosts | None:
    """The execution paths the search may bind to, measured on demand; None where the target
    offers only its default path. A runtime the action space asks for by name that the target
    does not offer is refused with one paragraph."""
    offered = backend.info.extra.get("execution_paths") or []
    binder = next((name for name in s.action_space.actions if ACTIONS[name].binds_path), None)
    if binder is None:
        return None
    asked = s.action_space.actions[binder].get("runtime")
    runtimes = {ExecutionPath.parse(label).runtime for label in offered} | {ExecutionPath().runtime}
    missing = sorted(set([asked] if isinstance(asked, str) else asked or []) - runtimes)
    if missing:
        absent = missing_paths(s.target.spec)
        raise MetaInferError(
            f"The action space asks the {binder} action for runtime(s) {missing}, which target {s.target.name} does not "
            f"offer (it offers {sorted(offered) or 'its default path only'}). "
            + (f"The package(s) {absent} are not installed in this environment: install them (they are pinned in "
               "requirements.lock), " if absent else f"List them under execution_paths in conf/target/{s.target.name}.yaml, ")
            + "or drop them from action_space's binding domain.")
    return PathCosts(backend, prepared.feeds, prepared.reference, prepared.loss_fn, clock=clock) if len(offered) > 1 else None
