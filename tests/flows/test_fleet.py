"""Fleet mode end to end, on loopback: PostgreSQL and a Prefect server, flows/deploy.py creates
one work pool per modeled target (fpga, asic) and deploys to it, one worker process per pool
picks up its target's re-profiling run, and every record lands in PostgreSQL under the new
fingerprint version; adapt with deploy.remote_verify=true has its plans verified by the fpga
pool's worker. The services start once for the module; everything they start, they stop."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.fingerprint.profiler import profile
from metainfer_core.zoo import build

from twins import backend
from fleet_services import ROOT, Postgres, PrefectServer, stop

pytestmark = [pytest.mark.fleet, pytest.mark.slow]
TARGETS = ("fpga", "asic")
FIRMWARE = "sim-fleet-fw-2"          # the firmware update the fleet re-profiles for


def _wait_for_runs(ids: list, timeout: float = 300) -> list:
    from prefect.client.orchestration import get_client

    async def poll():
        async with get_client() as client:
            deadline = time.monotonic() + timeout
            while True:
                runs = [await client.read_flow_run(i) for i in ids]
                if all(r.state is not None and r.state.is_final() for r in runs) or time.monotonic() > deadline:
                    return runs
                await asyncio.sleep(1)

    return asyncio.run(poll())


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """The services, started once for this module: PostgreSQL, a Prefect server, flows/deploy.py
    for both targets, and one worker process per pool. Everything it starts, it stops."""
    tmp_path = tmp_path_factory.mktemp("fleet")
    workers = []
    with Postgres() as pg, PrefectServer(tmp_path / "prefect") as server:
        try:
            args = ["deploy=fleet", f"deploy.prefect_api_url={server.api_url}", f"tracking.fingerprint_db={pg.url}",
                    f"tracking.mlflow_uri=sqlite:///{tmp_path}/mlflow.db", f"paths.artifacts={tmp_path}/artifacts",
                    "profile.reps=3", "profile.warmup=0", "predictor.iterations=30", "verify.runs=3"]
            dep = subprocess.run([sys.executable, str(ROOT / "flows" / "deploy.py"), *args, "targets=[fpga,asic]"],
                                 cwd=ROOT, env=server.env, capture_output=True, text=True, timeout=300)
            assert dep.returncode == 0, dep.stderr

            # the experiment store exists before the hosts write to it, as a tracking server's would
            # (two first runs creating one SQLite store at once race in its schema migration)
            from mlflow.tracking import MlflowClient
            MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").search_experiments()

            server.env = dict(server.env, PREFECT_WORKER_QUERY_SECONDS="1")
            logs = {t: tmp_path / f"worker-{t}.log" for t in TARGETS}
            workers = {t: server.worker(t, logs[t]) for t in TARGETS}
            yield SimpleNamespace(pg=pg, server=server, tmp=tmp_path, args=args, deployed=dep.stdout, logs=logs,
                                  workers=workers)
        finally:
            for w in workers.values() if workers else []:
                stop(w)


def test_each_pool_reprofiles_its_own_target_into_postgres(fleet):
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from app.fleet import target_overrides

    pg, server, tmp_path, args, logs = fleet.pg, fleet.server, fleet.tmp, fleet.args, fleet.logs
    assert fleet.deployed.strip().splitlines()[-1] == \
        "deployed: reprofile/fpga, onboard/fpga, verify/fpga, reprofile/asic, onboard/asic, verify/asic"
    # the library before the firmware update: each target profiled once under its old version
    lib = FingerprintLibrary(pg.url)
    old = {t: profile(backend(t), lib, [build("mlp"), build("resnet_tiny")], [1, 2], reps=3,
                      warmup=0).fingerprint_version for t in TARGETS}
    old_counts = {t: len(lib.records(v)) for t, v in old.items()}
    assert all(old_counts.values())

    with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
        ids = {t: run_deployment(f"reprofile/{t}", timeout=0,
                                 parameters={"overrides": target_overrides(args, t)
                                             + [f"target.spec.firmware={FIRMWARE}"]}).id for t in TARGETS}
        runs = dict(zip(TARGETS, _wait_for_runs(list(ids.values()))))

    for t, run in runs.items():
        other = next(o for o in TARGETS if o != t)
        assert run.state.is_completed(), (t, run.state, logs[t].read_text()[-3000:])
        assert run.work_pool_name == t
        # the flow run's own progress lines went to the output of the worker that started it
        assert f"reprofile: {old[t]} -> " in logs[t].read_text()
        assert f"reprofile: {old[t]} -> " not in logs[other].read_text()

    lib = FingerprintLibrary(pg.url)
    for t in TARGETS:
        new = backend(t, firmware=FIRMWARE).info.fingerprint_version
        assert lib.versions(t) == [old[t], new]
        assert len(lib.records(old[t])) == old_counts[t]                  # the old version untouched
        recs = lib.records(new)
        assert len(recs) == len({r["kernel_key"] for r in recs}) == old_counts[t]
        assert {r["source"] for r in recs} <= {"carried", "microbench"}
        report = json.loads(next((tmp_path / "artifacts" / "reprofile").glob(f"{t}-*.json")).read_text())
        assert (report["drift"]["old_version"], report["drift"]["new_version"]) == (old[t], new)


def _plan(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(Path(proc.stdout.strip().splitlines()[-1].removeprefix("plan: ")).read_text())


def _figures(plan: dict) -> dict:
    """What verify measured and what was decided from it (compile times are wall clock: left out)."""
    measured = lambda m: {k: m[k] for k in ("latency_ms", "peak_mem_bytes", "accuracy_loss")}  # noqa: E731
    return {"decision": plan["decision"], "reason": plan["reason"], "actions": plan["actions"],
            "measured": measured(plan["measured"]), "baseline": measured(plan["baseline"]),
            "candidates": [(c["label"], c["actions"], measured(c["measured"]), c["error"]) for c in plan["candidates"]],
            "repairs": plan["accuracy_repairs"]}


def test_adapt_verifies_on_the_target_pool_like_a_local_verify(fleet):
    """deploy.remote_verify=true: search here, verify as verify/fpga on the fpga pool's worker;
    the plan equals a local verify of the same search (modeled targets are seeded), and a verify
    no worker picks up fails the run in one paragraph, with no run folder."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from metainfer_core.fingerprint.verify_queue import pending

    artifacts = fleet.tmp / "adapt"
    args = [a for a in fleet.args if not a.startswith("paths.artifacts=")] + [
        f"paths.artifacts={artifacts}", "target=fpga", "model=mlp", "search=quick"]

    def adapt(*more: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROOT / "flows" / "adapt.py"), *args, *more], cwd=ROOT,
                              env=fleet.server.env, capture_output=True, text=True, timeout=600)

    remote = _plan(adapt("deploy.remote_verify=true"))
    where = remote["verify_remote"]
    assert (where["deployment"], where["work_pool"], where["target"]) == ("verify/fpga", "fpga", "fpga")
    assert where["fingerprint_version"] == remote["fingerprint_version"]
    assert remote["target"]["measurement"] == "modeled" and "simulated" in remote["target"]["note"]
    with temporary_settings(updates={PREFECT_API_URL: fleet.server.api_url}):
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(where["flow_run_id"])
            deployment = client.read_deployment(run.deployment_id)
    assert run.state.is_completed() and run.work_pool_name == "fpga" and deployment.name == "fpga"
    assert run.parent_task_run_id is not None                # linked under adapt's verify_remote task
    # the measuring happened in the fpga worker's flow run, not in the asic one's
    assert f"verify: request {where['request_id']}" in fleet.logs["fpga"].read_text()
    assert where["request_id"] not in fleet.logs["asic"].read_text()
    assert remote["candidates"] and all(c["measured"]["latency_ms"] for c in remote["candidates"] if not c["error"])

    # the same search on the same library with verify here: the same figures and decision
    local = _plan(adapt("predictor.frozen=true"))
    assert "verify_remote" not in local
    assert _figures(local) == _figures(remote)

    # the mailbox is empty again: adapt deletes its request once read
    lib = FingerprintLibrary(fleet.pg.url)
    assert pending(lib) == 0

    # nobody polls the fpga pool: the run fails in one paragraph, the verify run is cancelled,
    # and no run folder is left behind
    stop(fleet.workers["fpga"])
    folders = sorted((artifacts / "runs").iterdir())
    failed = adapt("deploy.remote_verify=true", "deploy.remote_verify_timeout_s=3", "predictor.frozen=true")
    assert failed.returncode != 0 and "plan:" not in failed.stdout
    err = failed.stderr.strip().splitlines()[-1]
    assert err.startswith("error: The remote verify run") and "no worker of work pool fpga picked it up" in err
    assert "was cancelled and nothing was written" in err
    assert sorted((artifacts / "runs").iterdir()) == folders
    with temporary_settings(updates={PREFECT_API_URL: fleet.server.api_url}):
        with get_client(sync_client=True) as client:
            verify_runs = client.read_flow_runs(deployment_filter=DeploymentFilter(
                id=DeploymentFilterId(any_=[deployment.id])))
    assert sorted(r.state.name for r in verify_runs) == ["Cancelled", "Completed"]
    assert pending(lib) == 0
