"""plan.json's file and the run folder it lives in: build_plan fills the typed record
(plan/schema.py) from the stage outputs, write_plan stores it (plan/plan_file.py reads it).

A run writes into a hidden staging folder and renames it into place only when everything is
written, so a failed run leaves no half-written plan behind."""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.errors import MetaInferError
from metainfer_core.plan import run_warnings
from metainfer_core.plan.plan_file import NODES_FILE
from metainfer_core.plan.schema import PLAN_SCHEMA, Plan


def _clean(x: Any) -> Any:
    """JSON-safe: NaN/inf become null, tuples lists, numpy scalars plain numbers."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and callable(x.item):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


class RunFolder:
    def __init__(self, artifacts: Path, run_name: str):
        self.final = artifacts / "runs" / run_name
        self.staging = artifacts / "runs" / f".{run_name}.partial"
        shutil.rmtree(self.staging, ignore_errors=True)
        self.staging.mkdir(parents=True)

    def path(self, name: str) -> Path:
        return self.staging / name

    def write_json(self, name: str, data: Any) -> Path:
        p = self.path(name)
        p.write_text(json.dumps(_clean(data), indent=2, sort_keys=False))
        return p

    def commit(self) -> Path:
        if self.final.exists():
            shutil.rmtree(self.final)
        os.replace(self.staging, self.final)
        return self.final

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


# plan.json stays a page a person reads: the candidates' per-node lists (the nodes each action
# touches, the kernels left on the host and why) go to this side file in the same folder, which
# plan.json names under `node_lists`; read_plan() puts them back. The chosen plan's `actions`
# keep their `nodes` (the contract), each list on one line.
NODES_SCHEMA = "meta-infer/plan-nodes/v1"


def _readable_json(x: Any, level: int = 0, width: int = 120) -> str:
    """JSON indented by two spaces, except that a list of plain values, and any object or list
    that fits in `width` characters, stays on one line."""
    pad, end = "  " * (level + 1), "\n" + "  " * level
    one_line = json.dumps(x)
    if len(one_line) + len(pad) <= width or not isinstance(x, (dict, list)):
        return one_line
    if isinstance(x, dict) and x:
        return "{\n" + ",\n".join(f"{pad}{json.dumps(k)}: {_readable_json(v, level + 1)}"
                                    for k, v in x.items()) + end + "}"
    if isinstance(x, list) and any(isinstance(v, (dict, list)) for v in x):
        return "[\n" + ",\n".join(pad + _readable_json(v, level + 1) for v in x) + end + "]"
    return json.dumps(x)


def split_node_lists(plan: dict) -> tuple[dict, dict]:
    """(plan.json's content, plan_nodes.json's): each candidate's action `nodes` become `n_nodes`
    and its binding's `host` list `host_kernels`, the lists kept in the second, in candidate order."""
    lists, candidates = [], []
    for c in plan.get("candidates") or []:
        actions = [{**{k: v for k, v in a.items() if k != "nodes"}, "n_nodes": len(a.get("nodes") or [])}
                   for a in c.get("actions") or []]
        binding = dict(c.get("binding") or {})
        host = binding.pop("host", None)
        if host is not None:
            binding["host_kernels"] = len(host)
        candidates.append({**c, "actions": actions, **({"binding": binding} if "binding" in c else {})})
        lists.append({"label": c.get("label"), "action_nodes": [a.get("nodes") or [] for a in c.get("actions") or []],
                      "binding_host": host})
    return {**plan, "candidates": candidates, "node_lists": NODES_FILE}, {"schema": NODES_SCHEMA, "candidates": lists}


def write_plan(folder: Path, plan: Plan) -> Path:
    """plan.json and its side file plan_nodes.json, each replaced atomically (the side file first)."""
    readable, lists = split_node_lists(_clean(plan.to_dict()))
    for name, text in ((NODES_FILE, json.dumps(lists, indent=1)), ("plan.json", _readable_json(readable))):
        tmp = folder / f"{name}.tmp"
        tmp.write_text(text + "\n")
        os.replace(tmp, folder / name)
    return folder / "plan.json"


