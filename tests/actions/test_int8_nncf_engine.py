"""int8 with engine nncf: NNCF's post-training quantizer writes OpenVINO's form. Checked like every
action (full checker, accuracy effect against the fp32 graph on ONNX Runtime, and on the OpenVINO
path the plan binds to), plus what only this engine does: the float layers read their original
inputs, weights and biases (NNCF's bias correction undone), the graph is marked as NNCF's (its path
cost is measured apart), and NNCF runs once per graph in a run."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from metainfer_core.accuracy import plan_loss, run_cpu
from metainfer_core.actions import ACTIONS, ActionContext, Site
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.directives import INT8_ENGINE_KEY, model_meta
from metainfer_core.normalize import normalize
from metainfer_core.search.path_costs import PathCosts, graph_class
from metainfer_core.zoo import build

from action_checks import apply, loss
from test_int8_openvino_form import OV_INT8, OV_ROUNDING
from twins import backend, host

NNCF_INT8 = dict(OV_INT8, engine="nncf")


def _reads_int8(model: onnx.ModelProto, node_name: str) -> bool:
    dq = {o for n in model.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    node = next(n for n in model.graph.node if n.name == node_name)
    return bool(set(node.input) & dq)


def test_nncf_writes_openvinos_form_bound_to_openvino_and_marked():
    m = normalize(build("resnet_tiny"), None).model
    out, feeds = apply("int8", m, NNCF_INT8, target="cpu")
    assert model_meta(out, INT8_ENGINE_KEY) == "nncf"
    assert ExecutionPath.of(out) == ExecutionPath("openvino", "f32")
    assert graph_class(out) == "int8-inputs"
    convs = [n.name for n in out.graph.node if n.op_type == "Conv"]
    assert convs and all(_reads_int8(out, c) for c in convs)
    assert loss(m, out, feeds) < 1e-2
    on_ort = run_cpu(out, feeds)
    compiled = host().compile(out)          # OpenVINO's int8 kernels compute what ORT reads
    assert plan_loss(on_ort, [compiled.run(f) for f in feeds]) < OV_ROUNDING
    # its path ratio is measured apart from meta-infer's own form of the same op types
    ours, _ = apply("int8", m, OV_INT8, target="cpu")
    assert PathCosts._key(ExecutionPath.of(out), out) != PathCosts._key(ExecutionPath.of(ours), ours)


def test_float_layers_read_their_original_weights_and_nncf_runs_once_per_graph():
    m = normalize(build("resnet_tiny"), None).model
    info = backend("cpu").info
    whole = ACTIONS["int8"].sites(m, NNCF_INT8, info)[0]
    floats = [n for n in whole.nodes if next(x for x in m.graph.node if x.name == n).op_type == "Conv"][:2]
    site = Site(tuple(n for n in whole.nodes if n not in floats), "compute, 2 float")
    out, feeds = apply("int8", m, NNCF_INT8, target="cpu")      # for the feeds
    ctx = ActionContext(target=info, calibration_feeds=feeds)
    mixed = ACTIONS["int8"].apply(m, site, NNCF_INT8, ctx)
    onnx.checker.check_model(mixed, full_check=True)
    assert not any(_reads_int8(mixed, f) for f in floats)
    assert any(_reads_int8(mixed, n) for n in site.nodes)
    original = {i.name: i for i in m.graph.initializer}
    values = {i.name: numpy_helper.to_array(i) for i in mixed.graph.initializer}
    for f in floats:        # the same weights and bias values as before (bias correction undone)
        src, now = (next(n for n in g.graph.node if n.name == f) for g in (m, mixed))
        for a, b in zip(src.input, now.input):
            if a in original:
                np.testing.assert_array_equal(values[b], numpy_helper.to_array(original[a]))
    whole = ACTIONS["int8"].apply(m, ACTIONS["int8"].sites(m, NNCF_INT8, info)[0], NNCF_INT8, ctx)
    assert len(ctx.cache["int8.nncf_results"]) == 1          # one NNCF run for both
    assert loss(m, mixed, feeds) <= loss(m, whole, feeds) + 1e-4
    n_q = sum(n.op_type == "QuantizeLinear" for n in mixed.graph.node)
    assert n_q < sum(n.op_type == "QuantizeLinear" for n in whole.graph.node)    # the float layers' went


def test_offered_for_openvinos_form_whole_or_fitted_only():
    m = normalize(build("resnet_tiny"), None).model
    cpu = backend("cpu").info
    assert ACTIONS["int8"].sites(m, dict(NNCF_INT8, float_layers="fit"), cpu)
    for other in (dict(placement="inputs_outputs"), dict(scope="all"), dict(float_layers=2)):
        assert not ACTIONS["int8"].sites(m, dict(NNCF_INT8, **other), cpu), other
    assert not ACTIONS["int8"].sites(m, NNCF_INT8, backend("npu").info)     # no OpenVINO path there


def test_profiling_leaves_nncf_out(settings_for):
    """Profiling measures the kernels of every choice's graph; NNCF's would cost seconds per graph
    and hold the same kernels as meta-infer's own form of it."""
    from metainfer_core.backends import backend_for
    from metainfer_core.fingerprint.profile_stage import profiling_variants
    from metainfer_core.normalize.prepare import prepare

    s = settings_for("target=cpu", "model=resnet_tiny")
    assert "nncf" in s.action_space.domains()["int8"]["engine"]
    variants = profiling_variants(s, prepare(s, False, progress=lambda msg: None), backend_for(s))
    forms = [m for m in variants if graph_class(m) == "int8-inputs"]
    assert forms and not any(model_meta(m, INT8_ENGINE_KEY) for m in variants)


def test_nncf_sends_no_usage_telemetry():
    """NNCF sends usage events to its vendor through OpenVINO's telemetry package, which
    metainfer_core keeps from loading: NNCF then runs its stub (a plain `import nncf` does not)."""
    import subprocess
    import sys

    code = ("from metainfer_core.actions.nncf_engine import quiet_nncf\nquiet_nncf()\n"
            "from nncf.telemetry.wrapper import telemetry\n"
            "print(type(telemetry).__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.split() == ["MagicMock"], done.stdout + done.stderr[-2000:]   # NNCF's own stub
