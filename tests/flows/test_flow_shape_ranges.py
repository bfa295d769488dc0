"""`python flows/adapt.py` over a declared shape range, as a user runs it: on a dynamic-shape
target one plan whose model.onnx keeps the symbolic dim and serves the whole range; on a
static-shape target one plan per bucket, served through buckets.json with padding; both refuse a
shape outside the range."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.errors import MetaInferError
from metainfer_core.plan.deployable import load_plan
from metainfer_core.zoo import build

QUICK = ("model=mlp", "search=quick", "budget.total_s=40", "model.shape_range={input:[[1,8],256]}")


def _served_within_bound(plan, batches, bound):
    original = build("mlp", seed=0)
    for b in batches:
        x = np.random.default_rng(b).standard_normal((b, 256)).astype(np.float32)
        out = plan({"input": x})
        assert out[0].shape == (b, 10)
        assert plan_loss(run_cpu(original, [{"input": x}]), [out]) <= bound, b
    with pytest.raises(MetaInferError, match=r"'input' has size 9 on axis 0.*\[1, 8\]"):
        plan({"input": np.zeros((9, 256), np.float32)})


@pytest.mark.slow
def test_a_dynamic_target_delivers_one_model_for_the_whole_range(run_flow, migrated, tmp_path):
    res = run_flow("adapt", "target=cpu", *QUICK, f"paths.artifacts={migrated(tmp_path)}")
    assert res.returncode == 0, res.stderr
    plan = res.plan
    model = onnx.load(plan["artifact"])
    onnx.checker.check_model(model, full_check=True)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param     # the batch dim stays symbolic
    shapes = plan["shapes"]
    assert shapes["declared"] and shapes["range"] == {"input": [[1, 8], 256]}
    assert {p["name"]: p["shapes"]["input"][0] for p in shapes["points"]} == {"opt": 1, "max": 8}
    if plan["decision"] == "adapted":      # confirmed at every point, its loss there within the bound
        assert all(p["pays"] and p["accuracy_loss"] <= plan["accuracy_bound"] for p in shapes["points"])
    assert "## Shapes served" in (res.plan_path.parent / "plan.md").read_text()
    _served_within_bound(load_plan(res.plan_path.parent), (1, 5, 8), plan["accuracy_bound"])


@pytest.mark.slow
def test_a_static_target_adapts_buckets_and_pads_to_them(run_flow, migrated, tmp_path):
    npz = tmp_path / "inputs.npz"        # real samples at batch 1: each bucket's run fits them to its batch
    np.savez(npz, input=np.random.default_rng(0).standard_normal((6, 1, 256)).astype(np.float32))
    res = run_flow("adapt", "target=npu", *QUICK, f"data.inputs={npz}", f"paths.artifacts={migrated(tmp_path)}")
    assert res.returncode == 0, res.stderr
    index = Path(next(x for x in res.stdout.splitlines() if x.startswith("buckets: ")).removeprefix("buckets: "))
    record = json.loads(index.read_text())
    assert [b["shapes"]["input"][0] for b in record["buckets"]] == [1, 8]
    assert record["paddable_axes"] == {"input": [0]}       # rows of a batch are independent: measured
    assert "samples cropped or tiled to the bound shape: input [1, 256] -> [8, 256]" in res.stdout + res.stderr
    for b in record["buckets"]:
        bucket_plan = json.loads((index.parent / b["run"] / "plan.json").read_text())
        assert bucket_plan["model"]["symbolic_dims"]["input"] == b["shapes"]["input"]     # static, as the target needs
    plan = load_plan(index.parent)
    assert plan.bucket_for({"input": (3, 256)}) == 1        # no bucket of 3: padded up to 8
    _served_within_bound(plan, (1, 3, 8), 0.01)
