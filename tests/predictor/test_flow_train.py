"""`python flows/train.py` as a user runs it: the training set, the saved revision with its
metrics and plot, the MLflow run; then a fine-tune from runtime records."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

SMALL = ["target=gpu", "predictor.zoo=[mlp,resnet_tiny,bert_tiny]", "predictor.plan_depth=1", "predictor.max_plans=8",
         "predictor.runs=5", "predictor.iterations=150", "profile.reps=3", "profile.batch_gradient=[1,2]"]


@pytest.mark.slow
def test_train_then_fine_tune(run_flow, migrated, tmp_path):
    migrated(tmp_path)
    res = run_flow("train", *SMALL, f"paths.artifacts={tmp_path}")
    assert res.returncode == 0, res.stderr
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("predictor: ")
    folder = Path(last.removeprefix("predictor: "))
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["n_records"] > 0 and meta["n_plan_runs"] > 3 and meta["revision"] == 1
    lomo = meta["metrics"]["lomo"]
    assert lomo["models"] == 3 and 0 <= lomo["within_10"] <= 1 and lomo["mape"] < 0.5
    assert (folder / "predicted_vs_measured.png").stat().st_size > 10_000
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("meta-infer/predictor@gpu")
    run = client.search_runs([exp.experiment_id])[0]
    assert run.data.tags["fingerprint_version"] == meta["fingerprint_version"]
    assert run.data.metrics["lomo.within_10"] == pytest.approx(lomo["within_10"])
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"meta.json", "kernel_latency.cbm", "predicted_vs_measured.png"} <= names

    nothing = run_flow("train", *SMALL, "predictor.mode=fine_tune", f"paths.artifacts={tmp_path}")
    assert nothing.returncode == 2 and "no runtime records" in nothing.stderr

    from metainfer_core.backends.base import Timing
    from metainfer_core.fingerprint import FingerprintLibrary
    from metainfer_core.fingerprint.library import PlanRun
    lib = FingerprintLibrary(f"sqlite:///{tmp_path}/fingerprints.db")
    zoo_run = lib.plan_runs(meta["fingerprint_version"], source="zoo", model="mlp")[0]
    lib.add_plan_runs(_info("gpu"), [PlanRun("mlp", zoo_run["plan_key"], "deployed", zoo_run["graph"],
                                             Timing.from_samples([zoo_run["median_ms"]] * 3), source="runtime")])
    tuned = run_flow("train", *SMALL, "predictor.mode=fine_tune", f"paths.artifacts={tmp_path}")
    assert tuned.returncode == 0, tuned.stderr
    assert "fine-tune:" in tuned.stderr
    assert len(list(folder.parent.glob("r*"))) == 2


def _info(name):
    from predictor.conftest import target
    return target(name)[0].info
