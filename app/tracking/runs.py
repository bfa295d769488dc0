"""MLflow: one run per adapt, in one experiment per model (the target a tag and a param, so a
model's runs on every target share one runs table), with params, metrics, the tags
fingerprint_version / firmware / measurement, and the plan as artifacts (the models too with a
tracking server; embedded, the registry points at the run folder's model.onnx); one run per
report-style flow (onboarding, re-profiling, training)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from mlflow.entities import Metric, RunTag
from mlflow.tracking import MlflowClient

from app.settings import RunSettings
from app.tracking.clients import logs_models, runs_client
from app.tracking.experiments import experiment_id, experiment_name, legacy_experiment_name
from app.tracking.masking import mask_secrets, masked_params
from app.tracking.reaping import fail_dead_runs, process_tag
from app.tracking.registry import promote, unpromote
from metainfer_core.plan.record import write_plan
from metainfer_core.plan.report import plan_name, speedup
from metainfer_core.plan.schema import Plan

# settings that do not define an adapt run (other flows' inputs): not logged as its params
NOT_ADAPT = ("feedback", "reprofile", "task_runner", "models", "targets", "debug")
# The chosen model and the default path: kept once. With embedded tracking they stay in the run
# folder (the registry points there); a tracking server also gets them, for the fleet's hosts.
MODEL_FILES = ("model.onnx", "default.onnx")


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def start_run(s: RunSettings, raw: dict, model_name: str, run_name: str) -> str:
    client = runs_client(s)
    exp_id = experiment_id(client, s, experiment_name(s, model_name))
    # tag `target` (and param `target.name`): the runs table's column that tells the model's targets apart
    run = client.create_run(exp_id, run_name=run_name, tags={"model": model_name, "target": s.target.name,
                                                             "measurement": s.target.measurement,
                                                             "process": process_tag()})
    legacy = client.get_experiment_by_name(legacy_experiment_name(s, model_name))
    fail_dead_runs(client, [exp_id] + ([legacy.experiment_id] if legacy else []), run.info.run_id)
    params = masked_params({k: v for k, v in _flatten({k: v for k, v in raw.items() if k not in NOT_ADAPT}).items()
                            if not k.startswith("target.spec.")})
    params += masked_params({f"target.spec.{k}": v for k, v in s.target.spec.items()})
    for i in range(0, len(params), 100):
        client.log_batch(run.info.run_id, params=params[i:i + 100])
    return run.info.run_id


def finish_run(s: RunSettings, run_id: str, plan: Plan, folder: Path, model_name: str) -> Plan:
    """Log the run's figures and files, move the registry's `active` alias when the plan was
    adapted, and record the registry state in plan.json. Returns the final plan."""
    client = runs_client(s)
    if logs_models(s):
        client.log_artifact(run_id, str(folder / "model.onnx"))
    plan = plan.model_copy(update={"registry": promote(s, run_id, plan.to_dict(), model_name)})
    try:
        _log_outcome(client, s, run_id, plan, folder)
    except BaseException:       # interrupted or failed after the registry moved: put it back
        unpromote(s, plan.registry)
        raise
    return plan


def _log_outcome(client: MlflowClient, s: RunSettings, run_id: str, plan: Plan, folder: Path) -> None:
    write_plan(folder, plan)
    content, target = plan.to_dict(), plan.target
    tags = [RunTag("fingerprint_version", plan.fingerprint_version), RunTag("firmware", target.firmware),
            RunTag("driver", target.driver), RunTag("runtime", target.runtime),
            RunTag("decision", plan.decision), RunTag("measurement", target.measurement),
            RunTag("active_version", str(plan.registry["active_version"])),
            RunTag("execution_path", (plan.execution_path or {}).get("label", "onnxruntime")),
            RunTag("plan", plan_name(content["actions"])),         # the chosen actions, as the runs table shows them
            RunTag("actions", ",".join(a.kind for a in plan.actions) or "none"),
            RunTag("warnings", mask_secrets("; ".join(plan.warnings))[:5000] or "none")]
    if (folder / "plan.md").is_file():      # the run's description in the MLflow UI
        tags.append(RunTag("mlflow.note.content", (folder / "plan.md").read_text()[:8000]))
    metrics = []
    for section in ("predicted", "measured", "baseline", "timings"):
        for k, v in content[section].items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                metrics.append(Metric(f"{section}.{k}", float(v), 0, 0))
    chosen_ms, default_ms = plan.measured.latency_ms, plan.baseline.latency_ms
    if chosen_ms and default_ms:
        metrics.append(Metric("speedup", default_ms / chosen_ms, 0, 0))
    served = plan.serving or {}
    for who in ("plan", "default"):      # under the deployment's load (serving=throughput)
        figures = served.get(who) or {}
        for k in ("throughput_per_s", "p50_ms", f"p{served.get('percentile', 99):g}_ms", "score"):
            if isinstance(figures.get(k), (int, float)):
                metrics.append(Metric(f"serving.{who}.{k}", float(figures[k]), 0, 0))
    if served:
        tags.append(RunTag("serving", f"{served.get('mode')}: {served.get('concurrency')} at once, "
                                      f"{served.get('cores')} cores"))
    metrics.append(Metric("n_actions", float(len(plan.actions)), 0, 0))
    metrics.append(Metric("n_warnings", float(len(plan.warnings)), 0, 0))
    client.log_batch(run_id, metrics=metrics, tags=tags)
    client.update_run(run_id, name=run_title(content, Path(plan.artifact).parent.name))   # the final folder's name
    for f in sorted(folder.iterdir()):
        if f.name != "model.onnx" and (f.name not in MODEL_FILES or logs_models(s)):
            client.log_artifact(run_id, str(f))
    client.set_terminated(run_id, "FINISHED")


def run_title(plan: dict, folder_name: str) -> str:
    """The MLflow run name once the run is done: what it decided first (the runs table cuts long
    names), then model@target and plan, then the run folder's time and id, which keep it unique."""
    sp = speedup(plan)
    gain = f" {sp:.2f}x" if sp and plan["decision"] == "adapted" else ""
    parts = folder_name.split("-")         # <date>-<time>-<model>-<target>-<id>
    stamp = f"{parts[1]}-{parts[-1]}" if len(parts) > 2 else folder_name
    return (f"{plan['decision']}{gain} {plan['model']['name']}@{plan['target']['name']} "
            f"{plan_name(plan['actions'])} {stamp}")


