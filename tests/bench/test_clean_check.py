"""bench/clean_check.py (issue 47): a run folder's plan and default.onnx timed again alone in a fresh
process against plan.json's claims; the pure parts (figures, the two-adapt comparison, the
report's claimed-vs-clean and two-adapts tables) on synthetic data, and (slow) one real adapt
run folder checked for real."""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from bench import clean_check, modelset, report

FAST = ["model=mlp", "search=quick", "profile.reps=3", "profile.warmup=1", "profile.batch_gradient=[1]",
        "verify.runs=3", "verify.warmup=1", "verify.samples=1"]


def _plan(decision="adapted", base=2.0, meas=1.0, loss=0.0, actions=(("int8", {"per_channel": "auto"}),),
          path="onnxruntime"):
    return {"decision": decision, "target": {"driver": "providers=CPUExecutionProvider;threads=1;opt=ORT_ENABLE_ALL"},
            "baseline": {"latency_ms": base, "accuracy_loss": 0.0},
            "measured": {"latency_ms": meas, "accuracy_loss": loss},
            "actions": [{"kind": k, "scope": "all", "params": p} for k, p in actions] if decision == "adapted" else [],
            "execution_path": {"label": path, "settings": {"intra_op_threads": 1}}}


def test_default_settings_come_from_the_targets_driver():
    assert clean_check.default_settings(_plan()) == {
        "providers": ["CPUExecutionProvider"], "intra_op_threads": 1, "graph_optimization_level": "ORT_ENABLE_ALL"}
    p = _plan()
    p["target"]["driver"] = "providers=CPUExecutionProvider;threads=4;opt=ORT_ENABLE_BASIC"
    assert clean_check.default_settings(p)["intra_op_threads"] == 4
    assert clean_check.default_settings(p)["graph_optimization_level"] == "ORT_ENABLE_BASIC"
    assert clean_check.default_settings({})["intra_op_threads"] == 1      # conf/target/cpu.yaml's


def test_figures_judge_the_clean_samples_against_the_claim():
    child = {"default_samples_ms": [2.0, 2.1, 1.9] * 20, "plan_samples_ms": [1.0, 1.05, 0.95] * 20, "rounds": 60}
    f = clean_check.figures(_plan(base=2.1, meas=1.0, loss=5e-4), [child])
    assert f["default_ms"] == 2.0 and f["plan_ms"] == 1.0 and f["speedup"] == 2.0
    assert f["claimed_speedup"] == pytest.approx(2.1)
    assert f["holds"] is False                        # 2.0 / 2.1 - 1 = -4.8 %
    assert f["lossy"] and f["lossy_ok"] is True       # lossy, but 2x clean
    assert f["default_error"] == pytest.approx(0.05) and f["default_holds"]
    assert f["ratio_low"] <= f["paired_ratio"] <= f["ratio_high"]
    assert clean_check.figures(_plan(base=2.02, meas=1.0), [child])["holds"] is True
    same = {"default_samples_ms": [1.0] * 30, "plan_samples_ms": [1.02] * 30, "rounds": 30}
    kept = clean_check.figures(_plan("rolled_back", base=1.5, meas=1.5), [same])
    assert kept["holds"] is None and kept["lossy_ok"] is None and not kept["adopted"]
    assert kept["default_error"] == pytest.approx(0.5) and not kept["default_holds"]
    slow = clean_check.figures(_plan(base=1.0, meas=0.97, loss=1e-3),
                               [{"default_samples_ms": [1.0] * 30, "plan_samples_ms": [0.99] * 30, "rounds": 30}])
    assert slow["lossy"] and slow["lossy_ok"] is False


def test_processes_are_pooled_and_each_ones_speedup_is_kept():
    fast = {"default_samples_ms": [2.0] * 30, "plan_samples_ms": [0.96] * 30}
    slow = {"default_samples_ms": [2.0] * 70, "plan_samples_ms": [1.04] * 70}
    f = clean_check.figures(_plan(base=2.0, meas=1.0), [fast, slow, fast])
    assert f["rounds"] == 130
    assert f["process_speedups"] == pytest.approx([2.0 / 0.96, 2.0 / 1.04, 2.0 / 0.96])
    assert f["plan_ms"] == 1.04 and f["holds"] is False     # the pooled median, not one process's draw


