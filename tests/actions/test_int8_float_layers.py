"""Mixed precision (int8 `float_layers`): the k quantizable layers most sensitive to int8 stay in
float, in ONNX Runtime's QDQ form and in OpenVINO's form, their float regions run on OpenVINO in
f32 or bf16; and a search whose accuracy bound whole-model int8 breaks finds a mixed plan."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.actions import ACTIONS, ActionContext, Site, Step, expand
from metainfer_core.actions.float_layers import EXACT_FIT_PROBES, most_sensitive, provide_ranking
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.normalize import normalize
from metainfer_core.search import Evaluator, beam_search
from metainfer_core.accuracy.sensitivity import Sensitivity
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.zoo import build

from test_binding import bind
from twins import BALANCED, backend, host


def int8_space(placement: str, float_layers: list[int]) -> dict:
    return {"int8": {"scope": ["compute"], "activation_type": ["QUInt8"], "weight_type": ["QInt8"],
                     "per_channel": ["auto"], "calibrate_method": ["MinMax"], "placement": [placement],
                     "float_layers": float_layers, "engine": ["metainfer"]}}


@pytest.fixture(scope="module")
def unet():
    m = normalize(build("unet_tiny"), None).model
    feeds = [random_feeds(m, seed=i) for i in range(4)]
    return m, feeds, run_cpu(m, feeds)


def ranked_context(m, feeds, reference):
    info = backend("cpu").info
    ctx = ActionContext(target=info, calibration_feeds=feeds)
    sensitivity = Sensitivity(m, feeds, reference, ctx)
    provide_ranking(ctx.cache, lambda params: sensitivity.table("int8", params))
    return info, ctx, sensitivity


@pytest.mark.parametrize("placement", ["inputs_outputs", "inputs"])
def test_the_most_sensitive_layers_stay_float_on_both_runtimes(unet, placement):
    m, feeds, reference = unet
    info, ctx, sensitivity = ranked_context(m, feeds, reference)
    (_, _, whole), (_, params, mixed) = list(expand(m, int8_space(placement, [0, 4]), info, cache=ctx.cache))
    assert params["float_layers"] == 4
    floats = set(whole.nodes) - set(mixed.nodes)
    table = sensitivity.table("int8", {k: v for k, v in params.items() if k != "float_layers"})
    # the four left out are the four with the highest sensitivity among the quantizable layers
    assert len(floats) == 4 and min(table[n] for n in floats) >= max(table[n] for n in mixed.nodes)
    assert set(most_sensitive(whole.nodes, table, 4)) == floats

    whole_q = ACTIONS["int8"].apply(m, whole, params, ctx)
    mixed_q = ACTIONS["int8"].apply(m, mixed, params, ctx)
    onnx.checker.check_model(mixed_q, full_check=True)
    dq_out = {o for n in mixed_q.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    int8_weights = {n.name for n in mixed_q.graph.node if len(n.input) > 1 and n.input[1] in dq_out}
    assert int8_weights and not int8_weights & floats    # the float layers keep float weights
    on_ort = run_cpu(mixed_q, feeds)
    whole_loss, mixed_loss = plan_loss(reference, run_cpu(whole_q, feeds)), plan_loss(reference, on_ort)
    assert mixed_loss < 0.7 * whole_loss, (mixed_loss, whole_loss)

    # on OpenVINO, in each precision this CPU offers it (OpenVINO's form is bound there already,
    # its float remainder in f32; either form may be bound to bf16 where the CPU has the datapath):
    # it runs, computes what ONNX Runtime computes up to where each rounds (OpenVINO's own int8
    # kernels round differently: 1e-2 on this U-Net, whole or mixed), and loses less than whole int8
    offered = [ExecutionPath.parse(p) for p in host().info.extra["execution_paths"]]
    for path in (p for p in offered if p.runtime == "openvino"):
        losses = []
        for q in (whole_q, mixed_q):
            plan = q if ExecutionPath.of(q) == path else bind(q, path.runtime, path.precision, host().info)
            compiled = host().compile(plan)
            on_ov = [compiled.run(f) for f in feeds]
            assert plan_loss(run_cpu(q, feeds), on_ov) < 2e-2
            losses.append(plan_loss(reference, on_ov))
        assert losses[1] <= losses[0], (path.label, losses)


def test_offered_only_where_a_ranking_is_known(unet):
    m, feeds, reference = unet
    info = backend("cpu").info
    plain = list(expand(m, int8_space("inputs_outputs", [0, 1, 2]), info))
    assert [p["float_layers"] for _, p, _ in plain] == [0]       # profiling, predictor training
    _, ctx, _ = ranked_context(m, feeds, reference)
    # unet_tiny has 11 quantizable layers: 8 float leaves 3, 16 would leave none
    assert [p["float_layers"] for _, p, _ in expand(m, int8_space("inputs_outputs", [0, 8]), info,
                                                    cache=ctx.cache)] == [0, 8]
    every_op = dict(int8_space("inputs_outputs", [0, 8])["int8"], scope=["all"])     # only weighted layers stay float
    assert [p["float_layers"] for _, p, _ in expand(m, {"int8": every_op}, info, cache=ctx.cache)] == [0]


class Int8Faster:
    """A cost twin where an int8 kernel costs a quarter of its float twin (as on a VNNI CPU)."""

    def predict_kernels_ms(self, kernels):
        return np.array([0.001 + k.flops * 1e-9 * (0.25 if k.dtype == "int8" else 1.0) for k in kernels])

    def predict_ms(self, kernels, infos=None):
        return float(self.predict_kernels_ms(kernels).sum())


def test_search_keeps_the_sensitive_layers_float_where_whole_int8_breaks_the_bound(unet):
    m, feeds, reference = unet
    info = backend("cpu").info
    space = int8_space("inputs_outputs", [0, 1, 2, 4, 8, "fit"])
    whole = ACTIONS["int8"].apply(m, next(expand(m, space, info))[2], {}, ActionContext(info, feeds))
    max_loss = 0.6 * plan_loss(reference, run_cpu(whole, feeds))          # whole-model int8 breaks it
    ctx = ActionContext(target=info, calibration_feeds=feeds)       # shared: the ranking lives in its cache
    ev = Evaluator(Int8Faster(), info, BALANCED, max_loss, feeds, reference, {"int8"}, ctx=ctx)
    res = beam_search(m, space, ev, ctx, 8, 1, 3, 60.0)
    numeric = {k: v[0] for k, v in space["int8"].items() if k != "float_layers"}
    whole_nodes = next(expand(m, int8_space("inputs_outputs", [0]), info))[2].nodes
    shares = ctx.cache["int8.float_shares"]       # what int8's narrowing reads (float_layers.prepare_search)
    assert shares(numeric, whole_nodes, True) > 1      # checked exactly: whole int8 breaks the bound
    assert res.top, res.pruned
    best = res.top[0]
    n_quantizable = len(next(expand(m, space, info))[2].nodes)

    def n_float(c):
        return n_quantizable - len(c.steps[0].site.nodes)

    assert n_float(best) > 0 and best.accuracy_exact and best.accuracy_loss <= max_loss
    assert plan_loss(reference, run_cpu(best.model, feeds)) <= max_loss
    # the fastest within the bound: no plan in the top keeps fewer layers float
    assert all(n_float(c) >= n_float(best) for c in res.top)


def test_fit_keeps_the_fewest_most_sensitive_layers_that_bring_the_estimate_within_the_bound(unet):
    m, feeds, reference = unet
    info, ctx, sensitivity = ranked_context(m, feeds, reference)
    params = {k: v[0] for k, v in int8_space("inputs_outputs", [0])["int8"].items()}

    def estimate(nodes):
        return sensitivity.estimate((Step("int8", Site(nodes, ""), tuple(sorted(params.items()))),))

    (_, _, whole), = expand(m, int8_space("inputs_outputs", [0]), info, cache=ctx.cache)
    bound = 0.5 * estimate(whole.nodes)
    provide_ranking(ctx.cache, lambda p: sensitivity.table("int8", p), lambda p, nodes, exact: estimate(nodes) / bound)
    (_, p, fit), = expand(m, int8_space("inputs_outputs", ["fit"]), info, cache=ctx.cache)
    floats = [n for n in whole.nodes if n not in fit.nodes]
    assert p["float_layers"] == "fit" and fit.label.endswith(f", {len(floats)} float")
    assert estimate(fit.nodes) <= bound
    fewer = most_sensitive(whole.nodes, sensitivity.table("int8", params), len(floats) - 1)
    assert estimate(tuple(n for n in whole.nodes if n not in fewer)) > bound      # one fewer does not fit
    assert set(floats) == set(most_sensitive(whole.nodes, sensitivity.table("int8", params), len(floats)))
    # a fixed k is offered only where its estimate is within the bound (else the search would prune it)
    for k in (1, len(floats)):
        rest = tuple(n for n in whole.nodes if n not in most_sensitive(whole.nodes, sensitivity.table("int8", params), k))
        offered = list(expand(m, int8_space("inputs_outputs", [k]), info, cache=ctx.cache))
        assert bool(offered) == (estimate(rest) <= bound)
    # without a bound to fit (no evaluator), fit is not offered
    ctx.cache.pop("int8.float_shares")
    assert not list(expand(m, int8_space("inputs_outputs", ["fit"]), info, cache=ctx.cache))


def fit_setting(unet):
    """The U-Net's ranked context, its int8 variant's sensitivity table, the estimate of int8 on
    a node set, and the whole int8 site."""
    m, feeds, reference = unet
    info, ctx, sensitivity = ranked_context(m, feeds, reference)
    params = {k: v[0] for k, v in int8_space("inputs_outputs", [0])["int8"].items()}
    table = sensitivity.table("int8", {k: v for k, v in params.items() if k != "float_layers"})

    def estimate(nodes):
        return sensitivity.estimate((Step("int8", Site(nodes, ""), tuple(sorted(params.items()))),))

    (_, _, whole), = expand(m, int8_space("inputs_outputs", [0]), info, cache=ctx.cache)
    return m, info, ctx, table, estimate, whole


def test_fit_weighs_what_keeping_each_layer_float_costs(unet):
    m, info, ctx, table, estimate, whole = fit_setting(unet)
    ranked = most_sensitive(whole.nodes, table, len(whole.nodes))
    first = ranked[0]
    # the most sensitive layer is by far the costliest to keep float, and the bound can be met
    # without it: every other ranked layer float, it alone (with the unranked ones) in int8
    costs = {n: 1.0 for n in whole.nodes} | {first: 100.0}
    bound = estimate(tuple(n for n in whole.nodes if n not in ranked[1:]))
    assert bound < estimate(whole.nodes)

    def floats_of_fit(with_costs):
        provide_ranking(ctx.cache, lambda p: table, lambda p, nodes, exact: estimate(nodes) / bound,
                        (lambda: costs) if with_costs else None)
        (_, _, fit), = expand(m, int8_space("inputs_outputs", ["fit"]), info, cache=ctx.cache)
        assert estimate(fit.nodes) <= bound
        return set(whole.nodes) - set(fit.nodes)

    by_loss = floats_of_fit(False)
    by_cost = floats_of_fit(True)
    assert first in by_loss and first not in by_cost
    assert sum(costs[n] for n in by_cost) < sum(costs[n] for n in by_loss)


@pytest.mark.parametrize("off", [1.5, 0.6])
def test_fit_rescales_its_estimate_by_what_a_run_measured(unet, off):
    """off: what a run measures over what the estimate says (1.5: the estimates run low)."""
    m, info, ctx, table, estimate, whole = fit_setting(unet)

    def rest(floats):
        return tuple(n for n in whole.nodes if n not in floats)

    bound = 0.5 * estimate(whole.nodes)
    runs = []

    def shares(p, nodes, exact):
        if exact:
            runs.append(nodes)
        return estimate(nodes) * (off if exact else 1) / bound

    provide_ranking(ctx.cache, lambda p: table, shares)
    (_, _, fit), = expand(m, int8_space("inputs_outputs", ["fit"]), info, cache=ctx.cache)
    floats = set(whole.nodes) - set(fit.nodes)
    ranked = most_sensitive(whole.nodes, table, len(whole.nodes))
    # the first run is the estimate's set; runs then bisect the ranking's prefixes, starting from
    # the rescaled estimate's guess, and the cheapest set a run found within the bound is kept
    assert 2 <= len(runs) <= EXACT_FIT_PROBES and fit.nodes in runs and off * estimate(fit.nodes) <= bound
    first = next(k for k in range(len(ranked) + 1) if estimate(rest(ranked[:k])) <= bound)
    guess = next(k for k in range(len(ranked) + 1) if off * estimate(rest(ranked[:k])) <= 0.9 * bound)
    if off > 1:
        # no more float layers than the rescaled estimate's guess, fewer than a blind step
        # halfway to all float from the first set would keep
        assert floats == set(ranked[:len(floats)])
        assert 0 < len(floats) <= guess < (first + len(ranked) + 1) // 2
    else:
        # the estimates ran high: fewer float layers than they asked for
        assert len(floats) <= guess < first