def metrics_of(v: dict | None) -> dict:
    keys = ("latency_ms", "p90_ms", "peak_mem_bytes", "accuracy_loss", "calibration_loss", "compile_s")
    out = {k: (v or {}).get(k) for k in keys}
    if (v or {}).get("point_losses"):
        out["point_losses"] = v["point_losses"]
    return out


def shapes_record(served, chosen_v: dict | None, across) -> dict | None:
    """plan.json's `shapes`: the range and, per verified point, its weight, the chosen plan's
    accuracy loss there and the default's and the plan's latency timed alone (decide/range_check)."""
    if served is None or not served.general:
        return None
    timed = {row["point"]: row for row in (across.as_dict() if across is not None else [])}
    losses = {"opt": (chosen_v or {}).get("accuracy_loss"), **((chosen_v or {}).get("point_losses") or {})}
    points = []
    for p in served.points:
        row = timed.get(p.name, {})
        points.append({"name": p.name, "shapes": served.tuned if p.name == "opt" else p.shapes, "weight": p.weight,
                       "default_ms": row.get("default_ms"), "plan_ms": row.get("plan_ms"),
                       "ratio": row.get("ratio"), "pays": row.get("pays"),
                       "accuracy_loss": losses.get(p.name) if chosen_v is not None else None})
    return {**served.as_dict(), "points": points,
            "aggregate_ratio": across.aggregate_ratio if across is not None else None}


def silent_problems(info, outcome, verified, chosen_v: dict | None) -> list[str]:
    """plan.json warnings from the stage outputs (metainfer_core.plan.run_warnings): the default's fit
    in the device memory, and the predictor's error on the plans verify measured."""
    measured = verified is not None and verified.baseline.ok
    default_peak = verified.baseline.peak_mem_bytes if measured else outcome.default.peak_mem_bytes
    memory = run_warnings.default_memory(default_peak, info.memory_limit_bytes,
                                         chosen_v["peak_mem_bytes"] if chosen_v else None, measured)
    pairs = [("default", outcome.default.latency_ms, verified.baseline.latency_ms)] if measured else []
    pairs += [(v.label, c.latency_ms, v.latency_ms) for c, v in zip(verified.plans, verified.candidates) if v.ok] \
        if verified else []
    return [w for w in (memory, run_warnings.predictor_error(pairs)) if w]


