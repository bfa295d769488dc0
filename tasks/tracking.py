"""MLflow: one run per adapt, in one experiment per model (the target a tag and a param, so a
model's runs on every target share one runs table), with params, metrics, the tags
fingerprint_version / firmware / measurement, and the plan as artifacts (the models too with a
tracking server; embedded, the registry points at the run folder's model.onnx)."""
from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from metainfer_core.errors import MetaInferError
from metainfer_core.plan.record import write_plan
from metainfer_core.plan.report import plan_name, speedup
from metainfer_core.plan.schema import Plan
from tasks.settings import RunSettings

ACTIVE = "active"
# settings that do not define an adapt run (other flows' inputs): not logged as its params
NOT_ADAPT = ("feedback", "reprofile", "task_runner", "models", "targets", "debug")
# the MLflow UI opens an experiment in its model-training view (not the GenAI one) with this tag
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


# scheme://user:PASSWORD@host: the password of a database or server URL (a fleet's PostgreSQL)
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:)[^@\s/]+(?=@)")
_SECRET_KEY = re.compile(r"(password|passwd|secret|token|api_key)$", re.IGNORECASE)


def mask_secrets(text: str) -> str:
    """`text` with every password in a URL replaced by ***."""
    return _URL_PASSWORD.sub(r"\g<head>***", text)


def _params(flat: dict[str, Any]) -> list[Param]:
    """MLflow params of flattened settings: values cut to MLflow's limit, secrets masked (a URL's
    password, the value of a key named like a password or token)."""
    return [Param(k, "***" if _SECRET_KEY.search(k.rsplit(".", 1)[-1]) and v else mask_secrets(str(v))[:6000])
            for k, v in flat.items()]


def _client(s: RunSettings) -> MlflowClient:
    return MlflowClient(tracking_uri=s.tracking.mlflow_uri)


def _experiment_id(client: MlflowClient, s: RunSettings, name: str) -> str:
    """The experiment's id, created when missing. Embedded tracking keeps artifacts under
    paths.artifacts; a tracking server stores them where it is configured to (its
    --artifacts-destination), so every host of a fleet sees the same files."""
    exp = client.get_experiment_by_name(name)
    if exp:
        return exp.experiment_id
    remote = s.tracking.mlflow_uri.startswith(("http://", "https://"))
    try:
        return client.create_experiment(
            name, artifact_location=None if remote else (Path(s.paths.artifacts) / "mlflow-artifacts").as_uri(),
            tags=dict([EXPERIMENT_KIND]))
    except MlflowException:     # another run (adapt_many, a fleet host) created it meanwhile
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


# The chosen model and the default path: kept once. With embedded tracking they stay in the run
# folder (the registry points there); a tracking server also gets them, for the fleet's hosts.
MODEL_FILES = ("model.onnx", "default.onnx")


def _logs_models(s: RunSettings) -> bool:
    return s.tracking.mlflow_uri.startswith(("http://", "https://"))


def experiment_name(s: RunSettings, model_name: str) -> str:
    """One experiment per model: its runs on every target line up in one runs table (tag and
    param `target` tell them apart). Runs stored before this, in `<experiment>/<model>@<target>`,
    stay there untouched and readable; nothing reads runs by experiment but the dead-run sweep
    (which also looks there) and the bench's alignment check (its runs are new): the registry, which
    rollback, feedback and re-profiling use, is keyed by `<model>.<target>` and points at runs by id."""
    return f"{s.tracking.experiment}/{model_name}"


def _legacy_experiment_name(s: RunSettings, model_name: str) -> str:
    return f"{s.tracking.experiment}/{model_name}@{s.target.name}"


def _process() -> str:
    """This process, so that a later run can tell whether it still lives: host, pid and start
    time (a pid is re-used once its process has gone)."""
    return f"{socket.gethostname()}:{os.getpid()}:{_started(os.getpid())}"


def _started(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]    # field 22: starttime
    except (OSError, IndexError):
        return ""


def _gone(process: str) -> bool:
    host, _, rest = process.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False        # another host's run: it may well be alive
    return _started(int(pid)) != started


def fail_dead_runs(client: MlflowClient, exp_ids: list[str], by: str) -> list[str]:
    """Mark FAILED the runs of the experiments left RUNNING by a process of this host that has
    gone (SIGKILL, out of memory, power loss): nothing else would end them."""
    dead = [r for r in client.search_runs(exp_ids, "attributes.status = 'RUNNING'", max_results=1000)
            if r.data.tags.get("process") and _gone(r.data.tags["process"])]
    for r in dead:
        client.set_tag(r.info.run_id, "error", f"its process ({r.data.tags['process']}) ended without ending the run "
                                               f"(killed?); marked FAILED by run {by}")
        client.set_terminated(r.info.run_id, "FAILED")
    return [r.info.run_id for r in dead]


