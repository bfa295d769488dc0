"""The estimate algebra of per-node sensitivities (Parts): a node's own part and the rounding
parts of the tensors it touches, added once per tensor."""
from __future__ import annotations


class Parts:
    """A variant's sensitivities split into what is a node's own (its arithmetic) and what is a
    tensor's rounding: a plan's estimate adds the own parts of the nodes it lowers and, once
    per tensor, the largest rounding part any of them has for it, so lowering more nodes never
    lowers the estimate."""

    def __init__(self) -> None:
        self.own: dict[str, float] = {}
        self.rounding: dict[str, dict[str, float]] = {}

    def alone(self, n: str) -> float:
        """The node's sensitivity lowered alone."""
        return self.own.get(n, 0.0) + sum(self.rounding.get(n, {}).values())

    def table(self) -> dict[str, float]:
        return {n: self.alone(n) for n in self.own}

    def estimate(self, covered) -> float:
        worst: dict[str, float] = {}
        total = 0.0
        for n in covered:
            total += self.own.get(n, 0.0)
            for t, v in self.rounding.get(n, {}).items():
                worst[t] = max(worst.get(t, 0.0), v)
        return total + sum(worst.values())

    def scaled(self, k: float) -> "Parts":
        out = Parts()
        out.own = {n: v * k for n, v in self.own.items()}
        out.rounding = {n: {t: v * k for t, v in r.items()} for n, r in self.rounding.items()}
        return out

    @classmethod
    def spread(cls, table: dict[str, float], touch: dict[str, set[str]]) -> "Parts":
        """Per-node losses (block probes) as parts: each node's spread evenly over its tensors."""
        parts = cls()
        for n, v in table.items():
            ts = touch.get(n)
            parts.own[n] = 0.0 if ts else v
            if ts:
                parts.rounding[n] = {t: v / len(ts) for t in ts}
        return parts
