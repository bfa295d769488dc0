"""A candidate plan: the graph after a sequence of action steps, with its predicted costs."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import onnx

from metainfer_core.actions.base import Step


def graph_hash(model: onnx.ModelProto) -> str:
    """Identity of the computation: the graph (nodes, weights, metadata), not the model header."""
    return hashlib.sha1(model.graph.SerializeToString(deterministic=True)).hexdigest()[:16]


@dataclass
class Candidate:
    model: onnx.ModelProto
    steps: tuple[Step, ...] = ()
    latency_ms: float = 0.0
    peak_mem_bytes: int = 0
    accuracy_loss: float = 0.0
    score: float = 0.0
    violation: str | None = None
    key: str = field(default="")

    def __post_init__(self):
        self.key = self.key or graph_hash(self.model)

    @property
    def changes(self) -> int:
        return len(self.steps)

    def summary(self) -> dict:
        return {"actions": [s.as_dict() for s in self.steps], "latency_ms": self.latency_ms,
                "peak_mem_bytes": self.peak_mem_bytes, "accuracy_loss": self.accuracy_loss, "score": self.score}