def start_run(s: RunSettings, raw: dict, model_name: str, run_name: str) -> str:
    client = _client(s)
    exp_id = _experiment_id(client, s, experiment_name(s, model_name))
    # tag `target` (and param `target.name`): the runs table's column that tells the model's targets apart
    run = client.create_run(exp_id, run_name=run_name, tags={"model": model_name, "target": s.target.name,
                                                             "measurement": s.target.measurement,
                                                             "process": _process()})
    legacy = client.get_experiment_by_name(_legacy_experiment_name(s, model_name))
    fail_dead_runs(client, [exp_id] + ([legacy.experiment_id] if legacy else []), run.info.run_id)
    params = _params({k: v for k, v in _flatten({k: v for k, v in raw.items() if k not in NOT_ADAPT}).items()
                      if not k.startswith("target.spec.")})
    params += _params({f"target.spec.{k}": v for k, v in s.target.spec.items()})
    for i in range(0, len(params), 100):
        client.log_batch(run.info.run_id, params=params[i:i + 100])
    return run.info.run_id


def finish_run(s: RunSettings, run_id: str, plan: Plan, folder: Path, model_name: str) -> Plan:
    """Log the run's figures and files, move the registry's `active` alias when the plan was
    adapted, and record the registry state in plan.json. Returns the final plan."""
    client = _client(s)
    if _logs_models(s):
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
    metrics.append(Metric("n_actions", float(len(plan.actions)), 0, 0))
    metrics.append(Metric("n_warnings", float(len(plan.warnings)), 0, 0))
    client.log_batch(run_id, metrics=metrics, tags=tags)
    client.update_run(run_id, name=run_title(content, Path(plan.artifact).parent.name))   # the final folder's name
    for f in sorted(folder.iterdir()):
        if f.name != "model.onnx" and (f.name not in MODEL_FILES or _logs_models(s)):
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
    client = _client(s)
    client.set_tag(run_id, "error", mask_secrets(message)[:5000])
    client.set_terminated(run_id, "KILLED" if killed else "FAILED")


def registered_name(model_name: str, target: str) -> str:
    return f"{model_name}.{target}"


def promote(s: RunSettings, run_id: str, plan: dict, model_name: str) -> dict:
    """Keep the (model, target) pair's active plan in the MLflow Model Registry (alias
    `active`). An adapted plan becomes a new version and takes the alias; a rolled-back or
    skipped run leaves the active plan as it is (registering the default when there is none
    yet). Each version remembers the version it replaced, for flows/rollback.py."""
    client = MlflowClient(tracking_uri=s.tracking.mlflow_uri, registry_uri=s.tracking.mlflow_uri)
    name = registered_name(model_name, s.target.name)
    try:
        client.get_registered_model(name)
    except MlflowException:
        client.create_registered_model(name, tags={"model": model_name, "target": s.target.name})
    try:
        active = client.get_model_version_by_alias(name, ACTIVE)
    except MlflowException:
        active = None
    if plan["decision"] != "adapted" and active is not None:
        return {"registered_model": name, "active_version": str(active.version), "changed": False}
    local = plan.get("artifact") and not _logs_models(s)       # the run folder's model.onnx
    version = client.create_model_version(
        name, source=str(plan["artifact"]) if local else f"runs:/{run_id}/model.onnx", run_id=run_id,
        tags={"decision": plan["decision"], "fingerprint_version": plan["fingerprint_version"],
              "previous_active": str(active.version) if active else ""})
    client.set_registered_model_alias(name, ACTIVE, version.version)
    return {"registered_model": name, "active_version": str(version.version), "changed": True,
            "previous_version": str(active.version) if active else None}


def unpromote(s: RunSettings, registry: dict) -> None:
    """Undo promote(): the new version goes, `active` returns to the version it replaced."""
    if not registry.get("changed"):
        return
    client = MlflowClient(tracking_uri=s.tracking.mlflow_uri, registry_uri=s.tracking.mlflow_uri)
    name, previous = registry["registered_model"], registry.get("previous_version")
    if previous:
        client.set_registered_model_alias(name, ACTIVE, previous)
    else:
        client.delete_registered_model_alias(name, ACTIVE)
    client.delete_model_version(name, registry["active_version"])


