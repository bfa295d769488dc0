"""The adapt pipeline's Prefect tasks, one per stage; each is a thin wrapper over
metainfer_core.stages. Settings travel as plain dicts (stable to hash and to serialise)."""
from __future__ import annotations

import time
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from metainfer_core import stages
from metainfer_core.deploy import path_record
from metainfer_core.plan import RunFolder, build_plan, read_plan, write_plan
from metainfer_core.plan_plots import write_plots
from metainfer_core.plan_report import plan_markdown, summary_text
from metainfer_core.budget import Budget
from metainfer_core.settings import Settings, validate_settings
from tasks.progress import say as _progress


def _settings(raw: dict) -> Settings:
    return validate_settings(raw)


def timed(budget: Budget, timings: dict[str, float], stage: str, task, *args, bounded: bool = False):
    """Run a stage's task, book its seconds in `timings` and the budget; a bounded stage gets
    its allowance as last argument. An overrun is said in the log (and plan.json)."""
    allowance = budget.allowance(stage)
    t = time.perf_counter()
    out = task(*args, allowance) if bounded else task(*args)
    timings[f"{stage}_s"] = time.perf_counter() - t
    overrun = budget.record(stage, timings[f"{stage}_s"])
    if overrun:
        _progress(f"WARNING: budget: {overrun}")
    return out


@task(name="normalize", cache_policy=NO_CACHE)
def normalize_task(raw: dict) -> stages.Prepared:
    s = _settings(raw)
    return stages.prepare(s, stages.make_backend(s).info.static_shapes, _progress)


@task(name="profile", cache_policy=NO_CACHE)
def profile_task(raw: dict, prepared: stages.Prepared, allowance_s: float | None = None):
    s = _settings(raw)
    return stages.profile_stage(s, prepared, stages.make_backend(s), _progress, allowance_s)


@task(name="train_predictor", cache_policy=NO_CACHE)
def train_predictor_task(raw: dict, fingerprint_version: str):
    return stages.train_stage(_settings(raw), fingerprint_version, _progress)


@task(name="search", cache_policy=NO_CACHE)
def search_task(raw: dict, prepared: stages.Prepared, cost_model, allowance_s: float | None = None
                ) -> stages.SearchOutcome:
    s = _settings(raw)
    return stages.search_stage(s, prepared, stages.make_backend(s), cost_model, _progress, allowance_s)


@task(name="verify", cache_policy=NO_CACHE)
def verify_task(raw: dict, prepared: stages.Prepared, outcome: stages.SearchOutcome, cost_model,
                allowance_s: float | None = None) -> stages.VerifyOutcome:
    s = _settings(raw)
    return stages.verify_stage(s, prepared, stages.make_backend(s), outcome, _progress, cost_model,
                               allowance_s=allowance_s)


def _plots(plan: dict, folder: RunFolder) -> list[tuple[str, str]]:
    try:
        return write_plots(plan, folder.staging)
    except Exception as exc:  # noqa: BLE001 - a plot is not worth the run: plan.md goes without it
        _progress(f"WARNING: plan.md's plots could not be drawn ({type(exc).__name__}: {exc})")
        return []


@task(name="rollback", cache_policy=NO_CACHE)
def rollback_task(raw: dict, run_name: str, mlflow_run_id: str, prepared: stages.Prepared, profile_report,
                  cost_model, outcome: stages.SearchOutcome, verified: stages.VerifyOutcome,
                  timings: dict, budget: Budget, remote: dict | None = None) -> tuple[RunFolder, dict]:
    """Decide, then stage the run folder (chosen model, plan.json, plan.md, feature map); the flow
    commits it once tracking has it."""
    s = _settings(raw)
    backend = stages.make_backend(s)
    decision, chosen = stages.decide_stage(s, backend, outcome, verified)
    _progress(f"decision: {decision.decision}: {decision.reason}")
    calibration = stages.calibration_stage(s, prepared, backend, outcome, verified, cost_model.meta.fingerprint_version)
    folder = RunFolder(s.artifacts, run_name)
    try:
        chosen_model = chosen.model if chosen is not None else prepared.model
        folder.path("model.onnx").write_bytes(chosen_model.SerializeToString())
        # the default path beside the plan: re-profiling re-verifies the plan against it
        folder.path("default.onnx").write_bytes(prepared.model.SerializeToString())
        folder.write_json("feature_map.json", prepared.feature_map)
        folder.write_json("normalize_log.json", {"log": prepared.normalized.log,
                                                 "max_abs_err": prepared.normalized.max_abs_err})
        timings = dict(timings, compile_s=sum(v.compile_s for v in [verified.baseline] + verified.candidates))
        timings["total_s"] = budget.elapsed()
        plan = build_plan(settings=s, info=backend.info, prepared=prepared, profile_report=profile_report,
                          cost_model_meta=cost_model.meta, outcome=outcome, verified=verified, decision=decision,
                          chosen=chosen, timings=timings, artifact=folder.final / "model.onnx",
                          mlflow_run_id=mlflow_run_id, budget=budget)
        plan["calibration"] = calibration
        plan["execution_path"] = path_record(backend, chosen_model)
        if remote is not None:      # deploy.remote_verify: which flow run, pool and host measured the plans
            plan["verify_remote"] = remote
        write_plan(folder.staging, plan)
        folder.path("plan.md").write_text(plan_markdown(plan, _plots(plan, folder)))
    except BaseException:
        folder.discard()
        raise
    return folder, plan


def print_summary(plan_path: str) -> None:
    """The end-of-run summary on stdout (before the flow's `plan:` line)."""
    path = Path(plan_path)
    print(summary_text(read_plan(path), str(path.with_name("plan.md"))), flush=True)
