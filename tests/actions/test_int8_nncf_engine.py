"""int8 with engine nncf: NNCF's post-training quantizer writes OpenVINO's form. Checked like every
action (full checker, accuracy effect against the fp32 graph on ONNX Runtime, and on the OpenVINO
path the plan binds to), plus what only this engine does: the float layers read their original
inputs, weights and biases (NNCF's bias correction undone), the graph is marked as NNCF's (its path
cost is measured apart), and NNCF runs once per graph in a run."""
from __future__ import annotations

from pathlib import Path

from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.actions import ACTIONS
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.ir.directives import INT8_ENGINE_KEY, model_meta
from metainfer_core.normalize import normalize
from metainfer_core.search.path_costs import PathCosts, graph_class
from metainfer_core.zoo import build

from action_checks import apply, check_float_layers_rewired, loss, reads_int8
from test_int8_openvino_form import OV_INT8, OV_ROUNDING
from twins import backend, host

NNCF_INT8 = dict(OV_INT8, engine="nncf")


def test_nncf_writes_openvinos_form_bound_to_openvino_and_marked():
    m = normalize(build("resnet_tiny"), None).model
    out, feeds = apply("int8", m, NNCF_INT8, target="cpu")
    assert model_meta(out, INT8_ENGINE_KEY) == "nncf"
    assert ExecutionPath.of(out) == ExecutionPath("openvino", "f32")
    assert graph_class(out) == "int8-inputs"
    convs = [n.name for n in out.graph.node if n.op_type == "Conv"]
    assert convs and all(reads_int8(out, c) for c in convs)
    assert loss(m, out, feeds) < 1e-2
    on_ort = run_cpu(out, feeds)
    compiled = host().compile(out)          # OpenVINO's int8 kernels compute what ORT reads
    assert plan_loss(on_ort, [compiled.run(f) for f in feeds]) < OV_ROUNDING
    # its path ratio is measured apart from meta-infer's own form of the same op types
    ours, _ = apply("int8", m, OV_INT8, target="cpu")
    assert PathCosts.key(ExecutionPath.of(out), out) != PathCosts.key(ExecutionPath.of(ours), ours)


def test_float_layers_read_their_original_weights_and_nncf_runs_once_per_graph():
    check_float_layers_rewired(NNCF_INT8, "int8.nncf_results")


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
    from metainfer_core.fingerprint.stage import profiling_variants
    from metainfer_core.prepare.stage import prepare_stage

    s = settings_for("target=cpu", "model=resnet_tiny")
    assert "nncf" in s.action_space.domains()["int8"]["engine"]
    variants = profiling_variants(s, prepare_stage(s, False, progress=lambda msg: None), backend_for(s))
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
