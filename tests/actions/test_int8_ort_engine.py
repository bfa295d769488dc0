"""int8 with engine onnxruntime: ONNX Runtime's quantize_static writes the QDQ form. Checked like
every action (full checker, accuracy effect against the fp32 graph on ONNX Runtime), plus what
only this engine does: the graph is marked as ONNX Runtime's (its own explorer kind, its path
costs measured apart), the float layers read their original inputs and weights, and the quantizer
runs once per graph in a run. The bench's ORT quantize_static peer is the same call."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from metainfer_core.actions import ACTIONS, ActionContext, Site, Step
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.directives import INT8_ENGINE_KEY, model_meta
from metainfer_core.normalize import normalize
from metainfer_core.search.beam import _lossy_label
from metainfer_core.search.path_costs import PathCosts, graph_class
from metainfer_core.zoo import build

from action_checks import apply, loss
from twins import backend

ORT_INT8 = {"scope": "compute", "activation_type": "QUInt8", "weight_type": "QInt8", "per_channel": "auto",
            "calibrate_method": "MinMax", "placement": "inputs_outputs", "float_layers": 0, "engine": "onnxruntime"}
OURS = dict(ORT_INT8, engine="metainfer")


def _reads_int8(model: onnx.ModelProto, node_name: str) -> bool:
    dq = {o for n in model.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    node = next(n for n in model.graph.node if n.name == node_name)
    return bool(set(node.input) & dq)


def test_onnxruntimes_quantizer_writes_the_qdq_form_on_the_default_path_and_marked():
    m = normalize(build("resnet_tiny"), None).model
    for scope in ("compute", "all"):
        out, feeds = apply("int8", m, dict(ORT_INT8, scope=scope), target="cpu")
        assert model_meta(out, INT8_ENGINE_KEY) == "onnxruntime"
        assert ExecutionPath.of(out).is_default and graph_class(out) == "int8"
        convs = [n.name for n in out.graph.node if n.op_type == "Conv"]
        assert convs and all(_reads_int8(out, c) for c in convs)
        assert loss(m, out, feeds) < 1e-2, scope
    # a kind of its own for the explorers, its path ratio measured apart from meta-infer's form
    ours, _ = apply("int8", m, OURS, target="cpu")
    ov = ExecutionPath("openvino", "f32")
    assert PathCosts._key(ov, out) != PathCosts._key(ov, ours)
    site = Site(("Conv_0",), "compute")
    assert _lossy_label(Step("int8", site, tuple(ORT_INT8.items()))) == "int8:onnxruntime"
    assert _lossy_label(Step("int8", site, tuple(OURS.items()))) == "int8"


def test_float_layers_read_their_original_weights_and_the_quantizer_runs_once_per_graph():
    m = normalize(build("resnet_tiny"), None).model
    info = backend("cpu").info
    whole = ACTIONS["int8"].sites(m, ORT_INT8, info)[0]
    floats = [n for n in whole.nodes if next(x for x in m.graph.node if x.name == n).op_type == "Conv"][:2]
    site = Site(tuple(n for n in whole.nodes if n not in floats), "compute, 2 float")
    _, feeds = apply("int8", m, ORT_INT8, target="cpu")      # for the feeds
    ctx = ActionContext(target=info, calibration_feeds=feeds)
    mixed = ACTIONS["int8"].apply(m, site, ORT_INT8, ctx)
    onnx.checker.check_model(mixed, full_check=True)
    assert not any(_reads_int8(mixed, f) for f in floats)
    assert any(_reads_int8(mixed, n) for n in site.nodes)
    original = {i.name: i for i in m.graph.initializer}
    values = {i.name: numpy_helper.to_array(i) for i in mixed.graph.initializer}
    for f in floats:        # the float weights and biases, not their dequantized int8 copies
        src, now = (next(n for n in g.graph.node if n.name == f) for g in (m, mixed))
        for a, b in zip(src.input, now.input):
            if a in original:
                np.testing.assert_array_equal(values[b], numpy_helper.to_array(original[a]))
    full = ACTIONS["int8"].apply(m, whole, ORT_INT8, ctx)
    assert len(ctx.cache["int8.ort_results"]) == 1          # one quantizer run for both
    assert loss(m, mixed, feeds) <= loss(m, full, feeds) + 1e-4
    n_dq = sum(n.op_type == "DequantizeLinear" for n in mixed.graph.node)
    assert n_dq < sum(n.op_type == "DequantizeLinear" for n in full.graph.node)    # the float layers' went


def test_offered_for_the_qdq_form_whole_or_fitted_only():
    m = normalize(build("resnet_tiny"), None).model
    cpu = backend("cpu").info
    assert ACTIONS["int8"].sites(m, dict(ORT_INT8, float_layers="fit"), cpu)
    assert ACTIONS["int8"].sites(m, dict(ORT_INT8, scope="all"), cpu)
    for other in (dict(placement="inputs"), dict(float_layers=2)):
        assert not ACTIONS["int8"].sites(m, dict(ORT_INT8, **other), cpu), other
    assert ACTIONS["int8"].calibrates(ORT_INT8) and not ACTIONS["int8"].calibrates(OURS)


def test_the_bench_peer_is_the_engines_call():
    """bench/peers.py's ORT quantize_static peer and the engine write the same graph."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench.peers import ort_quantized

    m = normalize(build("resnet_tiny"), None).model
    out, feeds = apply("int8", m, dict(ORT_INT8, scope="all", per_channel=True), target="cpu")
    peer = ort_quantized(m, feeds)
    assert [n.op_type for n in peer.graph.node] == [n.op_type for n in out.graph.node]


def test_every_quantizers_whole_plan_comes_before_any_float_layer_variant(settings_for):
    """In the default action space a search reaches each engine's whole-int8 plan (the form it
    writes best) before it spends its budget on float-layer variants of meta-infer's own."""
    from metainfer_core.actions import expand
    from metainfer_core.search.beam import in_budget_order

    s = settings_for("target=cpu", "model=resnet_tiny")
    m = normalize(build("resnet_tiny"), None).model
    order = [p for a, p, _ in in_budget_order(expand(m, s.action_space.domains(), backend("cpu").info, narrow=False))
             if a.name == "int8"]
    first_float = next(i for i, p in enumerate(order) if p["float_layers"] != 0)
    wholes = {p["engine"] for p in order[:first_float]}
    assert wholes == {"metainfer", "onnxruntime", "nncf"}, order[:first_float]
    assert all(p["float_layers"] == 0 for p in order[:first_float])
