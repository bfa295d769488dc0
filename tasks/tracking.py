"""MLflow: one run per adapt, in an experiment per (model, target), with params, metrics,
the tags fingerprint_version / firmware / measurement, and the plan and model as artifacts."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from metainfer_core.settings import Settings


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _client(s: Settings) -> MlflowClient:
    return MlflowClient(tracking_uri=s.tracking.mlflow_uri)


def experiment_name(s: Settings, model_name: str) -> str:
    return f"{s.tracking.experiment}/{model_name}@{s.target.name}"


def start_run(s: Settings, raw: dict, model_name: str, run_name: str) -> str:
    client = _client(s)
    name = experiment_name(s, model_name)
    exp = client.get_experiment_by_name(name)
    exp_id = exp.experiment_id if exp else client.create_experiment(
        name, artifact_location=(Path(s.paths.artifacts) / "mlflow-artifacts").as_uri())
    run = client.create_run(exp_id, run_name=run_name, tags={"model": model_name, "target": s.target.name,
                                                             "measurement": s.target.measurement})
    params = [Param(k, str(v)[:6000]) for k, v in _flatten(raw).items() if not k.startswith("target.spec.")]
    params += [Param(f"target.spec.{k}", str(v)[:6000]) for k, v in s.target.spec.items()]
    for i in range(0, len(params), 100):
        client.log_batch(run.info.run_id, params=params[i:i + 100])
    return run.info.run_id


def finish_run(s: Settings, run_id: str, plan: dict, folder: Path) -> None:
    client = _client(s)
    tags = [RunTag("fingerprint_version", plan["fingerprint_version"]), RunTag("firmware", plan["target"]["firmware"]),
            RunTag("driver", plan["target"]["driver"]), RunTag("runtime", plan["target"]["runtime"]),
            RunTag("decision", plan["decision"]), RunTag("measurement", plan["target"]["measurement"])]
    metrics = []
    for section in ("predicted", "measured", "baseline", "timings"):
        for k, v in (plan.get(section) or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                metrics.append(Metric(f"{section}.{k}", float(v), 0, 0))
    if plan["measured"].get("latency_ms") and plan["baseline"].get("latency_ms"):
        metrics.append(Metric("speedup", plan["baseline"]["latency_ms"] / plan["measured"]["latency_ms"], 0, 0))
    metrics.append(Metric("n_actions", float(len(plan["actions"])), 0, 0))
    client.log_batch(run_id, metrics=metrics, tags=tags)
    for f in sorted(folder.iterdir()):
        client.log_artifact(run_id, str(f))
    client.set_terminated(run_id, "FINISHED")


def fail_run(s: Settings, run_id: str, message: str) -> None:
    client = _client(s)
    client.set_tag(run_id, "error", message[:5000])
    client.set_terminated(run_id, "FAILED")