def build_plan(*, settings, info, prepared, profile_report, cost_model_meta, outcome, verified, decision, chosen,
               timings: dict, artifact: Path, mlflow_run_id: str | None, budget=None, calibration: dict | None = None,
               execution_path: dict | None = None, verify_remote: dict | None = None,
               serving: dict | None = None) -> Plan:
    """plan.json's record (plan/schema.py) from the stage outputs, assembled in this one place;
    numbers come out plain (numpy scalars as Python numbers, NaN and infinities as None), as the
    file holds them.
    calibration: the verified runs' record in the fingerprint library (feedback); execution_path:
    the chosen plan's (deployable.path_record); serving: how it is served (decide/serve.py's
    record); verify_remote: which flow run, pool and host
    measured the plans (deploy.remote_verify), when another host did."""
    measurement = info.measurement
    baseline = verified.baseline.as_dict() if verified else None
    chosen_v = verified.candidates[decision.chosen].as_dict() if verified and decision.chosen is not None else None
    confirmed = next((c for c in decision.confirmations if c.pays and c.label == chosen_v["label"]), None) \
        if chosen_v is not None else None
    if confirmed is not None:   # the figures of the plan and the default timed alone together
        baseline = baseline | {"latency_ms": confirmed.default_ms, "p90_ms": confirmed.p90_default_ms}
        chosen_v = chosen_v | {"latency_ms": confirmed.plan_ms, "p90_ms": confirmed.p90_plan_ms}
    alone = decision.default_alone
    if baseline is not None and chosen_v is None and alone is not None and not alone.error:
        baseline = baseline | {"latency_ms": alone.default_ms, "p90_ms": alone.p90_default_ms}
    pred_source = chosen if chosen is not None else outcome.default
    plan = {
        "schema": PLAN_SCHEMA,
        "model": {"name": prepared.name, "source": prepared.source, "sha256": prepared.sha256,
                  "nodes_before": prepared.normalized.nodes_before, "nodes_after": prepared.normalized.nodes_after,
                  "symbolic_dims": prepared.normalized.symbolic_dims},
        "target": {"name": info.name, "measurement": measurement, "firmware": info.firmware, "driver": info.driver,
                   "runtime": info.runtime, "memory_limit_bytes": info.memory_limit_bytes,
                   "memory_budget_bytes": info.memory_budget,
                   "note": "latencies are simulated by the target's spec model" if measurement == "modeled"
                   else "latencies are measured on this machine"},
        "fingerprint_version": info.fingerprint_version,
        "predictor": {"n_records": cost_model_meta.n_records, "val_mape": cost_model_meta.val_mape},
        "weights": settings.weights.model_dump(),
        "accuracy_bound": settings.accuracy.max_loss,
        "accuracy_samples": {"calibration": len(prepared.feeds), "judging": len(prepared.judge.feeds),
                             "judged_on": prepared.judged_on},
        "shapes": shapes_record(prepared.served, chosen_v, decision.across),
        "decision": decision.decision,
        "reason": decision.reason,
        "actions": [st.as_dict() for st in chosen.steps] if chosen is not None else [],
        "predicted": {"latency_ms": pred_source.latency_ms, "peak_mem_bytes": pred_source.peak_mem_bytes,
                      "accuracy_loss": pred_source.accuracy_loss, "score": pred_source.score},
        "measured": metrics_of(chosen_v or baseline),
        "baseline": metrics_of(baseline) | {"predicted_latency_ms": outcome.default.latency_ms,
                                            "predicted_peak_mem_bytes": outcome.default.peak_mem_bytes},
        "candidates": [
            {"label": v.label, "actions": [st.as_dict() for st in c.steps], "predicted_latency_ms": c.latency_ms,
             "predicted_score": c.score, "predicted_peak_mem_bytes": c.peak_mem_bytes,
             "predicted_accuracy_loss": c.accuracy_loss, "measured": metrics_of(v.as_dict()), "error": v.error,
             "verdict": decision.verdicts.get(v.label),
             "execution_path": ExecutionPath.of(c.model).label,
             "binding": c.binding}
            for c, v in zip(verified.plans, verified.candidates)] if verified else [],
        "accuracy_repairs": verified.repairs if verified else [],
        "confirmations": [c.as_dict() for c in decision.confirmations],
        "default_alone": decision.default_alone.as_dict() if decision.default_alone is not None else None,
        "warnings": [f"accuracy: {w}" for w in prepared.warnings]
                    + ([f"reference outputs {prepared.degenerate} are near-constant on the validation inputs: accuracy "
                      "figures for them mean little; give real inputs with data.inputs=<file.npz>"]
                     if prepared.degenerate else [])
                    + [f"normalize: {w}" for w in prepared.normalized.warnings]
                    + (list(prepared.served.dropped) if prepared.served is not None else [])
                    + [f"budget: {w}" for w in (budget.warnings if budget is not None else [])]
                    + [f"search: {w}" for w in outcome.extra.get("warnings", [])]
                    + silent_problems(info, outcome, verified, chosen_v),
        "profile": {"measured": profile_report.measured, "reused": profile_report.reused,
                    "skipped": profile_report.skipped[:20], "left": profile_report.left},
        "search": ({"evaluated": outcome.result.evaluated, "levels": outcome.result.levels,
                    "depth": outcome.result.depth, "skipped": outcome.result.skipped,
                    "dive_stalled_at": outcome.result.dive_stalled_at,
                    "duplicates": outcome.result.duplicates, "pruned": outcome.result.pruned,
                    "illegal": outcome.result.illegal, "failed": outcome.result.failed,
                    "stopped_by_budget": outcome.result.stopped_by_budget, "timings": outcome.result.timings,
                    "execution_paths": outcome.extra.get("execution_paths", {}),
                    "anchor": outcome.extra.get("anchor"), "memory": outcome.extra.get("memory", {})}
                   if outcome.result else None),
        "timings": timings,
        "budget": budget.as_dict() if budget is not None else None,
        "artifact": str(artifact),
        "mlflow_run_id": mlflow_run_id,
        "calibration": calibration,
        "execution_path": execution_path,
    }
    if serving is not None:
        plan["serving"] = serving
    if verify_remote is not None:
        plan["verify_remote"] = verify_remote
    return Plan.of(_clean(plan), "build_plan's plan")
