"""A candidate's estimated accuracy loss (search/accuracy_estimate.py): per-node sensitivity
measured once per precision tracks the exact loss a run measures, and a precision that cannot
beat the default even losing nothing is scored without measuring its sensitivity."""
from __future__ import annotations

from metainfer_core.actions import ACTIONS, ActionContext, Step
from metainfer_core.search import Candidate, Evaluator

from search.fakes import FakeClock
from search.helpers import INT8, INT8_FAST, LOSSY, ONE_INT8, Priced, searched
from twins import BALANCED, FakeCostModel, backend


def test_sensitivity_estimate_tracks_the_exact_loss(models):
    m, feeds, reference = models["resnet_tiny"]
    be = backend("npu")
    ctx = ActionContext(target=be.info, calibration_feeds=feeds)
    ev = Evaluator(FakeCostModel(), be.info, BALANCED, 0.01, feeds, reference, LOSSY, ctx=ctx, clock=FakeClock())
    ev.set_baseline(Candidate(m))
    for kind, params in (("int8", {k: v[-1] for k, v in INT8.items()}), ("fp16", {"scope": "all"})):
        site = ACTIONS[kind].sites(m, params, be.info)[0]
        c = Candidate(ACTIONS[kind].apply(m, site, params, ctx), (Step(kind, site, tuple(sorted(params.items()))),))
        ev.evaluate(c)
        estimate = c.accuracy_loss
        assert not c.accuracy_exact
        exact = ev.exact(c).accuracy_loss
        if kind == "int8":      # quantization noise dominates: node losses add up
            assert exact / 3 <= estimate <= exact * 3, (estimate, exact)
        else:                   # fp16 rounding is ~1e-7: the right order of magnitude is all that matters
            assert exact / 10 <= estimate <= exact * 10 and estimate < 1e-5, (estimate, exact)
    assert ev.sensitivity.probes <= 2 * ev.accuracy.max_probes


def test_a_precision_that_cannot_beat_the_default_is_scored_without_measuring_its_sensitivity(models):
    """fp16 predicted 10x slower: even at zero loss it ranks below the default, so its per-node
    sensitivity (traced runs of the whole graph) is never measured; int8, which can pay, gets
    its estimate and its exact check as before."""
    res, ev = searched(models, Priced(float16=10.0, **INT8_FAST),
                       {"fp16": {"scope": ["all"]}, "int8": {**ONE_INT8, "float_layers": [0]}})
    assert not ev.sensitivity.knows("fp16", {"scope": "all"}) and ev.timings["estimates_deferred"] >= 1
    assert res.top and all(c.steps[0].kind == "int8" and c.accuracy_exact for c in res.top), (res.failed, res.pruned)
    assert ev.sensitivity.knows("int8", dict(res.top[0].steps[0].params)) and res.top[0].accuracy_loss > 0
    assert res.evaluated == 2
