"""The benchmark suite's pure parts, without running the suite: roofline arithmetic and the
peak micro-benchmarks (small sizes), the goal arithmetic (bench/goals.py), the report writer, the
results block replacement (docs/benchmarks.md), the Pareto front and the plots."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from bench import goals, plan_predictions, plots, report, roofline

ROOT = Path(__file__).resolve().parents[2]


def matmul_model(m: int, k: int, n: int) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((k, n), np.float32), "W")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_model_work_counts_flops_weights_and_io():
    w = roofline.model_work(matmul_model(8, 64, 32))
    assert w.flops == 2 * 8 * 64 * 32
    assert w.weight_bytes == 64 * 32 * 4
    assert w.io_bytes == (8 * 64 + 8 * 32) * 4
    assert w.bytes_int8 == 64 * 32 + w.io_bytes


def test_roofline_takes_the_slower_of_compute_and_memory():
    # 1 GFLOP at 100 GFLOP/s = 10 ms; 10 MB at 10 GB/s = 1 ms -> compute-bound, 10 ms
    assert roofline.roofline_ms(10**9, 10**7, 100.0, 10.0) == pytest.approx(10.0)
    # 1 MFLOP = 0.01 ms; 100 MB at 10 GB/s = 10 ms -> memory-bound
    assert roofline.roofline_ms(10**6, 10**8, 100.0, 10.0) == pytest.approx(10.0)
    peaks = roofline.Peaks(fp32_gflops=100.0, int8_gops=400.0, bandwidth_gbs=10.0, cache_bandwidth_gbs=100.0,
                           cache_bytes=2 * 10**6)
    work = roofline.Work(flops=10**9, weight_bytes=4 * 10**7, io_bytes=0)
    lim = roofline.limits_ms(work, peaks)
    assert lim["fp32"] == pytest.approx(10.0)            # compute 10 ms > memory 4 ms (40 MB at 10 GB/s)
    assert lim["int8"] == pytest.approx(2.5)             # compute 2.5 ms > memory 1 ms
    assert roofline.bound_by(work, peaks, "fp32") == "compute"
    assert roofline.bound_by(roofline.Work(10, 10**9, 0), peaks, "fp32") == "memory (large arrays)"
    # a footprint inside the cache moves at the cache bandwidth: 1.6 MB at 100 GB/s = 0.016 ms
    small = roofline.Work(flops=10, weight_bytes=16 * 10**5, io_bytes=0)
    assert roofline.limits_ms(small, peaks)["fp32"] == pytest.approx(0.016)
    assert roofline.bound_by(small, peaks, "fp32") == "memory (cache)"
    assert roofline.best(peaks, roofline.Peaks(50.0, 800.0, 5.0, 200.0, 2 * 10**6)) == roofline.Peaks(
        100.0, 800.0, 10.0, 200.0, 2 * 10**6)
    with pytest.raises(ValueError, match="positive"):
        roofline.roofline_ms(1, 1, 0.0, 1.0)


def test_peak_microbenchmarks_measure_positive_rates():
    def session(model_bytes):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])

    p = roofline.measure_peaks(session, n=128, mem_mib=4, reps=3)
    assert p.fp32_gflops > 0.1 and p.int8_gops > 0.1 and p.bandwidth_gbs > 0.1 and p.cache_bandwidth_gbs > 0.1
    assert p.cache_bytes >= 1024
    assert all(math.isfinite(v) for v in p.as_dict().values())


def _compare(default_ms, adapted_ms, nncf_error=None):
    """A compare() result as bench/ort_baselines.py returns it (ORT default first, then the peers)."""
    ok = lambda ms, loss, runtime, precision: {"latency_ms": ms, "accuracy_loss": loss, "error": None,  # noqa: E731
                                               "path": {"runtime": runtime, "precision": precision}}
    return {"ort_default": ok(default_ms, 0.0, "onnxruntime-1.x", "fp32") | {"aa": 1.02},
            "ort_static": ok(default_ms / 1.25, 4e-4, "onnxruntime-1.x", "int8"),
            "ort_dynamic": ok(default_ms * 4, 3e-4, "onnxruntime-1.x", "int8"),
            "ov_default": ok(default_ms / 2, 5e-2, "openvino-2026.x", "bf16"),      # fastest, but over max_loss
            "ov_f32": ok(default_ms / 1.6, 1e-7, "openvino-2026.x", "f32"),
            "ov_nncf_int8": ({"latency_ms": None, "accuracy_loss": None, "path": None, "error": nncf_error}
                             if nncf_error else ok(default_ms / 1.1, 6e-4, "openvino-2026.x", "int8+bf16")),
            "ov_nncf_aac": ok(default_ms / 1.05, 3e-4, "openvino-2026.x", "int8+f32"),
            "meta_infer": ok(adapted_ms, 2e-4, "openvino", "bf16") | {
                "path": {"runtime": "openvino", "precision": "bf16", "graph": "fp32", "loader": "deployable.load_plan"}},
            "meta_infer_latency": ok(adapted_ms / 1.25, 3e-3, "openvino", "bf16")}


def _model(name, default_ms, adapted_ms, decision="adapted", actions=("int8",)):
    return {"name": name, "nodes": 49, "decision": decision, "actions": list(actions), "default_ms": default_ms,
            "default_loss": 1e-16, "default_predicted_ms": default_ms * 1.2, "adapted_ms": adapted_ms,
            "accuracy_loss": 2e-4, "timings": {"search_s": 3.0, "compile_s": 0.05, "verify_s": 1.5, "total_s": 12.0},
            "run_folder": f"artifacts/bench/store/runs/x-{name}", "mlflow_run_id": f"run-{name}", "mlflow_check": "match",
            "candidates": [{"label": "candidate1", "actions": list(actions), "predicted_ms": adapted_ms * 1.1,
                            "measured_ms": adapted_ms, "accuracy_loss": 2e-4, "error": None},
                           {"label": "candidate2", "actions": ["fp16"], "predicted_ms": default_ms,
                            "measured_ms": default_ms * 1.3, "accuracy_loss": 1e-6, "error": None}],
            "compare": _compare(default_ms, adapted_ms),
            "latency": {"rc": 0, "adapt_s": 9.0, "default_ms": default_ms, "adapted_ms": adapted_ms / 1.25,
                        "decision": "adapted", "actions": ["int8", "binding"], "accuracy_loss": 3e-3,
                        "mlflow_run_id": f"run-{name}-latency"},
            "roofline": {"gflops": 0.1, "mbytes": 1.0, "precision": "int8", "bound": "compute",
                         "limit_ms": adapted_ms / 50, "x_limit": 50.0}}


NNCF_ERROR = "convert/compile: RuntimeError: Exception from src/core/src/node.cpp"


def results():
    return {"date": "2026-11-29 20:00 UTC", "command": "make bench",
            "machine": {"cpu": "Test CPU", "cores": 2, "load": "load average 1.0 at start", "onnxruntime": "1.x"},
            "options": {"quick": False, "compare_runs": 40, "max_loss": 0.01}, "wall_s": 600.0,
            "peaks": {"fp32_gflops": 100.0, "int8_gops": 800.0, "bandwidth_gbs": 12.0, "cache_bandwidth_gbs": 80.0,
                      "cache_bytes": 2 << 20},
            "models": [_model("resnet_tiny", 0.4, 0.2) | {"compare": _compare(0.4, 0.2, NNCF_ERROR)},
                       _model("mlp", 0.1, 0.1, "rolled_back", ()),
                       {"name": "ppocr_rec", "error": "error: the run failed inside the pipeline"}],
            "search_scaling": [{"target": "gpu", "beam": 8, "depth": 6, "nodes": 97, "search_s": 4.0, "evaluated": 133},
                               {"target": "gpu", "beam": 8, "depth": 6, "nodes": 997, "search_s": 40.0,
                                "evaluated": 133}],
            "reprofile": [{"target": "fpga", "full_s": 10.0, "full_kernels": 300, "change": "firmware",
                           "quiet": {"seconds": 0.5, "checks": 3, "remeasured": 0, "drifted": []},
                           "drift": {"seconds": 1.0, "checks": 9, "remeasured": 100, "carried": 200,
                                     "drifted": ["Conv"]}}],
            "mlflow": {"uri": "sqlite:///artifacts/bench/store/mlflow.db",
                       "experiments": [{"name": "meta-infer/resnet_tiny", "target": "cpu", "runs": 2, "params": 90, "metrics": 30,
                                        "differs": []}]},
            "plots": ["pareto.png"]}


def test_headline_ratios_are_geometric_means_of_the_rows():
    h = goals.headline(results())
    assert h["models"] == 2 and h["failed"] == 1 and h["adapted"] == 1
    assert h["speedup_gmean"] == pytest.approx(math.sqrt(2.0 * 1.0))
    assert h["ort_static_gmean"] == pytest.approx(1.25)
    assert h["ort_dynamic_gmean"] == pytest.approx(0.25)
    assert h["ov_default_gmean"] == pytest.approx(2.0) and h["ov_f32_gmean"] == pytest.approx(1.6)
    assert h["ov_nncf_int8_gmean"] == pytest.approx(1.1)           # the failed peer (resnet_tiny) is left out
    assert h["meta_infer_gmean"] == pytest.approx(math.sqrt(2.0))
    assert h["fastest_gmean"] == pytest.approx(1.6)                # OpenVINO f32: bf16 is faster, but over max_loss
    assert h["vs_fastest_gmean"] == pytest.approx(math.sqrt((0.25 / 0.2) * (0.0625 / 0.1)))
    assert h["roofline_x_median"] == 50.0
    assert h["aa_gmean"] == pytest.approx(1.02)


def test_fastest_peer_respects_max_loss_and_leaves_meta_infer_out():
    c = _compare(0.4, 0.01)
    assert goals.fastest_peer(c, 0.01) == ("ov_f32", pytest.approx(0.25))
    assert goals.fastest_peer(c, 0.1) == ("ov_default", pytest.approx(0.2))  # looser bound: bf16 qualifies
    assert goals.fastest_peer(c, 0.0) == ("ort_default", pytest.approx(0.4))
    c["ort_default"]["accuracy_loss"] = 1e-3
    assert goals.fastest_peer(c, 1e-9) is None
    r = goals.compare_ratios({"name": "x", "compare": c}, 1e-9)
    assert r["fastest"] is None and r["vs_fastest"] is None and r["meta_infer"] == pytest.approx(40.0)


def test_report_names_runs_ratios_failures_and_sections():
    md = report.markdown(results())
    assert "**2.00x**" in md and "**1.00x**" in md                       # adapted vs default per row
    assert "`artifacts/bench/store/runs/x-resnet_tiny`" in md and "`run-resnet_tiny`" in md
    assert "| ppocr_rec | – | failed: error: the run failed" in md
    header = ("| model | source | ORT default ms | A/A | ORT quantize_static | ORT quantize_dynamic | OpenVINO default "
              "| OpenVINO f32 | OpenVINO+NNCF int8 | NNCF int8 accuracy-aware | meta-infer | meta-infer weights=latency "
              "| meta-infer path | fastest peer within max_loss 0.01 | meta-infer / fastest peer "
              "| weights=latency / fastest peer | 3 % goal (>= 0.97) |")
    assert header + "\n|" + "---|" * 17 + "\n" in md
    assert ("| resnet_tiny | – | 0.4 | 1.02x | 0.32 ms, 1.25x, loss 4.0e-04 | 1.6 ms, 0.25x, loss 3.0e-04 "
            "| 0.2 ms, 2.00x, loss 5.0e-02 | 0.25 ms, 1.60x, loss 1.0e-07 "
            "| failed: convert/compile: RuntimeError: Exception from src/core/src/node.cpp "
            "| 0.381 ms, 1.05x, loss 3.0e-04 | 0.2 ms, 2.00x, loss 2.0e-04 | 0.16 ms, 2.50x, loss 3.0e-03 "
            "| openvino bf16, fp32 graph via deployable.load_plan | OpenVINO f32 (1.60x) | **1.25x** | 1.56x | yes |") in md
    assert "| mlp | – | 0.1 | 1.02x | 0.08 ms, 1.25x, loss 4.0e-04 |" in md
    assert "| 0.09091 ms, 1.10x, loss 6.0e-04 | 0.09524 ms, 1.05x, loss 3.0e-04 | 0.1 ms, 1.00x, loss 2.0e-04 |" in md
    assert "| **0.62x** | 0.78x | **below** |" in md                              # mlp: under the 3 % goal
    assert ("| geo-mean (2 models) | | 0.2 | 1.02x | 1.25x | 0.25x | 2.00x | 1.60x | 1.10x | 1.05x | 1.41x | 1.77x "
            "| | 1.60x | **0.88x** | 1.10x | 1 of 3 |") in md
    assert md.splitlines()[2].startswith("**1 of 3 models meet the 3 % goal**")
    assert "fastest peer within accuracy.max_loss 0.01 1.60x, meta-infer against it **0.88x** (weights=latency 1.10x)" in md
    # the defaults are the headline; weights=latency beside them, in adapt's verify and in the same-run comparison
    assert ("adapted vs default with the defaults (`weights=balanced`) (adapt's own verify, geometric mean over 2 "
            "models): **1.41x**; 1 adapted, 1 kept the default; 1 failed; with weights=latency 1.77x (2 of 2 adapted)"
            ) in md
    assert "meta-infer 1.41x with the defaults (`weights=balanced`), 1.77x with weights=latency," in md
    assert "| 2.50x, adapted, int8, binding |" in md                # the weights=latency adapt in the adapt table
    assert "**capped** at 3 layers reverted to float" in md
    assert "**50x**" in md and "80.0 GB/s inside the 2048 KiB" in md                                              # adapted / roofline
    assert "| 997 | 40.0 | 133 | 0.301 | 10.00x |" in md                 # search scaling vs smallest
    assert "| fpga (modeled) | 10.0 (300) | 0.50 | 0.05x | firmware | 1.00 (Conv) | 100 / 200 | 0.10x |" in md
    assert "![pareto.png](pareto.png)" in md
    assert "## Cost model" not in md                                    # a results.json of before the section


def test_report_shows_the_cost_model_on_the_models_of_the_run():
    from tests.bench.test_plan_predictions import plan

    r = results() | {"cost_model": plan_predictions.figures([plan("m", "balanced", (10, 11), [("openvino:f32", 5, 6, None)])])}
    md = report.markdown(r)
    assert "## Cost model on these models" in md and "| m | 0 | 2 | – | " in md and "| openvino:f32 | 1 | 17% |" in md


def test_peers_table_keeps_failed_models_and_every_column():
    rows = [{"name": "a", "compare": _compare(1.0, 0.5)}, {"name": "b", "error": "ValueError: no model"},
            {"name": "c", "compare": {k: v for k, v in _compare(2.0, 1.0).items() if k != "meta_infer"}}]
    lines = report.peers_table(rows, 0.1)
    assert len(lines) == 2 + 3 + 1 and all(ln.count("|") == 18 for ln in lines), lines
    assert lines[3].startswith("| b | – | failed: ValueError: no model |") and lines[3].endswith("| **failed** |")
    assert "| – | 0.8 ms, 2.50x, loss 3.0e-03 | – | OpenVINO default (2.00x) | **–** | 1.25x | **failed** |" in lines[4]
    assert lines[-1].startswith("| geo-mean (2 models) |") and lines[-1].endswith(
        "| 2.00x | 2.50x | | 2.00x | **1.00x** | 1.25x | 1 of 3 |")


TIMINGS = {"normalize_s": 0.3, "profile_s": 3.4, "train_s": 1.9, "search_s": 4.5, "verify_s": 4.2, "compile_s": 0.47,
           "total_s": 15.2}


def combined_results():
    """The suite's rows over both sources: a zoo model, PP-OCR and another model from the corpus
    (real inputs), one under the 3 % goal, one whose own plan is over max_loss, one whose adapt
    timed out and one whose wheel could not be fetched."""
    zoo = _model("resnet_tiny", 0.4, 0.2) | {"source": "zoo", "inputs": "random", "rc": 0, "adapt_s": 20.4,
                                             "timings": TIMINGS, "execution_path": "onnxruntime f32"}
    ocr = _model("ppocr_cls", 0.84, 0.5) | {"source": "corpus", "inputs": "data.inputs", "rc": 0, "adapt_s": 61.0,
                                            "timings": TIMINGS, "execution_path": "openvino bf16",
                                            "search": {"levels": 2, "depth": 4, "evaluated": 31, "stopped_by_budget": True}}
    ocr["compare"]["meta_infer"]["latency_ms"] = (0.84 / 1.6) / 0.96             # 0.96x OpenVINO f32's speed
    vad = _model("silero_vad", 0.1, 0.05) | {"source": "corpus", "inputs": "data.inputs", "rc": 0, "adapt_s": 30.0,
                                            "timings": TIMINGS}
    vad["compare"]["meta_infer"]["accuracy_loss"] = 0.5
    slow = {"name": "ddddocr_det", "source": "corpus", "inputs": "data.inputs", "rc": "timeout", "adapt_s": 1800.0,
            "error": "no result within 1800 s; last progress lines:\n[meta-infer] search: 40 states"}
    gone = {"name": "magika_v3_3", "source": "corpus", "inputs": "random", "rc": "fetch", "adapt_s": 0.0,
            "error": "corpus: not fetched: pip download magika==1.0.3 failed (exit 1): no network"}
    return results() | {"models": [zoo, ocr, vad, slow, gone]}


def test_combined_table_covers_every_source_flags_the_goal_and_takes_geo_means():
    r = combined_results()
    lines = report.peers_table(r["models"], 0.01)
    rows = {ln.split(" | ")[0].removeprefix("| "): ln for ln in lines[2:]}
    assert list(rows) == ["resnet_tiny", "ppocr_cls", "silero_vad", "ddddocr_det", "magika_v3_3", "geo-mean (3 models)"]
    assert all(ln.count("|") == 18 for ln in lines), lines
    assert rows["resnet_tiny"].startswith("| resnet_tiny | zoo | 0.4 |") and rows["resnet_tiny"].endswith(
        "| **1.25x** | 1.56x | yes |")
    assert rows["ppocr_cls"].startswith("| ppocr_cls | corpus, real inputs | 0.84 |")
    assert rows["ppocr_cls"].endswith("| OpenVINO f32 (1.60x) | **0.96x** | 1.31x | **below** |")   # under 0.97
    assert rows["silero_vad"].endswith("| **1.25x** (over max loss) | 1.56x | **over max_loss** |")
    assert rows["ddddocr_det"].startswith("| ddddocr_det | corpus, real inputs | failed (timed out): no result within")
    assert rows["magika_v3_3"].startswith("| magika_v3_3 | corpus | failed (not fetched): corpus: not fetched")
    assert all(rows[k].endswith("| **failed** |") for k in ("ddddocr_det", "magika_v3_3"))
    # geo-means of every column over the three compared models
    g = [c.strip() for c in rows["geo-mean (3 models)"].strip("|").split("|")]
    assert g[2] == f"{(0.4 * 0.84 * 0.1) ** (1 / 3):.4g}" and g[3] == "1.02x" and g[4] == "1.25x"
    assert g[-4] == "1.60x" and g[-3] == f"**{(1.25 * 0.96 * 1.25) ** (1 / 3):.2f}x**" and g[-1] == "1 of 5"
    assert g[-2] == f"{(1.5625 * 1.3125 * 1.5625) ** (1 / 3):.2f}x"       # weights=latency against the fastest peer
    s = goals.goal_summary(r["models"], 0.01)
    assert s["met"] == 1 and s["total"] == 5 and [n for n, _ in s["below"]] == ["ppocr_cls"]
    assert s["other"] == [("silero_vad", "over max_loss"), ("ddddocr_det", "failed"), ("magika_v3_3", "failed")]

    md = report.markdown(r)
    assert md.splitlines()[2] == ("**1 of 5 models meet the 3 % goal** (meta-infer / fastest peer within "
                                  "accuracy.max_loss 0.01 >= 0.97); below: ppocr_cls 0.96x; silero_vad over max_loss, "
                                  "ddddocr_det failed, magika_v3_3 failed.")
    assert "\n".join(lines) in md                                         # the one peers table, every model
    # per model: exit code, adapt wall time and each stage's seconds
    assert ("| ppocr_cls | corpus, real inputs | 0 | 49 | 0.84 | 0.5 | **1.68x** | 2.00e-04 | adapted | int8 "
            "| openvino bf16 | 61 | normalize 0.3, profile 3.4, train 1.9, search 4.5, verify 4.2, compile 0.5, "
            "total 15.2 | depth 2 of 4 reached, 31 candidates scored, stopped by the budget |") in md
    adapt = report.adapt_table(r["models"])
    assert len(adapt) == 2 + 5 and len({ln.count("|") for ln in adapt}) == 1 and "\n".join(adapt) in md
    assert adapt[5].startswith("| ddddocr_det | corpus, real inputs | timeout |") and "| 1800 |" in adapt[5]
    assert ("### ddddocr_det: failed (timed out)\n\n```\nno result within 1800 s; last progress lines:\n"
            "[meta-infer] search: 40 states\n```") in md
    assert "### magika_v3_3: failed (not fetched)" in md
    assert goals.headline(r)["goal_met"] == 1 and goals.headline(r)["goal_models"] == 5

    block = report.readme_block(r, "artifacts/bench/report.md").splitlines()
    table = [ln for ln in block if ln.startswith("|")]
    assert len(table) == 2 + 5 + 1 and len({ln.count("|") for ln in table}) == 1, table
    assert "**1 of 5 models meet the 3 % goal**" in block[1]
    assert table[3].startswith("| ppocr_cls | corpus, real inputs | 0.84 | 0.5 | 1.68x |")
    assert "| 0.96x | **below** | 2.10x | 1.31x |" in table[3]
    assert table[5] == ("| ddddocr_det | corpus, real inputs | failed (timed out) |" + "  |" * 8 + " failed |"
                        + "  |" * 4 + " 1800 |")
    assert table[-1].startswith(f"| geo-mean (3 models) | | {(0.4 * 0.84 * 0.1) ** (1 / 3):.3g} |")
    assert f"| {(1.25 * 0.96 * 1.25) ** (1 / 3):.2f}x | 1 of 5 | {(2.5 * 2.1 * 2.5) ** (1 / 3):.2f}x | 1.47x |" in table[-1]
    assert "| max 2.0e-04 | 3 adapted |" in table[-1]


def test_readme_block_is_replaced_in_place_and_idempotent():
    text = f"# T\n\nbefore\n\n{report.BEGIN}\nold table\n{report.END}\n\nafter\n"
    block = report.readme_block(results(), "artifacts/bench/report.md")
    once = report.replace_block(text, block)
    assert "old table" not in once and once.startswith("# T\n\nbefore\n\n") and once.endswith("\n\nafter\n")
    assert "| resnet_tiny | – | 0.4 | 0.2 | 2.00x |" in once and "2026-11-29 20:00 UTC" in once and "Test CPU" in once
    assert "| 1.25x (4e-04) | 0.25x (3e-04) | OpenVINO f32 1.60x | 1.25x | yes | 2.50x | 1.56x | 1.02x | 50x | – |" in once
    assert "| ppocr_rec | – | failed |" + "  |" * 8 + " failed |" + "  |" * 4 + " – |" in once
    assert report.replace_block(once, block) == once
    for broken in ("no markers", f"{report.END} {report.BEGIN}", f"{report.BEGIN}{report.END}{report.BEGIN}{report.END}"):
        with pytest.raises(ValueError, match="exactly one"):
            report.replace_block(broken, block)


def test_the_repository_benchmarks_doc_holds_one_results_block():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    assert text.count(report.BEGIN) == 1 and text.count(report.END) == 1


def test_pareto_front_keeps_only_undominated_points():
    pts = [(1.0, 1e-9), (0.5, 1e-3), (0.6, 1e-4), (0.7, 1e-2), (0.4, 5e-3)]
    assert plots.pareto_front(pts) == [(0.4, 5e-3), (0.5, 1e-3), (0.6, 1e-4), (1.0, 1e-9)]


def test_plots_are_written_as_png(tmp_path):
    r = results()
    panels = plots.pareto(r["models"], tmp_path)
    assert [f.name for f in panels] == ["pareto_resnet_tiny.png", "pareto_mlp.png"]      # one per model that ran
    files = [*panels, plots.predicted_vs_measured(r["models"], tmp_path),
             plots.search_time(r["models"], r["search_scaling"], tmp_path)]
    for f in files:
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.stat().st_size > 5000


def test_pareto_points_name_the_plans_and_mark_the_chosen_one():
    resnet, mlp = results()["models"][:2]
    pts = plots._points(resnet)
    assert [(p["label"], p["role"]) for p in pts] == [("default", "default"), ("#1 int8", "chosen"),
                                                      ("#2 fp16", "candidate")]
    assert pts[0]["loss"] == 1e-16            # drawn as it is: the loss axis puts it at its 0
    assert {p["role"] for p in plots._points(mlp)} == {"default", "candidate"}          # rolled back: none chosen
    verdicts = dict(resnet, candidates=[dict(c, verdict="eligible, not chosen") for c in resnet["candidates"]])
    assert "chosen" not in {p["role"] for p in plots._points(verdicts)}       # the verdict, when kept, decides


def test_loss_axis_labels_zero_and_draws_the_bound():
    import matplotlib.pyplot as plt
    from metainfer_core.plan.plots import loss_axis

    fig, ax = plt.subplots()
    loss_axis(ax, [1e-16, 2e-4, 3e-6], 0.01)
    fig.canvas.draw()
    labels = {tick.get_text() for tick in ax.get_yticklabels()}
    assert {"0", "1e-6", "1e-2"} <= labels and not any("1e-9" in x or "1e-16" in x for x in labels)
    assert [line.get_ydata()[0] for line in ax.get_lines()] == [0.01]         # the bound
    assert ax.get_ylim()[0] < 0 < 1e-6 < ax.get_ylim()[1]
    plt.close(fig)
