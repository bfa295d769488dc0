"""The objective: score = w1*latency_rel + w2*peak_mem_rel + w3*accuracy_loss + penalty*changes
(lower is better). Latency and memory are relative to the default plan, so weights are
unitless. Hard constraints are separate: they prune a candidate instead of penalising it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Weights:
    latency: float
    memory: float
    accuracy: float
    change_penalty: float


def score(w: Weights, latency_ms: float, peak_mem: int, accuracy_loss: float, changes: int,
          base_latency_ms: float, base_peak_mem: int) -> float:
    return (w.latency * latency_ms / max(base_latency_ms, 1e-9) + w.memory * peak_mem / max(base_peak_mem, 1)
            + w.accuracy * accuracy_loss + w.change_penalty * changes)


def violation(peak_mem: int, memory_limit: int, accuracy_loss: float, max_loss: float) -> str | None:
    if peak_mem > memory_limit:
        return f"memory: peak {peak_mem} B exceeds the device limit {memory_limit} B"
    if accuracy_loss > max_loss:
        return f"accuracy: loss {accuracy_loss:.4g} exceeds accuracy.max_loss {max_loss}"
    return None
