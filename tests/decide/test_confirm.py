"""The clean confirmation before adopting (issue 47), with real timings: the plan decide would
adopt is timed alone with the default in a worker process of its own; a plan that paid only in
verify's rounds is set aside and named in the reason, one that also pays alone is adopted with
the confirmed figures first."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from metainfer_core.backends import backend_for
from metainfer_core.decide.stage import decide_stage
from metainfer_core.errors import MetaInferError
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.search.beam import SearchResult
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.stage import SearchOutcome
from metainfer_core.verify import Verified
from metainfer_core.verify.stage import VerifyOutcome
from metainfer_core.verify.worker import (CONFIRM_MIN_ROUNDS, CONFIRM_PROCESSES, _call, recipe, run_plans_isolated,
                                          time_pair_isolated)


def _chain(layers: int, width: int = 384) -> onnx.ModelProto:
    """x [1, width] through `layers` MatMul+Tanh: the work grows with `layers`."""
    rng = np.random.default_rng(layers)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32),
                                             f"w{i}"))
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]), helper.make_node("Tanh", [f"m{i}"], [f"t{i}"])]
        prev = f"t{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    g = helper.make_graph(nodes, f"chain{layers}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _claimed(ms: float, seed: int, n: int = 40) -> Verified:
    """verify's figures as verify would record them: n paired rounds around `ms`."""
    samples = list(ms * np.random.default_rng(seed).lognormal(0, 0.01, n))
    return Verified("default" if seed == 0 else f"candidate{seed}", float(np.median(samples)),
                    float(np.percentile(samples, 90)), 1000, 0.0, samples_ms=samples)


def _outcomes(default_model, plan_model, claimed_speedup: float):
    default, plan = Candidate(default_model), Candidate(plan_model)
    search = SearchOutcome(SearchResult(default, [plan]), default=default)
    verified = VerifyOutcome(_claimed(1.0, 0), [_claimed(1.0 / claimed_speedup, 1)], [plan], [], 0.0)
    return search, verified


@pytest.mark.parametrize("plan_layers, adopted", [(8, False), (1, True)])
def test_only_a_plan_that_pays_alone_with_the_default_is_adopted(settings_for, plan_layers, adopted):
    s = settings_for("target=cpu")
    backend = backend_for(s)
    default_model, plan_model = _chain(8), _chain(plan_layers)
    feed = random_feeds(default_model, seed=0)
    search, verified = _outcomes(default_model, plan_model, claimed_speedup=1.25)

    decision, chosen = decide_stage(s, backend, search, verified, default_model, feed, time_pair_isolated)
    c = decision.confirmations[0]
    assert c.isolated and c.error is None and c.rounds >= CONFIRM_PROCESSES * CONFIRM_MIN_ROUNDS
    assert len(c.process_speedups) == CONFIRM_PROCESSES         # pooled over fresh processes, each one's shown
    assert f"in {CONFIRM_PROCESSES} processes" in c.words()
    if adopted:      # a seventh of the work: confirmed well past the noise bound
        assert decision.decision == "adapted" and chosen is verified.plans[0]
        assert c.pays and c.ratio_high < 0.97 and c.plan_ms < c.default_ms
        assert decision.reason.startswith("candidate1 confirmed alone with the default")
    else:            # the same graph: verify's 1.25x does not survive being timed alone
        assert decision.decision == "rolled_back" and chosen is None and not c.pays
        assert 0.9 < c.ratio < 1.1
        assert "paid in verify's rounds" in decision.verdicts["candidate1"]
        assert "not when timed alone with the default" in decision.verdicts["candidate1"]
        assert decision.default_alone is c      # the default kept: its clean latency is the confirmation's


def test_a_default_kept_with_nothing_confirmed_is_timed_alone_beside_itself(settings_for):
    s = settings_for("target=cpu")
    backend = backend_for(s)
    default_model = _chain(4)
    feed = random_feeds(default_model, seed=0)
    search, verified = _outcomes(default_model, _chain(4), claimed_speedup=1.0)   # pays nowhere: nothing to confirm

    decision, _ = decide_stage(s, backend, search, verified, default_model, feed, time_pair_isolated)
    alone = decision.default_alone
    assert decision.decision == "rolled_back" and decision.confirmations == []
    assert alone is not None and alone.isolated and alone.error is None and alone.label == "default"
    assert 0.9 < alone.ratio < 1.1 and alone.default_ms > 0       # an A/A pair: the default against itself


def test_without_a_timer_the_decision_is_verifys(settings_for):
    s = settings_for("target=cpu")
    search, verified = _outcomes(_chain(2), _chain(2), claimed_speedup=1.25)
    decision, chosen = decide_stage(s, backend_for(s), search, verified)
    assert decision.decision == "adapted" and decision.confirmations == []


def test_verify_runs_in_a_worker_process_and_here_where_the_backend_cannot_be_rebuilt(settings_for):
    s = settings_for("target=cpu")
    backend = backend_for(s)
    m = _chain(2)
    feeds = [random_feeds(m, seed=i) for i in range(2)]
    away = run_plans_isolated(backend, [("default", m), ("candidate1", m)], feeds, runs=5, warmup=1)
    assert away.worker["isolated"] and away.worker["pid"] != os.getpid()
    assert [r.label for r in away.results] == ["default", "candidate1"] and all(r.ok for r in away.results)
    np.testing.assert_array_equal(away.outputs["default"][0][0], away.outputs["candidate1"][0][0])

    class Wrapped(type(backend)):       # a test's wrapper: not importable by a worker
        pass

    local = Wrapped(name=backend.name, measurement=backend.measurement, spec=dict(backend.spec), seed=backend.seed)
    assert recipe(local) is None
    here = run_plans_isolated(local, [("default", m)], feeds, runs=3, warmup=1)
    assert here.results[0].ok and "pid" not in here.worker


def test_a_worker_that_fails_says_why(settings_for):
    s = settings_for("target=cpu")
    with pytest.raises(MetaInferError, match="unknown measurement job 'nothing'"):
        _call({"job": "nothing", "backend": recipe(backend_for(s))})
