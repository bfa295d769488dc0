"""Which latency statistic the predictor learns from and is judged on.

A measured target shares its machine: other processes only ever add time to a run, and how
much changes from minute to minute. On a loaded machine, the median of a plan's runs moves
far more between two timings a few minutes apart than its 10th percentile does; with warm
runs (timing.py) on an idle machine both are stable
(docs/decisions/2026-12-05-measured-reasons-from-docstrings.md); bench/predictor.py --retest
reports this on the spot. So on measured targets the predictor learns and is scored on the 10th
percentile (the machine's own cost, with fewer interruptions in it), of micro-benchmarks and
whole-model runs alike. A modeled target's noise is symmetric model noise:
the median. Calibration (drift of measured/predicted over verify runs) keeps comparing
medians with its own reference ratio, so the bias between the two statistics cancels there."""
from __future__ import annotations

from metainfer_core.predictor.features.target_join import TargetSpec


def robust(spec: TargetSpec | None) -> bool:
    """Learn the low percentile: a target without spec figures is measured on a real machine
    (None: no target named, the plain median)."""
    return spec is not None and not spec.modeled


def latency_ms(row: dict, spec: TargetSpec | None) -> float:
    """A library record's or whole-model run's latency as the predictor sees it."""
    if robust(spec) and row.get("p10_ms"):
        return float(row["p10_ms"])
    return float(row["median_ms"])
