"""Secrets never reach MLflow (issue 17): the password of a database or server URL (a fleet's
PostgreSQL) is masked in every logged param and tag; the rest of the URL stays readable."""
from __future__ import annotations

from mlflow.tracking import MlflowClient

from app.compose import load_settings
from app.tracking.masking import mask_secrets
from app.tracking.runs import fail_run, start_run


def test_mask_secrets_hides_only_url_passwords():
    assert mask_secrets("postgresql+psycopg://metainfer:s3cr%40t@db:5432/mi") == "postgresql+psycopg://metainfer:***@db:5432/mi"
    assert mask_secrets("could not reach http://alice:pw@h:5000/api (timeout)") == \
        "could not reach http://alice:***@h:5000/api (timeout)"
    for plain in ("postgresql+psycopg://metainfer@127.0.0.1:5432/metainfer", "http://127.0.0.1:5000",
                  "sqlite:////tmp/a/mlflow.db", "no url here: a:b@c"):
        assert mask_secrets(plain) == plain


def test_logged_params_and_error_tag_mask_the_database_password(tmp_path):
    db = "postgresql+psycopg://metainfer:hunter2@db.example:5432/metainfer"
    s, raw = load_settings([f"paths.artifacts={tmp_path}", "model=mlp", f"tracking.fingerprint_db={db}"])
    run_id = start_run(s, raw, "mlp", "secrets")
    fail_run(s, run_id, f"OperationalError: connection to {db} failed")
    run = MlflowClient(tracking_uri=s.tracking.mlflow_uri).get_run(run_id)
    assert run.data.params["tracking.fingerprint_db"] == "postgresql+psycopg://metainfer:***@db.example:5432/metainfer"
    assert "hunter2" not in str(run.data.params) and "hunter2" not in str(run.data.tags)
    assert "metainfer:***@db.example" in run.data.tags["error"]
