"""The finalists handed to verify: the top (the best plans better than the default, lossy ones
exact-checked by a CPU run, twins after every distinct plan) and the explored (the best plan of
up to `explore` kinds the top lacks: a kind the predictor has barely seen is measured rather
than dismissed)."""
from __future__ import annotations

from metainfer_core.actions import ACTIONS
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.backends.timing import runs_per_sample
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.score import gains
from metainfer_core.search.search_log import first_line

EXACT_CHECKS_PER_SLOT = 3   # exact accuracy runs allowed per top-K slot before giving up
LATE_OUTSIDE_CHECKS = 1     # an outside tool's explored plan checked past the search's end, at most


def _lossy_steps(c: Candidate):
    return [(ACTIONS[st.kind], dict(st.params)) for st in c.steps if ACTIONS[st.kind].lossy]


def kind_of(c: Candidate) -> tuple:
    """What kind of plan a candidate is: its lossy steps' labels (Action.kind_label) and its
    execution path (empty for a lossless plan on the default path)."""
    lossy = tuple(sorted({a.kind_label(p) for a, p in _lossy_steps(c)}))
    path = ExecutionPath.of(c.model)
    return lossy + (() if path.is_default else (path.label,))


def breadth(c: Candidate) -> int:
    """How many choices a plan's kind combines; a form native to the runtime it is bound to is
    one with its binding."""
    path = ExecutionPath.of(c.model)
    native = not path.is_default and any(a.native_runtime(p) == path.runtime for a, p in _lossy_steps(c))
    return len(kind_of(c)) - int(native)


def outside(c: Candidate) -> bool:
    """Whether an outside tool wrote the plan's graph (Action.outside)."""
    return any(a.outside(p) for a, p in _lossy_steps(c))


def lossy(c: Candidate) -> bool:
    return bool(_lossy_steps(c))


def twins_last(pool: list[Candidate], made_at: dict[int, int]) -> list[Candidate]:
    """The pool best first, but a plan of the same kind as one made before it and scored within
    the predictor's resolution of it after every distinct plan: verifying both twins would spend
    a slot on one measurement's worth; the first made (the simpler plan) stands for both."""
    distinct: list[Candidate] = []
    twins: list[Candidate] = []
    for c in sorted(pool, key=lambda c: made_at.get(id(c), 0)):
        same = [d for d in distinct if kind_of(d) == kind_of(c)]
        (twins if any(not gains(c.score, d.score) and not gains(d.score, c.score) for d in same)
         else distinct).append(c)
    return sorted(distinct, key=lambda c: c.score) + sorted(twins, key=lambda c: c.score)


def exact_top(pool: list[Candidate], default: Candidate, evaluator, top_k: int, result, past_end) -> list[Candidate]:
    """The first `top_k` of `pool` (in the order to verify them) better than the default, with
    exact accuracy for the lossy ones. None is checked once `past_end()`, but until one lossy
    plan passed its check, a few are checked past it (the last expansions may overrun into the
    checks' share, and the best plans must not be dropped unchecked)."""
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
            if past_end():
                if late >= EXACT_CHECKS_PER_SLOT or any(map(lossy, top)):
                    continue
                late += 1
            checks += 1
            try:
                evaluator.exact(c)
            except Exception as exc:  # noqa: BLE001 - a candidate that fails to run is dropped with its reason
                kind = c.steps[-1].kind if c.steps else "default"
                result.failed[kind] = f"exact check: {type(exc).__name__}: {first_line(exc)}"
                continue
            if c.violation:
                result.pruned["accuracy (exact check)"] = result.pruned.get("accuracy (exact check)", 0) + 1
                continue
            if c.score >= default.score:
                continue
        top.append(c)
    return sorted(top, key=lambda c: c.score)


def explored(best_of_kind: dict[tuple, Candidate], top: list[Candidate], evaluator, explore: int,
             round_ms: float, result, past_end) -> list[Candidate]:
    """Up to `explore` plans of kinds the top lacks, single kinds first (one precision or one
    path alone says most about what the predictor missed), an outside tool's first among them,
    each within what is left of `round_ms` (what they may add to one verify round, at their
    predicted latencies). Once `past_end()` no exact check starts but one for an outside
    tool's plan (the graph a user of that tool gets must not be left unverified)."""
    have = {kind_of(c) for c in top}
    out: list[Candidate] = []
    late = 0
    for c in sorted(best_of_kind.values(), key=lambda c: (breadth(c) > 1, not outside(c), c.score)):
        if len(out) == explore:
            break
        if kind_of(c) in have or any(c is t for t in top):
            continue
        cost_ms = c.latency_ms * runs_per_sample(c.latency_ms) if c.latency_ms == c.latency_ms else 0.0
        if cost_ms > round_ms:
            continue
        if not c.accuracy_exact:
            if past_end():
                if late >= LATE_OUTSIDE_CHECKS or not outside(c):
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
