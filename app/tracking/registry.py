"""The MLflow Model Registry: one registered model per (model, target) pair, its alias `active` on
the plan in service; each version remembers the one it replaced, for rollback, and the clean-up
keeps both runs' folders."""
from __future__ import annotations

from pathlib import Path

from mlflow.exceptions import MlflowException

from app.settings import RunSettings
from app.tracking.clients import logs_models, registry_client
from metainfer_core.errors import MetaInferError

ACTIVE = "active"


def registered_name(model_name: str, target: str) -> str:
    return f"{model_name}.{target}"


def promote(s: RunSettings, run_id: str, plan: dict, model_name: str) -> dict:
    """Keep the (model, target) pair's active plan in the MLflow Model Registry (alias
    `active`). An adapted plan becomes a new version and takes the alias; a rolled-back or
    skipped run leaves the active plan as it is (registering the default when there is none
    yet). Each version remembers the version it replaced, for flows/rollback.py."""
    client = registry_client(s)
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
    local = plan.get("artifact") and not logs_models(s)       # the run folder's model.onnx
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
    client = registry_client(s)
    name, previous = registry["registered_model"], registry.get("previous_version")
    if previous:
        client.set_registered_model_alias(name, ACTIVE, previous)
    else:
        client.delete_registered_model_alias(name, ACTIVE)
    client.delete_model_version(name, registry["active_version"])


def roll_back_active(s: RunSettings, model_name: str) -> tuple[str, str, str]:
    """Move `active` back to the version the current one replaced: (name, from, to)."""
    client = registry_client(s)
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


def active_plans(s: RunSettings) -> list:
    """The `active` model versions of every registered (model, target) pair of this target."""
    client = registry_client(s)
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
    client = registry_client(s)
    return (Path(client.download_artifacts(version.run_id, "model.onnx", str(folder))),
            Path(client.download_artifacts(version.run_id, "default.onnx", str(folder))))


def restore_default(s: RunSettings, version, reason: str) -> str:
    """Register the default path of the plan's run as a new version and make it active."""
    client = registry_client(s)
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
    client = registry_client(s)
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
