"""Per-node accuracy sensitivity (accuracy/sensitivity.py): a lossy variant costs a few
whole-model runs whatever the graph's size, its per-node ranking agrees with lowering each node
alone, its estimate of lowering everything is the loss of doing so, estimates grow with the
nodes a plan lowers, and a graph the one-pass trace cannot take falls back to block probes."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from scipy.stats import spearmanr

from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.actions import ACTIONS, ActionContext, Site, Step
from metainfer_core.normalize import normalize
from metainfer_core.accuracy.sensitivity import MAX_PROBES, Sensitivity
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.zoo import build

from twins import backend
from graphs import model_of
from test_accuracy_guard import outlier_mlp

INT8 = {"scope": "all", "activation_type": "QUInt8", "weight_type": "QInt8", "per_channel": True,
        "calibrate_method": "MinMax"}


def prepared(m, n_feeds: int = 2):
    feeds = [random_feeds(m, seed=i) for i in range(n_feeds)]
    return m, feeds, run_cpu(m, feeds), ActionContext(target=backend("npu").info, calibration_feeds=feeds)


@pytest.fixture(scope="module")
def zoo():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = prepared(normalize(build(name), None).model)
        return cache[name]
    return get


def deep_chain(layers: int):
    """x -> (Conv 3x3 -> Relu) x layers -> GlobalAveragePool -> Flatten -> Gemm: 2 x layers + 3 nodes."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        inits += [numpy_helper.from_array((rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(np.float32), f"W{i}"),
                  numpy_helper.from_array((rng.standard_normal(4) * 0.1).astype(np.float32), f"B{i}")]
        nodes += [helper.make_node("Conv", [x, f"W{i}", f"B{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    inits.append(numpy_helper.from_array(rng.standard_normal((4, 10)).astype(np.float32), "Wg"))
    nodes += [helper.make_node("GlobalAveragePool", [x], ["g"], name="gap"),
              helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
              helper.make_node("Gemm", ["f", "Wg"], ["y"], name="gemm")]
    return model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)


def whole(kind: str, m, params: dict, info) -> Step:
    site = ACTIONS[kind].sites(m, params, info)[0]
    return Step(kind, site, tuple(sorted(params.items())))


def alone(kind: str, m, feeds, reference, ctx, params: dict, nodes, run=run_cpu) -> dict[str, float]:
    """The old measure, for comparison: each node lowered alone, one whole-model run each."""
    return {n: plan_loss(reference, run(ACTIONS[kind].apply(m, Site((n,), "probe"), params, ctx), feeds))
            for n in nodes}


def run_unfused(model, feeds):
    """The QDQ graph's own arithmetic: ONNX Runtime without graph optimisations, so no Q/DQ pair
    is fused into an integer kernel. On x86 CPUs without VNNI those kernels multiply u8 x s8 pairs
    into saturating int16 sums (VPMADDUBSW) and lose far more on some MatMuls (bert_tiny's
    MatMul_6: 6e-5 unfused, 2e-3 fused, on an AVX2-only EPYC): the traced table models rounding,
    not that; plans are judged by measured runs (exact checks, verify)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return [sess.run(None, f) for f in feeds]


# --- cost -------------------------------------------------------------------------------------

def test_a_variant_costs_a_few_whole_model_runs_whatever_the_node_count(monkeypatch, zoo):
    """Counted on ONNX Runtime itself: every InferenceSession.run call is one pass over one
    validation input. The first variant pays the fp32 exposed run too, a later precision its
    plain and traced runs, another variant of a traced precision its plain run only."""
    calls = {"n": 0}
    real_run = ort.InferenceSession.run

    def counting(self, *args, **kwargs):
        calls["n"] += 1
        return real_run(self, *args, **kwargs)

    per_model = {}
    for name, (m, feeds, reference, ctx) in (("mlp", zoo("mlp")), ("resnet_tiny", zoo("resnet_tiny")),
                                             ("deep_chain", prepared(deep_chain(60)))):
        variants = [("int8", INT8), ("int8", dict(INT8, activation_type="QInt8")), ("fp16", {"scope": "all"})]
        for kind, params in variants:     # calibration is the int8 action's, shared with the search's applies
            ACTIONS[kind].apply(m, ACTIONS[kind].sites(m, params, ctx.target)[0], params, ctx)
        s = Sensitivity(m, feeds, reference, ctx)
        monkeypatch.setattr(ort.InferenceSession, "run", counting)
        runs = []
        for kind, params in variants:
            before_calls, before_probes = calls["n"], s.probes
            table = s.table(kind, params)
            assert table and set(s.methods.values()) <= {"one-pass", "scaled"}
            runs.append((calls["n"] - before_calls) / len(feeds))
            assert s.probes - before_probes == runs[-1]          # .probes counts whole-model runs
        monkeypatch.setattr(ort.InferenceSession, "run", real_run)
        per_model[name] = (len(m.graph.node), runs)
    assert per_model["deep_chain"][0] == 123 > MAX_PROBES       # block probing would have spent 48 runs here
    for nodes, runs in per_model.values():
        # fp32 exposed once, then plain + traced; int8's second variant re-uses int8's trace
        assert runs == [3, 1, 2], per_model
    assert s.methods[Sensitivity.variant("int8", dict(INT8, activation_type="QInt8"))] == "scaled"
    probes = s.probes
    s.table("int8", dict(INT8, scope="compute"))                # another scope, the same variant: no new run
    assert s.probes == probes


# --- quality ----------------------------------------------------------------------------------

def test_ranking_agrees_with_lowering_each_node_alone_and_the_whole_estimate_is_the_loss(zoo):
    m, feeds, reference, ctx = zoo("resnet_tiny")
    s = Sensitivity(m, feeds, reference, ctx)
    table = s.table("int8", INT8)
    single = alone("int8", m, feeds, reference, ctx, INT8, table)
    names = sorted(table)
    a, b = [table[n] for n in names], [single[n] for n in names]
    rho = spearmanr(a, b).correlation
    assert rho >= 0.6, rho                                      # 0.79 when written
    top = lambda d, k: set(sorted(d, key=d.get, reverse=True)[:k])   # noqa: E731
    assert len(top(table, 10) & top(single, 10)) >= 5            # 6 of 10 when written
    assert top(table, 1) == top(single, 1) == {"Gemm_0"}         # the logits layer matters most

    info = ctx.target
    for params in (INT8, dict(INT8, scope="compute")):
        step = whole("int8", m, params, info)
        exact = plan_loss(reference, run_cpu(ACTIONS["int8"].apply(m, step.site, params, ctx), feeds))
        estimate = s.estimate((step,))
        assert exact / 2 <= estimate <= exact * 2, (params["scope"], estimate, exact)
    # scope all: the table is scaled to exactly that loss
    step = whole("int8", m, INT8, info)
    exact = plan_loss(reference, run_cpu(ACTIONS["int8"].apply(m, step.site, INT8, ctx), feeds))
    assert s.estimate((step,)) == pytest.approx(exact, rel=1e-6)


def test_ranking_on_a_transformer_and_on_an_outlier_channel(zoo):
    """bert_tiny's int8 MatMuls; and a hidden channel 1000x the others (outlier_mlp), where a
    whole-tensor error would blame the harmless first layer: mm3's int8 input (the outlier's
    scale) and mm2 -> relu2 lose the small channels, mm1 and relu1 hardly matter."""
    m, feeds, reference, ctx = zoo("bert_tiny")
    s = Sensitivity(m, feeds, reference, ctx)
    table = s.table("int8", INT8)
    single = alone("int8", m, feeds, reference, ctx, INT8, table, run_unfused)
    names = sorted(table)
    rho = spearmanr([table[n] for n in names], [single[n] for n in names]).correlation
    assert rho >= 0.8, rho                                      # 0.93 when written (fused, on a VNNI Xeon, too)

    m, feeds, reference, ctx = prepared(outlier_mlp(), 4)
    params = dict(INT8, per_channel=False)
    table = Sensitivity(m, feeds, reference, ctx).table("int8", params)
    single = alone("int8", m, feeds, reference, ctx, params, table)
    for t in (table, single):
        assert min(t["mm2"], t["relu2"], t["mm3"]) > 100 * max(t["mm1"], t["relu1"]), t


def test_estimates_grow_with_the_nodes_lowered(zoo):
    m, feeds, reference, ctx = zoo("mobilenet_v2_tiny")
    s = Sensitivity(m, feeds, reference, ctx)
    rng = np.random.default_rng(0)
    for kind, params in (("int8", INT8), ("bf16", {"scope": "all"})):
        step = whole(kind, m, params, ctx.target)
        nodes = list(step.site.nodes)
        for _ in range(20):
            order = list(rng.permutation(nodes))
            small, large = sorted(rng.choice(len(nodes) + 1, size=2, replace=False))
            sub, sup = Site(tuple(order[:small]), "sub"), Site(tuple(order[:large]), "sup")
            e_sub = s.estimate((Step(kind, sub, step.params),))
            e_sup = s.estimate((Step(kind, sup, step.params),))
            assert 0.0 <= e_sub <= e_sup * (1 + 1e-12), (kind, small, large, e_sub, e_sup)
        compute = whole(kind, m, dict(params, scope="compute"), ctx.target)
        assert s.estimate((compute,)) <= s.estimate((step,)) * (1 + 1e-12)
    assert set(s.methods.values()) == {"one-pass"}


# --- fallback ---------------------------------------------------------------------------------

def with_control_flow():
    """MatMul -> Add(If) -> MatMul, the If's branches reading the graph input: fp16's scope takes
    the If, whose branch bodies an exposed run cannot show."""
    rng = np.random.default_rng(1)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "W1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W2")
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    out = helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 8])
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["b"], name="then_relu")], "then", [], [out])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["b"], name="else_neg")], "else", [], [out])
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm1"),
             helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="positive"),
             helper.make_node("If", ["c"], ["b"], name="branch", then_branch=then, else_branch=other),
             helper.make_node("Add", ["h", "b"], ["a"], name="add"),
             helper.make_node("MatMul", ["a", "W2"], ["y"], name="mm2")]
    return model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w1, w2, zero])


def test_a_graph_the_trace_cannot_take_falls_back_to_bounded_block_probes():
    m, feeds, reference, ctx = prepared(with_control_flow(), 3)
    s = Sensitivity(m, feeds, reference, ctx, max_probes=3)
    step = whole("fp16", m, {"scope": "all"}, ctx.target)
    assert "branch" in step.site.nodes
    table = s.table("fp16", {"scope": "all"})
    assert set(s.methods.values()) == {"blocks"}
    assert s.probes == 3 and set(table) == set(step.site.nodes)     # 6 nodes in 3 blocks
    exact = plan_loss(reference, run_cpu(ACTIONS["fp16"].apply(m, step.site, {"scope": "all"}, ctx), feeds))
    assert 0 < exact / 10 <= s.estimate((step,)) <= exact * 10      # fp16 rounding: the order of magnitude


# --- numerics -----------------------------------------------------------------------------------

def overflowing_graph():
    """x -> MatMul -> Exp (values past fp16's 65504) -> Mul 1e-6 -> Add (x -> MatMul) -> Relu."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 16)) * 1.5).astype(np.float32), "W1"),
             numpy_helper.from_array(np.array(1e-6, np.float32), "k"),
             numpy_helper.from_array((rng.standard_normal((16, 16)) * 0.3).astype(np.float32), "W2")]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm"),
             helper.make_node("Exp", ["h"], ["e"], name="exp"),
             helper.make_node("Mul", ["e", "k"], ["es"], name="scale"),
             helper.make_node("MatMul", ["x", "W2"], ["b"], name="small"),
             helper.make_node("Add", ["es", "b"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    return model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], inits)


def test_an_fp16_overflow_is_a_finding_not_a_nan_or_a_warning():
    """Where a layer's values overflow fp16 (inf), that layer cannot take fp16: it counts as a
    large loss, the layers that can are still measured, no NaN reaches an estimate and no numpy
    warning reaches the terminal."""
    import warnings

    from metainfer_core.accuracy.sensitivity import OVERFLOW_LOSS

    m, feeds, reference, ctx = prepared(overflowing_graph())
    params = {"scope": "all"}
    everything = ACTIONS["fp16"].apply(m, ACTIONS["fp16"].sites(m, params, ctx.target)[0], params, ctx)
    from metainfer_core.ir.graph_utils import with_outputs
    exposed = with_outputs(everything, {"e|fp16": TensorProto.FLOAT16})
    assert not np.isfinite(run_cpu(exposed, feeds)[0][-1]).all()       # its fp16 values do overflow
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # any RuntimeWarning fails the test
        sens = Sensitivity(m, feeds, reference, ctx)
        table = sens.table("fp16", params)
        benign = sens.estimate((Step("fp16", Site(("small", "add", "relu"), "some"), tuple(params.items())),))
        bad = sens.estimate((Step("fp16", Site(("exp", "small"), "some"), tuple(params.items())),))
    assert sens.methods[Sensitivity.variant("fp16", params)] == "one-pass"
    assert all(np.isfinite(v) for v in table.values())
    # where the overflow starts, and the Mul reading those values (they overflow in its own rounding)
    assert set(sens.overflows[Sensitivity.variant("fp16", params)]) <= {"exp", "scale"}
    assert "exp" in sens.overflows[Sensitivity.variant("fp16", params)]
    assert table["exp"] >= OVERFLOW_LOSS
    assert bad >= OVERFLOW_LOSS and 0 <= benign < 0.01
    # the estimate for the layers that take fp16 stands for a real run of that plan
    lowered = ACTIONS["fp16"].apply(m, Site(("small", "add", "relu"), "some"), params, ctx)
    assert plan_loss(reference, run_cpu(lowered, feeds)) < 0.01
    assert any("exp" in f and "fp16" in f for f in sens.findings())
