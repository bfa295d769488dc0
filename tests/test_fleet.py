"""Fleet mode end to end, on loopback: PostgreSQL and a Prefect server, flows/deploy.py creates
one work pool per modeled target (fpga, asic) and deploys to it, one worker process per pool
picks up its target's re-profiling run, and every record lands in PostgreSQL under the new
fingerprint version. Everything the test starts, it stops."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.fingerprint.profiler import profile
from metainfer_core.zoo import build

from backends.test_simulator import backend
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


def test_each_pool_reprofiles_its_own_target_into_postgres(tmp_path):
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from tasks.fleet import target_overrides

    workers = []
    with Postgres() as pg, PrefectServer(tmp_path / "prefect") as server:
        try:
            # the library before the firmware update: each target profiled once under its old version
            lib = FingerprintLibrary(pg.url)
            old = {t: profile(backend(t), lib, [build("mlp"), build("resnet_tiny")], [1, 2], reps=3,
                              warmup=0).fingerprint_version for t in TARGETS}
            old_counts = {t: len(lib.records(v)) for t, v in old.items()}
            assert all(old_counts.values())

            args = ["deploy=fleet", f"deploy.prefect_api_url={server.api_url}", f"tracking.fingerprint_db={pg.url}",
                    f"tracking.mlflow_uri=sqlite:///{tmp_path}/mlflow.db", f"paths.artifacts={tmp_path}/artifacts",
                    "profile.reps=3", "profile.warmup=0", "predictor.iterations=30", "verify.runs=3"]
            dep = subprocess.run([sys.executable, str(ROOT / "flows" / "deploy.py"), *args, "targets=[fpga,asic]"],
                                 cwd=ROOT, env=server.env, capture_output=True, text=True, timeout=300)
            assert dep.returncode == 0, dep.stderr
            assert dep.stdout.strip().splitlines()[-1] == \
                "deployed: reprofile/fpga, onboard/fpga, reprofile/asic, onboard/asic"

            # the experiment store exists before the hosts write to it, as a tracking server's would
            # (two first runs creating one SQLite store at once race in its schema migration)
            from mlflow.tracking import MlflowClient
            MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").search_experiments()

            env = dict(server.env, PREFECT_WORKER_QUERY_SECONDS="1")
            logs = {t: tmp_path / f"worker-{t}.log" for t in TARGETS}
            server.env = env
            workers = [server.worker(t, logs[t]) for t in TARGETS]
            with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
                ids = {t: run_deployment(f"reprofile/{t}", timeout=0,
                                         parameters={"overrides": target_overrides(args, t)
                                                     + [f"target.spec.firmware={FIRMWARE}"]}).id for t in TARGETS}
                runs = dict(zip(TARGETS, _wait_for_runs(list(ids.values()))))
        finally:
            for w in workers:
                stop(w)

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
