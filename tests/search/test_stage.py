"""The search stage (search/stage.py): the adaptive switch that skips a search that cannot pay
back, and on a measured target every prediction anchored on the default plan timed there.

The stage times itself and its search on the wall clock (it takes no clock). The anchored test
is marked `alone`: it compares the anchor with the default timed again on the host (real runs)."""
from __future__ import annotations

import pytest

from metainfer_core.actions.base import kernels_of
from metainfer_core.backends import backend_for
from metainfer_core.prepare.stage import prepare_stage
from metainfer_core.search.anchor import measured_default_ms
from metainfer_core.search.stage import search_stage

from twins import FakeCostModel, backend


def test_adaptive_switch_skips_when_the_search_cannot_pay_back(settings_for, monkeypatch):
    s = settings_for("target=gpu", "search=quick", "action_space=lossless", "search.expected_runs=1")
    prepared = prepare_stage(s, False, progress=lambda msg: None)
    be = backend_for(s)
    out = search_stage(s, prepared, be, FakeCostModel(), progress=lambda msg: None)
    assert out.result is None and "search.expected_runs=1" in out.skipped_reason
    assert out.extra["expected_search_s"] > out.extra["possible_saving_s"]
    many = settings_for("target=gpu", "search=quick", "action_space=lossless", "search.expected_runs=100000000")
    out = search_stage(many, prepared, be, FakeCostModel(), progress=lambda msg: None)
    assert out.result is not None and out.skipped_reason is None
    assert set(out.extra["search_timings"]) >= {"apply_s", "evaluate_s", "total_s"}
    low = settings_for("target=gpu", "search=quick", "action_space=lossless", "search.skip_below_ms=1e9")
    assert "skip_below_ms" in search_stage(low, prepared, be, FakeCostModel(), progress=lambda m: None).skipped_reason


@pytest.mark.alone
def test_on_a_measured_target_predictions_are_anchored_on_the_default_timed_there(settings_for):
    """The default plan is timed on the target before the search: it is predicted as measured
    (a predictor 10x off overall no longer misleads the budget or the report) and every plan
    keeps its predicted ratio to it; a modeled target is not timed."""
    class TenfoldCostModel(FakeCostModel):      # the same ranking, every number 10x high
        def predict_kernels_ms(self, kernels):
            return 10 * super().predict_kernels_ms(kernels)

    s = settings_for("target=cpu", "search=quick", "action_space=lossless", "search.expected_runs=100000000")
    prepared = prepare_stage(s, False, progress=lambda msg: None)
    be = backend_for(s)
    out = search_stage(s, prepared, be, TenfoldCostModel(), progress=lambda msg: None)
    anchor = out.extra["anchor"]
    fake_default = FakeCostModel().predict_ms(kernels_of(prepared.model))
    assert anchor["predicted_default_ms"] == pytest.approx(10 * fake_default)
    assert out.default.latency_ms == pytest.approx(anchor["measured_default_ms"])
    again = measured_default_ms(be, prepared.model, prepared.feeds[0])     # the same quantity, timed again
    assert 0.5 < anchor["measured_default_ms"] / again < 2.0
    assert out.result.top
    for c in out.result.top:        # (a plan bound to another path also keeps that path's measured ratio)
        raw = FakeCostModel().predict_ms(kernels_of(c.model)) * c.binding.get("path_ratio", 1.0)
        assert c.latency_ms / out.default.latency_ms == pytest.approx(raw / fake_default, rel=1e-6)
    modeled = search_stage(settings_for("target=gpu", "search=quick", "action_space=lossless",
                                        "search.expected_runs=100000000"), prepared, backend("gpu"), FakeCostModel(),
                           progress=lambda msg: None)
    assert modeled.extra["anchor"]["measured_default_ms"] is None
