"""The objective, one for the search (predicted costs) and the decision (measured ones):
score = w1*latency_rel + w2*peak_mem_rel + w3*accuracy_loss + penalty*changes (lower is better).
Latency and memory are relative to the default plan, so weights are unitless. Hard constraints
are separate: they prune a candidate instead of penalising it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Weights:
    latency: float
    memory: float
    accuracy: float
    change_penalty: float = 0.0

    @classmethod
    def of(cls, w) -> "Weights":
        """From the configuration's weights (metainfer_core.settings.WeightSettings)."""
        return cls(w.latency, w.memory, w.accuracy, w.change_penalty)

    def score(self, latency_ratio: float, memory_ratio: float, accuracy_loss: float, changes: int) -> float:
        """Latency and peak memory as ratios to the default plan's."""
        return (self.latency * latency_ratio + self.memory * memory_ratio + self.accuracy * accuracy_loss
                + self.change_penalty * changes)


def violation(peak_mem: int, memory_limit: int, accuracy_loss: float, max_loss: float) -> str | None:
    if peak_mem > memory_limit:
        return f"memory: peak {peak_mem} B exceeds the device limit {memory_limit} B"
    if accuracy_loss > max_loss:
        return f"accuracy: loss {accuracy_loss:.4g} exceeds accuracy.max_loss {max_loss}"
    return None
