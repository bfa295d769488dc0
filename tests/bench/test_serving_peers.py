"""bench/serving_peers.py (issue 51's done-when): which peers count and the ratios on made-up rows,
the peer configurations a load gets, the command line, and a hand-laid run folder of the zoo's
MLP served for real beside its peers in one fresh process."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import onnx
import pytest

from bench import serving_configs, serving_peers, serving_tables
from metainfer_core.zoo import build
from plan_content import plan_content


def _cfg(label, peer, rps, p50, p99, loss=0.0, error=None):
    return {"label": label, "peer": peer, "setting": {"sessions": 1, "intra_op_threads": 2}, "error": error,
            "throughput_per_s": rps, "requests": 0 if error else 100, "p50_ms": p50, "p99_ms": p99,
            "accuracy_loss": loss}


def _row(mode="throughput", **kw):
    configs = [_cfg("meta_infer", "meta_infer", 970.0, 2.0, 5.0),
               _cfg("ort_default/1x2", "ort_default", 800.0, 2.2, 6.0),
               _cfg("ov_f32/THROUGHPUT", "ov_f32", 1000.0, 1.9, 4.0),
               _cfg("ov_nncf_int8/THROUGHPUT", "ov_nncf_int8", 2000.0, 1.0, 3.0, loss=0.05),   # too lossy
               _cfg("ort_static/2x1", "ort_static", 1500.0, 1.2, 20.0),                          # misses the bound
               _cfg("ov_f32/LATENCY", "ov_f32", None, None, None, error="open: RuntimeError: no")]
    return {"model": "m", "mode": mode, "cores": 2, "concurrency": 2, "percentile": 99, "bound_ms": 10.0,
            "accuracy_bound": 0.01, "claimed_throughput_per_s": 1000.0, "claimed_latency_ms": 1.9,
            "configs": configs} | kw


def test_only_peers_within_both_bounds_count_and_the_best_one_sets_the_ratio():
    row = _row()
    counted = [c["label"] for c in row["configs"] if serving_tables.eligible(c, row)]
    assert counted == ["ort_default/1x2", "ov_f32/THROUGHPUT"]
    s = serving_tables.summary(row)
    assert s["best"] == "ov_f32/THROUGHPUT" and s["ratio"] == pytest.approx(0.97) and s["meets"]
    assert s["fresh_vs_claimed"] == pytest.approx(-0.03) and s["reproduces"] and s["plan_holds"]
    assert s["spread"] is None                  # not served alone: the figure beside the peers stands in
    # served alone in three fresh processes: their median is checked against plan.json, their spread shown
    alone = serving_tables.summary(_row(alone=[_cfg("meta_infer", "meta_infer", f, 2.0, 5.0) for f in (900, 1040, 980)]))
    assert alone["fresh"] == 980 and alone["fresh_vs_claimed"] == pytest.approx(-0.02) and alone["reproduces"]
    assert alone["spread"] == pytest.approx(1040 / 900 - 1) and alone["ratio"] == pytest.approx(0.97)
    # beside the default in each fresh process: the speed-up over it is checked against plan.json's
    beside = [_cfg("meta_infer", "meta_infer", f, 2.0, 5.0) | {"default": _cfg("default/2x1", "default", d, 2, 5)}
              for f, d in ((900, 450), (1040, 500), (980, 500))]
    ups = serving_tables.summary(_row(alone=beside, claimed_default_throughput_per_s=500.0))
    assert ups["speedup_claimed"] == pytest.approx(2.0) and ups["speedup_fresh"] == pytest.approx(2.0)
    assert ups["speedup_reproduces"] and "speedup_claimed" not in alone
    assert "| m | 2.000x | 2.000x | yes |" in serving_tables.summary_table([_row(alone=beside,
                                                                              claimed_default_throughput_per_s=500.0)])
    # one request at a time: no latency bound, median latency compared (best peer p50 / the plan's)
    lat = serving_tables.summary(_row("latency", bound_ms=None, concurrency=1))
    assert lat["best"] == "ort_static/2x1" and lat["ratio"] == pytest.approx(1.2 / 2.0) and lat["meets"] is False
    assert lat["claimed"] == 1.9 and lat["fresh_vs_claimed"] == pytest.approx(2.0 / 1.9 - 1) and not lat["reproduces"]
    assert serving_tables.geo_mean([2.0, 0.5, None]) == pytest.approx(1.0)
    assert serving_tables.summary({"model": "x", "error": "adapt (exit 1): boom"})["error"].startswith("adapt")


def test_the_tables_show_every_configuration_and_the_geo_mean():
    lines = serving_tables.model_table(_row())
    assert lines[0].startswith("**m** (throughput: 2 request(s) at once on 2 cores") and "p99 bound 10 ms" in lines[0]
    body = lines[4:]
    assert len(body) == 6 and all(ln.count("|") == 9 for ln in body)
    assert "(the plan)" in body[0] and "| 20 | **no** |" in body[4] and "failed: open: RuntimeError" in body[5]
    assert "| 5.00e-02 | **no** |" in body[3]
    rows = [_row(), _row(model="n", configs=_row()["configs"][:1] + [_cfg("ort_default/1x2", "ort_default", 485.0,
                                                                          4.0, 8.0)]),
            {"model": "o", "mode": "throughput", "error": "adapt (exit 1): Traceback"}]
    summary = serving_tables.summary_table(rows)
    assert "| m | 970.0 | ov_f32/THROUGHPUT | 1000 | 0.970 | yes | 1000 | 970 | -3.0% | yes | – |" in summary
    assert "| n | 970.0 | ort_default/1x2 | 485 | 2.000 | yes |" in summary[3] and "failed: adapt" in summary[4]
    assert summary[-1].startswith(f"**geo-mean meta-infer / best peer: {math.sqrt(0.97 * 2):.3f}** over 2 model(s); "
                                  "2 of 2 at least 0.97")


def test_the_peers_settings_follow_the_cores_and_the_load():
    files = {"ort_default": Path("d.onnx"), "ov_f32": Path("d.onnx"), "ov_nncf_int8": Path("q.xml"),
             "ort_static": "build: no"}      # a str: why it could not be built
    load = serving_configs.configurations(files, {"memory_limit_bytes": 0}, 16, 2)
    assert [c["label"] for c in load] == ["meta_infer", "ort_default/1x16", "ort_default/2x8", "ov_f32/THROUGHPUT",
                                          "ov_f32/LATENCY", "ov_nncf_int8/THROUGHPUT", "ort_static/1x16",
                                          "ort_static/2x8"]
    assert load[3]["setting"] == {"performance_hint": "THROUGHPUT", "intra_op_threads": 16}      # the plugin's streams
    assert load[4]["setting"]["num_streams"] == 1 and load[5]["kind"] == "ov_ir"
    assert load[6]["error"] == "build: no" and "kind" not in load[6]
    alone = serving_configs.configurations(files, {}, 16, 1)
    assert [c["label"] for c in alone] == ["meta_infer", "ort_default/1x16", "ov_f32/LATENCY",
                                           "ov_nncf_int8/LATENCY", "ort_static/1x16"]


def test_the_command_line_refuses_unknown_flags_and_prints_its_docstring(capsys):
    assert serving_peers.main(["--help"]) == 0 and "fresh process" in capsys.readouterr().out
    assert serving_peers.main(["--bogus"]) == 2 and "unknown option '--bogus'" in capsys.readouterr().err
    assert serving_peers.main(["--only", "no_such_model"]) == 2 and "no_such_model" in capsys.readouterr().err
    a = serving_peers.parse(["--only", "silero_vad", "--latency", "--duration", "2", "search=quick"])
    assert a["only"] == ["silero_vad"] and a["latency"] and a["duration"] == 2.0 and a["overrides"] == ["search=quick"]


def test_a_run_folder_is_served_beside_its_peers_in_a_fresh_process(tmp_path):
    model = build("mlp", seed=0)
    onnx.save(model, str(tmp_path / "model.onnx"))
    onnx.save(model, str(tmp_path / "default.onnx"))
    path = {"runtime": "onnxruntime", "precision": "f32", "settings": {"providers": ["CPUExecutionProvider"],
                                                                         "intra_op_threads": 1}}
    serving = {"mode": "throughput", "cores": 2, "concurrency": 2, "percentile": 99, "bound_ms": 1e4,
               "setting": {"sessions": 2, "intra_op_threads": 1}, "plan": {"throughput_per_s": 1000.0},
               "default": {"setting": {"sessions": 1, "intra_op_threads": 2}, "throughput_per_s": 800.0}}
    (tmp_path / "plan.json").write_text(json.dumps(plan_content(execution_path=path, serving=serving,
                                                                accuracy_bound=0.01, decision="adapted")))
    row = serving_peers.serve_run(tmp_path, None, duration_s=0.2, warm_s=0.02)
    assert "error" not in row, row
    assert (row["mode"], row["cores"], row["concurrency"]) == ("throughput", 2, 2)
    assert row["claimed_throughput_per_s"] == 1000 and row["bound_ms"] == 1e4
    by = {c["label"]: c for c in row["configs"]}
    assert list(by) == ["meta_infer", "ort_default/1x2", "ort_default/2x1", "ov_f32/THROUGHPUT", "ov_f32/LATENCY",
                        "ov_nncf_int8/THROUGHPUT", "ort_static/1x2", "ort_static/2x1"]
    for c in by.values():
        assert c["error"] is None and c["requests"] > 0 and c["p50_ms"] <= c["p99_ms"], c
        assert c["accuracy_loss"] < 0.01
    assert by["meta_infer"]["chose"]["setting"] == serving["setting"]          # served as plan.json records
    assert by["meta_infer"]["aa_ratio"] > 0                                     # opened first and last, pooled
    assert by["ov_f32/THROUGHPUT"]["chose"]["streams"].isdigit()               # the plugin's pick, reported
    assert by["ov_f32/LATENCY"]["chose"]["streams"] == "1"
    child = row["child"]
    assert child["pid"] != os.getpid()
    assert not {m.split(".")[0] for m in child["heavy_modules"]} & {"prefect", "hydra", "mlflow", "nncf", "torch",
                                                                     "tasks", "app"}
    assert "bench.peers" not in child["heavy_modules"]
    row["model"] = "mlp"
    s = serving_tables.summary(row)
    assert s["best"] in by and s["ratio"] > 0 and s["fresh_vs_claimed"] is not None
    alone = serving_peers.serve_alone(tmp_path, None, duration_s=0.2, repeats=2, warm_s=0.02)
    assert [c["label"] for c in alone] == ["meta_infer", "meta_infer"] and all(c["requests"] > 0 for c in alone)
    # an adopted plan: the default served after it in each process, at the setting plan.json recorded for it
    assert all(c["default"]["label"] == "default/1x2" and c["default"]["requests"] > 0 for c in alone)
    s = serving_tables.summary(row | {"alone": alone})
    assert s["speedup_claimed"] == pytest.approx(1000 / 800) and s["speedup_fresh"] > 0
