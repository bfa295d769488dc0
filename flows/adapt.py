"""Adapt one model to one target:  python flows/adapt.py [hydra overrides]

normalize -> profile -> train_predictor -> search -> verify -> rollback, as a Prefect flow
(ephemeral, no server needed), recorded as one MLflow run. With deploy.remote_verify=true the
plans are timed by the deployment verify/<target> on the target's work pool. Ends with a
summary (default vs chosen) on stdout; the run folder's plan.md says the same at length. The
last stdout line is `plan: <path to plan.json>`. A static-shape target given model.shape_range
adapts one plan per bucket of the range and writes buckets.json (`buckets: <path>` before the
last line, which names the largest bucket's plan)."""
from __future__ import annotations

import time

STARTED = time.monotonic()      # budget.total_s counts from here: imports and the stores' start-up included

import sys  # noqa: E402
import uuid  # noqa: E402

from app.environment import quiet_prefect

quiet_prefect()  # before prefect is imported: it sets up logging at import time

from prefect import flow  # noqa: E402

from app.cli import run_cli, stopped_by  # noqa: E402
from app.flow_run import label_flow_run, publish_report  # noqa: E402
from app.tracking.runs import fail_run, finish_run, start_run  # noqa: E402
from tasks.adapt_tasks import (Run, log_summary, normalize_task, print_summary, profile_task,  # noqa: E402
                               rollback_task, search_task, timed, train_predictor_task, verify_task)
from tasks.buckets_tasks import buckets_task, bucket_raw, needs_buckets, write_buckets_task  # noqa: E402
from tasks.remote_verify_tasks import remote_verify_task  # noqa: E402


@flow(name="adapt", validate_parameters=False)
def adapt_flow(raw: dict, started: float | None = None) -> str:
    """started: when the command began (time.monotonic()), the budget's start; else now."""
    run = Run.of(raw)       # the settings validated and the backend built once for every task
    s = run.s
    budget = s.budget.start(started)
    model_name = s.model.name
    run_name = f"{time.strftime('%Y%m%d-%H%M%S')}-{model_name}-{s.target.name}-{uuid.uuid4().hex[:6]}"
    timings: dict[str, float] = {}
    prepared = timed(budget, timings, "normalize", normalize_task, run)   # refuses a bad model before any record
    run_id = start_run(s, raw, model_name, run_name)
    label_flow_run(run_name, [f"model:{model_name}", f"target:{s.target.name}"])
    try:
        report = timed(budget, timings, "profile", profile_task, run, prepared, bounded=True)
        cost_model, _ = timed(budget, timings, "train", train_predictor_task, run, report.fingerprint_version)
        outcome = timed(budget, timings, "search", search_task, run, prepared, cost_model, bounded=True)
        if s.deploy.remote_verify:      # measured on the target's work pool, everything else here
            verified, remote = timed(budget, timings, "verify", remote_verify_task, run, prepared, outcome, cost_model,
                                     bounded=True)
        else:
            verified = timed(budget, timings, "verify", verify_task, run, prepared, outcome, cost_model, bounded=True)
            remote = None
        staged, plan = rollback_task(run, run_name, run_id, prepared, report, cost_model, outcome, verified, timings,
                                     budget, remote)
        try:        # the run folder appears only once tracking and the registry have it
            finish_run(s, run_id, plan, staged.staging, model_name)
            folder = staged.commit()
        except BaseException:
            staged.discard()
            raise
    except BaseException as exc:
        # Prefect's own SIGTERM handler runs inside the flow: the signal may surface only as the cause
        # of an error its task engine raised while unwinding ("Task run is not set")
        fail_run(s, run_id, f"{type(exc).__name__}: {exc}",
                 killed=not isinstance(exc, Exception) or stopped_by(exc) is not None)
        raise
    publish_report(folder, model_name, s.target.name)
    log_summary(str(folder / "plan.json"))
    return str(folder / "plan.json")


@flow(name="adapt-buckets", validate_parameters=False)
def adapt_buckets_flow(raw: dict) -> tuple[str, list[str]]:
    """A static-shape target over a declared shape range: one adapt per bucket (each with the
    whole budget), then buckets.json, which load_plan serves the range from."""
    run = Run.of(raw)
    layout = buckets_task(run)
    plans = [adapt_flow(bucket_raw(raw, shapes)) for shapes in layout.buckets]
    return write_buckets_task(run, layout, plans), plans


def main(argv: list[str]) -> int:
    def body(s, raw) -> str:
        if needs_buckets(Run.of(raw)):
            buckets, plans = adapt_buckets_flow(raw)
            for plan in plans:
                print_summary(plan)
            return f"buckets: {buckets}\nplan: {plans[-1]}"
        plan = adapt_flow(raw, started=STARTED)
        print_summary(plan)         # what was done, default vs chosen, why
        return f"plan: {plan}"

    return run_cli(argv, body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
