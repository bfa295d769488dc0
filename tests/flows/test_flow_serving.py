"""serving=throughput: the plan and the default are served under the deployment's load with every
setting their runtime offers; plan.json records each one's requests per second and latency
percentiles and the setting chosen, the terminal says it, and load_plan serves the run folder
with that setting from several threads at once."""
from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest

from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.plan.deployable import load_plan


@pytest.mark.slow
def test_throughput_serving_measures_settings_under_load_and_load_plan_serves_the_chosen_one(run_flow, migrated,
                                                                                               tmp_path):
    migrated(tmp_path)
    res = run_flow("adapt", "model=mlp", "search=quick", "serving=throughput", "serving.duration_s=0.4",
                   "budget.total_s=60", f"paths.artifacts={tmp_path}")
    assert res.returncode == 0, res.stderr
    serving = res.plan["serving"]
    assert serving["mode"] == "throughput" and serving["concurrency"] == 2
    assert serving["request_threads"] == max(1, serving["cores"] // 2)
    defaults = [m for m in serving["measured"] if m["label"] == "default"]
    assert defaults and all(m["error"] is None and m["requests"] > 0 and m["throughput_per_s"] > 0
                            for m in defaults), [(m["described"], m["error"]) for m in defaults]
    assert all(m["p50_ms"] <= m["p99_ms"] for m in defaults)
    assert serving["bound_ms"] > 0 and serving["setting"] in [m["setting"] for m in serving["measured"]]
    assert "serve: " in res.stdout + res.stderr
    if serving["cores"] > 1:        # the fingerprint at a session's other thread count scored the settings first
        assert "(sessions under the load)" in res.stdout + res.stderr
        predicted = [p for p in serving["predicted"] if p["label"] == "default"]
        assert len(predicted) == 2 and all(p["served"] and p["predicted_throughput_per_s"] > 0 for p in predicted)
        assert "Predicted before serving" in (folder := res.plan_path.parent).joinpath("plan.md").read_text()
    folder = res.plan_path.parent
    plan = load_plan(folder)
    default = onnx.load(str(folder / "default.onnx"))
    feeds = [random_feeds(default, seed=20 + i) for i in range(4)]
    reference = run_cpu(default, feeds)
    outs: dict[int, list] = {}
    threads = [threading.Thread(target=lambda i=i: outs.__setitem__(i, plan(feeds[i]))) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert plan_loss(reference, [outs[i] for i in range(4)]) <= res.plan["accuracy_bound"]
    assert np.isfinite(serving["default"]["throughput_per_s"])
    assert serving["confirmation"] and not serving["confirmation"].get("error")    # what is served, served again
