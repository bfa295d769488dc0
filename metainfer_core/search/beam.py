"""Beam search over action sequences. Each level expands every beam state by every legal
(action, parameter choice, site); equivalent graphs are merged by their canonical hash;
candidates that break a hard constraint are pruned; the best `beam_width` by score go on.
Actions enable each other: a rewrite at one level can open sites at the next, and a state
over the device's memory limit stays expandable (a later tiling, buffer reuse or int8 step may
bring it under; over the limit it is never returned). At the end, the
best candidates whose accuracy loss was estimated get an exact check (a CPU run), and any that
then break the accuracy bound are dropped, until `top_k` remain."""
from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import onnx

from metainfer_core.actions import ACTIONS, ActionContext, Step, expand
from metainfer_core.actions.base import share_analysis
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.evaluate import Evaluator
from metainfer_core.timing import runs_per_sample

EXACT_CHECKS_PER_SLOT = 3       # exact accuracy runs allowed per top-K slot before giving up


def _arity(fn: Callable) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 3
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return 4
    return min(4, sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)))


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


def expansions(state: Candidate, space: dict[str, dict[str, Any]], ctx: ActionContext, result: SearchResult):
    return expand(state.model, space, ctx.target, state.steps[-1] if state.steps else None, result.illegal,
                  narrow=False)


