"""Fleet deployments: one process work pool per target, and each target's onboard, reprofile and
verify (adapt's deploy.remote_verify) flows deployed to it from this source tree, so the worker
on the host that has the device runs them. Talks to the Prefect server of deploy.prefect_api_url
(conf/deploy/fleet.yaml)."""
from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from prefect import Flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.exceptions import ObjectNotFound

from app.compose import load_settings
from app.settings import RunSettings
from metainfer_core.errors import MetaInferError

ROOT = Path(__file__).resolve().parent.parent
# flow name -> entrypoint; a deployment is <flow>/<target>, e.g. reprofile/fpga
ENTRYPOINTS = {"reprofile": "flows/reprofile.py:reprofile_flow", "onboard": "flows/onboard.py:onboard_flow",
               "verify": "flows/verify.py:verify_flow"}      # verify: adapt's deploy.remote_verify


def require_server(s: RunSettings) -> str:
    if not s.deploy.prefect_api_url:
        raise MetaInferError("Deployments need a Prefect server, but deploy=embedded runs Prefect in-process. "
                             "Start one (prefect server start) and run with deploy=fleet "
                             "deploy.prefect_api_url=http://<host>:4200/api.")
    url = s.deploy.prefect_api_url
    try:
        httpx.get(f"{url.rstrip('/')}/health", timeout=10).raise_for_status()
    except httpx.HTTPError as exc:
        raise MetaInferError(f"Cannot reach the Prefect server at {url} ({exc}). Start it with "
                             "`prefect server start --host 0.0.0.0` or fix deploy.prefect_api_url.") from None
    return url


async def _ensure_pools(names: list[str]) -> list[str]:
    created = []
    async with get_client() as client:
        for name in names:
            try:
                await client.read_work_pool(name)
            except ObjectNotFound:
                await client.create_work_pool(WorkPoolCreate(name=name, type="process",
                                                             description=f"meta-infer: hosts that have the {name} device"))
                created.append(name)
    return created


def ensure_pools(names: list[str]) -> list[str]:
    """Create the process work pools that do not exist yet; returns the ones created."""
    return asyncio.run(_ensure_pools(names))


def target_overrides(overrides: list[str], target: str) -> list[str]:
    """The deploying command's overrides for one target: the worker composes its config from them."""
    base = [o for o in overrides if o.partition("=")[0].lstrip("+") not in ("target", "targets")]
    return base + [f"target={target}"]


def deploy_target(s: RunSettings, target: str, overrides: list[str]) -> list[str]:
    """Deploy the target's reprofile, onboard and verify flows to its work pool; returns their names."""
    pool, mine = s.deploy.pool(target), target_overrides(overrides, target)
    _, raw = load_settings(mine)          # onboard takes its composed config; reprofile composes at run time
    # verify: adapt passes its own composed config and the request id at run time
    parameters = {"reprofile": {"overrides": mine}, "onboard": {"raw": raw}, "verify": {"raw": raw}}
    names = []
    for flow_name, entrypoint in ENTRYPOINTS.items():
        flow = Flow.from_source(source=str(ROOT), entrypoint=entrypoint)
        flow.deploy(name=target, work_pool_name=pool, parameters=parameters[flow_name], build=False, push=False,
                    cron=s.reprofile.cron if flow_name == "reprofile" else None, print_next_steps=False,
                    tags=["meta-infer", target], description=f"meta-infer {flow_name} of {target} on pool {pool}")
        names.append(f"{flow_name}/{target}")
    return names
