"""What binding a graph to another execution path costs (search/path_costs.py): graph classes
and families measured apart (int8 by activation sign and quantized op set, 16-bit graphs by the
op types computing in 16 bits), paired rounds by a graph's speed, validation outputs re-used by
the exact check, and a graph compiled for the other paths beside the one measured."""
from __future__ import annotations

import numpy as np
import pytest

from metainfer_core.accuracy.metric import plan_loss
from metainfer_core.actions import ACTIONS, ActionContext, Site
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.backends.timing import SETTLE, runs_per_sample
from metainfer_core.search.path_costs import (BUDGET_MS, MAX_ROUNDS, ROUNDS, PathCosts, graph_class, half_ops,
                                              paired_rounds, rebound, signed_activations)

from twins import backend


def test_int8_graph_families_part_by_activation_sign_and_quantized_op_set(models):
    """ONNX Runtime (a path ratio's base, and the default path) runs signed int8 activations
    through slower kernels than unsigned (deepcut's signed int8 plan ran 2.5x its unsigned
    twin's prediction), and a scope of all quantizes more op types than one of compute: each
    is a family of its own, timed apart; the same form calibrated otherwise is the same family."""
    m, feeds, _ = models["resnet_tiny"]
    ctx = ActionContext(target=backend("cpu").info, calibration_feeds=feeds)

    def lowered(**params):
        p = ACTIONS["int8"].with_defaults({"placement": "inputs_outputs", "float_layers": 0, **params})
        return ACTIONS["int8"].apply(m, ACTIONS["int8"].sites(m, p, ctx.target)[0], p, ctx)

    unsigned, signed = lowered(activation_type="QUInt8"), lowered(activation_type="QInt8")
    assert not signed_activations(unsigned) and signed_activations(signed)
    families = {PathCosts.family(g) for g in (unsigned, signed, lowered(activation_type="QUInt8", scope="all"))}
    assert len(families) == 3
    assert PathCosts.family(lowered(activation_type="QUInt8", calibrate_method="Percentile")) == PathCosts.family(unsigned)


def test_each_16_bit_scope_is_its_own_graph_class_on_a_path(models):
    """ONNX Runtime (a path ratio's base) runs an fp16 scope of all 2-3x slower than a scope of
    compute; OpenVINO runs both at its own precision: one ratio for both predicted wakeword's
    fp16 compute plan on OpenVINO 2.7x fast. Each set of op types computing in 16 bits is timed
    apart."""
    m, _, _ = models["resnet_tiny"]
    ctx = ActionContext(target=backend("gpu").info)
    keys = set()
    for scope in ("compute", "all"):
        params = ACTIONS["fp16"].with_defaults({"scope": scope})
        half = ACTIONS["fp16"].apply(m, ACTIONS["fp16"].sites(m, params, ctx.target)[0], params, ctx)
        assert graph_class(half) == "half" and "Conv" in half_ops(half)
        keys.add(PathCosts.key(ExecutionPath("openvino", "f32"), half))
    assert len(keys) == 2
    assert half_ops(m) == ()


def test_a_fast_graph_gets_more_paired_rounds_a_slow_one_fewer_within_the_budget():
    """Five pairs of a 3 ms graph left OpenVINO's f32 and bf16 ratios in the wrong order; cheap
    rounds are added up to MAX_ROUNDS, a slow graph's stay within BUDGET_MS."""
    assert paired_rounds(0.05, SETTLE) == paired_rounds(3.0, SETTLE) == MAX_ROUNDS
    assert ROUNDS <= paired_rounds(10.0, SETTLE) < MAX_ROUNDS
    assert paired_rounds(30.0, SETTLE, least=2) < paired_rounds(30.0, SETTLE) == ROUNDS
    for ms in (60.0, 400.0, 2000.0):
        rounds = paired_rounds(ms, SETTLE)
        assert rounds == 2 or rounds * ms * 2 * runs_per_sample(ms, SETTLE) <= BUDGET_MS, (ms, rounds)


def test_an_exact_check_of_a_graph_a_path_was_measured_on_re_uses_its_outputs(models):
    """Binding a class's first graph runs it on the path: its exact accuracy check re-uses those
    outputs (compiling a QDQ graph on OpenVINO costs seconds) and finds the same loss."""
    m, feeds, reference = models["resnet_tiny"]
    be = backend("cpu")
    if "openvino:f32" not in be.info.extra.get("execution_paths", []):
        pytest.fail("the host offers no OpenVINO path (openvino is pinned in requirements.lock)")
    ctx = ActionContext(target=be.info, calibration_feeds=feeds)
    ov = {"runtime": "openvino", "precision": "f32"}
    bound = ACTIONS["binding"].apply(m, Site((), "model"), ov, ctx)
    compiled = []

    class Counting:     # the host backend, its compiles counted
        info = be.info

        def compile(self, model):
            compiled.append(model)
            return be.compile(model)

    paths = PathCosts(Counting(), feeds, reference, plan_loss, rounds=2)
    cost = paths.cost(bound)
    n = len(compiled)
    outputs = paths.run(bound)
    assert len(compiled) == n
    assert plan_loss(reference, outputs) == pytest.approx(cost.added_loss, abs=1e-9)
    fresh = PathCosts(be, feeds, reference, plan_loss).run(bound)
    assert all(np.allclose(a, b) for ra, rb in zip(outputs, fresh) for a, b in zip(ra, rb))


def test_a_graph_bound_to_one_path_compiles_for_the_other_paths_beside_it(models):
    """Measuring OpenVINO f32 on a graph compiles it for bf16 too, side by side: measuring bf16
    next compiles nothing and finds what a PathCosts measuring bf16 alone finds."""
    m, feeds, reference = models["resnet_tiny"]
    be = backend("cpu")
    f32, bf16 = ExecutionPath("openvino", "f32"), ExecutionPath("openvino", "bf16")
    if not {f32, bf16} <= set(be.paths):
        pytest.skip("this CPU offers no OpenVINO bf16 path")
    compiled = []

    class Counting:     # the host backend, its compiles counted
        info, paths = be.info, be.paths

        def compile(self, model):
            compiled.append(ExecutionPath.of(model))
            return be.compile(model)

    paths = PathCosts(Counting(), feeds, reference, plan_loss, rounds=2)
    paths.cost(rebound(m, f32))
    assert f32 in compiled and bf16 in compiled
    n = len(compiled)
    there = paths.cost(rebound(m, bf16))
    assert len(compiled) == n and there.error is None and there.ratio > 0
    alone = PathCosts(be, feeds, reference, plan_loss, rounds=2).cost(rebound(m, bf16))
    assert there.added_loss == pytest.approx(alone.added_loss, abs=1e-6)
    assert paths.run(rebound(m, bf16)) is not None and len(compiled) == n
