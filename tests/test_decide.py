"""Rollback decisions from verified (interleaved) measurements."""
from __future__ import annotations

import numpy as np

from metainfer_core.decide import decide
from metainfer_core.verify import Verified


def v(label, ms, loss=0.0, mem=100, error=None, jitter=0.02, seed=0, n=20):
    samples = list(ms * np.random.default_rng(seed).lognormal(0, jitter, n)) if error is None else []
    return Verified(label, latency_ms=float(np.median(samples)) if samples else float("nan"),
                    p90_ms=float(np.percentile(samples, 90)) if samples else float("nan"),
                    peak_mem_bytes=mem, accuracy_loss=loss, error=error, samples_ms=samples)


def test_faster_candidate_is_adapted():
    d = decide(v("default", 10.0), [v("a", 9.0, seed=1), v("b", 7.0, seed=2)], max_loss=0.01, memory_limit=1000)
    assert d.decision == "adapted" and d.chosen == 1


def test_slower_candidate_rolls_back():
    d = decide(v("default", 10.0), [v("a", 10.5, seed=1)], max_loss=0.01, memory_limit=1000)
    assert d.decision == "rolled_back" and d.chosen is None and "not faster" in d.reason


def test_gain_within_noise_rolls_back():
    d = decide(v("default", 10.0, jitter=0.3), [v("a", 9.7, jitter=0.3, seed=1)], max_loss=0.01, memory_limit=1000)
    assert d.decision == "rolled_back" and "beyond noise" in d.reason


def test_small_gain_with_low_noise_is_kept():
    d = decide(v("default", 10.0, jitter=0.005), [v("a", 9.5, jitter=0.005, seed=1)], max_loss=0.01, memory_limit=1000)
    assert d.decision == "adapted"


def test_accuracy_memory_and_failures_reject():
    cands = [v("lossy", 5.0, loss=0.2), v("big", 5.0, mem=5000), v("broken", 5.0, error="boom")]
    d = decide(v("default", 10.0), cands, max_loss=0.01, memory_limit=1000)
    assert d.decision == "rolled_back"
    assert "accuracy" in d.reason and "limit" in d.reason and "failed to run" in d.reason
