"""Beam search with the learned cost model, and the weights' effect on the chosen plan."""
from __future__ import annotations

import pytest

from metainfer_core.accuracy import run_cpu
from metainfer_core.actions import ActionContext
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.fingerprint.profiler import profile
from metainfer_core.normalize import normalize
from metainfer_core.predictor import CostModel
from metainfer_core.search import Evaluator, Weights, beam_search
from metainfer_core.tensors import random_feeds
from metainfer_core.zoo import build

from backends.test_simulator import backend

SPACE = {"fuse_chain": {"max_depth": [2, 4]}, "fp16": {}, "int8": {"scope": ["compute", "all"], "activation_type": ["QUInt8"],
         "weight_type": ["QInt8"], "per_channel": [True], "calibrate_method": ["MinMax"]}}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    model = normalize(build("resnet_tiny"), {"input": [1, 3, 64, 64]}).model
    feeds = [random_feeds(model, seed=i) for i in range(2)]
    lib = FingerprintLibrary(f"sqlite:///{tmp_path_factory.mktemp('fp')}/fp.db")
    return model, feeds, run_cpu(model, feeds), lib


def _search(setup, target, weights=Weights(1.0, 0.3, 1.0, 0.02), max_loss=0.01, depth=3, **spec):
    model, feeds, reference, lib = setup
    be = backend(target, **spec)
    ctx = ActionContext(target=be.info, calibration_feeds=feeds)
    rep = profile(be, lib, [model], [1, 2], reps=3, warmup=0)
    cm = CostModel.train(lib.records(rep.fingerprint_version), rep.fingerprint_version)
    ev = Evaluator(cm, be.info, weights, max_loss, feeds, reference, {"fp16", "int8"})
    return beam_search(model, SPACE, ev, ctx, beam_width=3, depth=depth, top_k=3, time_budget_s=60)


def test_finds_better_plans_and_dedupes(setup):
    res = _search(setup, "gpu")
    assert res.top and all(c.score < res.default.score for c in res.top)
    assert len({c.key for c in res.top}) == len(res.top)
    assert res.evaluated >= len(res.top)
    assert all(1 <= c.changes <= 3 for c in res.top)


def test_npu_prefers_int8(setup):
    res = _search(setup, "npu")                       # no fp32 datapath on the npu
    assert any(s.kind == "int8" for s in res.top[0].steps)


def test_accuracy_bound_prunes(setup):
    res = _search(setup, "npu", max_loss=0.0, depth=1)
    assert all(not any(s.kind in ("fp16", "int8") for s in c.steps) for c in res.top)
    assert res.pruned.get("accuracy", 0) > 0


def test_memory_limit_prunes_everything_over_it(setup):
    res = _search(setup, "gpu", memory_limit_bytes=1000, depth=1)
    assert not res.top and res.pruned.get("memory", 0) > 0


def test_time_budget_stops_the_search(setup):
    model, feeds, reference, lib = setup
    be = backend("gpu")
    rep = profile(be, lib, [model], [1], reps=3, warmup=0)
    cm = CostModel.train(lib.records(rep.fingerprint_version), rep.fingerprint_version)
    ev = Evaluator(cm, be.info, Weights(1, 0, 1, 0), 0.01, feeds, reference, {"fp16", "int8"})
    res = beam_search(model, SPACE, ev, ActionContext(target=be.info, calibration_feeds=feeds), 3, 5, 3, 1e-9)
    assert res.stopped_by_budget and res.evaluated == 0
