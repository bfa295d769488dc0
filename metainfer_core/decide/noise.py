"""What counts as beyond noise when two plans were timed in paired rounds (each round timed both,
back to back): the bootstrap bounds of the median of the per-round ratios, and the smallest gain
trusted whatever those say."""
from __future__ import annotations

import numpy as np

# never trust a latency gain below 3 %, whatever one verify's statistics say: two sessions of the same
# graph created at different times run a few % apart, so a smaller gain does not carry to a deployment
# (docs/decisions/2026-12-05-measured-reasons-from-docstrings.md)
MIN_GAIN = 0.03
BOOTSTRAP = 400


def ratio_bounds(base: list[float], cand: list[float], seed: int = 0) -> tuple[float, float, float]:
    """(median, 5th, 95th percentile bootstrap bounds) of the median of the paired ratios cand/base."""
    n = min(len(base), len(cand))
    ratios = np.asarray(cand[:n]) / np.maximum(np.asarray(base[:n]), 1e-12)
    rng = np.random.default_rng(seed)
    medians = np.median(ratios[rng.integers(0, n, size=(BOOTSTRAP, n))], axis=1)
    return float(np.median(ratios)), float(np.percentile(medians, 5)), float(np.percentile(medians, 95))
