"""int8 with engine onnxruntime: ONNX Runtime's quantize_static writes the QDQ form. Checked like
every action (full checker, accuracy effect against the fp32 graph on ONNX Runtime), plus what
only this engine does: the graph is marked as ONNX Runtime's (its own explorer kind, its path
costs measured apart), the float layers read their original inputs and weights, and the quantizer
runs once per graph in a run. The bench's ORT quantize_static peer is the same call."""
from __future__ import annotations


from metainfer_core.actions import ACTIONS
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.ir.directives import INT8_ENGINE_KEY, model_meta
from metainfer_core.normalize import normalize
from metainfer_core.search.path_costs import PathCosts, graph_class
from metainfer_core.zoo import build

from action_checks import apply, check_float_layers_rewired, loss, reads_int8
from twins import backend

ORT_INT8 = {"scope": "compute", "activation_type": "QUInt8", "weight_type": "QInt8", "per_channel": "auto",
            "calibrate_method": "MinMax", "placement": "inputs_outputs", "float_layers": 0, "engine": "onnxruntime"}
OURS = dict(ORT_INT8, engine="metainfer")


def test_onnxruntimes_quantizer_writes_the_qdq_form_on_the_default_path_and_marked():
    m = normalize(build("resnet_tiny"), None).model
    for scope in ("compute", "all"):
        out, feeds = apply("int8", m, dict(ORT_INT8, scope=scope), target="cpu")
        assert model_meta(out, INT8_ENGINE_KEY) == "onnxruntime"
        assert ExecutionPath.of(out).is_default and graph_class(out) == "int8"
        convs = [n.name for n in out.graph.node if n.op_type == "Conv"]
        assert convs and all(reads_int8(out, c) for c in convs)
        assert loss(m, out, feeds) < 1e-2, scope
    # a kind of its own for the explorers, its path ratio measured apart from meta-infer's form
    ours, _ = apply("int8", m, OURS, target="cpu")
    ov = ExecutionPath("openvino", "f32")
    assert PathCosts.key(ov, out) != PathCosts.key(ov, ours)
    label = ACTIONS["int8"].kind_label
    assert label(ORT_INT8) == "int8:onnxruntime:compute"
    assert label(dict(ORT_INT8, scope="all")) == "int8:onnxruntime"
    assert label(OURS) == "int8"


def test_float_layers_read_their_original_weights_and_the_quantizer_runs_once_per_graph():
    check_float_layers_rewired(ORT_INT8, "int8.ort_results")


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
    from metainfer_core.search.order import in_budget_order

    s = settings_for("target=cpu", "model=resnet_tiny")
    m = normalize(build("resnet_tiny"), None).model
    order = [p for a, p, _ in in_budget_order(expand(m, s.action_space.domains(), backend("cpu").info, narrow=False))
             if a.name == "int8"]
    first_float = next(i for i, p in enumerate(order) if p["float_layers"] != 0)
    wholes = {p["engine"] for p in order[:first_float]}
    assert wholes == {"metainfer", "onnxruntime", "nncf"}, order[:first_float]
    assert all(p["float_layers"] == 0 for p in order[:first_float])



def test_the_quantizers_own_op_set_is_offered_before_its_compute_only_scope(settings_for):
    """In the default action space a search reaches ONNX Runtime's quantizer on its own op set
    (scope all: the graph its users get) before its compute-only scope, at each float-layer
    count and activation type; meta-infer's own rewrite keeps its place ahead of both."""
    from metainfer_core.actions import expand
    from metainfer_core.search.order import in_budget_order

    s = settings_for("target=cpu", "model=resnet_tiny")
    m = normalize(build("resnet_tiny"), None).model
    order = [(p["float_layers"], p["activation_type"], p["engine"], p["scope"])
             for a, p, _ in in_budget_order(expand(m, s.action_space.domains(), backend("cpu").info, narrow=False))
             if a.name == "int8" and p["placement"] == "inputs_outputs"]
    groups = [g for g in {o[:2] for o in order} if (*g, "onnxruntime", "compute") in order]
    assert groups, order
    for group in groups:
        mine = [o[2:] for o in order if o[:2] == group]
        assert mine.index(("onnxruntime", "all")) < mine.index(("onnxruntime", "compute")), (group, mine)
        assert mine.index(("metainfer", "compute")) < mine.index(("onnxruntime", "all")), (group, mine)
