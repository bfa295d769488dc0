"""The predictor's part in serving: thread scaling learned from the fingerprint at the thread
counts that matter, each sessions-and-threads setting's load predicted, and only the best few
per plan served."""
from __future__ import annotations

import numpy as np
import pytest

from metainfer_core.backends.runtimes import runtime_of
from metainfer_core.decide.serve import serve_verdict
from metainfer_core.decide.serve_predicted import learned_scaling, setting_predictor
from metainfer_core.fingerprint.library import FingerprintLibrary
from metainfer_core.fingerprint.thread_counts import at_threads, counts_that_matter, profile_threads
from metainfer_core.ir.features import kernel_features
from metainfer_core.ir.kernels import group_kernels
from metainfer_core.ir.tensors import random_feeds, tensor_infos
from metainfer_core.predictor.model.thread_scaling import ThreadScaling
from metainfer_core.serving.load import LoadFigures
from metainfer_core.serving.measure import serve_all
from metainfer_core.serving.predicted import PredictedLoad, predict_load
from metainfer_core.settings import ServingSettings
from metainfer_core.zoo import build

from twins import backend


def test_the_thread_counts_that_matter_are_those_the_default_paths_sessions_run_at():
    assert counts_that_matter(2, 2, 1) == [2]
    assert counts_that_matter(16, 8, 2) == [4, 8, 16]         # 1x16, 2x8, 4x4, 8x2 less the request's 2
    assert counts_that_matter(16, 1, 16) == []                # one request at a time: nothing to scale


def test_a_load_is_predicted_from_the_latency_at_a_sessions_threads_and_the_cores_kept_busy():
    # 2 sessions x 1 thread on 2 cores: both requests at once, nothing oversubscribed
    two = predict_load({"sessions": 2, "intra_op_threads": 1}, 1.0, 2, 2)
    assert two.throughput_per_s == pytest.approx(2000) and two.latency_ms == pytest.approx(1.0)
    # 1 session x 2 threads: two calls and the pool's other thread on 2 cores, each call 0.7 ms alone
    one = predict_load({"sessions": 1, "intra_op_threads": 2}, 0.7, 2, 2)
    assert one.service_ms == pytest.approx(0.7 * 1.5) and one.throughput_per_s == pytest.approx(2 / 1.05e-3)
    assert one.percentile(99) == one.latency_ms


def _records(kernels, ms):
    return [{"kernel_key": k.key(), "source": "microbench", "median_ms": m, "features": kernel_features(k)}
            for k, m in zip(kernels, ms)]


def test_thread_scaling_is_measured_where_the_library_holds_a_pair_and_learned_elsewhere():
    model = build("resnet_tiny", seed=0)
    every = group_kernels(model, tensor_infos(model))
    kernels = list({k.key(): k for k in every}.values())       # the distinct ones, as the library holds them
    convs = [k for k in kernels if k.op_type.startswith("Conv")]
    others = [k for k in kernels if not k.op_type.startswith("Conv")]
    assert len(convs) >= 6 and len(others) >= 4
    # the fake fingerprint (the learner's own test): convolutions halve at 2 threads, the rest doubles
    ref = _records(kernels, [1.0] * len(kernels))
    at2 = _records(convs[:-2], [0.5] * (len(convs) - 2)) + _records(others[:-2], [2.0] * (len(others) - 2))
    scaling = ThreadScaling.learn(1, ref, {2: at2})
    assert scaling is not None and scaling.pairs == len(at2) and scaling.threads == [2]
    ratios = scaling.kernel_ratios(kernels, 2)
    measured = {r["kernel_key"] for r in at2}
    for k, r in zip(kernels, ratios):
        expected = 0.5 if k.op_type.startswith("Conv") else 2.0
        if k.key() in measured:
            assert r == pytest.approx(expected)
        else:       # learned: the kernels held out are told apart by their features
            assert r == pytest.approx(expected, rel=0.35)
    assert scaling.kernel_ratios(kernels, 1).tolist() == [1.0] * len(kernels)
    whole = scaling.plan_ratio(model, 2)
    share = sum(k.op_type.startswith("Conv") for k in every) / len(every)
    assert whole == pytest.approx(0.5 * share + 2.0 * (1 - share), rel=0.15)
    # too few pairs teach nothing
    assert ThreadScaling.learn(1, ref, {2: at2[:2]}) is None


