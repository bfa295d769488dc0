"""Beam search over action sequences. Each level expands every beam state by every legal
(action, parameter choice, site); equivalent graphs are merged by their canonical hash;
candidates that break a hard constraint are pruned; the best `beam_width` by score go on.
A greedy dive to full depth along the best child comes first, so a budget that ends early has
still scored combinations; an expansion that would end past the budget is left out, cheaper
ones after it still run.
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
from metainfer_core.ir.tensors import carry_tuned_shapes
from metainfer_core.actions.float_layers import FIT, FLOAT_LAYERS
from metainfer_core.actions.nncf_engine import NNCF
from metainfer_core.actions.ort_engine import ORT
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.backends.timing import runs_per_sample
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.evaluate import CALIBRATES, Evaluator

DOMINATED = "float layers (the whole-precision plan cannot beat the default)"
NEEDLESS = "float layers (the whole-precision plan is well within the accuracy bound)"
NARROWED_AWAY = "float layers (no such set: the same plan as fewer, or over the accuracy bound)"
WELL_WITHIN = 0.5       # of accuracy.max_loss: an estimate this far inside the bound is trusted
EXACT_CHECKS_PER_SLOT = 3       # exact accuracy runs allowed per top-K slot before giving up


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
    depth: int = 0                       # the configured depth (levels: the deepest one reached)
    skipped: int = 0                     # expansions left out because they would not fit the budget
    dive_stalled_at: int = 0             # the dive's level where no child was predicted to gain (0: it did not stall)
    log: list[dict] = field(default_factory=list)   # every expansion made or pruned, in order (search_log.json)


def _memo(state: Candidate, kind: str, site, params: dict) -> tuple:
    """What identifies an expansion (a child is made once per state, step and parameters)."""
    return state.key, kind, site, repr(tuple(sorted(params.items())))


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""


def _entry(level: int, steps: tuple[Step, ...], **fields) -> dict:
    """One line of the search log: the level, the plan's steps (kind and parameters), what happened."""
    return {"level": level, "steps": [f"{s.kind}(" + ", ".join(f"{k}={v}" for k, v in s.params) + ")" for s in steps],
            **{k: v for k, v in fields.items() if v is not None}}


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
    add to one verify round, at their predicted latencies (a slow model verifies fewer).

    First a greedy dive to full depth along the best child (within DIVE_SHARE of the budget),
    then the beam widens from the root over what is left: a budget that ends early has still
    scored combinations. A child is made and scored once (the widening finds the dive's again)."""
    t0 = time.perf_counter()
    default = Candidate(default_model)
    evaluator.set_baseline(default)
    # the pool keeps the best few only (graphs are large)
    run = _Search(default, evaluator, space, ctx, depth, top_k, 4 * max(beam_width, top_k), t0, time_budget_s)
    pool: list[Candidate] = []

    def report(level: int, frontier: list[Candidate], beam_size: int) -> None:
        if progress:        # (level, new candidates within the bounds, best score[, beam size])
            best = min((c.score for c in pool), default=float("nan"))
            args = (level, len(frontier), best, beam_size)
            progress(*args[:_arity(progress)])

    pool = _best(pool, run.unchanged_on_paths(), run.keep)
    # the dive: one state per level, its children scored cheapest-first within the level's slice;
    # a state with no child to grow (all over a bound, or directives) hands the level to the
    # next best state of the level before (a dead end must not end the dive at depth 2)
    state, dive_end, level, alternatives = default, t0 + DIVE_SHARE * (run.deadline - t0), 1, []
    while level <= depth:
        coasting = bool(run.result.dive_stalled_at)
        until = run.slice_end(dive_end, depth - level + 1)
        frontier, stepping = run.expand([state], level, until=until, defer_directives=level < depth,
                                        warm_only=coasting, first_only=coasting)
        nxt = run.growable(frontier + stepping, last=level == depth)
        if coasting and not nxt and not run.out_of_time():
            # nothing that re-uses every measurement grows (whole int8 over the bound): the
            # level may measure after all (int8 keeping layers float); made children cost nothing
            frontier, stepping = run.expand([state], level, until=until, defer_directives=level < depth)
            nxt = run.growable(frontier + stepping, last=level == depth)
        pool = _best(pool, frontier, run.keep)
        if frontier:
            report(level, frontier, 1)
        if run.out_of_time():
            break
        if not nxt:
            if not alternatives:
                break
            state = alternatives.pop(0)
            continue
        if level < depth and not coasting and not _gains(run.rank(nxt[0]), run.rank(state)):
            # no child is predicted to gain: the dive still goes to full depth (combinations get
            # scored: the predictor's resolution is coarser than a step's effect), but coasting,
            # on steps that measure nothing new, so the widening keeps the time for what does
            run.result.dive_stalled_at = level
        state, alternatives, level = nxt[0], nxt[1:], level + 1
    # the widening: the beam from the root over the whole budget, the dive's children re-used
    beam = [default]
    for level in range(1, depth + 1):
        if run.out_of_time():
            break
        frontier, stepping = run.expand(beam, level, until=run.deadline)
        if not frontier and not stepping:
            break
        beam = run.ranked(frontier + stepping)[:beam_width]
        pool = _best(pool, frontier, run.keep)
        report(level, frontier, len(beam))
    result = run.result
    result.skipped = len(run.skipped)
    end = t0 + time_budget_s       # no exact check starts after it
    result.top = _exact_top(_twins_last(pool, run.made_at), default, evaluator, top_k, result, end)
    result.top += _explorers(run.best_of_kind, result.top, evaluator, explore, explore_round_ms, result, end)
    result.search_s = time.perf_counter() - t0
    result.timings = {k: round(v, 4) for k, v in {**run.clock, **evaluator.timings, "total_s": result.search_s}.items()}
    if evaluator.sensitivity is not None:
        result.timings["sensitivity_probes"] = evaluator.sensitivity.probes
    result.timings["apply_by_action_s"] = {k: round(v, 3) for k, v in sorted(run.per_action.items(), key=lambda kv: -kv[1])}
    return result


DIVE_SHARE = 0.5        # of the expansions' time, at most, for the dive to full depth
MIN_GAIN = 0.01         # a predicted score this much lower (share) is a gain; less is within the predictor's resolution


def _calibration(action, params: dict) -> str | None:
    """The sort of an expansion whose rewrite calibrates: per quantizer."""
    who = action.calibrates(params)
    return f"{CALIBRATES}:{who}" if who else None


def _gains(score: float, than: float) -> bool:
    return score < than - MIN_GAIN * abs(than)


EXACT_SHARE = 0.2       # of the search's budget kept for the exact checks of the best lossy plans


def _twins_last(pool: list[Candidate], made_at: dict[int, int]) -> list[Candidate]:
    """The pool best first, but a plan of the same kind as one made before it and scored within
    the predictor's resolution of it (int8 with the other activation type, a neutral tiling
    added) after every distinct plan: the predictor cannot tell such twins apart, so verifying
    both would spend a slot on one measurement's worth; the first made (its domain's first
    choice, the simpler plan) stands for both."""
    distinct: list[Candidate] = []
    twins: list[Candidate] = []
    for c in sorted(pool, key=lambda c: made_at.get(id(c), 0)):
        same = [d for d in distinct if kind_of(d) == kind_of(c)]
        (twins if any(not _gains(c.score, d.score) and not _gains(d.score, c.score) for d in same)
         else distinct).append(c)
    return sorted(distinct, key=lambda c: c.score) + sorted(twins, key=lambda c: c.score)


def _best(pool: list[Candidate], new: list[Candidate], keep: int) -> list[Candidate]:
    """The best `keep` of both, each plan once."""
    merged = {id(c): c for c in pool + new}
    return sorted(merged.values(), key=lambda c: c.score)[:keep]


def _ends_in_directive(c: Candidate) -> bool:
    """After a plan-wide directive only directives follow (actions.expand): a dead end for a dive
    that has levels left."""
    last = c.steps[-1] if c.steps else None
    return last is not None and ACTIONS[last.kind].keeps_graph(dict(last.params))


class _Search:
    """One search's shared state: the plans seen, each (state, step) made and scored once, the
    best plan of each kind, and the clock that decides which expansion still fits the budget."""

    def __init__(self, default: Candidate, evaluator: Evaluator, space: dict, ctx: ActionContext, depth: int,
                 top_k: int, keep: int, t0: float, budget_s: float):
        self.evaluator, self.space, self.ctx = evaluator, space, ctx
        self.result = SearchResult(default=default, top=[], depth=depth)
        # the exact checks of lossy plans come after the expansions, inside the same budget
        lossy = any(ACTIONS[a].lossy for a in space)
        self.deadline = t0 + budget_s * (1 - EXACT_SHARE * lossy)
        self.keep = keep
        self.level = 0          # the level being expanded (the search log says where each plan was made)
        self.seen = {self.result.default.key}
        self.made: dict[tuple, Candidate | None] = {}        # (state key, step) -> its child
        self.made_at: dict[int, int] = {}        # candidate -> the order it was scored in
        self.best_of_kind: dict[tuple, Candidate] = {}
        self.ahead_of: dict[int, float | None] = {}  # graph -> its best bound plan's score; bound plan -> None
        self.fastest_bound: dict[int, float] = {}   # lossy graph -> its best bound plan's score at zero loss
        self.at_zero: dict[tuple, float] = {}       # expansion -> its child's score at zero loss, bound broken or not
        self.scored: dict[tuple, Candidate] = {}    # expansion -> its child as scored, bound broken or not
        self.lookahead = {k: v for k, v in space.items() if k == "binding"}
        self.clock = {"expand_s": 0.0, "apply_s": 0.0, "hash_s": 0.0}
        self.per_action: dict[str, float] = {}
        self.skipped: set[tuple] = set()     # expansions left out: they would have ended past the budget
        self.warm_s = 0.0       # the longest expansion that measured nothing new so far
        # per sort (a new precision's sensitivity, a new path): the longest expansion that
        # measured one; before the first of its sort, an estimate (Evaluator.fresh_cost_prior_s)
        self.fresh_s = evaluator.fresh_cost_prior_s(lossy)
        self.fresh_seen: set[str] = set()

    # --- the budget -------------------------------------------------------------------------
    def out_of_time(self) -> bool:
        """Whether not even an expansion that re-uses every measurement would fit any more."""
        over = time.perf_counter() + self.warm_s > self.deadline
        self.result.stopped_by_budget |= over
        return over

    def slice_end(self, end: float, levels_left: int) -> float:
        """A level's share of what is left until `end`: what a level leaves goes to the next."""
        now = time.perf_counter()
        return min(self.deadline, now + max(0.0, end - now) / max(levels_left, 1))

    def fits(self, state: Candidate, action, params, until: float) -> bool:
        """Whether the expansion would likely end by `until`, at the cost of the longest one so
        far of its sort: one that measures a new precision or execution path costs seconds on a
        large model, one that re-uses those measurements only its rewrite and its scoring."""
        fresh = self.evaluator.measures_anew(state, action, params)
        return time.perf_counter() + self._rewrite_s(action, params) + (self.fresh_s[fresh] if fresh else 0.0) <= until

    def reuses(self, state: Candidate, action, params: dict) -> bool:
        """Whether the expansion measures nothing new: no new precision or path, no quantizer
        calibrating (float layers fitted by runs may still run the graph)."""
        return not (self.evaluator.measures_anew(state, action, params) or action.calibrates(params))

    def warm(self, state: Candidate, action, params: dict) -> bool:
        """Whether the expansion re-uses every measurement: it measures nothing new and fits no
        float layers by runs."""
        return self.reuses(state, action, params) and params.get(FLOAT_LAYERS) != FIT

    def _rewrite_s(self, action, params) -> float:
        """What the rewrite and scoring alone likely cost: an outside quantizer calibrates (it
        runs the graph), a plain rewrite does not, and one must not price the other; nor one
        quantizer another (NNCF's apply can take several times ONNX Runtime's on the same graph)."""
        sort = _calibration(action, params)
        return self.fresh_s.get(sort, self.fresh_s[CALIBRATES]) if sort else self.warm_s

    # --- expanding --------------------------------------------------------------------------
    def expand(self, states: list[Candidate], level: int, until: float, defer_directives: bool = False,
               warm_only: bool = False, first_only: bool = False):
        """Score the states' children cheapest-first (in_budget_order) while they fit by `until`
        (the level's first while it fits the budget); warm_only: only those that measure nothing
        new (warm); first_only: up to the first child within the bounds (a coasting dive only
        needs one to go deeper: scoring each of its siblings took seconds per level on a large
        detector, the widening's time). Returns (children within the bounds, children over the
        memory limit: expanded, never returned)."""
        frontier: list[Candidate] = []
        stepping: list[Candidate] = []
        self.level = level
        for state in states:
            t_exp = time.perf_counter()
            todo = in_budget_order(expansions(state, self.space, self.ctx, self.result))
            if warm_only:
                todo = [t for t in todo if self.warm(state, *t[:2])]
            if defer_directives:
                # the dive: what re-uses every measurement first (it fits a level's slice), a
                # directive last (it ends the dive's growth), else cheapest-first as ever
                todo = sorted(todo, key=lambda t: (_keeps(t), bool(self.evaluator.measures_anew(state, t[0], t[1]))))
            self.clock["expand_s"] += time.perf_counter() - t_exp
            fresh_tried = False
            for action, params, site in measured_first_within_turns(
                    todo, lambda t, s=state: self.reuses(s, t[0], t[1])):
                measured_before = self.evaluator.measuring_s()
                # a level's first may run past its slice (within the budget): a dive whose state
                # has nothing cheap left to add still goes deeper. So may the dive's first child
                # that measures something new (a precision, a path): on a measured target the
                # gains are there, and what it measures the widening re-uses
                first = not frontier and not stepping
                fresh_first = (defer_directives and not fresh_tried and not _keeps((action, params, site))
                               and bool(self.evaluator.measures_anew(state, action, params)))
                cand = self.consider(state, action, params, site, frontier, stepping,
                                     self.deadline if first or fresh_first else until)
                if cand is not None and self.lookahead and action.lossy:
                    # a precision whose form pays on another path only (OpenVINO's int8) is scored
                    # there too at once: ranked on the default path alone it would leave the beam.
                    # The bound plans join the pool; the graph stays in the beam at their rank.
                    # (Lossless rewrites keep the plain order: their gains mostly carry across.)
                    for a2, p2, s2 in expansions(cand, self.lookahead, self.ctx, self.result):
                        child = self.consider(cand, a2, p2, s2, frontier, stepping, self.deadline)
                        if child is not None:
                            self.ahead_of[id(child)] = None
                            self.ahead_of[id(cand)] = min(self.ahead_of.get(id(cand), child.score), child.score)
                        # over the accuracy bound too: what float layers could reach
                        at_zero = self.at_zero.get(_memo(cand, a2.name, s2, p2))
                        if at_zero is not None:
                            self.fastest_bound[id(cand)] = min(self.fastest_bound.get(id(cand), at_zero), at_zero)
                    deferred = cand.accuracy_deferred
                    self.evaluator.reanchor(cand)       # binding it may have timed its graph
                    if deferred and not cand.accuracy_deferred:
                        self.note(cand, "estimated once its bound plans ranked it ahead")
                    if cand.violation:      # its loss, deferred, estimated now that it ranks ahead
                        frontier.remove(cand)
                        self.prune(cand.violation.split(":")[0])
                # the privilege is spent only on a child that measured: one scored without its
                # estimate (it cannot beat the default) leaves it to the next
                fresh_tried |= fresh_first and self.evaluator.measuring_s() > measured_before
                if first_only and cand is not None and not cand.violation:
                    break
        if frontier or stepping:
            self.result.levels = max(self.result.levels, level)
        return frontier, stepping

    def unchanged_on_paths(self) -> list[Candidate]:
        """The unchanged graph bound to each execution path the target offers, scored before
        anything else: what a user would try instead (OpenVINO beside ONNX Runtime) is the floor
        a plan must beat, and a budget spent on a large graph's rewrites must not leave it
        unscored (a large graph's search, left little by its profile, scored only tilings and
        kept the default where OpenVINO ran it clearly faster). Its path ratio is re-used by every
        float graph bound there later; the dive and the widening find these children made."""
        frontier: list[Candidate] = []
        self.level = 1
        for action, params, site in expansions(self.result.default, self.lookahead, self.ctx, self.result):
            self.consider(self.result.default, action, params, site, frontier, [], self.deadline)
        if frontier:
            self.result.levels = 1
        return frontier

    def ranked(self, cands: list[Candidate]) -> list[Candidate]:
        """The states worth growing, best first: a lossy graph at its best bound plan's rank, a
        plan over the memory limit behind by how far over it is; bound plans are leaves."""
        growing = {id(c): c for c in cands if id(c) not in self.ahead_of or self.ahead_of[id(c)] is not None}
        return sorted(growing.values(), key=self.rank)

    def growable(self, cands: list[Candidate], last: bool) -> list[Candidate]:
        """The dive's next states, best first: a plan ending in a directive grows no further
        but on the last level."""
        return self.ranked([c for c in cands if last or not _ends_in_directive(c)])

    def rank(self, c: Candidate) -> float:
        """A state's worth for growing: a lossy graph at its best bound plan's score, a plan over
        the memory limit behind by how far over it is."""
        limit = max(self.evaluator.target.memory_limit_bytes, 1)
        bound = self.ahead_of.get(id(c))
        return min(c.score, c.score if bound is None else bound) + max(0.0, c.peak_mem_bytes / limit - 1.0)

    def consider(self, state: Candidate, action, params, site, frontier: list, stepping: list,
                 until: float) -> Candidate | None:
        """Apply one expansion, score it, file it; the candidate within the bounds, or None when
        it fails, repeats a seen plan, breaks a bound (over the memory limit it is filed to be
        expanded further) or would not fit by `until`. Made once: asked again (the widening
        meets the dive's children), the same candidate is filed at no cost."""
        step = Step(action.name, site, tuple(sorted(params.items())))
        memo = _memo(state, action.name, site, params)
        if memo in self.made:
            cand = self.made[memo]
        else:
            if not self.fits(state, action, params, until):
                if until >= self.deadline or not self.fits(state, action, params, self.deadline):
                    self.result.stopped_by_budget = True
                    self.skipped.add(memo)
                return None
            why = DOMINATED if self._dominated(state, action, params, site) else \
                NEEDLESS if self._needless(state, action, params, site) else None
            if why:
                self.made[memo] = None
                self.prune(why)
                self.result.log.append(_entry(self.level, state.steps + (step,), pruned=why))
                return None
            t_start = time.perf_counter()
            measured_before, precision_before = self.evaluator.measuring_s(), self.evaluator.precision_s()
            # what is measured without being foreseen (int8's float-layer fits) is priced as a precision
            fresh = self.evaluator.measures_anew(state, action, params) or "precision"
            try:
                narrowed = action.narrow(site, params, self.ctx.cache)     # may measure (int8's float layers)
            except Exception as exc:  # noqa: BLE001 - a choice that cannot be narrowed prunes itself only
                self.made[memo] = None
                self.result.failed[action.name] = f"narrowing: {type(exc).__name__}: {_first_line(exc)}"
                self.result.log.append(_entry(self.level, state.steps + (step,), failed=self.result.failed[action.name]))
                return None
            whole = self._sibling(state, action, params, site)
            if narrowed is None:
                self.prune(NARROWED_AWAY)
                self.result.log.append(_entry(self.level, state.steps + (step,), pruned=NARROWED_AWAY))
            elif narrowed != site:
                site, step = narrowed, Step(action.name, narrowed, step.params)
            cand = self._make(state, action, params, site, step, whole) if narrowed is not None else None
            if cand is not None:
                self.at_zero[memo] = self.zero_loss_score(cand)
                self.scored[memo] = cand
            # over the accuracy bound it is not made again (once reanchor estimated it, it is)
            over_bound = cand is not None and cand.violation and cand.violation.split(":")[0] != "memory"
            cand = self.made[memo] = None if over_bound else cand
            spent = time.perf_counter() - t_start
            calibrated = bool(action.calibrates(params)) and self.evaluator.measuring_s() == measured_before
            self._account(_calibration(action, params) if calibrated else fresh, spent,
                          measured=calibrated or self.evaluator.measuring_s() > measured_before,
                          precision_s=self.evaluator.precision_s() - precision_before)
        if cand is None:
            return None
        if cand.violation:      # over the memory limit: later steps (tiling, reuse, int8) may fit it
            if cand.violation.split(":")[0] == "memory":
                stepping.append(cand)
            return None     # (over the accuracy bound: made again, once reanchor estimated it)
        frontier.append(cand)
        return cand

    def _account(self, sort: str, spent: float, measured: bool, precision_s: float) -> None:
        """Price expansions by what this one cost: `sort` (what it measured anew) at the longest
        such so far (the first replaces the prior); one that measured nothing prices the warm
        ones. precision_s: the seconds of it spent measuring a precision. A plan bound to a new
        path whose graph's loss estimate measured a precision prices the precision with those,
        not the path: priced at a detector's int8 sensitivity, every later binding was left out
        of the budget."""
        if not measured:
            self.warm_s = max(self.warm_s, spent)
            return
        if sort == "path" and precision_s > 0:
            self._account("precision", precision_s, True, 0.0)
            spent -= precision_s
        self.fresh_s[sort] = max(self.fresh_s[sort], spent) if sort in self.fresh_seen else spent
        self.fresh_seen.add(sort)

    def note(self, cand: Candidate, event: str | None = None) -> None:
        """The search log's entry for a scored candidate (`event`: what changed it later)."""
        self.result.log.append(_entry(self.level, cand.steps, event=event, n=self.made_at.get(id(cand)),
                                      predicted_ms=cand.latency_ms, loss=cand.accuracy_loss,
                                      loss_exact=cand.accuracy_exact, loss_deferred=cand.accuracy_deferred,
                                      score=cand.score, violation=cand.violation,
                                      path=ExecutionPath.of(cand.model).label))

    def prune(self, reason: str) -> None:
        self.result.pruned[reason] = self.result.pruned.get(reason, 0) + 1

    def _dominated(self, state: Candidate, action, params: dict, site) -> bool:
        """Whether keeping layers in float (float_layers) cannot pay: the same step with every
        layer lowered, scored already, cannot beat the default even at zero loss, on any path
        bound so far. Float layers only add float time to it, and choosing them measures the
        precision's sensitivity (seconds on a large graph)."""
        whole = self._whole(state, action, params, site)
        if whole is None:
            return False
        # its plans bound to another path count even over the accuracy bound (the whole-int8 graph
        # on OpenVINO): float layers bring the loss down, not the speed up
        at_zero = self.zero_loss_score(whole)
        return min(at_zero, self.fastest_bound.get(id(whole), at_zero)) >= self.evaluator.base_score

    def _needless(self, state: Candidate, action, params: dict, site) -> bool:
        """Whether keeping layers in float cannot pay because the same step with every layer
        lowered already keeps its estimated loss well within the bound: they could gain only
        its accuracy term, within the predictor's resolution, while adding float time, and the
        budget they take (on a large detector, every other engine and placement) goes to what
        may pay. Near the bound (an estimate, not exact) they are still tried."""
        whole = self._whole(state, action, params, site)
        if whole is None or whole.accuracy_deferred:
            return False
        ev = self.evaluator
        return (whole.accuracy_loss <= WELL_WITHIN * ev.max_loss
                and ev.weights.accuracy * whole.accuracy_loss < MIN_GAIN * abs(ev.base_score))

    def _whole(self, state: Candidate, action, params: dict, site) -> Candidate | None:
        """For a float-layers choice: the same step with every layer lowered, when it was made,
        scored within the bounds, against a scored default (None otherwise: nothing to prune on)."""
        whole = self._sibling(state, action, params, site)
        return None if whole is None or whole.violation or self.evaluator.base_score is None else whole

    def _sibling(self, state: Candidate, action, params: dict, site) -> Candidate | None:
        """For a float-layers choice: the same step with every layer lowered, when it was scored
        (over the accuracy bound too: its anchor and path ratio still price the layers lowered)."""
        return self.scored.get(_memo(state, action.name, site, {**params, FLOAT_LAYERS: 0})) \
            if params.get(FLOAT_LAYERS) else None

    def zero_loss_score(self, c: Candidate) -> float:
        """A plan's score without its accuracy term: the best any float-layer variant of it could do."""
        return c.score - self.evaluator.weights.accuracy * c.accuracy_loss

    def _make(self, state: Candidate, action, params, site, step: Step, whole: Candidate | None = None
              ) -> Candidate | None:
        """`state`'s child by `step`, applied and scored, over a bound too (the caller files it);
        None when the rewrite or its scoring fails or it repeats a plan seen. whole: for int8
        keeping layers float, the same step lowering them all (its anchor carries over)."""
        result = self.result
        t_apply = time.perf_counter()
        try:
            model = carry_tuned_shapes(state.model, action.apply(state.model, site, params, self.ctx))
        except Exception as exc:  # noqa: BLE001 - a rewrite refusing a graph prunes that branch only
            result.failed[action.name] = f"{type(exc).__name__}: {_first_line(exc)}"
            result.log.append(_entry(self.level, state.steps + (step,), failed=result.failed[action.name]))
            return None
        finally:
            spent = time.perf_counter() - t_apply
            self.clock["apply_s"] += spent
            self.per_action[action.name] = self.per_action.get(action.name, 0.0) + spent
        same_graph = action.keeps_graph(action.with_defaults(params))
        if same_graph:
            share_analysis(model, state.model)
        t_hash = time.perf_counter()
        cand = Candidate(model, state.steps + (step,))
        self.clock["hash_s"] += time.perf_counter() - t_hash
        if cand.key in self.seen:
            result.duplicates += 1
            result.log.append(_entry(self.level, cand.steps, pruned="duplicate"))
            return None
        self.seen.add(cand.key)
        try:
            self.evaluator.evaluate(cand, parent=state if same_graph else None, origin=state, whole=whole)
        except Exception as exc:  # noqa: BLE001 - a candidate that cannot be scored is dropped, not fatal
            result.failed[action.name] = f"scoring: {type(exc).__name__}: {_first_line(exc)}"
            return None
        result.evaluated += 1
        self.made_at[id(cand)] = result.evaluated
        self.note(cand)
        if cand.violation:
            reason = cand.violation.split(":")[0]
            self.prune(reason)
            if reason != "memory":
                return cand
            if result.leanest is None or cand.peak_mem_bytes < result.leanest.peak_mem_bytes:
                result.leanest = cand
            return cand
        sig = kind_of(cand)
        # a kind's representative: its simplest plan (fewest steps), then the best scored; a score
        # within the predictor's resolution keeps the first made (its domain's first choice: the
        # predictor tells int8's activation types apart no better than that, the runtime may)
        held = self.best_of_kind.get(sig)
        if sig and (held is None or cand.changes < held.changes
                    or (cand.changes == held.changes and _gains(cand.score, held.score))):
            self.best_of_kind[sig] = cand
        return cand


def _keeps(todo_item) -> bool:
    action, params, _ = todo_item
    return action.keeps_graph(action.with_defaults(params))


# the width of each lossy action's numbers: the narrowest promises the most speed where legal
_BITS = {"int8": 8, "int8_dynamic": 8, "fp16": 16, "bf16": 16}


def in_budget_order(todo) -> list:
    """Plan-wide directives (an execution path, a memory policy) cost no rewrite: scored first,
    then the low-precision rewrites, then the rest, so a time budget spent on expensive rewrites
    of a large graph still sees the other paths and precisions the target offers. Within each
    group the actions take turns (each one's first choice, then each one's second...), the
    narrower precision first within a turn: on a slow model a few fp16 variants, each bound and
    timed on every path, must not use up the time int8 needed."""
    todo, turn, seen = list(todo), [], {}
    for action, _, _ in todo:
        turn.append(seen.get(action.name, 0))
        seen[action.name] = turn[-1] + 1
    keyed = [((not a.keeps_graph(a.with_defaults(p)), not a.lossy, turn[i], _BITS.get(a.name, 32)), i)
             for i, (a, p, _) in enumerate(todo)]
    return [todo[i] for _, i in sorted(keyed)]


def measured_first_within_turns(todo: list, cheap: Callable[[tuple], bool]):
    """todo in its order of turns (which action, directive or rewrite, goes next), but at each
    turn the action's first choice that measures nothing new, asked then (`cheap`: what was
    measured so far changes as the level goes): after whole int8 broke the bound, int8 keeping
    its sensitive layers in float re-uses int8's sensitivity and comes before int8 with the
    other activation type, which measures its own (seconds on a large model)."""
    queues: dict[tuple, list] = {}
    for item in todo:
        queues.setdefault((item[0].name, _keeps(item)), []).append(item)
    for item in todo:
        queue = queues[(item[0].name, _keeps(item))]
        pick = next((i for i, t in enumerate(queue) if cheap(t)), 0)
        yield queue.pop(pick)


def kind_of(c: Candidate) -> tuple:
    """What kind of plan a candidate is: its lossy actions and its execution path (empty for a
    lossless plan on the default path). OpenVINO's int8 form is a kind of its own."""
    from metainfer_core.backends.paths import ExecutionPath

    lossy = tuple(sorted({_lossy_label(st) for st in c.steps if ACTIONS[st.kind].lossy}))
    path = ExecutionPath.of(c.model)
    return lossy + (() if path.is_default else (path.label,))


def _lossy_label(st: Step) -> str:
    """int8 in OpenVINO's form is a kind apart, and so is an outside quantizer's writing of
    either form (NNCF's, ONNX Runtime's): the predictor tells none of them from meta-infer's QDQ
    form, so each is worth a measurement of its own. ONNX Runtime's quantizer on its own op set
    (scope all) is the graph its users get: a kind apart from its compute-only scope."""
    params = dict(st.params)
    if st.kind != "int8":
        return st.kind
    if params.get("engine") == ORT and params.get("scope") == "compute":
        return f"int8:{ORT}:compute"
    if params.get("engine") in (NNCF, ORT):
        return f"int8:{params['engine']}"
    return "int8:openvino-form" if params.get("placement") == "inputs" else st.kind


_OPENVINO_FORMS = ("int8:openvino-form", "int8:nncf")


def _breadth(kind: tuple) -> int:
    """How many choices a kind combines; OpenVINO's int8 form on OpenVINO is one (it binds there)."""
    implied = any(f in kind for f in _OPENVINO_FORMS) and any(k.startswith("openvino:") for k in kind)
    return len(kind) - int(implied)


def _outside(kind: tuple) -> bool:
    return any(k.startswith((f"int8:{NNCF}", f"int8:{ORT}")) for k in kind)


def _explorers(best_of_kind: dict[tuple, Candidate], top: list[Candidate], evaluator: Evaluator, explore: int,
               round_ms: float, result: SearchResult, end: float = float("inf")) -> list[Candidate]:
    """Past `end` no exact check starts, but one for an outside quantizer's plan: on some models
    the search's last seconds went to the unchanged graph's binding and ONNX Runtime's
    quantize_static plan (there the fastest peer's own graph) was left unverified."""
    have = {kind_of(c) for c in top}
    out: list[Candidate] = []
    late = 0
    # single kinds first (one precision or one path alone says most about what the predictor
    # missed), an outside quantizer's first among them: the graphs users get from those tools,
    # which the predictor reads worst
    for c in sorted(best_of_kind.values(), key=lambda c: (_breadth(kind_of(c)) > 1, not _outside(kind_of(c)), c.score)):
        if len(out) == explore:
            break
        if kind_of(c) in have or any(c is t for t in top):
            continue
        cost_ms = c.latency_ms * runs_per_sample(c.latency_ms) if c.latency_ms == c.latency_ms else 0.0
        if cost_ms > round_ms:
            continue
        if not c.accuracy_exact:
            if time.perf_counter() > end:
                if late >= LATE_OUTSIDE_CHECKS or not _outside(kind_of(c)):
                    result.stopped_by_budget = True
                    continue
                late += 1
            try:
                evaluator.exact(c)
            except Exception as exc:  # noqa: BLE001 - dropped with its reason
                result.failed[c.steps[-1].kind] = f"exact check: {type(exc).__name__}: {str(exc)[:200]}"
                continue
        if c.violation:     # its exact check broke the bound (this one's, or the top's before it)
            continue
        have.add(kind_of(c))
        out.append(c)
        round_ms -= cost_ms
    return out


LATE_OUTSIDE_CHECKS = 1     # an outside quantizer's explorer checked past the search's end, at most


def _lossy(c: Candidate) -> bool:
    return any(ACTIONS[st.kind].lossy for st in c.steps)


def _exact_top(pool: list[Candidate], default: Candidate, evaluator: Evaluator, top_k: int,
               result: SearchResult, end: float = float("inf")) -> list[Candidate]:
    """The first `top_k` of `pool` (in the order to verify them) better than the default, with
    exact accuracy for the lossy ones (those not checked by `end` are left out, but until one
    lossy plan passed its check, a few are checked past it: on a large detector the last
    expansions, outside quantizers calibrating, overran into the checks' share, and the search's
    best plans, int8 keeping layers float and faster than the lossless one kept, were dropped
    unchecked)."""
    top: list[Candidate] = []
    checks = late = 0
    for c in pool:
        if len(top) == top_k:
            break
        if c.score >= default.score:
            continue
        if not c.accuracy_exact:
            if checks >= EXACT_CHECKS_PER_SLOT * top_k:
                continue
            if time.perf_counter() > end:
                if late >= EXACT_CHECKS_PER_SLOT or any(map(_lossy, top)):
                    continue
                late += 1
            checks += 1
            try:
                evaluator.exact(c)
            except Exception as exc:  # noqa: BLE001 - a candidate that fails to run is dropped with its reason
                kind = c.steps[-1].kind if c.steps else "default"
                result.failed[kind] = f"exact check: {type(exc).__name__}: {_first_line(exc)}"
                continue
            if c.violation:
                result.pruned["accuracy (exact check)"] = result.pruned.get("accuracy (exact check)", 0) + 1
                continue
            if c.score >= default.score:
                continue
        top.append(c)
    return sorted(top, key=lambda c: c.score)
