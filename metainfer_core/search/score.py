"""The objective, one for the search (predicted costs) and the decision (measured ones):
score = w1*latency_rel + w2*peak_mem_rel + w3*accuracy_loss + penalty*changes (lower is better),
plus w_t*throughput_rel where several requests come at once (the default's requests per second /
the plan's). Latency is relative to the default plan; peak memory to what memory costs on the
target (`memory_base`), so weights are unitless. Hard constraints are separate: they prune a
candidate instead of penalising it."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Weights:
    latency: float
    memory: float
    accuracy: float
    change_penalty: float = 0.0
    memory_floor: float = 0.0     # share of the target's memory budget (see memory_base)
    throughput: float = 0.0       # counts only where several requests come at once

    @classmethod
    def of(cls, w, under_load: bool = False) -> "Weights":
        """From the configuration's weights (metainfer_core.settings.WeightSettings); the
        throughput weight only `under_load` (serving.concurrency > 1): one request at a time,
        requests per second are the inverse of the latency, already weighed."""
        return cls(w.latency, w.memory, w.accuracy, w.change_penalty, w.memory_floor,
                   w.throughput if under_load else 0.0)

    def terms(self, latency_ratio: float, memory_ratio: float, accuracy_loss: float, changes: int,
              throughput_ratio: float | None = None) -> dict[str, float]:
        """The score's terms, named (a decision says in which one a plan lost). Without a measured
        `throughput_ratio` (timed one request at a time, or predicted), a plan's requests per
        second are estimated from its latency: throughput_ratio = latency_ratio."""
        out = {"latency": self.latency * latency_ratio, "memory": self.memory * memory_ratio,
               "accuracy": self.accuracy * accuracy_loss, "actions": self.change_penalty * changes}
        if self.throughput:
            out["throughput"] = self.throughput * (latency_ratio if throughput_ratio is None else throughput_ratio)
        return out

    def score(self, latency_ratio: float, memory_ratio: float, accuracy_loss: float, changes: int,
              throughput_ratio: float | None = None) -> float:
        """Latency as a ratio to the default plan's, peak memory to `memory_base`."""
        return sum(self.terms(latency_ratio, memory_ratio, accuracy_loss, changes, throughput_ratio).values())


def memory_base(default_peak_mem: int, memory_limit: int, memory_budget: int = 0, floor: float = 0.0) -> int:
    """What peak memory is relative to: the default plan's peak, but never less than `floor` x the
    target's memory budget (what a model may hold there), and the device's limit when the default
    exceeds it. The floor prices memory by what it costs on the target: on a host with GiBs the
    tens of MiB a runtime holds are a sliver of the budget and must not outweigh a faster plan,
    while on a device the model fills (the default above the floor) every byte counts relative to
    the default. A default that cannot run is no yardstick: relative to its peak (on a device that
    streams weights, one unsplit layer's weights) every plan that fits would look alike, and a real
    saving among them would weigh less than one change."""
    if memory_limit > 0 and default_peak_mem > memory_limit:
        return memory_limit
    return max(1, default_peak_mem, int(floor * (memory_budget or memory_limit)))


def violation(peak_mem: int, memory_limit: int, accuracy_loss: float, max_loss: float) -> str | None:
    if peak_mem > memory_limit:
        return f"memory: peak {peak_mem} B exceeds the device limit {memory_limit} B"
    if accuracy_loss > max_loss:
        return f"accuracy: loss {accuracy_loss:.4g} exceeds accuracy.max_loss {max_loss}"
    return None


# a predicted score this much lower (share) is a gain; less is within the predictor's resolution
MIN_GAIN = 0.01


def gains(score: float, than: float) -> bool:
    """Whether `score` is lower than `than` by more than the predictor's resolution."""
    return score < than - MIN_GAIN * abs(than)
