"""One MLflow experiment per model (issue 18): a store written before, with its runs in
`meta-infer/<model>@<target>`, keeps working: new runs go to `meta-infer/<model>`, the old
experiment stays as it is, and a run a killed process left RUNNING there is still marked FAILED."""
from __future__ import annotations

import socket

from mlflow.tracking import MlflowClient

from app.compose import load_settings
from app.tracking.experiments import experiment_name
from app.tracking.runs import start_run


def test_a_store_with_per_target_experiments_keeps_working(tmp_path):
    s, raw = load_settings([f"paths.artifacts={tmp_path}", "model=mlp", "target=npu"])
    client = MlflowClient(tracking_uri=s.tracking.mlflow_uri)
    old = client.create_experiment("meta-infer/mlp@npu")
    finished = client.create_run(old, run_name="before", tags={"target": "npu"})
    client.set_terminated(finished.info.run_id, "FINISHED")
    # a process of this host that is gone (its start time no longer matches)
    dead = client.create_run(old, run_name="killed", tags={"process": f"{socket.gethostname()}:1:never"})
    run_id = start_run(s, raw, "mlp", "after")
    assert experiment_name(s, "mlp") == "meta-infer/mlp"
    new = client.get_run(run_id)
    assert client.get_experiment(new.info.experiment_id).name == "meta-infer/mlp" and new.data.tags["target"] == "npu"
    assert client.get_run(dead.info.run_id).info.status == "FAILED"
    assert client.get_run(finished.info.run_id).info.status == "FINISHED"          # the old runs stay as they were
    assert {r.info.run_name for r in client.search_runs([old])} == {"before", "killed"}
