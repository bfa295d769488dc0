"""Rollback: the default path always exists. The chosen plan is the fastest verified candidate
that ran, respects every hard bound, and beats the default by more than the measured noise;
otherwise the default stays (rolled_back)."""
from __future__ import annotations

from dataclasses import dataclass

from metainfer_core.verify import Verified

MIN_NOISE = 0.01     # never trust a gain below 1 %, whatever the spread says


@dataclass
class Decision:
    decision: str            # adapted | rolled_back
    reason: str
    chosen: int | None       # index into the candidates, None for the default


def decide(baseline: Verified, candidates: list[Verified], max_loss: float, memory_limit: int) -> Decision:
    if not baseline.ok:
        raise RuntimeError(f"the default plan failed on the target: {baseline.error}")
    noise = max(MIN_NOISE, baseline.spread)
    threshold = baseline.latency_ms * (1 - noise)
    rejected = []
    eligible = []
    for i, c in enumerate(candidates):
        if not c.ok:
            rejected.append(f"{c.label} failed to run ({c.error})")
        elif c.accuracy_loss > max_loss:
            rejected.append(f"{c.label} loses {c.accuracy_loss:.4g} accuracy (bound {max_loss})")
        elif c.peak_mem_bytes > memory_limit:
            rejected.append(f"{c.label} needs {c.peak_mem_bytes} B (limit {memory_limit} B)")
        elif c.latency_ms >= threshold:
            rejected.append(f"{c.label} {c.latency_ms:.4g} ms is not faster than the default "
                            f"{baseline.latency_ms:.4g} ms beyond noise ({noise:.1%})")
        else:
            eligible.append(i)
    if not eligible:
        return Decision("rolled_back", "; ".join(rejected) or "no candidate to verify", None)
    best = min(eligible, key=lambda i: candidates[i].latency_ms)
    c = candidates[best]
    return Decision("adapted", f"{c.label} verified at {c.latency_ms:.4g} ms vs default {baseline.latency_ms:.4g} ms "
                               f"({baseline.latency_ms / c.latency_ms:.2f}x), accuracy loss {c.accuracy_loss:.3g}", best)
