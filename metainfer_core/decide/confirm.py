"""A clean confirmation before a plan is adopted: the plan verify would adopt is timed once more
against the default in fresh processes that hold only those two (verify/worker.py time_pair:
alternating, warm, in a few processes one after another, pooled, enough rounds for the bootstrap
bound), and is adopted only if that also pays
by the rule that made it eligible (faster: the 95 % bound of the median paired ratio below
1 - MIN_GAIN and its median below the default's; leaner: not slower beyond noise). A gain that
shows only in verify's rounds, beside other plans, is not one a deployment gets."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import onnx

from metainfer_core.backends.base import Backend
from metainfer_core.decide.noise import MIN_GAIN, ratio_bounds
from metainfer_core.verify.worker import PairTiming

PairTimer = Callable[[Backend, onnx.ModelProto, onnx.ModelProto, dict[str, np.ndarray]], PairTiming]


@dataclass
class Confirmation:
    label: str
    pays: bool
    default_ms: float = float("nan")     # medians of the confirmation's rounds
    plan_ms: float = float("nan")
    p90_default_ms: float = float("nan")
    p90_plan_ms: float = float("nan")
    ratio: float = float("nan")          # median paired ratio plan / default, with its bootstrap bounds
    ratio_low: float = float("nan")
    ratio_high: float = float("nan")
    rounds: int = 0
    process_speedups: list[float] = field(default_factory=list)   # each fresh process's own (1 / its median ratio)
    seconds: float = 0.0
    isolated: bool = True
    error: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    def words(self) -> str:
        if self.error:
            return f"the confirmation failed ({self.error})"
        return (f"{self.plan_ms:.4g} ms vs default {self.default_ms:.4g} ms alone "
                f"({self.default_ms / self.plan_ms:.2f}x, paired ratio {self.ratio:.3f}, 95% bounds "
                f"{self.ratio_low:.3f}-{self.ratio_high:.3f}, {self.rounds} rounds{self._spread()})")

    def _spread(self) -> str:
        if len(self.process_speedups) < 2:
            return ""
        return (f" in {len(self.process_speedups)} processes: "
                + "/".join(f"{x:.2f}x" for x in self.process_speedups))


def confirm(timer: PairTimer, backend: Backend, default: onnx.ModelProto, plan: onnx.ModelProto,
            feed: dict[str, np.ndarray], label: str, basis: str) -> Confirmation:
    """Time `plan` alone with the default; whether it still pays on `basis` (decide's: faster |
    memory | fit; not_slower: at another point of the shape range)."""
    t = timer(backend, default, plan, feed)
    if t.error or not t.default_ms:
        return Confirmation(label, False, seconds=t.seconds, isolated=t.isolated, error=t.error or "no rounds")
    ratio, low, high = ratio_bounds(t.default_ms, t.plan_ms)
    d, p = np.asarray(t.default_ms), np.asarray(t.plan_ms)
    default_ms, plan_ms = float(np.median(d)), float(np.median(p))
    pays = {"faster": high < 1 - MIN_GAIN and plan_ms < default_ms,
            "memory": low <= 1 + MIN_GAIN, "not_slower": low <= 1 + MIN_GAIN}.get(basis, True)
    return Confirmation(label, bool(pays), default_ms, plan_ms, float(np.percentile(d, 90)),
                        float(np.percentile(p, 90)), ratio, low, high, len(t.plan_ms),
                        [1 / r for r in t.process_ratios], t.seconds, t.isolated)
