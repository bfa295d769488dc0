"""bench/plan_predictions.py: the cost model's figures from adapt runs' plan.json."""
from __future__ import annotations

import json

import pytest

from bench import plan_predictions as pp


def plan(name, weights, default, cands, sha=None, memory=(10, 20)):
    """default: (predicted, measured); cands: (path, predicted, measured, error); memory: every
    plan's (predicted, measured) peak."""
    return {"model": {"name": name, "sha256": sha or name}, "weights": {"name": weights},
            "baseline": {"predicted_latency_ms": default[0], "latency_ms": default[1],
                         "predicted_peak_mem_bytes": memory[0], "peak_mem_bytes": memory[1]},
            "candidates": [{"execution_path": path, "predicted_latency_ms": pr, "predicted_peak_mem_bytes": memory[0],
                            "measured": {"latency_ms": me, "peak_mem_bytes": memory[1]},
                            "error": err} for path, pr, me, err in cands]}


def test_each_models_first_adapt_with_the_weights_counts():
    runs = [plan("a", "latency", (1, 1), []), plan("a", "balanced", (2, 2), []), plan("a", "balanced", (3, 3), []),
            plan("b", "balanced", (4, 4), [])]
    assert [p["baseline"]["latency_ms"] for p in pp.first_adapts(runs, "balanced")] == [2, 4]
    assert [p["baseline"]["latency_ms"] for p in pp.first_adapts(runs)] == [1, 4]


def test_figures_rank_and_size_the_plans_per_model_and_per_path():
    good = plan("good", "balanced", (10, 10), [("openvino:f32", 5, 5.5, None), ("onnxruntime", 8, 8, None),
                                               ("onnxruntime", 1, 99, "failed to run")])
    bad = plan("bad", "balanced", (10, 20), [("openvino:f32", 5, 4, None), ("onnxruntime", 3, 9, None)])
    f = pp.figures([good, bad])
    g, b = f["models"]
    assert (g["plans"], g["seen_before"], b["seen_before"]) == (3, 0, 1)       # the failed plan left out
    assert g["spearman"] == pytest.approx(1.0) and b["spearman"] == pytest.approx(0.5)
    assert g["default_err"] == 0 and b["default_err"] == pytest.approx(0.5)
    assert (g["off_2x"], b["off_2x"]) == (0, 1)                                # 3 vs 9 ms: 3x off
    assert f["paths"]["openvino:f32"]["plans"] == 2 and f["paths"]["onnxruntime"]["plans"] == 4
    assert f["paths"]["openvino:f32"]["median_err"] == pytest.approx((0.5 / 5.5 + 0.25) / 2)
    assert f["mean_spearman"] == pytest.approx(0.75)
    assert f["paths"]["openvino:f32"]["memory_median_err"] == pytest.approx(0.5)        # 10 predicted, 20 measured
    assert [(b["band"], b["models"]) for b in f["learning"]] == [("0", 1), ("1-3", 1)]      # the learning curve
    assert f["learning"][1]["mean_spearman"] == pytest.approx(0.5) and f["learning"][1]["default_median_err"] == 0.5
    md = "\n".join(pp.markdown(f))
    assert "| 1-3 | 1 | 0.50 | " in md
    assert "| bad | 1 | 3 | 0.50 | " in md and "1 of 2 models with a plan off by more than 2x" in md


def test_the_command_reads_a_stores_runs(tmp_path, capsys):
    for i, p in enumerate([plan("m", "balanced", (10, 11), [("onnxruntime", 5, 5, None)])]):
        (tmp_path / f"2026-{i}").mkdir()
        (tmp_path / f"2026-{i}" / "plan.json").write_text(json.dumps(p))
    assert pp.main([str(tmp_path)]) == 0
    assert "| m | 0 | 2 |" in capsys.readouterr().out
    assert pp.main([str(tmp_path), "--weights", "embedded"]) == 1
