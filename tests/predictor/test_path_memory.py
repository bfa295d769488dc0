"""Peak memory per execution path: the planner's peak through a fit on that path's measured runs
(runtime footprint and what the runtime holds beyond the planned tensors)."""
from __future__ import annotations

import pytest

from metainfer_core.predictor.model.path_memory import PLANNED_KEY, MemoryFit

MIB = 2 ** 20


def _runs(points, model="m"):
    return [{"model": model, "peak_mem_bytes": measured, "graph": {PLANNED_KEY: planned}} for planned, measured in points]


def test_the_fit_recovers_a_runtimes_footprint_and_scale_from_runs_of_several_sizes():
    """OpenVINO's plugin holds ~52 MiB of its own and ~1.1x the planned tensors (measured on the
    corpus): runs at that law give it back, and predict an unseen size by it."""
    law = lambda planned: 52 * MIB + 1.1 * planned      # noqa: E731
    runs = [r for m, sizes in (("a", (1, 5)), ("b", (20, 140)), ("c", (9,))) for r in _runs([(p * MIB, law(p * MIB)) for p in sizes], m)]
    fit = MemoryFit.fit(runs)
    assert fit.footprint_bytes == pytest.approx(52 * MIB, rel=1e-6) and fit.scale == pytest.approx(1.1, rel=1e-6)
    assert (fit.runs, fit.models) == (5, 3)
    assert MemoryFit.fit(runs[:4]).scale == 1.0         # two models: the footprint alone
    assert fit.predict(60 * MIB) == pytest.approx(law(60 * MIB), rel=1e-6)


def test_without_runs_a_plan_is_predicted_as_planned_and_one_size_gives_the_footprint_alone():
    assert MemoryFit.fit([]).predict(7 * MIB) == 7 * MIB
    # runs without the planner's figure (recorded before it was kept) teach nothing
    assert MemoryFit.fit([{"model": "m", "peak_mem_bytes": 30 * MIB, "graph": {}}]).runs == 0
    one = MemoryFit.fit(_runs([(4 * MIB, 20 * MIB), (4 * MIB, 22 * MIB)]))
    assert one.scale == 1.0 and one.footprint_bytes == pytest.approx(17 * MIB)


def test_the_scale_stays_within_its_range_and_the_footprint_non_negative():
    """Runs where the measured peak shrinks as the plan grows (noise, a runtime that shares
    weights): the fit does not predict less memory for a larger plan than for a smaller one."""
    fit = MemoryFit.fit([r for i, pt in enumerate([(1 * MIB, 40 * MIB), (10 * MIB, 30 * MIB), (30 * MIB, 20 * MIB)])
                         for r in _runs([pt], f"m{i}")])
    assert fit.scale == 0.5 and fit.footprint_bytes >= 0
    assert fit.predict(30 * MIB) > fit.predict(1 * MIB)
