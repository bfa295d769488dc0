"""flows/adapt_many.py's tasks: one task per model that runs the whole adapt flow (a nested flow
run, so every model keeps its own MLflow run and plan folder), the task runner that maps it,
and the summary table."""
from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ProcessPoolTaskRunner, TaskRunner, ThreadPoolTaskRunner

from app.settings import RunSettings
from metainfer_core.plan import run_warnings
from metainfer_core.plan.plan_file import read_plan

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ("model", "decision", "actions", "default_ms", "chosen_ms", "speedup", "accuracy_loss", "plan")


def task_runner(s: RunSettings) -> TaskRunner:
    """task_runner.kind: threads (default), process, or dask (a local cluster or task_runner.dask_address)."""
    r = s.task_runner
    if r.kind == "threads":
        return ThreadPoolTaskRunner(max_workers=r.max_workers)
    if r.kind == "process":
        return ProcessPoolTaskRunner(max_workers=r.max_workers)
    import logging

    from prefect_dask import DaskTaskRunner  # late: dask is heavy and only this kind needs it

    logging.getLogger("distributed").setLevel(logging.WARNING)   # the local cluster's start/stop chatter

    if r.dask_address:
        return DaskTaskRunner(address=r.dask_address)
    return DaskTaskRunner(cluster_kwargs={"n_workers": r.max_workers, "threads_per_worker": 1, "processes": True,
                                          "dashboard_address": None})


def init_tracking_store(s: RunSettings) -> None:
    """Create the MLflow store before the mapped runs write to it: first runs creating one
    SQLite store at once race in its schema migration."""
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=s.tracking.mlflow_uri).search_experiments(max_results=1)


@cache
def _adapt_flow():
    # flows/ is a folder of scripts, not a package: load flows/adapt.py by path, once per process
    spec = importlib.util.spec_from_file_location("metainfer_flow_adapt", ROOT / "flows" / "adapt.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.adapt_flow


@task(name="adapt_model", cache_policy=NO_CACHE)
def adapt_model_task(raw: dict) -> dict:
    """Adapt one model (the same flow as flows/adapt.py); returns its plan.json path."""
    return {"model": raw["model"]["name"], "plan": _adapt_flow()(raw)}


def summary_row(plan_path: str) -> dict:
    plan = read_plan(Path(plan_path))
    default, chosen = plan.baseline.latency_ms, plan.measured.latency_ms
    return {"model": plan.model.name, "decision": plan.decision,
            "actions": "+".join(a.kind for a in plan.actions) or "-",
            "default_ms": default, "chosen_ms": chosen,
            "speedup": default / chosen if default and chosen else None,
            "accuracy_loss": plan.measured.accuracy_loss, "plan": plan_path,
            "warnings": [w for w in plan.warnings if w.startswith(run_warnings.PREFIXES)]}


def plan_signature(plan_path: str) -> tuple:
    """What makes two runs' plans the same: the decision and the exact actions (kind, nodes, params)."""
    plan = read_plan(Path(plan_path))
    return plan.decision, json.dumps(plan.to_dict()["actions"], sort_keys=True)


def markdown_table(rows: list[dict], target: str, measurement: str) -> str:
    def cell(v):
        return f"{v:.4g}" if isinstance(v, float) else ("-" if v is None else str(v))

    note = " (latencies modeled by the simulator, not measured)" if measurement == "modeled" else ""
    lines = [f"# adapt_many on {target}{note}", "", "| " + " | ".join(COLUMNS) + " |",
             "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r[c]) for c in COLUMNS) + " |" for r in rows]
    # what no stage logged while it ran (an adapt says these in its own end-of-run summary)
    warned = [f"WARNING: {r['model']}: {w}" for r in rows for w in r.get("warnings") or []]
    return "\n".join(lines + ([""] + warned if warned else [])) + "\n"
