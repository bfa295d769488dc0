"""Active plans in the MLflow Model Registry: adapt moves `active` only for adapted plans;
flows/rollback.py moves it back to the version it replaced."""
from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from app.tracking.registry import ACTIVE, promote, registered_name, roll_back_active
from app.tracking.runs import start_run
from metainfer_core.errors import MetaInferError


def _run(s, raw, tmp_path, decision):
    run_id = start_run(s, raw, "resnet_tiny", f"r-{decision}")
    model = tmp_path / "model.onnx"
    model.write_bytes(b"onnx-bytes")
    MlflowClient(tracking_uri=s.tracking.mlflow_uri).log_artifact(run_id, str(model))
    return promote(s, run_id, {"decision": decision, "fingerprint_version": "v"}, "resnet_tiny")


def _active(s):
    c = MlflowClient(tracking_uri=s.tracking.mlflow_uri, registry_uri=s.tracking.mlflow_uri)
    return str(c.get_model_version_by_alias(registered_name("resnet_tiny", s.target.name), ACTIVE).version)


def test_active_moves_only_for_adapted_and_rolls_back(settings_for, tmp_path):
    from app.compose import load_settings

    s, raw = load_settings([f"paths.artifacts={tmp_path}", "target=npu"])
    first = _run(s, raw, tmp_path, "rolled_back")          # no active plan yet: the default becomes it
    assert first["changed"] and _active(s) == "1"
    assert not _run(s, raw, tmp_path, "rolled_back")["changed"] and _active(s) == "1"
    assert _run(s, raw, tmp_path, "adapted")["previous_version"] == "1" and _active(s) == "2"
    assert _run(s, raw, tmp_path, "adapted")["active_version"] == "3"
    assert roll_back_active(s, "resnet_tiny") == ("resnet_tiny.npu", "3", "2")
    assert _active(s) == "2"


def test_rollback_without_history_is_a_clear_error(settings_for):
    s = settings_for("target=asic")
    with pytest.raises(MetaInferError, match="No active plan"):
        roll_back_active(s, "resnet_tiny")


def test_rollback_cli(run_flow, tmp_path):
    from app.compose import load_settings

    s, raw = load_settings([f"paths.artifacts={tmp_path}", "target=gpu"])
    _run(s, raw, tmp_path, "adapted")
    _run(s, raw, tmp_path, "adapted")
    res = run_flow("rollback", "model=resnet_tiny", "target=gpu", f"paths.artifacts={tmp_path}")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "active: resnet_tiny.gpu version 1"
    again = run_flow("rollback", "model=resnet_tiny", "target=gpu", f"paths.artifacts={tmp_path}")
    assert again.returncode == 2 and "nothing to roll back" in again.stderr