def beam_search(default_model: onnx.ModelProto, space: dict[str, dict[str, Any]], evaluator: Evaluator,
                ctx: ActionContext, beam_width: int, depth: int, top_k: int, time_budget_s: float,
                progress: Callable[..., None] | None = None, explore: int = 0,
                explore_round_ms: float = float("inf")) -> SearchResult:
    """explore: beyond the top_k, verify the best candidate of up to this many kinds (the lossy
    actions and execution path a plan uses) that the top lacks, even when the predictor ranks it
    below the default: a kind the predictor has barely seen (a new quantization mode, another
    runtime) is measured rather than dismissed. explore_round_ms: what the explored plans may
    add to one verify round, at their predicted latencies (a slow model verifies fewer)."""
    t0 = time.perf_counter()
    clock = {"expand_s": 0.0, "apply_s": 0.0, "hash_s": 0.0}
    per_action: dict[str, float] = {}
    default = Candidate(default_model)
    evaluator.set_baseline(default)
    result = SearchResult(default=default, top=[])
    seen = {default.key}
    pool: list[Candidate] = []
    keep = 4 * max(beam_width, top_k)       # the pool keeps the best few only (graphs are large)
    beam = [default]
    best_of_kind: dict[tuple, Candidate] = {}
    lookahead = {k: v for k, v in space.items() if k == "binding"}
    ahead_of: dict[int, float | None] = {}     # graph -> its best bound plan's score; bound plan -> None

    def consider(state: Candidate, action, params, site, frontier: list, stepping: list) -> Candidate | None:
        """Apply one expansion, score it, file it in the frontier; the candidate, or None when
        it fails, repeats a seen plan or breaks a bound other than memory."""
        t_apply = time.perf_counter()
        try:
            model = action.apply(state.model, site, params, ctx)
        except Exception as exc:  # noqa: BLE001 - a rewrite refusing a graph prunes that branch only
            result.failed[action.name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            return None
        finally:
            spent = time.perf_counter() - t_apply
            clock["apply_s"] += spent
            per_action[action.name] = per_action.get(action.name, 0.0) + spent
        same_graph = action.keeps_graph(action.with_defaults(params))
        if same_graph:
            share_analysis(model, state.model)
        t_hash = time.perf_counter()
        cand = Candidate(model, state.steps + (Step(action.name, site, tuple(sorted(params.items()))),))
        clock["hash_s"] += time.perf_counter() - t_hash
        if cand.key in seen:
            result.duplicates += 1
            return None
        seen.add(cand.key)
        try:
            evaluator.evaluate(cand, parent=state if same_graph else None)
        except Exception as exc:  # noqa: BLE001 - a candidate that cannot be scored is dropped, not fatal
            result.failed[action.name] = f"scoring: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            return None
        result.evaluated += 1
        if cand.violation:
            reason = cand.violation.split(":")[0]
            result.pruned[reason] = result.pruned.get(reason, 0) + 1
            # over the memory limit: no result, but later steps (tiling, reuse, int8) may fit it
            if reason == "memory":
                stepping.append(cand)
                if result.leanest is None or cand.peak_mem_bytes < result.leanest.peak_mem_bytes:
                    result.leanest = cand
            return None
        frontier.append(cand)
        sig = kind_of(cand)
        # a kind's representative: its simplest plan (fewest steps), then the best scored
        if sig and (sig not in best_of_kind or (cand.changes, cand.score) < (best_of_kind[sig].changes,
                                                                           best_of_kind[sig].score)):
            best_of_kind[sig] = cand
        return cand

    last = [time.perf_counter(), 0.0]      # when the previous expansion began; the longest one so far

    def out_of_time() -> bool:
        """Whether the next expansion could end past the budget, at the cost of the longest one so
        far (on a large model one that times new execution paths costs seconds): the search stops
        before it, not after it."""
        now = time.perf_counter()
        last[1] = max(last[1], now - last[0])
        last[0] = now
        result.stopped_by_budget = now - t0 + last[1] > time_budget_s
        return result.stopped_by_budget

    for level in range(1, depth + 1):
        frontier: list[Candidate] = []
        stepping: list[Candidate] = []      # over the memory limit: expanded, never returned
        for state in beam:
            t_exp = time.perf_counter()
            todo = in_budget_order(expansions(state, space, ctx, result))
            clock["expand_s"] += time.perf_counter() - t_exp
            for action, params, site in todo:
                if out_of_time():
                    break
                t_narrow = time.perf_counter()
                site = action.narrow(site, params, ctx.cache)      # may measure (int8's float layers)
                clock["expand_s"] += time.perf_counter() - t_narrow
                if site is None:
                    continue
                cand = consider(state, action, params, site, frontier, stepping)
                if cand is not None and lookahead and action.lossy:
                    # a precision whose form pays on another path only (OpenVINO's int8) is scored
                    # there too at once: ranked on the default path alone it would leave the beam.
                    # The bound plans join the pool; the graph stays in the beam at their rank.
                    # (Lossless rewrites keep the plain order: their gains mostly carry across.)
                    for a2, p2, s2 in expansions(cand, lookahead, ctx, result):
                        if out_of_time():
                            break
                        child = consider(cand, a2, p2, s2, frontier, stepping)
                        if child is not None:
                            ahead_of[id(child)] = None
                            ahead_of[id(cand)] = min(ahead_of.get(id(cand), child.score), child.score)
            if result.stopped_by_budget:
                break
        result.levels = level
        if not frontier and not stepping:
            break
        limit = max(evaluator.target.memory_limit_bytes, 1)
        growing = [c for c in frontier + stepping if id(c) not in ahead_of or ahead_of[id(c)] is not None]
        beam = sorted(growing, key=lambda c: min(c.score, ahead_of.get(id(c), c.score))
                      + max(0.0, c.peak_mem_bytes / limit - 1.0))[:beam_width]
        pool = sorted(pool + frontier, key=lambda c: c.score)[:keep]
        if progress:        # (level, new candidates within the bounds, best score[, beam size])
            args = (level, len(frontier), pool[0].score if pool else float("nan"), len(beam))
            progress(*args[:_arity(progress)])
        if result.stopped_by_budget:
            break
    result.top = _exact_top(pool, default, evaluator, top_k, result)
    result.top += _explorers(best_of_kind, result.top, evaluator, explore, explore_round_ms, result)
    result.search_s = time.perf_counter() - t0
    result.timings = {k: round(v, 4) for k, v in {**clock, **evaluator.timings, "total_s": result.search_s}.items()}
    if evaluator.sensitivity is not None:
        result.timings["sensitivity_probes"] = evaluator.sensitivity.probes
    result.timings["apply_by_action_s"] = {k: round(v, 3) for k, v in sorted(per_action.items(), key=lambda kv: -kv[1])}
    return result


def in_budget_order(todo) -> list:
    """Plan-wide directives (an execution path, a memory policy) cost no rewrite: scored first,
    then the low-precision rewrites, then the rest, so a time budget spent on expensive rewrites
    of a large graph still sees the other paths and precisions the target offers. Within each
    group the actions take turns (each one's first choice, then each one's second...): on a slow
    model a few fp16 variants, each bound and timed on every path, must not use up the time int8
    needed."""
    todo, turn, seen = list(todo), [], {}
    for action, _, _ in todo:
        turn.append(seen.get(action.name, 0))
        seen[action.name] = turn[-1] + 1
    keyed = [((not a.keeps_graph(a.with_defaults(p)), not a.lossy, turn[i]), i) for i, (a, p, _) in enumerate(todo)]
    return [todo[i] for _, i in sorted(keyed)]


def kind_of(c: Candidate) -> tuple:
    """What kind of plan a candidate is: its lossy actions and its execution path (empty for a
    lossless plan on the default path). OpenVINO's int8 form is a kind of its own."""
    from metainfer_core.backends.paths import ExecutionPath

    lossy = tuple(sorted({_lossy_label(st) for st in c.steps if ACTIONS[st.kind].lossy}))
    path = ExecutionPath.of(c.model)
    return lossy + (() if path.is_default else (path.label,))


def _lossy_label(st: Step) -> str:
    return "int8:openvino-form" if st.kind == "int8" and dict(st.params).get("placement") == "inputs" else st.kind


def _breadth(kind: tuple) -> int:
    """How many choices a kind combines; OpenVINO's int8 form on OpenVINO is one (it binds there)."""
    implied = "int8:openvino-form" in kind and any(k.startswith("openvino:") for k in kind)
    return len(kind) - int(implied)


def _explorers(best_of_kind: dict[tuple, Candidate], top: list[Candidate], evaluator: Evaluator, explore: int,
               round_ms: float, result: SearchResult) -> list[Candidate]:
    have = {kind_of(c) for c in top}
    out: list[Candidate] = []
    # single kinds first (one precision or one path alone says most about what the predictor missed)
    for c in sorted(best_of_kind.values(), key=lambda c: (_breadth(kind_of(c)) > 1, c.score)):
        if len(out) == explore:
            break
        if kind_of(c) in have or any(c is t for t in top):
            continue
        cost_ms = c.latency_ms * runs_per_sample(c.latency_ms) if c.latency_ms == c.latency_ms else 0.0
        if cost_ms > round_ms:
            continue
        if not c.accuracy_exact:
            try:
                evaluator.exact(c)
            except Exception as exc:  # noqa: BLE001 - dropped with its reason
                result.failed[c.steps[-1].kind] = f"exact check: {type(exc).__name__}: {str(exc)[:200]}"
                continue
            if c.violation:
                continue
        have.add(kind_of(c))
        out.append(c)
        round_ms -= cost_ms
    return out


def _exact_top(pool: list[Candidate], default: Candidate, evaluator: Evaluator, top_k: int,
               result: SearchResult) -> list[Candidate]:
    """The best `top_k` better than the default, with exact accuracy for the lossy ones."""
    top: list[Candidate] = []
    checks = 0
    for c in sorted(pool, key=lambda c: c.score):
        if len(top) == top_k or c.score >= default.score:
            break
        if not c.accuracy_exact:
            if checks >= EXACT_CHECKS_PER_SLOT * top_k:
                continue
            checks += 1
            try:
                evaluator.exact(c)
            except Exception as exc:  # noqa: BLE001 - a candidate that fails to run is dropped with its reason
                kind = c.steps[-1].kind if c.steps else "default"
                result.failed[kind] = f"exact check: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                continue
            if c.violation:
                result.pruned["accuracy (exact check)"] = result.pruned.get("accuracy (exact check)", 0) + 1
                continue
            if c.score >= default.score:
                continue
        top.append(c)
    return sorted(top, key=lambda c: c.score)
