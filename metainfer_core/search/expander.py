"""One search's expansions: each (state, step) applied, scored and filed once (the widening meets
the dive's children at no cost), within the budget's slices; the best plan of each kind kept for
the explored finalists; a lossy graph scored bound to each execution path at once."""
from __future__ import annotations

from metainfer_core.actions import ACTIONS, ActionContext, Step, expand
from metainfer_core.actions.base import share_analysis
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.ir.tensors import carry_tuned_shapes
from metainfer_core.search.budget import Budget, calibration
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.finalists import kind_of
from metainfer_core.search.order import in_budget_order, keeps, measured_first_within_turns
from metainfer_core.search.score import MIN_GAIN, gains
from metainfer_core.search.search_log import entry, first_line

NARROWED_AWAY = "narrowed away (no such choice: the same plan as a smaller one, or over the accuracy bound)"


class Expander:
    """Also the view an action's pruning hook reads (Action.pruned): base_score, max_loss,
    weights, resolution, zero_loss_score, fastest_bound."""

    resolution = MIN_GAIN

    def __init__(self, result, evaluator, space: dict, ctx: ActionContext, budget: Budget):
        self.result, self.evaluator, self.space, self.ctx, self.budget = result, evaluator, space, ctx, budget
        self.level = 0          # the level being expanded (the search log says where each plan was made)
        self.seen = {result.default.key}
        self.made: dict[tuple, Candidate | None] = {}        # (state key, step) -> its child
        self.made_at: dict[int, int] = {}        # candidate -> the order it was scored in
        self.best_of_kind: dict[tuple, Candidate] = {}
        self.ahead_of: dict[int, float | None] = {}  # graph -> its best bound plan's score; bound plan -> None
        self._fastest_bound: dict[int, float] = {}  # lossy graph -> its best bound plan's score at zero loss
        self.at_zero: dict[tuple, float] = {}       # expansion -> its child's score at zero loss, bound broken or not
        self.scored: dict[tuple, Candidate] = {}    # expansion -> its child as scored, bound broken or not
        self.lookahead = {k: v for k, v in space.items() if ACTIONS[k].binds_path}
        self.timings = {"expand_s": 0.0, "apply_s": 0.0, "hash_s": 0.0}
        self.per_action: dict[str, float] = {}
        self.skipped: set[tuple] = set()     # expansions left out: they would have ended past the budget

    # --- the pruning view ------------------------------------------------------------------
    @property
    def base_score(self):
        return self.evaluator.base_score

    @property
    def max_loss(self) -> float:
        return self.evaluator.max_loss

    @property
    def weights(self):
        return self.evaluator.weights

    def zero_loss_score(self, c: Candidate) -> float:
        """A plan's score without its accuracy term: the best any partial-lowering variant could do."""
        return c.score - self.evaluator.weights.accuracy * c.accuracy_loss

    def fastest_bound(self, c: Candidate, default: float) -> float:
        """The best zero-loss score of `c`'s graph bound to another path, over the bound too."""
        return self._fastest_bound.get(id(c), default)

    # --- the budget's questions ------------------------------------------------------------
    def reuses(self, state: Candidate, action, params: dict) -> bool:
        """Whether the expansion measures nothing new: no new precision or path, no quantizer calibrating."""
        return not (self.evaluator.measures_anew(state, action, params) or action.calibrates(params))

    def warm(self, state: Candidate, action, params: dict) -> bool:
        """Whether the expansion re-uses every measurement: nothing new, and no narrowing by runs."""
        return self.reuses(state, action, params) and not action.fits_by_runs(params)

    def fits(self, state: Candidate, action, params: dict, until: float) -> bool:
        return self.budget.fits(self.evaluator.measures_anew(state, action, params), calibration(action, params), until)

    # --- expanding --------------------------------------------------------------------------
    def expansions(self, state: Candidate, space: dict):
        return expand(state.model, space, self.ctx.target, state.steps[-1] if state.steps else None,
                      self.result.illegal, narrow=False)

    def expand(self, states: list[Candidate], level: int, until: float, defer_directives: bool = False,
               warm_only: bool = False, first_only: bool = False):
        """Score the states' children cheapest-first (in_budget_order) while they fit by `until`
        (the level's first while it fits the budget); warm_only: only warm ones; first_only: up
        to the first child within the bounds (a coasting dive needs one to go deeper). Returns
        (children within the bounds, children over the memory limit: expanded, never returned)."""
        frontier: list[Candidate] = []
        stepping: list[Candidate] = []
        self.level = level
        ev = self.evaluator
        for state in states:
            t_exp = self.budget.now()
            todo = in_budget_order(self.expansions(state, self.space))
            if warm_only:
                todo = [t for t in todo if self.warm(state, *t[:2])]
            if defer_directives:
                # the dive: what re-uses every measurement first (it fits a level's slice), a
                # directive last (it ends the dive's growth), else cheapest-first as ever
                todo = sorted(todo, key=lambda t: (keeps(t), bool(ev.measures_anew(state, t[0], t[1]))))
            self.timings["expand_s"] += self.budget.now() - t_exp
            fresh_tried = False
            for action, params, site in measured_first_within_turns(todo, lambda t, s=state: self.reuses(s, t[0], t[1])):
                measured_before = ev.measuring_s()
                # a level's first may run past its slice (within the budget), and so may the dive's
                # first child that measures something new: what it measures the widening re-uses
                first = not frontier and not stepping
                fresh_first = (defer_directives and not fresh_tried and not keeps((action, params, site))
                               and bool(ev.measures_anew(state, action, params)))
                cand = self.consider(state, action, params, site, frontier, stepping,
                                     self.budget.deadline if first or fresh_first else until)
                if cand is not None and self.lookahead and action.lossy:
                    self._bind_at_once(cand, frontier, stepping)
                # the privilege is spent only on a child that measured
                fresh_tried |= fresh_first and ev.measuring_s() > measured_before
                if first_only and cand is not None and not cand.violation:
                    break
        if frontier or stepping:
            self.result.levels = max(self.result.levels, level)
        return frontier, stepping

    def _bind_at_once(self, cand: Candidate, frontier: list, stepping: list) -> None:
        """A precision whose form pays on another path only is scored there too at once: ranked
        on the default path alone it would leave the beam. The bound plans join the pool; the
        graph stays in the beam at their rank. (Lossless rewrites keep the plain order.)"""
        for a2, p2, s2 in self.expansions(cand, self.lookahead):
            child = self.consider(cand, a2, p2, s2, frontier, stepping, self.budget.deadline)
            if child is not None:
                self.ahead_of[id(child)] = None
                self.ahead_of[id(cand)] = min(self.ahead_of.get(id(cand), child.score), child.score)
            at_zero = self.at_zero.get(_memo(cand, a2.name, s2, p2))    # over the bound too
            if at_zero is not None:
                self._fastest_bound[id(cand)] = min(self._fastest_bound.get(id(cand), at_zero), at_zero)
        deferred = cand.accuracy_deferred
        self.evaluator.reanchor(cand)       # binding it may have timed its graph
        if deferred and not cand.accuracy_deferred:
            self.note(cand, "estimated once its bound plans ranked it ahead")
        if cand.violation:      # its loss, deferred, estimated now that it ranks ahead
            frontier.remove(cand)
            self.prune(cand.violation.split(":")[0])

    def unchanged_on_paths(self) -> list[Candidate]:
        """The unchanged graph bound to each execution path the target offers, scored first: what
        a user would try instead is the floor a plan must beat, and a budget spent on a large
        graph's rewrites must not leave it unscored. Its path ratio is re-used by every float
        graph bound there later; the dive and the widening find these children made."""
        frontier: list[Candidate] = []
        self.level = 1
        for action, params, site in self.expansions(self.result.default, self.lookahead):
            self.consider(self.result.default, action, params, site, frontier, [], self.budget.deadline)
        if frontier:
            self.result.levels = 1
        return frontier

    def ranked(self, cands: list[Candidate]) -> list[Candidate]:
        """The states worth growing, best first (bound plans are leaves)."""
        growing = {id(c): c for c in cands if id(c) not in self.ahead_of or self.ahead_of[id(c)] is not None}
        return sorted(growing.values(), key=self.rank)

    def growable(self, cands: list[Candidate], last: bool) -> list[Candidate]:
        """The dive's next states, best first: a plan ending in a directive grows no further
        (after a directive only directives follow) but on the last level."""
        return self.ranked([c for c in cands if last or not (c.steps and keeps(_item(c.steps[-1])))])

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
        expanded further) or would not fit by `until`. Made once."""
        step = Step(action.name, site, tuple(sorted(params.items())))
        memo = _memo(state, action.name, site, params)
        if memo in self.made:
            cand = self.made[memo]
        else:
            cand = self._first_time(state, action, params, site, step, memo, until)
        if cand is None:
            return None
        if cand.violation:      # over the memory limit: later steps (tiling, reuse, int8) may fit it
            if cand.violation.split(":")[0] == "memory":
                stepping.append(cand)
            return None     # (over the accuracy bound: made again, once reanchor estimated it)
        frontier.append(cand)
        return cand

    def _first_time(self, state, action, params, site, step: Step, memo: tuple, until: float) -> Candidate | None:
        if not self.fits(state, action, params, until):
            if until >= self.budget.deadline or not self.fits(state, action, params, self.budget.deadline):
                self.budget.stopped = True
                self.skipped.add(memo)
            return None
        whole_params = action.whole(params)
        whole = self.scored.get(_memo(state, action.name, site, whole_params)) if whole_params is not None else None
        why = action.pruned(params, whole, self) if whole_params is not None else None
        if why:
            self.made[memo] = None
            self.prune(why)
            self.result.log.append(entry(self.level, state.steps + (step,), pruned=why))
            return None
        ev = self.evaluator
        t_start = self.budget.now()
        measured_before, precision_before = ev.measuring_s(), ev.precision_s()
        # what is measured without being foreseen (narrowing by runs) is priced as a precision
        fresh = ev.measures_anew(state, action, params) or "precision"
        try:
            narrowed = action.narrow(site, params, self.ctx.cache)     # may measure
        except Exception as exc:  # noqa: BLE001 - a choice that cannot be narrowed prunes itself only
            self.made[memo] = None
            self.result.failed[action.name] = f"narrowing: {type(exc).__name__}: {first_line(exc)}"
            self.result.log.append(entry(self.level, state.steps + (step,), failed=self.result.failed[action.name]))
            return None
        if narrowed is None:
            self.prune(NARROWED_AWAY)
            self.result.log.append(entry(self.level, state.steps + (step,), pruned=NARROWED_AWAY))
        elif narrowed != site:
            site, step = narrowed, Step(action.name, narrowed, step.params)
        cand = self._make(state, action, params, site, step, whole) if narrowed is not None else None
        if cand is not None:
            self.at_zero[memo] = self.zero_loss_score(cand)
            self.scored[memo] = cand
        # over the accuracy bound it is not made again (once reanchor estimated it, it is)
        over_bound = cand is not None and cand.violation and cand.violation.split(":")[0] != "memory"
        cand = self.made[memo] = None if over_bound else cand
        spent = self.budget.now() - t_start
        calibrated = bool(action.calibrates(params)) and ev.measuring_s() == measured_before
        self.budget.account(calibration(action, params) if calibrated else fresh, spent,
                            measured=calibrated or ev.measuring_s() > measured_before,
                            precision_s=ev.precision_s() - precision_before)
        return cand

    def note(self, cand: Candidate, event: str | None = None) -> None:
        """The search log's entry for a scored candidate (`event`: what changed it later)."""
        self.result.log.append(entry(self.level, cand.steps, event=event, n=self.made_at.get(id(cand)),
                                     predicted_ms=cand.latency_ms, loss=cand.accuracy_loss,
                                     loss_exact=cand.accuracy_exact, loss_deferred=cand.accuracy_deferred,
                                     score=cand.score, violation=cand.violation,
                                     path=ExecutionPath.of(cand.model).label))

    def prune(self, reason: str) -> None:
        self.result.pruned[reason] = self.result.pruned.get(reason, 0) + 1

    def _make(self, state: Candidate, action, params, site, step: Step, whole: Candidate | None = None
              ) -> Candidate | None:
        """`state`'s child by `step`, applied and scored, over a bound too (the caller files it);
        None when the rewrite or its scoring fails or it repeats a plan seen. whole: the scored
        plan of the same choice doing all of it (its anchor carries over)."""
        result = self.result
        t_apply = self.budget.now()
        try:
            model = carry_tuned_shapes(state.model, action.apply(state.model, site, params, self.ctx))
        except Exception as exc:  # noqa: BLE001 - a rewrite refusing a graph prunes that branch only
            result.failed[action.name] = f"{type(exc).__name__}: {first_line(exc)}"
            result.log.append(entry(self.level, state.steps + (step,), failed=result.failed[action.name]))
            return None
        finally:
            spent = self.budget.now() - t_apply
            self.timings["apply_s"] += spent
            self.per_action[action.name] = self.per_action.get(action.name, 0.0) + spent
        same_graph = action.keeps_graph(action.with_defaults(params))
        if same_graph:
            share_analysis(model, state.model)
        t_hash = self.budget.now()
        cand = Candidate(model, state.steps + (step,))
        self.timings["hash_s"] += self.budget.now() - t_hash
        if cand.key in self.seen:
            result.duplicates += 1
            result.log.append(entry(self.level, cand.steps, pruned="duplicate"))
            return None
        self.seen.add(cand.key)
        try:
            self.evaluator.evaluate(cand, parent=state if same_graph else None, origin=state, whole=whole)
        except Exception as exc:  # noqa: BLE001 - a candidate that cannot be scored is dropped, not fatal
            result.failed[action.name] = f"scoring: {type(exc).__name__}: {first_line(exc)}"
            return None
        result.evaluated += 1
        self.made_at[id(cand)] = result.evaluated
        self.note(cand)
        if cand.violation:
            reason = cand.violation.split(":")[0]
            self.prune(reason)
            if reason == "memory" and (result.leanest is None or cand.peak_mem_bytes < result.leanest.peak_mem_bytes):
                result.leanest = cand
            return cand
        sig = kind_of(cand)
        # a kind's representative: its simplest plan (fewest steps), then the best scored; a score
        # within the predictor's resolution keeps the first made (its domain's first choice)
        held = self.best_of_kind.get(sig)
        if sig and (held is None or cand.changes < held.changes
                    or (cand.changes == held.changes and gains(cand.score, held.score))):
            self.best_of_kind[sig] = cand
        return cand


def _memo(state: Candidate, kind: str, site, params: dict) -> tuple:
    """What identifies an expansion (a child is made once per state, step and parameters)."""
    return state.key, kind, site, repr(tuple(sorted(params.items())))


def _item(step: Step) -> tuple:
    return ACTIONS[step.kind], dict(step.params), step.site