def roll_back_active(s: RunSettings, model_name: str) -> tuple[str, str, str]:
    """Move `active` back to the version the current one replaced: (name, from, to)."""
    client = MlflowClient(tracking_uri=s.tracking.mlflow_uri, registry_uri=s.tracking.mlflow_uri)
    name = registered_name(model_name, s.target.name)
    try:
        active = client.get_model_version_by_alias(name, ACTIVE)
    except MlflowException:
        raise MetaInferError(f"No active plan for model {model_name!r} on target {s.target.name!r} in "
                             f"{s.tracking.mlflow_uri}: run flows/adapt.py for this pair first.") from None
    previous = active.tags.get("previous_active") or ""
    if not previous:
        raise MetaInferError(f"The active plan of {name} (version {active.version}) replaced no earlier plan: "
                             "there is nothing to roll back to.")
    client.set_registered_model_alias(name, ACTIVE, previous)
    client.set_model_version_tag(name, previous, "restored_from", str(active.version))
    return name, str(active.version), previous


def record_report(s: RunSettings, kind: str, run_name: str, raw: dict, metrics: dict[str, float], tags: dict[str, str],
                  files: list[Path]) -> str:
    """One MLflow run for a report-style flow (onboarding, re-profiling) in `meta-infer/<kind>@<target>`."""
    client = _client(s)
    name = f"{s.tracking.experiment}/{kind}@{s.target.name}"
    exp_id = _experiment_id(client, s, name)
    run = client.create_run(exp_id, run_name=run_name,
                            tags={"target": s.target.name, **{k: mask_secrets(str(v)) for k, v in tags.items()}})
    params = _params(_flatten({"target": raw["target"], "profile": raw["profile"]}))
    client.log_batch(run.info.run_id, params=params[:100],
                     metrics=[Metric(k, float(v), 0, 0) for k, v in metrics.items()])
    for f in files:
        client.log_artifact(run.info.run_id, str(f))
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id


def active_plans(s: RunSettings) -> list:
    """The `active` model versions of every registered (model, target) pair of this target."""
    client = MlflowClient(tracking_uri=s.tracking.mlflow_uri, registry_uri=s.tracking.mlflow_uri)
    out = []
    for rm in client.search_registered_models(filter_string=f"tags.target = '{s.target.name}'"):
        try:
            out.append(client.get_model_version_by_alias(rm.name, ACTIVE))
        except MlflowException:
            continue
    return out


def download_plan(s: RunSettings, version, folder: Path) -> tuple[Path, Path]:
    """The active plan's model and the default path it was verified against."""
    if not version.source.startswith("runs:/"):        # embedded: the files of the plan's run folder
        run_folder = Path(version.source).parent
        return run_folder / "model.onnx", run_folder / "default.onnx"
    client = MlflowClient(tracking_uri=s.tracking.mlflow_uri, registry_uri=s.tracking.mlflow_uri)
    return (Path(client.download_artifacts(version.run_id, "model.onnx", str(folder))),
            Path(client.download_artifacts(version.run_id, "default.onnx", str(folder))))


def restore_default(s: RunSettings, version, reason: str) -> str:
    """Register the default path of the plan's run as a new version and make it active."""
    client = MlflowClient(tracking_uri=s.tracking.mlflow_uri, registry_uri=s.tracking.mlflow_uri)
    source = (f"runs:/{version.run_id}/default.onnx" if version.source.startswith("runs:/")
              else str(Path(version.source).with_name("default.onnx")))
    new = client.create_model_version(version.name, source=source, run_id=version.run_id,
                                      tags={"decision": "rolled_back", "reason": reason[:4000],
                                            "previous_active": str(version.version)})
    client.set_registered_model_alias(version.name, ACTIVE, new.version)
    return str(new.version)


def protected_runs(s: RunSettings) -> set[str]:
    """MLflow runs whose run folders a clean-up keeps: every pair's active plan and the plan it
    replaced (what flows/rollback.py restores)."""
    client = MlflowClient(tracking_uri=s.tracking.mlflow_uri, registry_uri=s.tracking.mlflow_uri)
    out = set()
    for rm in client.search_registered_models(max_results=1000):
        try:
            active = client.get_model_version_by_alias(rm.name, ACTIVE)
        except MlflowException:
            continue
        out.add(active.run_id)
        if active.tags.get("previous_active"):
            out.add(client.get_model_version(rm.name, active.tags["previous_active"]).run_id)
    return out
