"""decide/range_check.py: a plan confirmed at the tuned shape is adopted over a shape range only
if no point shows it slower than the default beyond noise and, chosen for speed, the points'
weighted aggregate pays."""
from __future__ import annotations

import math

from metainfer_core.decide.confirm import Confirmation
from metainfer_core.decide.range_check import AcrossRange
from metainfer_core.normalize.shape_range import Point


def _c(label, ratio, low, high, pays=True):
    return Confirmation(label, pays, default_ms=1.0, plan_ms=ratio, ratio=ratio, ratio_low=low, ratio_high=high,
                        rounds=100)


def _points(*weights):
    return [Point(name, {"x": [1, size]}, w) for (name, size), w in zip((("min", 8), ("max", 128)), weights)]


def test_a_point_slower_beyond_noise_sets_the_plan_aside_and_names_it():
    lo, hi = _points(0.25, 0.25)
    across = AcrossRange("faster", _c("c1", 0.5, 0.48, 0.52), 0.5,
                         [(lo, _c("c1 at min", 0.6, 0.58, 0.62)), (hi, _c("c1 at max", 1.2, 1.15, 1.25, pays=False))])
    assert not across.pays and [p.name for p, _ in across.slower_at] == ["max"]
    why = across.failure(0.5, 1.0)
    assert "slower than the default beyond noise" in why and "at max (x [1, 128])" in why


def test_the_weighted_aggregate_must_pay_when_chosen_for_speed():
    lo, hi = _points(0.25, 0.25)
    # faster at the tuned shape, level elsewhere (within noise): weighted ratio 0.96^0.5 -> not past the 3 % rule
    across = AcrossRange("faster", _c("c1", 0.96, 0.95, 0.965), 0.5,
                         [(lo, _c("c1 at min", 1.02, 0.99, 1.04)), (hi, _c("c1 at max", 1.0, 0.98, 1.02))])
    assert math.isclose(across.aggregate_ratio, math.exp(0.5 * math.log(0.96) + 0.25 * math.log(1.02)), rel_tol=1e-9)
    assert not across.pays and "weighted aggregate" in across.failure(0.96, 1.0)
    # a memory-driven plan only must not be slower anywhere
    assert AcrossRange("memory", across.tuned, 0.5, across.points).pays
    # a clear gain everywhere pays
    fast = AcrossRange("faster", _c("c1", 0.5, 0.48, 0.52), 0.5,
                       [(lo, _c("c1 at min", 0.7, 0.68, 0.72)), (hi, _c("c1 at max", 0.4, 0.38, 0.42))])
    assert fast.pays and "weighted" in fast.words()
