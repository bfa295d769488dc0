"""A candidate that fails anywhere in the search (its rewrite, its scoring, its exact check)
is dropped with its reason, and the search goes on with the others; only the default path's
failure fails a run."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from metainfer_core.accuracy.metric import run_cpu
from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.actions.base import Action, Param, Site
from metainfer_core.normalize import normalize
from metainfer_core.ir.graph_utils import clone
from metainfer_core.search import Evaluator, beam_search
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.zoo import build

from twins import backend
from twins import BALANCED, FakeCostModel

SPACE = {"fp16": {}, "int8": {"scope": ["all"], "activation_type": ["QUInt8"], "weight_type": ["QInt8"],
                              "per_channel": [True], "calibrate_method": ["MinMax"],
                              "engine": ["metainfer"]}}


class NoInt8CostModel(FakeCostModel):
    """A predictor twin that cannot score int8 kernels (as a model trained without them might fail)."""
    def predict_kernels_ms(self, kernels):
        if any(k.dtype == "int8" for k in kernels):
            raise ValueError("no int8 kernels in the training set")
        return super().predict_kernels_ms(kernels)


class Unrunnable(Action):
    """A lossy fake whose graph looks cheaper (one Relu fewer) but ONNX Runtime refuses to run it
    (another Relu carries a bogus attribute)."""
    name = "unrunnable"
    lossy = True
    params = {"where": Param("first", ("first",), "which Relu")}

    def sites(self, model, params, target):
        return [Site((), "first")] if any(n.op_type == "Relu" for n in model.graph.node) else []

    def legal(self, model, site, params, target):
        return None

    def apply(self, model, site, params, ctx):
        out = clone(model)
        first, second = [n for n in out.graph.node if n.op_type == "Relu"][:2]
        for n in out.graph.node:
            n.input[:] = [first.input[0] if i == first.output[0] else i for i in n.input]
        out.graph.node.remove(first)
        second.attribute.append(onnx.helper.make_attribute("bogus", 1))
        return out


@pytest.fixture
def resnet():
    m = normalize(build("resnet_tiny"), None).model
    feeds = [random_feeds(m, seed=i) for i in range(2)]
    return m, feeds, run_cpu(m, feeds)


def test_a_candidate_the_predictor_cannot_score_is_dropped(resnet):
    m, feeds, reference = resnet
    be = backend("fpga")
    ctx = ActionContext(target=be.info, calibration_feeds=feeds)
    lossy = {n for n, a in ACTIONS.items() if a.lossy}
    ev = Evaluator(NoInt8CostModel(), be.info, BALANCED, 0.05, feeds, reference, lossy, ctx=ctx)
    res = beam_search(m, SPACE, ev, ctx, beam_width=2, depth=2, top_k=2, time_budget_s=60)
    assert "scoring: ValueError: no int8 kernels" in res.failed["int8"]
    assert res.evaluated > 0 and all(all(st.kind != "int8" for st in c.steps) for c in res.top)


def _search_with(fake: Action, resnet, monkeypatch):
    """A one-level search on gpu (modeled) over `fake` beside fp16 and int8."""
    m, feeds, reference = resnet
    monkeypatch.setitem(ACTIONS, fake.name, fake)
    be = backend("gpu")
    ctx = ActionContext(target=be.info, calibration_feeds=feeds)
    lossy = {n for n, a in ACTIONS.items() if a.lossy}
    ev = Evaluator(FakeCostModel(), be.info, BALANCED, 0.05, feeds, reference, lossy, ctx=ctx)
    return beam_search(m, {fake.name: {}, **SPACE}, ev, ctx, beam_width=3, depth=1, top_k=3, time_budget_s=60)


def test_a_candidate_that_fails_its_exact_run_is_dropped(resnet, monkeypatch):
    res = _search_with(Unrunnable(), resnet, monkeypatch)
    assert "exact check: " in res.failed["unrunnable"]
    assert all(all(st.kind != "unrunnable" for st in c.steps) for c in res.top)
    assert np.isfinite([c.score for c in res.top]).all()


class Unnarrowable(Unrunnable):
    """A fake whose narrowing (what int8's float layers measure first) fails."""
    name = "unnarrowable"

    def narrow(self, site, params, cache):
        raise RuntimeError("the sensitivity run failed\nsecond line")


def test_a_choice_whose_narrowing_fails_is_dropped(resnet, monkeypatch):
    res = _search_with(Unnarrowable(), resnet, monkeypatch)
    assert res.failed["unnarrowable"] == "narrowing: RuntimeError: the sensitivity run failed"
    assert res.top and all(all(st.kind != "unnarrowable" for st in c.steps) for c in res.top)
    assert any(e.get("failed", "").startswith("narrowing") for e in res.log)
