"""`python flows/adapt.py` end to end, as a user runs it: plan.json contract, chosen model,
MLflow run; and bad input failing with one paragraph, a non-zero exit and nothing written."""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from mlflow.tracking import MlflowClient

from metainfer_core.zoo import build

PLAN_FIELDS = ["schema", "model", "target", "fingerprint_version", "weights", "decision", "reason", "actions",
               "predicted", "measured", "baseline", "timings", "artifact", "mlflow_run_id"]
TIMINGS = ["normalize_s", "profile_s", "train_s", "search_s", "compile_s", "verify_s", "total_s"]


def _check_contract(plan: dict, tmp_path) -> None:
    for f in PLAN_FIELDS:
        assert f in plan and plan[f] is not None, f
    assert set(plan["model"]) >= {"name", "source", "sha256"} and len(plan["model"]["sha256"]) == 64
    assert set(plan["target"]) >= {"name", "measurement", "firmware", "driver", "runtime"}
    assert plan["decision"] in ("adapted", "rolled_back", "skipped", "default")
    for section in ("measured", "baseline"):
        for k in ("latency_ms", "peak_mem_bytes", "accuracy_loss", "compile_s"):
            assert plan[section][k] is not None, (section, k)
    for k in ("latency_ms", "peak_mem_bytes", "accuracy_loss", "score"):
        assert plan["predicted"][k] is not None
    assert all(plan["timings"][k] >= 0 for k in TIMINGS)
    artifact = onnx.load(plan["artifact"])
    onnx.checker.check_model(artifact, full_check=True)
    run = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db").get_run(plan["mlflow_run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.tags["fingerprint_version"] == plan["fingerprint_version"]
    assert run.data.tags["firmware"] == plan["target"]["firmware"]
    assert run.data.params["weights.name"] and "baseline.latency_ms" in run.data.metrics
    names = {a.path for a in MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db").list_artifacts(run.info.run_id)}
    assert {"plan.json", "feature_map.json"} <= names and not names & {"model.onnx", "default.onnx"}   # stored once
    version = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db").get_model_version(
        plan["registry"]["registered_model"], plan["registry"]["active_version"])
    assert Path(version.source).parent == Path(plan["artifact"]).parent         # the run folder's model


@pytest.mark.slow
def test_design_card_command_on_fpga(run_flow, tmp_path):
    res = run_flow("adapt", "target=fpga", "weights=embedded", "search=quick", f"paths.artifacts={tmp_path}")
    assert res.returncode == 0, res.stderr
    plan = res.plan
    _check_contract(plan, tmp_path)
    assert plan["target"]["measurement"] == "modeled" and "simulated" in plan["target"]["note"]
    assert plan["weights"]["name"] == "embedded"
    assert plan["decision"] == "adapted" and plan["actions"]        # the default is far from best on an fpga
    assert plan["measured"]["latency_ms"] < plan["baseline"]["latency_ms"]


@pytest.mark.slow
def test_any_onnx_file_on_cpu_then_library_reuse(run_flow, tmp_path):
    path = tmp_path / "my_mlp.onnx"
    onnx.save(build("mlp", seed=3), path)
    args = ["target=cpu", "model=file", f"model.path={path}", "model.input_shapes={input:[4,256]}", "search=quick",
            f"paths.artifacts={tmp_path}"]
    first = run_flow("adapt", *args)
    assert first.returncode == 0, first.stderr
    plan = first.plan
    _check_contract(plan, tmp_path)
    assert plan["model"]["name"] == "my_mlp" and plan["target"]["measurement"] == "measured"
    assert plan["model"]["nodes_after"] < plan["model"]["nodes_before"]      # MatMul+Add folded into Gemm
    assert plan["profile"]["measured"] > 0
    second = run_flow("adapt", *args)
    assert second.returncode == 0, second.stderr
    assert second.plan["profile"]["measured"] == 0 and second.plan["profile"]["reused"] > 0


@pytest.mark.parametrize("args, fragment", [
    (["target=tpu"], "Unknown target option 'tpu'"),
    (["weights.memory=-0.5"], "weights.memory"),
    (["search.beam_width=0"], "search.beam_width"),
    (["model=file"], "model.path"),
])
def test_bad_config_fails_fast(run_flow, tmp_path, args, fragment):
    res = run_flow("adapt", *args, f"paths.artifacts={tmp_path}")
    assert res.returncode == 2
    assert fragment in res.stderr and "Traceback" not in res.stderr
    assert len([line for line in res.stderr.splitlines() if line.startswith("error:")]) == 1
    assert not (tmp_path / "runs").exists()