def fail_run(s: RunSettings, run_id: str, message: str, killed: bool = False) -> None:
    """End the run FAILED, or KILLED when an interrupt (SIGINT, SIGTERM) stopped it."""
    client = runs_client(s)
    client.set_tag(run_id, "error", mask_secrets(message)[:5000])
    client.set_terminated(run_id, "KILLED" if killed else "FAILED")


def record_report(s: RunSettings, kind: str, run_name: str, raw: dict, metrics: dict[str, float], tags: dict[str, str],
                  files: list[Path]) -> str:
    """One MLflow run for a report-style flow (onboarding, re-profiling) in `meta-infer/<kind>@<target>`."""
    client = runs_client(s)
    name = f"{s.tracking.experiment}/{kind}@{s.target.name}"
    exp_id = experiment_id(client, s, name)
    run = client.create_run(exp_id, run_name=run_name,
                            tags={"target": s.target.name, **{k: mask_secrets(str(v)) for k, v in tags.items()}})
    params = masked_params(_flatten({"target": raw["target"], "profile": raw["profile"]}))
    client.log_batch(run.info.run_id, params=params[:100],
                     metrics=[Metric(k, float(v), 0, 0) for k, v in metrics.items()])
    for f in files:
        client.log_artifact(run.info.run_id, str(f))
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id
