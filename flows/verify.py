"""verify/<target>: adapt's verify step on the host that has the device (deploy.remote_verify=true).

Not run by hand: flows/deploy.py deploys it to each target's work pool, and adapt runs it with
`run_deployment` and waits. It reads the request (the plans and validation inputs adapt stored
in the shared fingerprint database), times the plans on this host's backend with the same
verify() as a local run, and writes the measurements back for adapt to read."""
from __future__ import annotations

from app.environment import quiet_prefect

quiet_prefect()  # before prefect is imported: it sets up logging at import time

from prefect import flow  # noqa: E402

from tasks.remote_verify_tasks import measure_request_task  # noqa: E402


@flow(name="verify", validate_parameters=False)
def verify_flow(raw: dict, request_id: str) -> dict:
    # raw: the requester's composed config (target spec, seed, tracking.fingerprint_db)
    return measure_request_task(raw, request_id)
