"""One real adapt of a tiny model file named like most shipped ones (`tinynet/model.onnx`) with
valid samples, against a running Prefect server (issue 30): it adapts; the model is
filed under one distinctive name in its run folder, plan.json, plan.md, MLflow experiment and
registry; and its stage lines and final summary are in the flow run's log, read back through
the Prefect client."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from metainfer_core.zoo import build
from subprocess_env import flow_env

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, prefect_api):
    """The run against the worker's Prefect server (conftest's prefect_api), found there by its
    run folder's name."""
    tmp = tmp_path_factory.mktemp("records")
    (tmp / "tinynet").mkdir()
    onnx.save(build("mlp"), tmp / "tinynet" / "model.onnx")         # input 'input' [batch, 256]
    np.savez(tmp / "samples.npz", input=np.random.default_rng(0).standard_normal((3, 1, 256)).astype(np.float32))
    artifacts = tmp / "artifacts"
    # (explicit: in-process tests of this session may have set it false in os.environ, which the
    # flow would inherit; a user's environment naming a server turns it on: app/environment.py)
    env = flow_env(prefect_api, PREFECT_LOGGING_TO_API_ENABLED="true")
    proc = subprocess.run([sys.executable, str(ROOT / "flows" / "adapt.py"), "model=file",
                           f"model.path={tmp / 'tinynet' / 'model.onnx'}", f"data.inputs={tmp / 'samples.npz'}",
                           "search=quick", "budget.total_s=30", f"paths.artifacts={artifacts}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    logs = _flow_run_logs(prefect_api, proc) if proc.returncode == 0 else []
    return proc, artifacts, logs


def _flow_run_logs(api_url: str, proc: subprocess.CompletedProcess) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName, LogFilter, LogFilterFlowRunId
    from prefect.settings import PREFECT_API_URL, temporary_settings

    folder = Path(proc.stdout.strip().splitlines()[-1].removeprefix("plan: ")).parent
    with temporary_settings(updates={PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[folder.name])))
        assert len(runs) == 1, runs
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[runs[0].id])))
    return [log.message for log in logs]


@pytest.mark.slow
def test_a_valid_tiny_model_with_valid_inputs_adapts(tiny_run):
    proc, _, _ = tiny_run
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("plan: ")


@pytest.mark.slow
def test_a_generic_file_name_is_filed_under_one_distinctive_name_everywhere(tiny_run):
    from mlflow.tracking import MlflowClient

    proc, artifacts, _ = tiny_run
    assert proc.returncode == 0, proc.stderr
    plan_path = Path(proc.stdout.strip().splitlines()[-1].removeprefix("plan: "))
    name = "tinynet_model"
    assert f"-{name}-cpu-" in plan_path.parent.name
    plan = json.loads(plan_path.read_text())
    assert plan["model"]["name"] == name
    assert name in (plan_path.parent / "plan.md").read_text()
    client = MlflowClient(tracking_uri=f"sqlite:///{artifacts}/mlflow.db")
    experiment = client.get_experiment_by_name(f"meta-infer/{name}")
    assert experiment is not None
    assert client.get_run(plan["mlflow_run_id"]).info.experiment_id == experiment.experiment_id
    assert [m.name for m in client.search_registered_models()] == [f"{name}.cpu"]


@pytest.mark.slow
def test_stage_lines_and_the_summary_reach_the_flow_runs_log(tiny_run):
    proc, _, logs = tiny_run
    assert proc.returncode == 0, proc.stderr
    text = "\n".join(logs)
    for stage in ("normalize:", "profile:", "search", "verify", "decision:"):
        assert stage in text, (stage, text[:2000])
    summary = proc.stdout.strip().splitlines()[:-1]          # the terminal's summary, before the plan line
    assert any("\n".join(summary).strip() in message for message in logs), logs[-3:]
