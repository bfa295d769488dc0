"""One time budget for a whole adapt, shared by its stages (budget.total_s).

Each stage has a share. A stage's allowance is the time still left times its share of the
shares not yet spent, so what an early stage leaves unused goes to the later ones and what it
overruns comes out of theirs. The stages that can bound themselves (profile, search, verify)
plan their work within their allowance; every stage's seconds are recorded, and a stage past
its allowance is reported as an overrun (log and plan.json)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

STAGES = ("normalize", "profile", "train", "search", "verify", "rollback")
MIN_ALLOWANCE_S = 1.0       # a stage always gets a little: its first step runs whatever is left


@dataclass
class Budget:
    total_s: float
    shares: dict[str, float]
    started: float = field(default_factory=time.monotonic)
    spent: dict[str, float] = field(default_factory=dict)
    allowed: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, total_s: float, shares: dict[str, float], started: float | None = None) -> "Budget":
        unknown = sorted(set(shares) - set(STAGES))
        if unknown:
            raise ValueError(f"budget.shares names unknown stage(s) {unknown}; the stages are {list(STAGES)}")
        out = cls(float(total_s), {k: float(shares.get(k, 0.0)) for k in STAGES})
        if started is not None:
            out.started = min(started, out.started)
        return out

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return self.total_s - self.elapsed()

    def allowance(self, stage: str) -> float:
        """Seconds `stage` may spend from now, fixed at its first call."""
        if stage not in self.allowed:
            later = STAGES[STAGES.index(stage):]
            weight = sum(self.shares[k] for k in later)
            share = self.shares[stage] / weight if weight > 0 else 0.0
            self.allowed[stage] = max(MIN_ALLOWANCE_S, self.left() * share)
        return self.allowed[stage]

    def record(self, stage: str, seconds: float) -> str | None:
        """Book the stage's seconds; the overrun's message, if it went past its allowance."""
        allowed = self.allowance(stage)
        self.spent[stage] = seconds
        if not self._over(stage):
            return None
        self.warnings.append(f"{stage} took {seconds:.0f} s, over its {allowed:.0f} s share of budget.total_s="
                             f"{self.total_s:g}")
        return self.warnings[-1]

    def _over(self, stage: str) -> bool:     # 10 % and a second of slack: a stage's last step is not cut
        return self.spent.get(stage, 0.0) > self.allowed.get(stage, float("inf")) * 1.1 + MIN_ALLOWANCE_S

    def as_dict(self) -> dict:
        overruns = [k for k in self.spent if self._over(k)]
        return {"total_s": self.total_s, "elapsed_s": self.elapsed(), "shares": self.shares,
                "allowed_s": dict(self.allowed), "spent_s": dict(self.spent), "overruns": overruns}


def eta(seconds: float) -> str:
    """A short human duration: 45s, 3m05s."""
    seconds = max(0, int(round(seconds)))
    return f"{seconds}s" if seconds < 60 else f"{seconds // 60}m{seconds % 60:02d}s"
