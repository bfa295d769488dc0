"""adapt's verify step on the target's own host (deploy.remote_verify=true): the plans and the
validation inputs go to the fleet's shared database (metainfer_core.verify.mailbox),
the deployment verify/<target> runs on the target's work pool and times them with the same
verify() as a local run, and adapt waits for it, reads the measurements back and goes on
(accuracy guard before, decide after: both here, where the user is).

remote_verify_task: the requester's side (a Prefect task of flows/adapt.py).
measure_request_task: the host's side (the task of flows/verify.py)."""
from __future__ import annotations

import os
import socket
import time

from prefect import task
from prefect.cache_policies import NO_CACHE

from app.progress import say as _progress
from app.settings import RunSettings, validate_settings
from metainfer_core.backends import backend_for
from metainfer_core.errors import MetaInferError
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.verify import mailbox
from metainfer_core.verify.stage import VerifyOutcome, verify_stage

FLOW = "verify"          # the deployment of a target is verify/<target> (flows/deploy.py)


def deployment_name(target: str) -> str:
    return f"{FLOW}/{target}"


def _cancel(flow_run) -> None:
    """A run we stopped waiting for must not start (or go on) later."""
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelled, Cancelling

    state = Cancelling() if flow_run.state is not None and flow_run.state.is_running() else Cancelled()
    try:
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(flow_run.id, state, force=True)
    except Exception as exc:  # noqa: BLE001 - the timeout is the error to report
        _progress(f"verify: could not cancel flow run {flow_run.name} ({type(exc).__name__}: {exc})")


def _run_remote(s: RunSettings, raw: dict, request_id: str) -> tuple[object, float]:
    """Run verify/<target> on the target's pool and wait; returns the completed flow run."""
    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound

    name, pool = deployment_name(s.target.name), s.deploy.pool(s.target.name)
    t0 = time.perf_counter()
    try:
        flow_run = run_deployment(name, parameters={"raw": raw, "request_id": request_id},
                                  timeout=s.deploy.remote_verify_timeout_s, poll_interval=1,
                                  tags=["meta-infer", s.target.name, "remote-verify"])
    except ObjectNotFound:
        raise MetaInferError(f"deploy.remote_verify=true, but the Prefect server at {s.deploy.prefect_api_url} has no "
                             f"deployment {name}. Deploy it once with `python flows/deploy.py deploy=fleet "
                             f"targets=[{s.target.name}]` and start a worker on the host that has the device "
                             f"(`prefect worker start --pool {pool} --type process`), or run with "
                             "deploy.remote_verify=false to verify here. Nothing was written for this run.") from None
    waited = time.perf_counter() - t0
    state = flow_run.state
    if state is None or not state.is_final():
        _cancel(flow_run)
        where = ("no worker of work pool {pool} picked it up: is `prefect worker start --pool {pool}` running on "
                 "the host that has the device?" if state is None or state.is_scheduled() or state.is_pending()
                 else "it was still running on the target's host; raise deploy.remote_verify_timeout_s if the "
                      "plans need longer").format(pool=pool)
        raise MetaInferError(f"The remote verify run {flow_run.name} of deployment {name} did not finish within "
                             f"deploy.remote_verify_timeout_s={s.deploy.remote_verify_timeout_s:g} s "
                             f"({state.name if state else 'no state'}): {where} The run was cancelled and nothing "
                             "was written for this run.")
    if not state.is_completed():
        msg = (state.message or "").strip().splitlines()
        raise MetaInferError(f"The remote verify run {flow_run.name} of deployment {name} on work pool "
                             f"{flow_run.work_pool_name or pool} ended {state.name}"
                             f"{': ' + msg[0][:500] if msg else ''}. Its worker's output (and the Prefect UI, flow "
                             f"run {flow_run.id}) has the details; nothing was written for this run.")
    return flow_run, waited


