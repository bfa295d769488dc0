"""The search's budget (search/budget.py), on a fake clock: its shares and slices, whether an
expansion fits, the prices an expansion's cost sets (a path's apart from a precision measured
inside it, each quantizer's calibration apart), when it is out of time and past its end; and,
in a search, a slow precision or a slow calibrating rewrite pricing nothing else out."""
from __future__ import annotations

import pytest

from metainfer_core.accuracy import sensitivity as sensitivity_module
from metainfer_core.accuracy.metric import plan_loss
from metainfer_core.accuracy.sensitivity import Sensitivity
from metainfer_core.actions import ACTIONS, ActionContext, nncf_engine
from metainfer_core.search import Evaluator, beam_search
from metainfer_core.search.budget import CALIBRATES, DIVE_SHARE, EXACT_SHARE, Budget, calibration
from metainfer_core.search.path_costs import PathCosts

from search.fakes import FakeClock
from search.helpers import INT8, INT8_FAST, LOSSY, Priced
from twins import BALANCED, FakeCostModel, backend

PRIOR = {"path": 1.0, "precision": 4.0, CALIBRATES: 2.0}


def test_the_budget_keeps_the_exact_checks_share_and_slices_what_is_left_by_level():
    clock = FakeClock(100.0)
    lossy = Budget(clock, 10.0, True, PRIOR)
    assert (lossy.end, lossy.deadline) == (110.0, pytest.approx(100.0 + 10.0 * (1 - EXACT_SHARE)))
    assert lossy.dive_end == pytest.approx(100.0 + DIVE_SHARE * 10.0 * (1 - EXACT_SHARE))
    lossless = Budget(clock, 10.0, False, PRIOR)
    assert lossless.deadline == lossless.end == 110.0           # nothing to check exactly: no share kept
    # a level's share of what is left until `end`; what a level leaves goes to the next
    assert lossy.slice_end(lossy.dive_end, 2) == pytest.approx(102.0)
    clock.advance(1.0)
    assert lossy.slice_end(lossy.dive_end, 2) == pytest.approx(101.0 + 1.5)
    assert lossy.slice_end(1e9, 1) == lossy.deadline             # never past the expansions' deadline
    clock.advance(5.0)                                          # past the dive's end: the slice is now
    assert lossy.slice_end(lossy.dive_end, 3) == pytest.approx(106.0)
    assert lossy.spent() == pytest.approx(6.0) and lossy.now() == 106.0


def test_an_expansion_fits_by_its_rewrite_and_what_it_measures_anew():
    clock = FakeClock()
    budget = Budget(clock, 10.0, True, PRIOR)
    assert budget.fits(None, None, 0.0)                         # warm: priced at the longest warm one (none yet)
    assert budget.fits("path", None, 1.0) and not budget.fits("path", None, 0.9)
    assert budget.fits("precision", None, 4.0) and not budget.fits("precision", None, 3.9)
    # a calibrating rewrite at its quantizer's price, the prior before its first
    assert budget.rewrite_s("calibration:nncf") == 2.0 and budget.fits(None, "calibration:nncf", 2.0)
    budget.account("calibration:nncf", 5.0, measured=True, precision_s=0.0)
    assert not budget.fits(None, "calibration:nncf", 4.9) and budget.fits(None, "calibration:onnxruntime", 2.0)
    assert budget.rewrite_s(None) == 0.0                        # a plain rewrite is not priced as a quantizer
    budget.account("precision", 0.5, measured=False, precision_s=0.0)
    assert budget.warm_s == 0.5 and not budget.fits(None, None, 0.4) and budget.fits("path", None, 1.5)
    clock.advance(1.0)
    assert not budget.fits("path", None, 2.4) and budget.fits("path", None, 2.5)
    # the calibration an expansion would measure: per quantizer, none for meta-infer's own rewrite
    int8 = ACTIONS["int8"]
    assert calibration(int8, {"engine": "nncf"}) == f"{CALIBRATES}:nncf"
    assert calibration(int8, {"engine": "onnxruntime"}) == f"{CALIBRATES}:onnxruntime"
    assert calibration(int8, {"engine": "metainfer"}) is None and calibration(ACTIONS["tiling"], {}) is None


def test_a_measurement_is_priced_at_its_first_cost_then_at_the_longest():
    budget = Budget(FakeClock(), 10.0, True, PRIOR)
    budget.account("precision", 1.0, measured=True, precision_s=1.0)     # the first replaces the prior (4 s)
    assert budget.fresh_s["precision"] == 1.0
    budget.account("precision", 3.0, measured=True, precision_s=3.0)
    budget.account("precision", 2.0, measured=True, precision_s=2.0)
    assert budget.fresh_s["precision"] == 3.0
    budget.account("path", 0.5, measured=True, precision_s=0.0)          # nothing of a precision in it: all the path's
    assert budget.fresh_s == {"path": 0.5, "precision": 3.0, CALIBRATES: 2.0} and budget.warm_s == 0.0
    budget.account("path", 0.2, measured=False, precision_s=0.0)         # measured nothing: prices the warm ones
    assert budget.warm_s == 0.2 and budget.fresh_s["path"] == 0.5


