"""The search's budget: its deadlines on a clock passed in, and the prices of expansions.
An expansion that measures nothing new (warm) is priced at the longest warm one so far; one
that measures something new at the longest of its measurement so far (a precision's
sensitivity, an execution path, a quantizer's calibration), a prior before the first. An
expansion that would end past its slice's end is left out; cheaper ones after it still run."""
from __future__ import annotations

from metainfer_core.search.clock import Clock

CALIBRATES = "calibration"  # the measurement of an expansion whose rewrite calibrates (Action.calibrates)
EXACT_SHARE = 0.2           # of the budget kept for the exact checks of the best lossy plans
DIVE_SHARE = 0.5            # of the expansions' time, at most, for the dive to full depth


def calibration(action, params: dict) -> str | None:
    """The measurement of an expansion whose rewrite calibrates: per quantizer (one must not
    price another: their applies differ several times on one graph)."""
    who = action.calibrates(params)
    return f"{CALIBRATES}:{who}" if who else None


class Budget:
    def __init__(self, clock: Clock, budget_s: float, lossy: bool, fresh_prior: dict[str, float] | None = None):
        """lossy: whether the space may lower precision (then EXACT_SHARE is kept for the exact
        checks); fresh_prior: per measurement, its price before the first was measured."""
        self.clock = clock
        self.start = clock.now()
        self.end = self.start + budget_s                        # no exact check starts after it
        self.deadline = self.start + budget_s * (1 - EXACT_SHARE * lossy)      # nor an expansion
        self.dive_end = self.start + DIVE_SHARE * (self.deadline - self.start)
        self.warm_s = 0.0
        self.fresh_s = dict(fresh_prior or {})
        self._seen: set[str] = set()
        self.stopped = False        # something was left out for want of time

    def now(self) -> float:
        return self.clock.now()

    def spent(self) -> float:
        return self.clock.now() - self.start

    def out_of_time(self) -> bool:
        """Whether not even an expansion that re-uses every measurement would fit any more."""
        over = self.clock.now() + self.warm_s > self.deadline
        self.stopped |= over
        return over

    def past_end(self) -> bool:
        return self.clock.now() > self.end

    def slice_end(self, end: float, levels_left: int) -> float:
        """A level's share of what is left until `end`: what a level leaves goes to the next."""
        now = self.clock.now()
        return min(self.deadline, now + max(0.0, end - now) / max(levels_left, 1))

    def fits(self, measurement: str | None, calibrates: str | None, until: float) -> bool:
        """Whether an expansion would likely end by `until`: its rewrite and scoring, plus what
        it measures anew (`measurement`) at the longest such so far."""
        return self.clock.now() + self.rewrite_s(calibrates) + (self.fresh_s[measurement] if measurement else 0.0) <= until

    def rewrite_s(self, calibrates: str | None) -> float:
        """What the rewrite and scoring alone likely cost: an outside quantizer calibrates (it
        runs the graph), a plain rewrite does not, and one must not price the other."""
        return self.fresh_s.get(calibrates, self.fresh_s[CALIBRATES]) if calibrates else self.warm_s

    def account(self, measurement: str, spent: float, measured: bool, precision_s: float) -> None:
        """Price expansions by what this one cost: `measurement` at the longest such so far (the
        first replaces the prior); one that measured nothing prices the warm ones. precision_s:
        the seconds of it spent measuring a precision: a plan bound to a new path whose loss
        estimate measured a precision prices the precision with those, not the path (priced at
        a precision's cost, every later binding would be left out of the budget)."""
        if not measured:
            self.warm_s = max(self.warm_s, spent)
            return
        if measurement == "path" and precision_s > 0:
            self.account("precision", precision_s, True, 0.0)
            spent -= precision_s
        self.fresh_s[measurement] = max(self.fresh_s[measurement], spent) if measurement in self._seen else spent
        self._seen.add(measurement)
