"""Onboarding's concurrency item: 1..N instances of a representative model served at once, up
to the usable cores (a modeled device's instances share it), with throughput, latency
percentiles, scaling efficiency and power; it fails where adding instances loses throughput."""
from __future__ import annotations

import pytest

from metainfer_core.fingerprint import concurrency, onboard
from metainfer_core.serving.options import usable_cores

from twins import backend


def _row(n: int, per_s: float) -> dict:
    return {"instances": n, "throughput_per_s": per_s, "median_latency_ms": 1.0, "p90_latency_ms": 1.2, "watts": None}


def test_instances_that_lose_throughput_fail_the_item():
    passed, detail = concurrency.verdict([_row(1, 1000), _row(2, 1900), _row(4, 1200)])
    assert not passed and "4 instances serve 1200/s, below 80% of the 1900/s" in detail
    assert "not measurable here" in detail
    passed, detail = concurrency.verdict([_row(1, 1000), _row(2, 1900), _row(4, 1850)])
    assert passed and "efficiency 0.95" in detail and "FAILED" not in detail


def test_a_measured_cpu_serves_one_instance_per_core_and_reports_each_count():
    item = onboard.check_concurrency(backend("cpu"), onboard.representative_model(), duration_s=0.2)
    counts = concurrency.instance_counts(backend("cpu"))
    assert counts[0] == 1 and counts[-1] == usable_cores()
    assert set(item.data) == {str(n) for n in counts}
    for row in item.data.values():
        assert row["throughput_per_s"] > 0 and row["p90_latency_ms"] >= row["median_latency_ms"] > 0
        assert 0 < row["scaling_efficiency"] <= 1.5


def test_a_modeled_device_shares_one_device_among_its_instances():
    item = onboard.check_concurrency(backend("npu"), onboard.representative_model())
    assert item.passed and set(item.data) == {"1", "2", "4"}
    assert item.data["4"]["scaling_efficiency"] == pytest.approx(0.25, rel=0.15)
    assert item.data["4"]["median_latency_ms"] == pytest.approx(4 * item.data["1"]["median_latency_ms"], rel=0.15)
