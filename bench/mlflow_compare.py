"""The suite's side of MLflow: check that each adapt run's MLflow figures equal its plan.json,
add the suite's same-run comparison figures and plots to that run, check that the runs of each
model's experiment on the suite's target carry the same param and metric names (so the UI's
compare view lines them up), and record the suite itself as one run in `meta-infer/bench@cpu`."""
from __future__ import annotations

import math
from pathlib import Path

from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

# plan.json figure -> the metric name app/tracking/ logs it under
CHECKED = {("measured", "latency_ms"): "measured.latency_ms", ("baseline", "latency_ms"): "baseline.latency_ms",
           ("measured", "accuracy_loss"): "measured.accuracy_loss", ("timings", "search_s"): "timings.search_s",
           ("timings", "compile_s"): "timings.compile_s", ("timings", "verify_s"): "timings.verify_s"}


def check_run(client: MlflowClient, plan: dict) -> str:
    """'match' when every figure the report takes from plan.json is the run's MLflow metric."""
    metrics = client.get_run(plan["mlflow_run_id"]).data.metrics
    bad = []
    for (section, key), name in CHECKED.items():
        want = (plan.get(section) or {}).get(key)
        got = metrics.get(name)
        if want is None and got is None:
            continue
        if want is None or got is None or not math.isclose(want, got, rel_tol=1e-9, abs_tol=1e-15):
            bad.append(f"{name} plan {want} mlflow {got}")
    return "match" if not bad else "differs: " + "; ".join(bad)


def log_to_run(client: MlflowClient, run_id: str, metrics: dict[str, float], files: list[Path]) -> None:
    """The suite's figures for this run (prefixed `bench.`) and the plots, under artifacts bench/."""
    ms = [Metric(f"bench.{k}", float(v), 0, 0) for k, v in metrics.items() if v is not None and math.isfinite(v)]
    if ms:
        client.log_batch(run_id, metrics=ms)
    for f in files:
        client.log_artifact(run_id, str(f), artifact_path="bench")


def alignment(client: MlflowClient, run_ids: dict[str, str]) -> list[dict]:
    """Per experiment of the suite's runs, on the run's target (a model's experiment holds its other
    targets too, whose target.spec params differ): how many finished runs there are and which
    param or metric names some of them lack (empty: the compare view lines every run up)."""
    out = []
    for name, run_id in run_ids.items():
        run = client.get_run(run_id)
        exp = client.get_experiment(run.info.experiment_id)
        target = run.data.tags.get("target", "")
        runs = client.search_runs([exp.experiment_id], max_results=200,
                                  filter_string=f"attributes.status = 'FINISHED' and tags.target = '{target}'")
        params = [set(r.data.params) for r in runs]
        metrics = [set(r.data.metrics) for r in runs]
        differs = sorted((set.union(*params) - set.intersection(*params)) | (set.union(*metrics) - set.intersection(*metrics)))
        out.append({"name": exp.name, "target": target, "runs": len(runs), "params": len(run.data.params),
                    "metrics": len(run.data.metrics), "differs": differs})
    return out


def record_suite(client: MlflowClient, experiment: str, artifact_root: Path, run_name: str, params: dict,
                 metrics: dict[str, float], files: list[Path]) -> str:
    exp = client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(
        experiment, artifact_location=(artifact_root / "mlflow-artifacts").resolve().as_uri())
    run = client.create_run(exp_id, run_name=run_name, tags={"target": "cpu", "measurement": "measured"})
    client.log_batch(run.info.run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()],
                     metrics=[Metric(k, float(v), 0, 0) for k, v in metrics.items()
                              if v is not None and math.isfinite(v)])
    for f in files:
        client.log_artifact(run.info.run_id, str(f))
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id
