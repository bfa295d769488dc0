"""The plan decide would adopt, confirmed across the shape range: timed alone with the default
(decide/confirm.py) at each of the range's other points, as at the tuned one. It is adopted only
if it is not slower than the default beyond noise at any point and, when it was chosen for speed,
pays on the points' weighted aggregate (the weighted geometric mean of the paired ratios)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx

from metainfer_core.backends.base import Backend
from metainfer_core.decide.confirm import Confirmation, PairTimer, confirm
from metainfer_core.decide.noise import MIN_GAIN
from metainfer_core.normalize.shape_range import Point


@dataclass
class AcrossRange:
    basis: str
    tuned: Confirmation                      # the confirmation at the tuned shape
    tuned_weight: float
    points: list[tuple[Point, Confirmation]] = field(default_factory=list)

    @property
    def slower_at(self) -> list[tuple[Point, Confirmation]]:
        return [(p, c) for p, c in self.points if not c.pays]

    @property
    def aggregate_ratio(self) -> float:
        """Weighted geometric mean of the paired ratios plan / default over every point."""
        pairs = [(self.tuned_weight, self.tuned.ratio)] + [(p.weight, c.ratio) for p, c in self.points]
        total = sum(w for w, r in pairs if r == r and r > 0)
        if total <= 0:
            return math.nan
        return float(np.exp(sum(w * math.log(r) for w, r in pairs if r == r and r > 0) / total))

    @property
    def pays(self) -> bool:
        if self.slower_at:
            return False
        return self.basis != "faster" or self.aggregate_ratio < 1 - MIN_GAIN

    def words(self) -> str:
        each = ", ".join(f"{p.name} {c.default_ms / c.plan_ms:.2f}x" if not c.error else f"{p.name} failed"
                         for p, c in self.points)
        return f"across the shape range: {each}; weighted {1 / self.aggregate_ratio:.2f}x"

    def failure(self, verify_ms: float, default_ms: float) -> str:
        """Why the plan is set aside, for its verdict."""
        if self.slower_at:
            lost = "; ".join(f"at {p.name} ({p.where()}) {c.words()}" for p, c in self.slower_at)
            return f"pays at the tuned shape but is slower than the default beyond noise elsewhere in the range: {lost}"
        return (f"pays at the tuned shape ({verify_ms:.4g} ms vs default {default_ms:.4g} ms in verify's rounds) but "
                f"not on the range's weighted aggregate ({self.words()})")

    def as_dict(self) -> list[dict]:
        rows = [{"point": "opt", "weight": self.tuned_weight, **_figures(self.tuned)}]
        return rows + [{"point": p.name, "shapes": p.shapes, "weight": p.weight, **_figures(c)} for p, c in self.points]


def _figures(c: Confirmation) -> dict:
    return {"default_ms": c.default_ms, "plan_ms": c.plan_ms, "ratio": c.ratio, "ratio_low": c.ratio_low,
            "ratio_high": c.ratio_high, "rounds": c.rounds, "pays": c.pays, "error": c.error}


def across_range(timer: PairTimer, backend: Backend, default: onnx.ModelProto, plan: onnx.ModelProto,
                 points: list[tuple[Point, dict]], label: str, tuned: Confirmation, basis: str = "faster"
                 ) -> AcrossRange:
    """`points`: the range's other points, each with one input feed at its shapes."""
    timed = [(p, confirm(timer, backend, default, plan, feed, f"{label} at {p.name}", "not_slower"))
             for p, feed in points]
    return AcrossRange(basis, tuned, max(0.0, 1.0 - sum(p.weight for p, _ in points)), timed)