def test_a_precision_measured_inside_a_new_paths_plan_prices_the_precision_not_the_path():
    """A plan bound to a new path whose graph's loss estimate measured int8's sensitivity (26 s
    of 29 s on PP-OCR's detector): the path is priced at the rest, the precision at those
    seconds (priced at 29 s, every later binding was left out of the search's budget)."""
    budget = Budget(FakeClock(), 60, False, {"path": 1.0, "precision": 4.0})
    budget.account("path", 29.0, measured=True, precision_s=26.0)
    assert budget.fresh_s == {"path": pytest.approx(3.0), "precision": pytest.approx(26.0)}
    budget.account("path", 2.0, measured=True, precision_s=0.0)      # the longest so far stays
    budget.account(None, 0.5, measured=False, precision_s=0.0)
    assert budget.fresh_s["path"] == pytest.approx(3.0) and budget.warm_s == 0.5


def test_out_of_time_once_not_even_a_warm_expansion_fits_and_past_the_end_after_the_checks_share():
    clock = FakeClock()
    budget = Budget(clock, 10.0, True, PRIOR)                   # expansions until 8 s, exact checks until 10 s
    budget.account(None, 0.5, measured=False, precision_s=0.0)
    clock.advance(7.5)
    assert not budget.out_of_time() and not budget.stopped     # 7.5 + 0.5 is the deadline itself
    clock.advance(0.25)
    assert budget.out_of_time() and budget.stopped             # something was left out for want of time
    assert not budget.past_end()
    clock.advance(2.25)
    assert not budget.past_end()                               # at the end, not past it
    clock.advance(0.25)
    assert budget.past_end() and budget.spent() == 10.25


@pytest.mark.parametrize("cost_model", [FakeCostModel(), Priced(**INT8_FAST)], ids=["int8-deferred", "int8-pays"])
def test_a_slow_precision_does_not_price_an_execution_path_out_of_the_budget(models, monkeypatch, cost_model):
    """A precision's sensitivity made slow as on a large model (3 s on the fake clock, which
    Sensitivity's own seconds read too): measuring an execution path is a few runs, not that, so
    the search still binds the int8 plan to OpenVINO inside a budget the precision has mostly
    used up (priced alike, the path was left out as too long). Where int8 cannot beat the default
    on its own (int8-deferred) its estimate waits for its bound plan, whose path's expansion then
    measures the precision; where it pays (int8-pays) the precision is measured first and the
    binding must fit what the 3 s left."""
    m, feeds, reference = models["resnet_tiny"]
    be = backend("cpu")
    if "openvino:f32" not in be.info.extra.get("execution_paths", []):
        pytest.fail("the host offers no OpenVINO path (openvino is pinned in requirements.lock)")
    clock = FakeClock()
    clock.drive(monkeypatch, sensitivity_module)
    ev = Evaluator(cost_model, be.info, BALANCED, 0.01, feeds, reference, LOSSY,
                   paths=PathCosts(be, feeds, reference, plan_loss), clock=clock)
    monkeypatch.setattr(Sensitivity, "_measure", clock.slowed(Sensitivity._measure, 3.0))
    space = {"int8": {**INT8, "scope": ["compute"]}, "binding": {"runtime": ["openvino"], "precision": ["f32"]}}
    res = beam_search(m, space, ev, ActionContext(target=be.info, calibration_feeds=feeds), beam_width=2, depth=1,
                      top_k=3, time_budget_s=6.0, clock=clock)
    assert any(k.startswith("openvino:f32|int8") for k in ev.paths.measured), (ev.paths.measured, res.skipped, res.evaluated, res.failed, res.pruned, res.search_s)


def test_a_slow_calibrating_rewrite_does_not_price_plain_rewrites_out_of_the_budget(models, monkeypatch):
    """NNCF's int8 calibrates (it runs the graph: seconds on a large model, 5 s more here, on the
    fake clock). Once its sensitivity and path cost are known (a first search), it measures
    nothing new, yet the plain rewrites after it cost what they cost, and so does ONNX Runtime's
    quantizer (it calibrates too, in a fraction of NNCF's time): a budget NNCF has mostly used up
    still scores them (priced at the slowest expansion so far, or at NNCF's, they were left out
    as too long)."""
    m, feeds, reference = models["resnet_tiny"]
    be = backend("cpu")
    clock = FakeClock()
    monkeypatch.setattr(nncf_engine, "_quantize", clock.slowed(nncf_engine._quantize, 5.0))
    ev = Evaluator(FakeCostModel(), be.info, BALANCED, 0.01, feeds, reference, LOSSY,
                   paths=PathCosts(be, feeds, reference, plan_loss), clock=clock)
    plain = {"conv_merge": {}, "layout": {}, "fuse_chain": {"max_depth": [2, 4, 8], "span": ["epilogue"]}}
    space = {"int8": {**INT8, "scope": ["compute"], "placement": ["inputs", "inputs_outputs"], "float_layers": [0],
                      "engine": ["nncf", "onnxruntime"]}, **plain}

    def search(space, budget_s):        # a fresh context: NNCF's result is not cached from before
        return beam_search(m, space, ev, ActionContext(target=be.info, calibration_feeds=feeds), beam_width=2,
                           depth=1, top_k=3, time_budget_s=budget_s, clock=clock)

    search(space, 30.0)         # measures the sensitivity and the path cost of NNCF's graph
    alone = search(plain, 30.0)
    res = search(space, 12.0)      # after NNCF, less is left than NNCF took
    assert res.timings["apply_by_action_s"]["int8"] >= 5.0
    assert res.skipped == 0 and res.evaluated == alone.evaluated + 2, (res.failed, res.pruned, res.search_s)
