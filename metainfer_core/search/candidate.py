"""A candidate plan: the graph after a sequence of action steps, with its predicted costs, keyed
by the canonical graph hash (ir/graph_hash.py) that lets the search merge equivalent plans."""
from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from metainfer_core.actions.base import Step
from metainfer_core.ir.graph_hash import graph_hash


@dataclass
class Candidate:
    model: onnx.ModelProto
    steps: tuple[Step, ...] = ()
    latency_ms: float = 0.0
    peak_mem_bytes: int = 0             # on its execution path (the planner's peak through that path's MemoryFit)
    planned_peak_bytes: int = 0         # the liveness planner's peak for its graph
    accuracy_loss: float = 0.0
    accuracy_exact: bool = True         # False: estimated from per-node sensitivity
    accuracy_deferred: bool = False     # True: scored at zero loss, its estimate not made yet (Evaluator._worth_estimating)
    score: float = 0.0
    violation: str | None = None
    binding: dict = field(default_factory=dict)   # {"device": n, "host": [{"kernel", "nodes", "reason"}]}
    graph_latency_ms: float = 0.0       # the predictor's figure before plan-wide corrections (double buffering)
    graph_anchor: float = 1.0           # the factor its graph's measured anchor applied (Evaluator.graph_anchors)
    float_share: float = 0.0            # of its anchored latency, the layers a lowered precision kept float
    # of its default-path latency, the factor the lossless rewrites since its last lossy step made
    # (predicted); another execution path is taken to run it as it runs the graph before them
    rewrite_gain: float = 1.0
    key: str = field(default="")

    def __post_init__(self):
        self.key = self.key or graph_hash(self.model)

    @property
    def changes(self) -> int:
        return len(self.steps)

    def summary(self) -> dict:
        return {"actions": [s.as_dict() for s in self.steps], "latency_ms": self.latency_ms,
                "peak_mem_bytes": self.peak_mem_bytes, "accuracy_loss": self.accuracy_loss,
                "accuracy_exact": self.accuracy_exact, "score": self.score, "binding": self.binding}
