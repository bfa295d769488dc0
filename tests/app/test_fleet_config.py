"""conf/deploy/: fleet mode is configuration only (same settings, other URLs), and bad fleet
settings are one clear paragraph."""
from __future__ import annotations

import pytest

from app.fleet import target_overrides
from metainfer_core.errors import MetaInferError


def test_embedded_is_the_default_and_keeps_the_file_stores(settings_for, tmp_path):
    s = settings_for()
    assert s.deploy.name == "embedded" and s.deploy.prefect_api_url is None
    assert s.tracking.fingerprint_db == f"sqlite:///{tmp_path}/fingerprints.db"
    assert s.task_runner.kind == "threads" and s.models == [] and s.targets is None


def test_fleet_points_the_same_tracking_settings_at_servers(settings_for, monkeypatch):
    monkeypatch.setenv("METAINFER_FINGERPRINT_DB", "postgresql+psycopg://fleet@db-host/metainfer")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://db-host:5000")
    monkeypatch.setenv("PREFECT_API_URL", "http://db-host:4200/api")
    s = settings_for("deploy=fleet", "target=asic")
    assert (s.tracking.name, s.tracking.fingerprint_db, s.tracking.mlflow_uri) == \
        ("fleet", "postgresql+psycopg://fleet@db-host/metainfer", "http://db-host:5000")
    assert s.deploy.prefect_api_url == "http://db-host:4200/api" and s.deploy.pool(s.target.name) == "asic"
    assert settings_for("deploy=fleet", "deploy.work_pool='lab-{target}'").deploy.pool("fpga") == "lab-fpga"


@pytest.mark.parametrize("override, words", [
    ("deploy.prefect_api_url=db-host:4200", "not an http(s) URL"),
    ("deploy.work_pool='{host}'", "placeholder {target}"),
    ("deploy=cloud", "Unknown deploy option"),
    ("task_runner.kind=ray", "task_runner.kind"),
])
def test_bad_fleet_settings_are_one_paragraph(settings_for, override, words):
    with pytest.raises(MetaInferError, match=None) as err:
        settings_for("deploy=fleet", override)
    assert words in str(err.value)


def test_deployments_carry_the_overrides_for_their_target():
    args = ["deploy=fleet", "targets=[fpga,asic]", "target=cpu", "profile.reps=3"]
    assert target_overrides(args, "asic") == ["deploy=fleet", "profile.reps=3", "target=asic"]


def test_deploy_needs_a_prefect_server(run_flow, tmp_path):
    res = run_flow("deploy", "targets=[fpga]", f"paths.artifacts={tmp_path}")
    assert res.returncode == 2 and "deploy=fleet" in res.stderr
    res = run_flow("deploy", "deploy=fleet", "deploy.prefect_api_url=http://127.0.0.1:9/api", "targets=[fpga]",
                   f"paths.artifacts={tmp_path}")
    assert res.returncode == 2 and "Cannot reach the Prefect server" in res.stderr