def test_the_fingerprint_at_the_thread_counts_that_matter_predicts_which_setting_serves_more(tmp_path):
    """Real: the graph's kernels measured at 2 threads beside 1 on this host, the scaling learned,
    and the prediction set against the load served."""
    serving = ServingSettings(name="throughput", threads=2, concurrency=2)
    model, cpu = build("resnet_tiny", seed=0), backend("cpu", intra_op_threads=1)
    feeds = random_feeds(model, seed=0)
    library = FingerprintLibrary(f"sqlite:///{tmp_path}/fp.db")
    from metainfer_core.fingerprint.profiler import profile

    profile(cpu, library, [model], [1], 10, 2)
    lines = []
    profile_threads(cpu, library, model, "resnet_tiny", feeds, [2], 10, 2, lines.append)
    assert "at 2 threads" in lines[0]
    two = at_threads(cpu, 2).info.fingerprint_version
    kernels = library.records(cpu.info.fingerprint_version)
    assert two != cpu.info.fingerprint_version and len(library.records(two)) == len(kernels) > 10
    assert len(library.thread_runs(two, cpu.info.fingerprint_version)) == 1
    profile_threads(cpu, library, model, "resnet_tiny", feeds, [2], 10, 2, lines.append)     # known: reused
    assert len(library.thread_runs(two, cpu.info.fingerprint_version)) == 1 and " 0 kernels measured" in lines[1]

    scaling, whole = learned_scaling(library, cpu, serving, model)
    assert scaling is not None and scaling.pairs == len(kernels) and set(whole) == {2}
    compiled = cpu.compile(model)
    alone_ms = float(np.median([compiled.time_once(feeds) for _ in range(100)]))
    predict = setting_predictor(scaling, {"default": (model, alone_ms)}, serving, whole=whole)
    settings = runtime_of("onnxruntime").serving_options(2, 2)
    predicted = [predict("default", s) for s in settings]
    assert all(isinstance(p, PredictedLoad) for p in predicted)
    assert predict("default", {"performance_hint": "THROUGHPUT", "intra_op_threads": 2}) is None
    served = serve_all(cpu, [("default", model)], {"default": settings}, feeds, 2, 1.0)["default"]
    # within a factor of three of what the load shows (another test may hold a core meanwhile)
    for p, f in zip(predicted, served):
        assert f.error is None and 1 / 3 < p.throughput_per_s / f.throughput_per_s < 3.0, (p, f.throughput_per_s)


def _served(per_s: float, ms: float) -> LoadFigures:
    return LoadFigures([ms] * 50, 50 / per_s)


def test_a_16_core_target_serves_only_the_settings_the_predictor_scores_best_and_every_unscored_one():
    serving = ServingSettings(name="throughput", threads=16, concurrency=8, bound_ms=100.0)
    model = build("mlp", seed=0)
    offered = runtime_of("onnxruntime").serving_options(16, 8)
    assert len(offered) == 4

    def predict(label, setting):       # the extension point's fake: fewer threads a session, more served
        if "batch" in setting:
            return None
        t = setting["intra_op_threads"]
        return PredictedLoad(1.0 + t / 16, 8e3 / (1.0 + t / 16), 1.0 + t / 16)

    served_settings = {}

    def server(_backend, models, settings, feed, concurrency, duration_s):
        served_settings.setdefault("round", settings)
        return {label: [_served(1000.0 / (1 + s["intra_op_threads"] / 16), 1.0) for s in settings[label]]
                for label in settings}

    # most_rows=8: requests may be combined, settings the predictor does not score
    v = serve_verdict(serving, None, model, [("p", model)], "p", {}, 1.0, server, most_rows=8, predict=predict,
                      predicted_best=2)
    round_ = served_settings["round"]
    for label in ("default", "p"):
        threads = sorted(s["intra_op_threads"] for s in round_[label] if "batch" not in s)
        assert threads == [2, 4] and sum("batch" in s for s in round_[label]) == 3
    rows = [r for r in v.predicted if r["label"] == "default"]
    assert len(rows) == 4 and [r["served"] for r in rows] == [True, True, False, False]
    assert all("served_throughput_per_s" in r for r in rows if r["served"])
    assert not any("served_throughput_per_s" in r for r in rows if not r["served"])
    assert v.record()["predicted"] == v.predicted


def test_a_slow_graph_is_timed_whole_fewer_times_but_never_under_the_minimum(monkeypatch):
    from metainfer_core.fingerprint import thread_counts

    class Timed:        # a Compiled's own fake: a fixed latency, and how often it ran
        def __init__(self, ms):
            self.ms, self.runs = ms, 0

        def run(self, feeds):
            self.runs += 1

        def time_once(self, feeds):
            self.runs += 1
            return self.ms

    a, b = Timed(2.0), Timed(1.0)
    assert thread_counts.timed_alternately(a, b, {}, 1) == (2.0, 1.0) and a.runs == thread_counts.WHOLE_ROUNDS + 1
    monkeypatch.setattr(thread_counts, "WHOLE_MAX_S", 0.0)      # past the time allowance at once
    a, b = Timed(2.0), Timed(1.0)
    thread_counts.timed_alternately(a, b, {}, 1)
    assert a.runs == b.runs == thread_counts.WHOLE_MIN_ROUNDS + 1
