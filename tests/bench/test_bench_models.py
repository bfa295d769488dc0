"""bench/modelset.py: the model list the suite and bench/adapt_corpus.py share (every key once, PP-OCR
from the corpus), a corpus model that cannot be fetched is a failed row, an adapt past its
timeout is ended and reported as timed out, and (slow) one model benched for real with the
defaults and weights=latency side by side."""
from __future__ import annotations

import time

import onnx
import pytest

from bench import adapt_run, corpus, goals, modelset, report
from bench.corpus import ready
from subprocess_env import flow_env


def test_every_key_once_ppocr_from_the_corpus_unless_skipped():
    known = modelset.known()
    keys = [m.key for m in corpus.CORPUS]
    assert list(known) == [*modelset.ZOO, *modelset.LARGE, *keys]    # zoo first, then the corpus
    assert {k: known[k] for k in corpus.PPOCR} == {k: "corpus" for k in corpus.PPOCR}
    assert "silero_vad" in known and "ppocr_cls" in known
    without = modelset.known(with_corpus=False)
    assert "silero_vad" not in without and all(without[k] == "ppocr" for k in corpus.PPOCR if k in without)
    zoo = modelset.entries(["mlp", "resnet_tiny", "mlp"])
    assert [(e.key, e.source, e.args, e.inputs) for e in zoo] == [
        ("mlp", "zoo", ["model=mlp"], "random"), ("resnet_tiny", "zoo", ["model=resnet_tiny"], "random")]
    large = modelset.entries(["unet_nhwc_512"])[0]      # a large zoo network, adapted from its file
    assert large.source == "large" and large.args == ["model=file", f"model.path={large.path}"]
    assert onnx.load(str(large.path)).graph.input[0].name == "image"


def test_an_unfetched_corpus_model_is_a_failed_row(monkeypatch):
    def offline(model):
        raise corpus.CorpusUnavailable(f"pip download {model.pin} failed (exit 1): no network")

    monkeypatch.setattr(ready, "fetch", offline)     # what corpus_models calls
    e, = modelset.entries(["magika_v3_3"])
    assert e.source == "corpus" and e.error.startswith("corpus: not fetched: pip download magika==1.0.3 failed")
    row = modelset.bench_model(e, [], peers=True)      # no adapt is started for it
    assert row == {"name": "magika_v3_3", "source": "corpus", "inputs": "random", "rc": "fetch", "adapt_s": 0.0,
                   "error": e.error}


@pytest.mark.alone
def test_an_adapt_past_its_timeout_is_ended_and_reported(tmp_path):
    t0 = time.perf_counter()
    r = adapt_run.adapt(["model=mlp", f"paths.artifacts={tmp_path}"], timeout=1.0)
    assert time.perf_counter() - t0 < 8
    assert r["rc"] == "timeout" and r["plan"] is None and r["error"].startswith("no result within 1 s")
    row = modelset.bench_model(modelset.Entry("mlp", "zoo", ["model=mlp"]), [f"paths.artifacts={tmp_path}"],
                               timeout=1.0)
    assert row["rc"] == "timeout" and row["error"].startswith("no result within 1 s") and "compare" not in row


def test_the_second_adapt_runs_weights_latency_unless_the_first_does():
    assert modelset.latency_overrides(["paths.artifacts=/x"]) == ["paths.artifacts=/x", "weights=latency"]
    assert modelset.latency_overrides(["weights=embedded"]) == ["weights=embedded", "weights=latency"]   # last wins
    assert modelset.latency_overrides(["weights=latency", "search=quick"]) is None


@pytest.mark.slow
def test_a_model_is_benched_with_the_defaults_and_weights_latency_side_by_side(migrated, tmp_path, prefect_api,
                                                                                 monkeypatch):
    """bench_model for real on the zoo mlp: two adapts (the defaults, then weights=latency), both
    plans timed beside the peers, NNCF's accuracy-aware int8 among them; the report renders the
    defaults as meta-infer and weights=latency beside it. The adapts (which inherit this
    environment) use the worker's Prefect server."""
    migrated(tmp_path)
    for key, value in flow_env(prefect_api).items():
        if key.startswith("PREFECT_"):
            monkeypatch.setenv(key, value)
    row = modelset.bench_model(modelset.Entry("mlp", "zoo", ["model=mlp"]),
                               [f"paths.artifacts={tmp_path}", "search=quick"], rounds=3, samples=2)
    assert row["rc"] == 0 and row["latency"]["rc"] == 0, row
    assert row["mlflow_run_id"] != row["latency"]["mlflow_run_id"]
    assert row["run_folder"] != row["latency"]["run_folder"]
    c = row["compare"]
    assert {"ov_nncf_aac", "meta_infer", "meta_infer_latency"} <= set(c)
    assert c["ov_nncf_aac"]["error"] is None and c["ov_nncf_aac"]["path"]["precision"].startswith("int8+")
    assert c["meta_infer"]["error"] is None and c["meta_infer_latency"]["error"] is None
    ratios = goals.compare_ratios(row, row["accuracy_bound"])
    assert ratios["meta_infer"] > 0 and ratios["meta_infer_latency"] > 0
    line = report.compare_row(row, row["accuracy_bound"])
    assert line.count("|") == 18 and report.latency_cell(row).split(", ")[1] == row["latency"]["decision"]
