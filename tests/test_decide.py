"""Rollback decisions from verified measurements."""
from __future__ import annotations

from metainfer_core.decide import decide
from metainfer_core.verify import Verified


def v(label, ms, p90=None, loss=0.0, mem=100, error=None):
    return Verified(label, latency_ms=ms, p90_ms=p90 if p90 is not None else ms * 1.02, peak_mem_bytes=mem,
                    accuracy_loss=loss, error=error)


def test_faster_candidate_is_adapted():
    d = decide(v("default", 10.0), [v("a", 9.0), v("b", 7.0)], max_loss=0.01, memory_limit=1000)
    assert d.decision == "adapted" and d.chosen == 1


def test_slower_candidate_rolls_back():
    d = decide(v("default", 10.0), [v("a", 10.5)], max_loss=0.01, memory_limit=1000)
    assert d.decision == "rolled_back" and d.chosen is None and "not faster" in d.reason


def test_gain_within_noise_rolls_back():
    d = decide(v("default", 10.0, p90=12.0), [v("a", 9.0)], max_loss=0.01, memory_limit=1000)
    assert d.decision == "rolled_back" and "noise (20.0%)" in d.reason


def test_accuracy_memory_and_failures_reject():
    cands = [v("lossy", 5.0, loss=0.2), v("big", 5.0, mem=5000), v("broken", 5.0, error="boom")]
    d = decide(v("default", 10.0), cands, max_loss=0.01, memory_limit=1000)
    assert d.decision == "rolled_back"
    assert "accuracy" in d.reason and "limit" in d.reason and "failed to run" in d.reason
