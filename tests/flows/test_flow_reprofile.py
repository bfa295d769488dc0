"""flows/reprofile.py: the nightly schedule registers one deployment per target with its cron;
a firmware change re-measures the drifted op types and rolls back an active plan that no longer
pays; a run without drift re-measures nothing."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_serve_registers_nightly_deployments(tmp_path, monkeypatch, prefect_api):
    """Registered on the worker's Prefect server (conftest's prefect_api; a deployment is named
    after its target, and nothing else here registers reprofile deployments)."""
    monkeypatch.syspath_prepend(str(ROOT / "flows"))
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    import reprofile
    from app.compose import load_settings

    overrides = [f"paths.artifacts={tmp_path}", "reprofile.targets=[cpu,npu]"]
    s, _ = load_settings(overrides)
    with temporary_settings(updates={PREFECT_API_URL: prefect_api}):
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


# an FPGA bitstream without layer fusion: int8 pays about 1.4x here, so a 50 % slower integer datapath erases it
FPGA = ["target=fpga", "target.spec.fuse_layers=false", "target.spec.max_fusion_depth=1"]


def _report(res) -> dict:
    assert res.returncode == 0, res.stderr
    md = Path(res.stdout.strip().splitlines()[-1].removeprefix("report: "))
    return json.loads(md.with_suffix(".json").read_text())


@pytest.mark.slow
def test_firmware_drift_rolls_back_a_plan_that_no_longer_pays(run_flow, migrated, tmp_path):
    from metainfer_core.fingerprint import FingerprintLibrary

    migrated(tmp_path)
    art = f"paths.artifacts={tmp_path}"
    adapt = run_flow("adapt", *FPGA, "model=mlp", "search=quick", art)
    assert adapt.returncode == 0, adapt.stderr
    assert adapt.plan["decision"] == "adapted" and "int8" in {a["kind"] for a in adapt.plan["actions"]}
    quiet = _report(run_flow("reprofile", *FPGA, art))
    assert quiet["drift"]["drifted"] == [] and quiet["drift"]["remeasured"] == 0
    assert [p["decision"] for p in quiet["plans"]] == ["kept"]
    library = FingerprintLibrary(f"sqlite:///{tmp_path}/fingerprints.db")
    old_version = quiet["drift"]["new_version"]
    before = library.records(old_version)
    # new firmware: the quantize and dequantize units run 50 % slower
    report = _report(run_flow("reprofile", *FPGA, "target.spec.firmware=sim-fpga-bit-2.0",
                              "target.spec.op_slowdown={QuantizeLinear:1.5,DequantizeLinear:1.5}", art))
    drift = report["drift"]
    assert drift["version_changed"] and drift["old_version"] == old_version
    assert drift["drifted"] == ["DequantizeLinear", "QuantizeLinear"]
    # re-measured: exactly the kernels that hold quantize/dequantize nodes (the int8 ones)
    n_int8 = sum(r["dtype"] == "int8" for r in before)
    assert drift["remeasured"] == n_int8 and drift["carried"] == len(before) - n_int8
    new = library.records(drift["new_version"])
    assert {r["source"] for r in new if r["dtype"] == "int8"} == {"microbench"}
    assert {r["source"] for r in new if r["dtype"] != "int8"} == {"carried"}
    assert library.records(old_version) == before                       # nothing of the old version is lost
    predictor = report["predictor"]
    assert predictor["version"] == drift["new_version"] and predictor["action"] == "fine_tuned"
    carried = predictor["carry_over"]
    assert carried["parent"].startswith(old_version + "/r")
    assert carried["held_out_after"] < carried["held_out_before"]
    assert [p["decision"] for p in report["plans"]] == ["rolled_back"]


@pytest.mark.slow
def test_cpu_reprofile_covers_every_execution_path(run_flow, migrated, tmp_path):
    """On `cpu` the OpenVINO paths are checked beside ONNX Runtime: seeded from the default
    path's typical kernels the first time, compared with their own records the second, and a
    changed OpenVINO setting is a new version of those paths only."""
    import openvino  # noqa: F401  (pinned in requirements.lock: the cpu paths below are OpenVINO's)
    from metainfer_core.fingerprint import FingerprintLibrary
    from metainfer_core.fingerprint.profiler import profile
    from metainfer_core.normalize import normalize
    from metainfer_core.zoo import build
    from app.compose import target_backend

    migrated(tmp_path)
    cpu = target_backend("cpu")
    library = FingerprintLibrary(f"sqlite:///{tmp_path}/fingerprints.db")
    profile(cpu, library, [normalize(build("mlp"), {"input": [1, 256]}).model], [1], reps=5, warmup=1)
    others = [p for p in cpu.info.extra["execution_paths"] if p != "onnxruntime"]
    art = [f"paths.artifacts={tmp_path}", "target=cpu", "profile.reps=5", "profile.warmup=1"]
    res = run_flow("reprofile", *art)
    first = _report(res)["drift"]
    assert first["path"] == "onnxruntime" and first["status"] in ("no drift", "drift")
    assert [p["path"] for p in first["paths"]] == others
    assert all(p["status"] == "seeded" and p["seeded"] >= 2 for p in first["paths"])
    md = Path(res.stdout.strip().splitlines()[-1].removeprefix("report: ")).read_text()
    assert all(f"| {p} |" in md for p in ["onnxruntime", *others]) and "| seeded |" in md
    assert "Predictor of openvino:f32" in md and "no predictor of its own to fine-tune" in md
    # an OpenVINO setting changed (its performance hint): a new version of the OpenVINO paths, compared and carried
    second = _report(run_flow("reprofile", *art, "target.spec.execution_paths.openvino.performance_hint=THROUGHPUT"))
    drift = second["drift"]
    assert not drift["version_changed"] and drift["new_version"] == first["new_version"]
    for old, new in zip(first["paths"], drift["paths"]):
        assert new["path"] == old["path"] and new["version_changed"] and new["old_version"] == old["new_version"]
        assert new["status"] in ("no drift", "drift") and len(new["checks"]) == old["seeded"]
        assert new["remeasured"] + new["carried"] == old["seeded"] and new["seeded"] == 0
        assert len(library.records(new["new_version"])) == old["seeded"]
        assert len(library.records(old["new_version"])) == old["seeded"]        # the old version kept
    assert [p["path"] for p in second["path_predictors"]] == others
    assert all(p["action"] == "none" for p in second["path_predictors"])