def test_two_adapts_agree_on_the_same_plan_or_both_keeping_the_default():
    a, b = _plan(), _plan()
    assert clean_check.compare_twice(a, b)["agree"]
    assert clean_check.compare_twice(_plan("rolled_back"), _plan("skipped"))["agree"]
    assert not clean_check.compare_twice(a, _plan(actions=(("int8", {"per_channel": "off"}),)))["agree"]
    assert not clean_check.compare_twice(a, _plan(path="openvino-bf16"))["agree"]
    assert not clean_check.compare_twice(a, _plan("rolled_back"))["agree"]
    narrow = {"ratio_low": 0.70, "ratio_high": 0.72, "speedup": 1.4}
    assert clean_check.within_noise(narrow, {"ratio_low": 0.715, "ratio_high": 0.73}) is True
    assert clean_check.within_noise(narrow, {"ratio_low": 0.98, "ratio_high": 1.01}) is False
    assert clean_check.within_noise(narrow, {"error": "x"}) is None
    apart = {"ratio_low": 0.73, "ratio_high": 0.74}      # tight intervals apart, speed-ups 2 % apart
    assert clean_check.within_noise(narrow, apart | {"speedup": 1.372}) is True
    assert clean_check.within_noise(narrow, apart | {"speedup": 1.35}) is False
    t = clean_check.compare_twice(a, _plan("rolled_back"), narrow, {"ratio_low": 0.98, "ratio_high": 1.01,
                                                                     "speedup": 1.0})
    assert t == {"agree": False, "decisions": ["adapted", "rolled_back"], "within_noise": False,
                 "clean_speedups": [1.4, 1.0]}
    assert modelset.with_artifacts(["paths.artifacts=/a", "search=quick"], Path("/b")) == [
        "search=quick", "paths.artifacts=/b"]


def _clean(decision="adapted", claimed=1.4, speedup=1.39, lossy=False, default_error=0.04, **kw):
    adopted = decision == "adapted"
    ok = abs(speedup / claimed - 1) <= 0.03
    return {"decision": decision, "adopted": adopted, "execution_path": "onnxruntime",
            "actions": ["int8"] if adopted else [], "accuracy_loss": 2.4e-4 if lossy else 0.0, "lossy": lossy,
            "claimed_speedup": claimed, "speedup": speedup, "paired_ratio": 1 / speedup,
            "ratio_low": 1 / speedup - 0.01, "ratio_high": 1 / speedup + 0.01, "claimed_default_ms": 0.15,
            "default_ms": 0.15 / (1 + default_error), "default_error": default_error,
            "default_holds": abs(default_error) <= 0.1, "holds": ok if adopted else None,
            "lossy_ok": (speedup >= 1.03) if adopted and lossy else None} | kw


def test_the_claimed_vs_clean_table_and_its_summary():
    rows = [{"name": "a", "decision": "adapted", "clean": _clean(lossy=True)},
            {"name": "b", "decision": "adapted", "clean": _clean(claimed=1.10, speedup=1.01, lossy=True)},
            {"name": "c", "decision": "rolled_back", "clean": _clean("rolled_back", 1.0, 0.99, default_error=0.2)},
            {"name": "d", "decision": "adapted", "clean": {"decision": "adapted", "adopted": True, "actions": ["fp16"],
                                                           "claimed_speedup": 1.2, "error": "ValueError: boom"}},
            {"name": "e", "rc": "timeout", "error": "no result within 5 s"}]
    lines = report.clean_table(rows)
    head, body, summary = lines[0], lines[2:-2], lines[-1]
    assert head.count("|") == 12 and all(line.count("|") == 12 for line in body) and len(body) == 5
    a, b, c, d, e = body
    assert "| a | adapted | onnxruntime: int8 (lossy, 2.4e-04) | 1.40x | **1.39x** |" in a
    assert "| yes | yes | 0.15 |" in a and "+4.0%" in a
    assert "| **no** | **no** |" in b                  # off the claim, and lossy under 1.03x
    assert "default kept" in c and "| – | – |" in c and "+20.0% **over**" in c
    assert "check failed: ValueError: boom" in d
    assert "failed (timed out)" in e
    assert report.clean_summary(rows) == {"adopted": 2, "holds": 1, "lossy": 2, "lossy_under": 1, "checked": 3,
                                          "defaults_within": 2, "errors": 1}
    assert summary.startswith("**1 of 2 adopted plans hold within 3%**")
    assert "lossy plans adopted under 1.03x clean: 1" in summary and "2 of 3" in summary


