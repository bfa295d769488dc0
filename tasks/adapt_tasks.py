"""The adapt pipeline's Prefect tasks, one per stage, each a thin wrapper over the stage's entry
point:

    normalize        metainfer_core.prepare.stage.prepare_stage
    profile          metainfer_core.fingerprint.stage.profile_stage
    train_predictor  metainfer_core.predictor.stage.train_stage
    search           metainfer_core.search.stage.search_stage
    verify           metainfer_core.verify.stage.verify_stage (verify_remote: tasks/remote_verify_tasks.py)
    rollback         metainfer_core.decide.stage.decide_stage, feedback.record_verified_runs,
                     plan.run_folder.stage_run with plan.record.build_plan

The settings are validated once per run and the target's backend built once (`Run`); every task
of the run gets that."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from app.progress import run_log, say as _progress
from app.settings import RunSettings, validate_settings
from metainfer_core.backends import Backend, backend_for
from metainfer_core.budget import Budget
from metainfer_core.decide.serve import serving_stage
from metainfer_core.decide.stage import decide_stage
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.fingerprint.stage import profile_stage
from metainfer_core.plan.deployable import path_record
from metainfer_core.plan.plan_file import read_plan
from metainfer_core.plan.record import RunFolder, build_plan
from metainfer_core.plan.report import summary_text
from metainfer_core.plan.run_folder import stage_run
from metainfer_core.plan.schema import Plan
from metainfer_core.predictor.lifecycle.feedback import record_verified_runs
from metainfer_core.predictor.stage import train_stage
from metainfer_core.prepare.stage import Prepared, prepare_stage
from metainfer_core.search.stage import SearchOutcome, search_stage
from metainfer_core.verify.stage import VerifyOutcome, verify_stage
from metainfer_core.verify.worker import serve_isolated, time_pair_isolated


@dataclass(frozen=True)
class Run:
    """One run's settings, validated once, and its target's backend, built once; `raw` is the
    composed configuration as a plain dict (what a remote deployment is sent)."""
    raw: dict
    s: RunSettings
    backend: Backend

    @classmethod
    def of(cls, raw: dict) -> "Run":
        s = validate_settings(raw)
        return cls(raw, s, backend_for(s))


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
def normalize_task(run: Run) -> Prepared:
    return prepare_stage(run.s, run.backend.info.static_shapes, _progress, getattr(run.backend, "path_failure", None))


@task(name="profile", cache_policy=NO_CACHE)
def profile_task(run: Run, prepared: Prepared, allowance_s: float | None = None):
    return profile_stage(run.s, prepared, run.backend, _progress, allowance_s)


@task(name="train_predictor", cache_policy=NO_CACHE)
def train_predictor_task(run: Run, fingerprint_version: str):
    return train_stage(run.s, fingerprint_version, _progress)


@task(name="search", cache_policy=NO_CACHE)
def search_task(run: Run, prepared: Prepared, cost_model, allowance_s: float | None = None) -> SearchOutcome:
    return search_stage(run.s, prepared, run.backend, cost_model, _progress, allowance_s)


@task(name="verify", cache_policy=NO_CACHE)
def verify_task(run: Run, prepared: Prepared, outcome: SearchOutcome, cost_model,
                allowance_s: float | None = None) -> VerifyOutcome:
    return verify_stage(run.s, prepared, run.backend, outcome, _progress, cost_model, allowance_s=allowance_s)


@task(name="rollback", cache_policy=NO_CACHE)
def rollback_task(run: Run, run_name: str, mlflow_run_id: str, prepared: Prepared, profile_report,
                  cost_model, outcome: SearchOutcome, verified: VerifyOutcome,
                  timings: dict, budget: Budget, remote: dict | None = None) -> tuple[RunFolder, Plan]:
    """Decide, then stage the run folder (chosen model, plan.json, plan.md, feature map); the flow
    commits it once tracking has it."""
    s, backend = run.s, run.backend
    measured_here = backend.info.measurement == "measured" and remote is None    # the device is this host
    decision, chosen = decide_stage(s, backend, outcome, verified, prepared.model, prepared.feeds[0],
                                    time_pair_isolated if measured_here else None,
                                    [(p, ss.feeds[0]) for p, ss in prepared.point_sets])
    for c in decision.confirmations:
        _progress(f"confirm: {c.label} alone with the default: {c.words()}: "
                  + ("pays" if c.pays else "does not pay"))
    if decision.across is not None:
        _progress(f"confirm: {decision.across.words()}")
    serving, chosen = serving_stage(s, backend, decision, verified, prepared,
                                    serve_isolated if measured_here else None, _progress, cost_model)
    _progress(f"decision: {decision.decision}: {decision.reason}")
    calibration = record_verified_runs(FingerprintLibrary(s.tracking.fingerprint_db), backend, prepared, outcome,
                                       verified, cost_model.meta.fingerprint_version)
    chosen_model = chosen.model if chosen is not None else prepared.model
    timings = dict(timings, compile_s=sum(v.compile_s for v in [verified.baseline] + verified.candidates))
    if decision.confirmations:
        timings["confirm_s"] = sum(c.seconds for c in decision.confirmations) + (
            sum(c.seconds for _, c in decision.across.points) if decision.across else 0.0)
    if serving.measured:
        timings["serve_s"] = serving.seconds
    timings["total_s"] = budget.elapsed()
    return stage_run(s.artifacts, run_name, prepared, chosen_model, lambda artifact: build_plan(
        settings=s, info=backend.info, prepared=prepared, profile_report=profile_report,
        cost_model_meta=cost_model.meta, outcome=outcome, verified=verified, decision=decision, chosen=chosen,
        timings=timings, artifact=artifact, mlflow_run_id=mlflow_run_id, budget=budget, calibration=calibration,
        execution_path=path_record(backend, chosen_model), verify_remote=remote, serving=serving.record()), _progress,
        outcome.result.log if outcome.result else None)


def _summary(plan_path: str) -> str:
    path = Path(plan_path)
    return summary_text(read_plan(path).to_dict(), str(path.with_name("plan.md")))


def print_summary(plan_path: str) -> None:
    """The end-of-run summary on stdout (before the flow's `plan:` line)."""
    print(_summary(plan_path), flush=True)


def log_summary(plan_path: str) -> None:
    """The same summary in the flow run's log (the Prefect UI's run page)."""
    run_log(_summary(plan_path))