def remote_measure(s: RunSettings, raw: dict, record: dict):
    """verify_stage's runner (metainfer_core.verify.measure.Runner) that has the target's pool
    measure the plans; what ran where goes into `record` (plan.json's verify_remote)."""
    lib = FingerprintLibrary(s.tracking.fingerprint_db)
    local_version = backend_for(s).info.fingerprint_version

    def measure(backend, models, feeds, runs, warmup, time_left_s=None) -> mailbox.VerifyResult:
        # time_left_s is not sent: the target's host times the planned rounds (its queue wait is not ours to cut)
        request_id = mailbox.put_request(lib, s.target.name, models, feeds, runs, warmup)
        try:
            _progress(f"verify: waiting for {deployment_name(s.target.name)} on work pool "
                      f"{s.deploy.pool(s.target.name)} (request {request_id})")
            flow_run, waited = _run_remote(s, raw, request_id)
            result = mailbox.get_result(lib, request_id)
            if result is None or result.worker.get("flow_run_id") != str(flow_run.id):
                raise MetaInferError(f"The remote verify run {flow_run.name} completed but left no measurements for "
                                     f"request {request_id} in {lib.engine.url}: the worker's host must use the same "
                                     "tracking.fingerprint_db as this one. Nothing was written for this run.")
            if result.worker.get("fingerprint_version") != local_version:
                raise MetaInferError(f"The host that ran {deployment_name(s.target.name)} "
                                     f"({result.worker.get('hostname')}) measures {s.target.name} as fingerprint "
                                     f"version {result.worker.get('fingerprint_version')}, but this run profiled and "
                                     f"searched under {local_version} (different firmware, driver or runtime). "
                                     "Re-profile the target (flows/reprofile.py) or align target.spec with the "
                                     "host; nothing was written for this run.")
            record.update({"deployment": deployment_name(s.target.name), "flow_run_id": str(flow_run.id),
                           "flow_run_name": flow_run.name, "work_pool": flow_run.work_pool_name,
                           "request_id": request_id, "waited_s": round(waited, 3), **result.worker})
            _progress(f"verify: measured by flow run {flow_run.name} on work pool {flow_run.work_pool_name} "
                      f"(host {result.worker.get('hostname')}) in {waited:.1f}s")
            return result
        finally:
            mailbox.delete_request(lib, request_id)

    return measure


@task(name="verify_remote", cache_policy=NO_CACHE)
def remote_verify_task(run, prepared, outcome, cost_model, allowance_s: float | None = None
                       ) -> tuple[VerifyOutcome, dict]:
    """run: tasks.adapt_tasks.Run (its raw configuration is what the deployment is sent)."""
    record: dict = {}
    verified = verify_stage(run.s, prepared, run.backend, outcome, _progress, cost_model,
                            measure=remote_measure(run.s, run.raw, record), allowance_s=allowance_s)
    return verified, record


@task(name="measure_request", cache_policy=NO_CACHE)
def measure_request_task(raw: dict, request_id: str) -> dict:
    """On the target's host: time the request's plans on this host's backend, store the result."""
    from prefect.runtime import flow_run

    s = validate_settings(raw)
    lib = FingerprintLibrary(s.tracking.fingerprint_db)
    request = mailbox.get_request(lib, request_id)
    if request.target != s.target.name:
        raise MetaInferError(f"Verify request {request_id} is for target {request.target}, but this run was composed "
                             f"for {s.target.name}: the requester must run deployment "
                             f"{deployment_name(request.target)}.")
    backend = backend_for(s)
    _progress(f"verify: request {request_id}: {len(request.models)} plans on {backend.info.name} "
              f"({backend.info.measurement}), {request.runs} interleaved runs each")
    t0 = time.perf_counter()
    result = mailbox.measure(backend, request)
    result.worker = {"flow_run_id": str(flow_run.id) if flow_run.id else None, "hostname": socket.gethostname(),
                     "pid": os.getpid(), "target": backend.info.name, "measurement": backend.info.measurement,
                     "fingerprint_version": backend.info.fingerprint_version,
                     "seconds": round(time.perf_counter() - t0, 3)}
    mailbox.put_result(lib, request_id, result)
    _progress(f"verify: request {request_id} measured in {result.worker['seconds']:.1f}s: "
              + ", ".join(f"{r.label} {r.latency_ms:.4g} ms" if r.ok else f"{r.label} failed" for r in result.results))
    return result.worker
