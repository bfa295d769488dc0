"""`python flows/onboard.py`: the checklist passes on a real and a modeled target, and a target
whose memory limit is below the minimal model fails the memory item with a clear message."""
from __future__ import annotations

import json

import pytest

from metainfer_core.serving.options import usable_cores


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpu", "npu"])       # npu: the smallest working memory of all targets
def test_onboarding_passes(run_flow, migrated, tmp_path, target):
    migrated(tmp_path)
    res = run_flow("onboard", f"target={target}", "profile.reps=5", "profile.batch_gradient=[1,2]",
                   f"paths.artifacts={tmp_path}")
    assert res.returncode == 0, res.stderr
    report = res.stdout.strip().splitlines()[-1].removeprefix("report: ")
    items = {i["name"]: i for i in json.loads(open(report.replace(".md", ".json")).read())}
    assert set(items) == {"versions", "capabilities", "microbench", "minimal_model", "memory", "execution_paths",
                          "concurrency"}
    assert all(i["passed"] for i in items.values())
    assert items["microbench"]["data"]["measured"] > 50
    most = "4" if target == "npu" else str(usable_cores())       # up to the cores; a modeled device's fixed
    assert {"1", most} <= set(items["concurrency"]["data"])
    paths = items["execution_paths"]["data"]["paths"]
    assert ({"onnxruntime", "openvino:f32"} <= set(paths)) if target == "cpu" else set(paths) == {"default"}
    assert len({p["fingerprint_version"] for p in paths.values()}) == len(paths)      # each path its own version
    assert ("simulated" in open(report).read()) == (target == "npu")


@pytest.mark.slow
def test_memory_limit_below_the_minimal_model_fails(run_flow, migrated, tmp_path):
    migrated(tmp_path)
    res = run_flow("onboard", "target=npu", "target.spec.memory_limit_bytes=10000", "profile.reps=3",
                   "profile.batch_gradient=[1]", f"paths.artifacts={tmp_path}")
    assert res.returncode == 2
    assert "failed onboarding: memory: peak" in res.stderr and "10000 B" in res.stderr
    assert "Traceback" not in res.stderr
