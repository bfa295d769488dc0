"""The evaluator (search/evaluate.py): a candidate's latency on a modeled device as the device
runs it (double-buffered weight streaming), and a plan scored at zero loss (its estimate
deferred as unable to beat the default) estimated once its re-anchored score ranks it ahead."""
from __future__ import annotations

import pytest

from metainfer_core.actions import ACTIONS, ActionContext, Step
from metainfer_core.search import Candidate, Evaluator

from search.fakes import FakeClock
from search.helpers import INT8_SLOW, LOSSY, ONE_INT8, Priced
from twins import BALANCED, backend


def test_double_buffered_weight_streaming_is_predicted_as_the_device_runs_it(models, predictors):
    """On the npu a kernel waits for its weights from flash; with double buffering the next
    kernel's weights stream while the current one computes, and only behind its compute: the
    load is not hidden behind the previous load."""
    m, feeds, reference = models["resnet_tiny"]
    npu = backend("npu")
    ctx = ActionContext(target=npu.info, calibration_feeds=feeds)
    plan = ACTIONS["int8"].apply(m, ACTIONS["int8"].sites(m, {"scope": "all"}, npu.info)[0],
                                 {"scope": "all", "per_channel": True}, ctx)
    params = {"tiles": 8, "axis": "channels"}
    plan = ACTIONS["tiling"].apply(plan, ACTIONS["tiling"].sites(plan, params, npu.info)[-1], params, ctx)
    db = {"order": "keep", "double_buffer": True}
    plan = ACTIONS["schedule"].apply(plan, ACTIONS["schedule"].sites(plan, db, npu.info)[0], db, ctx)
    ev = Evaluator(predictors("npu", "resnet_tiny"), npu.info, BALANCED, 0.01, feeds, reference, LOSSY, ctx=ctx,
                   clock=FakeClock())
    predicted = ev.measure(Candidate(plan)).latency_ms
    simulated = npu.compile(plan).base_us / 1e3
    assert predicted == pytest.approx(simulated, rel=0.1)


def test_a_plan_scored_without_its_estimate_is_estimated_once_its_anchor_ranks_it_ahead(models):
    """int8 kernels predicted 10x slow: the int8 graph cannot beat the default, so it is scored
    at zero loss without an estimate. Once its measured anchor (here 1/50 of the prediction)
    ranks it ahead of the default, it gets its estimate: ranked on a loss never estimated, the
    dive grew a graph over the bound (every child of it pruned, the dive ended at depth 2)."""
    m, feeds, reference = models["resnet_tiny"]
    be = backend("cpu")
    ev = Evaluator(Priced(**INT8_SLOW), be.info, BALANCED, 1e-9, feeds, reference, LOSSY, clock=FakeClock())
    ev.set_baseline(Candidate(m))
    params = {k: v[0] for k, v in {**ONE_INT8, "float_layers": [0]}.items()}
    step = Step("int8", ACTIONS["int8"].sites(m, params, be.info)[0], tuple(sorted(params.items())))
    lowered = ACTIONS["int8"].apply(m, step.site, params, ActionContext(target=be.info, calibration_feeds=feeds))
    c = ev.evaluate(Candidate(lowered, (step,)))
    assert c.accuracy_deferred and c.accuracy_loss == 0.0 and not c.violation and c.score > ev.base_score
    ev.graph_anchors[c.key] = 1 / 50
    ev.reanchor(c)
    assert not c.accuracy_deferred and c.accuracy_loss > 0 and c.violation and c.violation.startswith("accuracy")
    assert ev.sensitivity.knows("int8", dict(step.params))
