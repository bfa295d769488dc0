"""flows/reprofile.py: the nightly schedule registers one deployment per target with its cron;
a firmware change re-measures the drifted op types and rolls back an active plan that no longer
pays; a run without drift re-measures nothing."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_serve_registers_nightly_deployments(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "flows"))
    from prefect.client.orchestration import get_client
    from prefect.testing.utilities import prefect_test_harness

    import reprofile
    from tasks.compose import load_settings

    overrides = [f"paths.artifacts={tmp_path}", "reprofile.targets=[cpu,npu]"]
    s, _ = load_settings(overrides)
    with prefect_test_harness(server_startup_timeout=90):
        ids = [d.apply() for d in reprofile.deployments(s, overrides)]

        async def read():
            async with get_client() as client:
                return [await client.read_deployment(i) for i in ids]

        import asyncio

        deps = asyncio.run(read())
    assert sorted(d.name for d in deps) == ["reprofile-cpu", "reprofile-npu"]
    for d in deps:
        assert [sch.schedule.cron for sch in d.schedules] == ["0 2 * * *"]
        assert d.parameters["overrides"][-1] == f"target={d.name.removeprefix('reprofile-')}"


@pytest.mark.slow
def test_firmware_drift_rolls_back_a_plan_that_no_longer_pays(run_flow, tmp_path):
    art = f"paths.artifacts={tmp_path}"
    adapt = run_flow("adapt", "target=fpga", "search=quick", art)
    assert adapt.returncode == 0, adapt.stderr
    assert adapt.plan["decision"] == "adapted"
    same = run_flow("reprofile", "target=fpga", art)
    assert same.returncode == 0, same.stderr
    quiet = json.loads(Path(same.stdout.strip().splitlines()[-1].removeprefix("report: ").replace(".md", ".json")).read_text())
    assert quiet["drift"]["drifted"] == [] and quiet["drift"]["remeasured"] == 0
    assert [p["decision"] for p in quiet["plans"]] == ["kept"]
    # new firmware: the integer datapath's quantize/dequantize units get 3x slower
    res = run_flow("reprofile", "target=fpga", "target.spec.firmware=sim-fpga-bit-2.0",
                   "target.spec.op_slowdown={QuantizeLinear:3.0,DequantizeLinear:3.0}", art)
    assert res.returncode == 0, res.stderr
    report = json.loads(Path(res.stdout.strip().splitlines()[-1].removeprefix("report: ").replace(".md", ".json")).read_text())
    assert report["drift"]["version_changed"]
    # every int8 kernel holds quantize/dequantize nodes, so int8 kernels of other ops slow down too
    assert {"QuantizeLinear", "DequantizeLinear"} <= set(report["drift"]["drifted"])
    assert report["drift"]["remeasured"] > 0 and report["drift"]["carried"] > 0
    assert report["predictor"]["version"] == report["drift"]["new_version"]
    assert [p["decision"] for p in report["plans"]] == ["rolled_back"]