def test_the_two_adapts_table_counts_agreements_and_noise():
    twice_ok = {"decision": "adapted", "clean": _clean(), "agree": True, "clean_speedups": [1.39, 1.38],
                "within_noise": True}
    twice_bad = {"decision": "rolled_back", "clean": _clean("rolled_back", 1.0, 1.0), "agree": False,
                 "clean_speedups": [1.02, 1.0], "within_noise": True}
    rows = [{"name": "a", "decision": "adapted", "clean": _clean(), "twice": twice_ok},
            {"name": "b", "decision": "adapted", "clean": _clean(claimed=1.05, speedup=1.02), "twice": twice_bad},
            {"name": "c", "decision": "adapted", "clean": _clean(), "twice": {"rc": 1, "adapt_s": 3.0,
                                                                             "error": "Traceback\nboom"}}]
    lines = report.twice_table(rows)
    assert len(lines) == 2 + 3 + 2 and all(line.count("|") == 7 for line in lines[:5])
    assert "| a | adapted, onnxruntime: int8 (lossless) | adapted, onnxruntime: int8 (lossless) | yes |" in lines[2]
    assert "| b |" in lines[3] and "rolled_back, default kept | **no** | 1.02x / 1.00x | yes |" in lines[3]
    assert "failed (exit 1): Traceback" in lines[4]
    assert lines[-1] == ("**two adapts agree: 1 of 2**; of the 1 that disagree, 1 differ by less than the noise "
                         "bound (clean speed-ups within 3 % or their paired ratios' bootstrap intervals overlapping); "
                         "1 second adapts failed")


def test_a_missing_run_folder_is_an_error_not_an_exception(tmp_path):
    r = clean_check.clean_check(tmp_path / "nowhere")
    assert r["error"].startswith("plan.json: FileNotFoundError")


@pytest.mark.slow
def test_a_real_run_folder_is_checked_in_a_fresh_process(run_flow, migrated, tmp_path):
    migrated(tmp_path)
    r = run_flow("adapt", *FAST, f"paths.artifacts={tmp_path}", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    folder, plan = r.plan_path.parent, r.plan
    c = clean_check.clean_check(folder, rounds=40, processes=2)
    assert "error" not in c, c
    assert all(math.isfinite(c[k]) and c[k] > 0 for k in ("default_ms", "plan_ms", "speedup"))
    assert c["claimed_speedup"] == pytest.approx(plan["baseline"]["latency_ms"] / plan["measured"]["latency_ms"])
    assert c["claimed_default_ms"] == plan["baseline"]["latency_ms"] and c["decision"] == plan["decision"]
    assert c["rounds"] == 40 and c["ratio_low"] <= c["paired_ratio"] <= c["ratio_high"]
    assert len(c["process_speedups"]) == 2 and len({k["pid"] for k in c["children"]}) == 2
    child = c["child"]
    assert child["pid"] != os.getpid() and c["parent_pid"] == os.getpid()     # a process of its own ran it
    heavy = {"prefect", "hydra", "mlflow", "bench", "tasks", "app"}
    assert not {m.split(".")[0] for m in child["heavy_modules"]} & heavy
    assert child["default_settings"]["intra_op_threads"] == 1 and child["plan_path"]
    assert "claimed" in clean_check.describe(c) and "fresh process:     pid" in clean_check.describe(c)
    broken = tmp_path / "broken"        # the child fails: the result says why, nothing raises
    shutil.copytree(folder, broken)
    (broken / "model.onnx").write_bytes(b"not onnx")
    bad = clean_check.clean_check(broken, rounds=5)
    assert bad["error"] and bad["decision"] == plan["decision"] and "speedup" not in bad
    assert json.loads((folder / "plan.json").read_text())["decision"] == plan["decision"]
