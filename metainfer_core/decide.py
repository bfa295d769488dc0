"""Rollback: the default path always exists. The chosen plan is the fastest verified candidate
that ran, respects every hard bound, and beats the default by more than the measured noise;
otherwise the default stays (rolled_back).

"Beyond noise" uses the interleaved rounds of verify: each round timed the default and the
candidate back to back, so the per-round ratio candidate/default cancels slow drift of a shared
machine. The candidate wins when a bootstrap upper bound (95th percentile) of the median ratio
is below 1 - MIN_GAIN."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metainfer_core.verify import Verified

MIN_GAIN = 0.01      # never trust a gain below 1 %, whatever the statistics say
BOOTSTRAP = 400


def ratio_bound(base: list[float], cand: list[float], seed: int = 0) -> tuple[float, float]:
    """(median, 95th-percentile bootstrap bound) of the paired ratios cand/base."""
    n = min(len(base), len(cand))
    ratios = np.asarray(cand[:n]) / np.maximum(np.asarray(base[:n]), 1e-12)
    rng = np.random.default_rng(seed)
    medians = np.median(ratios[rng.integers(0, n, size=(BOOTSTRAP, n))], axis=1)
    return float(np.median(ratios)), float(np.percentile(medians, 95))


@dataclass
class Decision:
    decision: str            # adapted | rolled_back
    reason: str
    chosen: int | None       # index into the candidates, None for the default


def decide(baseline: Verified, candidates: list[Verified], max_loss: float, memory_limit: int) -> Decision:
    if not baseline.ok:
        raise RuntimeError(f"the default plan failed on the target: {baseline.error}")
    rejected = []
    eligible = []
    for i, c in enumerate(candidates):
        if not c.ok:
            rejected.append(f"{c.label} failed to run ({c.error})")
        elif c.accuracy_loss > max_loss:
            rejected.append(f"{c.label} loses {c.accuracy_loss:.4g} accuracy (bound {max_loss})")
        elif c.peak_mem_bytes > memory_limit:
            rejected.append(f"{c.label} needs {c.peak_mem_bytes} B (limit {memory_limit} B)")
        else:
            median, bound = ratio_bound(baseline.samples_ms, c.samples_ms)
            if bound >= 1 - MIN_GAIN:
                rejected.append(f"{c.label} {c.latency_ms:.4g} ms is not faster than the default "
                                f"{baseline.latency_ms:.4g} ms beyond noise (paired ratio {median:.3f}, "
                                f"95% bound {bound:.3f})")
            else:
                eligible.append(i)
    if not eligible:
        return Decision("rolled_back", "; ".join(rejected) or "no candidate to verify", None)
    best = min(eligible, key=lambda i: candidates[i].latency_ms)
    c = candidates[best]
    return Decision("adapted", f"{c.label} verified at {c.latency_ms:.4g} ms vs default {baseline.latency_ms:.4g} ms "
                               f"({baseline.latency_ms / c.latency_ms:.2f}x), accuracy loss {c.accuracy_loss:.3g}", best)
