"""Serving as the deployment will: the settings each runtime offers grow with the cores and the
requests at once; a pool serves concurrent requests with the same outputs as one session; the
closed-loop load counts requests and latency percentiles; the serving verdict keeps the plan
only where it scores no worse than the default under the load (requests per second and latency
weighed) with the bound held."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from metainfer_core.backends.runtimes import runtime_of
from metainfer_core.decide.serve import (CONFIRM_PROCESSES, CONFIRM_X, ServingVerdict, one_at_a_time, overrule,
                                         serve_verdict, to_serve)
from metainfer_core.decide.stage import Decision
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.plan.serving_report import serving_section
from metainfer_core.serving.load import LoadFigures, under_load
from metainfer_core.serving.measure import serve_all
from metainfer_core.serving.options import describe, doublings
from metainfer_core.search.score import Weights
from metainfer_core.settings import ServingSettings
from metainfer_core.zoo import build

from twins import backend

from tests.serving.clients import assert_same_answers, served_by_clients


def test_the_settings_offered_grow_with_a_16_core_target_and_the_requests_at_once():
    ort = runtime_of("onnxruntime").serving_options(16, 8)
    assert [(o["sessions"], o["intra_op_threads"]) for o in ort] == [(1, 16), (2, 8), (4, 4), (8, 2)]
    ov = runtime_of("openvino").serving_options(16, 8)
    assert ov[0] == {"performance_hint": "LATENCY", "num_streams": 1, "intra_op_threads": 16}
    assert [o.get("num_streams") for o in ov[1:]] == [None, 2, 4, 8]      # None: the plugin picks
    assert all(o["performance_hint"] == "THROUGHPUT" for o in ov[1:])
    # one request at a time: nothing to trade, one setting each
    assert runtime_of("onnxruntime").serving_options(16, 1) == [{"sessions": 1, "intra_op_threads": 16}]
    assert len(runtime_of("openvino").serving_options(16, 1)) == 1
    # on two cores, two requests: at most two sessions of one thread
    assert [(o["sessions"], o["intra_op_threads"]) for o in runtime_of("onnxruntime").serving_options(2, 2)] == \
        [(1, 2), (2, 1)]
    assert doublings(6) == [1, 2, 4, 6]
    assert describe({"sessions": 2, "intra_op_threads": 1}) == "2 sessions, 1 thread each"
    assert describe({"performance_hint": "THROUGHPUT", "intra_op_threads": 2}) == \
        "THROUGHPUT hint, the plugin's streams, 2 threads"


def test_the_serving_group_sets_the_threads_a_request_gets(settings_for):
    assert settings_for().target.spec["intra_op_threads"] == 1          # serving=latency: one core
    s = settings_for("serving=throughput", "serving.threads=4", "serving.concurrency=2")
    assert (s.serving.cores, s.serving.request_threads, s.serving.under_load) == (4, 2, True)
    assert s.target.spec["intra_op_threads"] == 2
    assert settings_for("serving.threads=0").target.spec["intra_op_threads"] == s.serving.__class__(threads=0).cores


def test_the_default_latency_bound_allows_for_the_requests_each_core_serves_in_turn():
    on = lambda threads, concurrency, **kw: ServingSettings(name="throughput", threads=threads,  # noqa: E731
                                                           concurrency=concurrency, **kw)
    assert on(2, 2).bound(1.0) == pytest.approx(3.0)            # bound_x x the default alone
    assert on(2, 4).bound(1.0) == pytest.approx(6.0)            # two requests per core: each waits for one
    assert on(16, 8).bound(1.0) == pytest.approx(3.0)
    assert on(2, 4, bound_ms=2.5).bound(1.0) == pytest.approx(2.5)      # a declared bound stands


def test_a_target_spec_naming_its_own_threads_is_refused_for_the_serving_group(settings_for):
    with pytest.raises(Exception, match="serving.threads"):
        settings_for("+target.spec.intra_op_threads=2")


@pytest.mark.parametrize("runtime,setting", [
    ("onnxruntime", {"sessions": 2, "intra_op_threads": 1}),
    ("onnxruntime", {"sessions": 1, "intra_op_threads": 2}),
    ("openvino", {"performance_hint": "THROUGHPUT", "num_streams": 2, "intra_op_threads": 2}),
])
def test_a_pool_serves_concurrent_requests_with_one_sessions_outputs(runtime, setting):
    pool, got, want = served_by_clients(runtime, setting, in_flight=3, requests=8)
    assert pool.size == (3 if runtime == "openvino" or setting["sessions"] == 1 else 4)
    assert_same_answers(got, want, rtol=1e-5, atol=1e-6)


def test_closed_loop_load_counts_requests_and_percentiles_and_keeps_an_error():
    model = build("mlp", seed=0)
    compiled = backend("cpu").compile(model)
    feeds = random_feeds(model, seed=0)
    f = under_load(compiled.run, feeds, 2, 0.3, warm_s=0.05)
    assert f.error is None and f.requests > 10 and f.seconds >= 0.3
    assert f.percentile(50) <= f.percentile(90) <= f.percentile(99)
    assert f.throughput_per_s == pytest.approx(f.requests / f.seconds)
    calls = [0]

    def failing(_):
        calls[0] += 1
        if calls[0] > 3:
            raise RuntimeError("device lost")

    bad = under_load(failing, feeds, 2, 5.0, warm_s=0)
    assert bad.error == "RuntimeError: device lost" and bad.seconds < 5.0


def test_serve_all_measures_every_plan_with_every_setting_and_reports_a_refused_one():
    model = build("mlp", seed=0)
    feeds = random_feeds(model, seed=0)
    settings = {"default": [{"sessions": 1, "intra_op_threads": 1}, {"sessions": 2, "intra_op_threads": 1}],
                "plan": [{"sessions": 1, "intra_op_threads": 1, "graph_optimization_level": "NO_SUCH_LEVEL"}]}
    out = serve_all(backend("cpu"), [("default", model), ("plan", model)], settings, feeds, 2, 0.2)
    assert [f.error for f in out["default"]] == [None, None] and all(f.requests > 0 for f in out["default"])
    assert out["plan"][0].error and out["plan"][0].requests == 0


def _figures(per_s: float, p99: float, n: int = 100) -> LoadFigures:
    """n requests in n / per_s seconds, latencies spread up to p99 (a fake server's answer)."""
    return LoadFigures(list(np.linspace(p99 / 2, p99, n)), n / per_s)


def _verdict(default: list[LoadFigures], plans: dict[str, list[LoadFigures]], kept: str | None = "p",
             bound_ms=None, weights: Weights | None = None, fixed: dict | None = None,
             confirmed: dict[str, LoadFigures] | None = None) -> ServingVerdict:
    """The verdict over a fake server's figures (the extension point's fake): the round's, then
    a confirmation's (`confirmed`, by label; default: each chosen setting's figures again)."""
    serving = ServingSettings(name="throughput", threads=2, concurrency=2, bound_ms=bound_ms)
    model = build("mlp", seed=0)
    figures, offered, served_again = {"default": default, **plans}, {}, []

    def server(backend, models, settings, feed, concurrency, duration_s):
        assert concurrency == 2
        if not offered:         # the round: every plan with every setting
            assert [m for m, _ in models] == ["default", *plans] and duration_s == serving.duration_s
            assert len(settings["default"]) == 2        # onnxruntime on 2 cores, 2 requests: 1x2 and 2x1
            offered.update(settings)
            return figures
        assert models[0][0] == "default" and len(models) <= 2 and all(len(v) == 1 for v in settings.values())
        served_again.append([m for m, _ in models])
        assert duration_s == pytest.approx(CONFIRM_X * serving.duration_s / CONFIRM_PROCESSES)
        return {label: [(confirmed or {}).get(label) or figures[label][offered[label].index(s[0])]]
                for label, s in settings.items()}

    v = serve_verdict(serving, None, model, [(label, model) for label in plans], kept, {}, 1.0, server,
                      weights, fixed)
    # what is served is served again, in CONFIRM_PROCESSES fresh workers pooled
    failed = any(f.error for f in (confirmed or {}).values())     # a worker's error ends the serving
    assert len(served_again) == (0 if v.default is None else 1 if failed else CONFIRM_PROCESSES)
    return v


def test_the_plan_is_served_only_where_it_serves_more_with_the_bound_held():
    base = [_figures(100, 2.0), _figures(150, 2.5)]
    wins = _verdict(base, {"p": [_figures(170, 2.0), _figures(160, 2.0)]})
    assert wins.keeps_plan and wins.plan.throughput == pytest.approx(170) and wins.default.throughput == pytest.approx(150)
    assert wins.bound_ms == pytest.approx(3.0)      # bound_x (3) x the default alone (1 ms)
    assert wins.record()["setting"] == {"sessions": 1, "intra_op_threads": 2}
    loses = _verdict(base, {"p": [_figures(120, 2.0), _figures(130, 2.0)]})
    assert not loses.keeps_plan and "the default does better" in loses.reason
    assert loses.plan is loses.default
    # the plan's faster setting misses the bound, its other one serves less than the default: the default
    bound = _verdict([_figures(100, 2.0), _figures(110, 2.5)], {"p": [_figures(300, 9.0), _figures(90, 2.0)]},
                     bound_ms=4.0)
    assert not bound.keeps_plan and bound.plan.label == "default"
    # nothing adopted: the default's best setting is recorded
    kept = _verdict(base, {}, kept=None)
    assert kept.keeps_plan is False and kept.record()["setting"] == {"sessions": 2, "intra_op_threads": 1}
    # nothing holds the bound: the most requests decide, and the reason says so
    none = _verdict(base, {"p": [_figures(170, 9.0), _figures(160, 9.0)]}, bound_ms=1.0)
    assert none.keeps_plan and "no setting of any plan held the p99 bound" in none.reason


def test_another_path_that_serves_more_under_load_is_served_instead_of_the_kept_plan():
    base = [_figures(100, 2.0), _figures(150, 2.5)]
    # the kept plan serves 160/s, another path's plan 220/s: beyond noise, the other one
    other = _verdict(base, {"p": [_figures(160, 2.0), _figures(150, 2.0)], "ov": [_figures(220, 2.0)] * 2})
    assert other.keeps_plan and other.plan.label == "ov"
    d = Decision("adapted", "faster", 0, {"p": "chosen: 1.2x", "ov": "pays but scores less"}, basis="faster")
    overrule(d, other, {"p": 0, "ov": 3})
    assert (d.decision, d.chosen, d.basis) == ("adapted", 3, "throughput")
    assert d.verdicts["ov"].startswith("chosen under the load") and d.verdicts["p"].startswith("not served")
    # within noise of the kept one: the kept plan stands (it was confirmed one request at a time)
    near = _verdict(base, {"p": [_figures(160, 2.0)] * 2, "ov": [_figures(163, 2.0)] * 2})
    assert near.plan.label == "p"
    # no plan kept: another one is adopted only beyond the default's noise
    adopt = _verdict(base, {"ov": [_figures(170, 2.0)] * 2}, kept=None)
    assert adopt.keeps_plan and adopt.plan.label == "ov"
    tie = _verdict(base, {"ov": [_figures(152, 2.0)] * 2}, kept=None)
    assert not tie.keeps_plan and "the default does as well" in tie.reason


def test_under_load_the_weights_trade_requests_per_second_for_latency_and_memory():
    # the default's 2x1 serves most (150/s) at a 4.75 ms p90; the plan's 1x2 serves 140/s at 1.52 ms
    base = [_figures(100, 2.0), _figures(150, 5.0)]
    plan = {"p": [_figures(140, 1.6), _figures(120, 5.0)]}
    by_requests = _verdict(base, plan, bound_ms=10)            # no weights: requests per second alone
    assert not by_requests.keeps_plan and by_requests.weights == {"latency": 0.0, "throughput": 1.0}
    balanced = Weights(1.0, 0.3, 1.0, 0.02, 0.25, throughput=1.0)
    weighed = _verdict(base, plan, bound_ms=10, weights=balanced)
    assert weighed.keeps_plan and weighed.plan.setting == {"sessions": 1, "intra_op_threads": 2}
    assert weighed.plan.terms["throughput"] == pytest.approx(150 / 140)
    assert weighed.plan.terms["latency"] == pytest.approx(weighed.plan.figures["p90_ms"] / 4.75)
    scores = [m["score"] for m in weighed.measured]
    assert len(scores) == 4 and weighed.record()["plan"]["score"] == pytest.approx(min(scores))
    # the same plan holding 3x the default's memory, weighed as memory: the default
    heavy = _verdict(base, plan, bound_ms=10, weights=Weights(1.0, 1.0, 1.0, throughput=1.0),
                     fixed={"default": (1.0, 0.0, 0), "p": (3.0, 0.0, 1)})
    assert not heavy.keeps_plan and heavy.plan.terms["memory"] == pytest.approx(1.0)


def test_under_load_the_latency_weighed_is_the_p90_not_the_median_that_hides_waiting_requests():
    # one session of both threads: most requests fast, the rest waiting (p50 low, p90 high), fewer
    # per second; two sessions of one thread: every request alike, more per second. By the median
    # the first scores lower (8.8 / 10.65 + 189.9 / 176.8 < 2); by the p90 the second does
    split = LoadFigures([8.8] * 60 + [17.5] * 40, 100 / 176.8)
    even = LoadFigures([10.4] * 50 + [10.9] * 50, 100 / 189.9)
    v = _verdict([split, even], {}, kept=None, weights=Weights(1.0, 0.3, 1.0, 0.02, 0.25, throughput=1.0),
                 bound_ms=30)
    assert v.plan.setting == {"sessions": 2, "intra_op_threads": 1}


def test_a_plan_chosen_under_load_is_confirmed_served_again_alone_with_the_default():
    base = [_figures(100, 2.0), _figures(150, 2.5)]
    held = _verdict(base, {"p": [_figures(170, 2.0), _figures(160, 2.0)]})
    assert held.keeps_plan and held.confirmation["pays"] and "confirmed served again alone" in held.reason
    assert held.record()["confirmation"]["plan"]["throughput_per_s"] == pytest.approx(170)
    # alone with the default the plan serves no more: the default is served, and the reason says why
    lost = _verdict(base, {"p": [_figures(170, 2.0), _figures(160, 2.0)]},
                    confirmed={"default": _figures(150, 2.5), "p": _figures(130, 2.0)})
    assert not lost.keeps_plan and lost.plan is lost.default and not lost.confirmation["pays"]
    assert "but not when served again alone with the default in fresh processes" in lost.reason
    broken = _verdict(base, {"p": [_figures(170, 2.0), _figures(160, 2.0)]},
                      confirmed={"default": _figures(150, 2.5), "p": LoadFigures(error="Boom")})
    assert not broken.keeps_plan and "it failed: Boom" in broken.reason
    # the default kept in the round: served again alone, and its figures are the ones claimed
    alone = _verdict(base, {"p": [_figures(120, 2.0)] * 2}, confirmed={"default": _figures(140, 2.4)})
    assert alone.confirmation["alone"] and alone.plan is alone.default
    assert alone.record()["plan"]["throughput_per_s"] == pytest.approx(140)
    assert alone.measured[1]["throughput_per_s"] == pytest.approx(150)      # the round's figure stays in its row
    assert "served again alone in fresh processes" in "\n".join(serving_section({"serving": alone.record()}))


def test_a_plan_losing_under_load_rolls_the_decision_back_naming_the_load():
    v = _verdict([_figures(100, 2.0), _figures(150, 2.5)], {"p": [_figures(120, 2.0), _figures(130, 2.0)]})
    d = Decision("adapted", "faster", 0, {"p": "chosen"}, basis="faster")
    overrule(d, v, {"p": 0})
    assert (d.decision, d.chosen) == ("rolled_back", None)
    assert "2 requests at once on 2 cores" in d.reason and "the default does better" in d.verdicts["p"]


def test_each_paths_fastest_servable_candidate_is_served_beside_the_kept_one():
    from metainfer_core.verify.measure import Verified

    class V:
        candidates = [Verified("a", 2.0, accuracy_loss=0.0), Verified("b", 1.5, accuracy_loss=0.0),
                      Verified("c", 1.0, accuracy_loss=0.5), Verified("d", 3.0, accuracy_loss=0.0),
                      Verified("e", 0.5, error="crashed")]
    paths = ["onnxruntime", "onnxruntime", "openvino:f32", "openvino:f32", "openvino:f32"]
    # c is faster on openvino but loses accuracy, e did not run: d is that path's; b is onnxruntime's
    assert to_serve(V, 0, 0.01, 1 << 30, lambda i: paths[i]) == [0, 1, 3]
    assert to_serve(V, None, 0.01, 1 << 30, lambda i: paths[i]) == [1, 3]


def test_one_request_at_a_time_measures_nothing_again():
    v = one_at_a_time(ServingSettings())
    assert v.keeps_plan and v.record()["setting"] == {"sessions": 1, "intra_op_threads": 1} and not v.measured


def test_load_plan_serves_with_the_recorded_setting_from_several_threads(tmp_path):
    import json

    import onnx

    from metainfer_core.plan.deployable import load_plan
    from plan_content import plan_content

    model = build("mlp", seed=0)
    onnx.save(model, str(tmp_path / "model.onnx"))
    path = {"runtime": "onnxruntime", "precision": "f32", "settings": {"providers": ["CPUExecutionProvider"],
                                                                         "intra_op_threads": 1}}
    serving = {"mode": "throughput", "cores": 2, "concurrency": 2, "setting": {"sessions": 2, "intra_op_threads": 1}}
    (tmp_path / "plan.json").write_text(json.dumps(plan_content(execution_path=path, serving=serving)))
    plan = load_plan(tmp_path)
    assert plan.pooled and plan._pools         # opened at load: the first requests pay no compile
    feeds = random_feeds(model, seed=3)
    want = backend("cpu").compile(model).run(feeds)
    outs = []
    threads = [threading.Thread(target=lambda: outs.append(plan(feeds))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outs) == 4 and all(np.allclose(o[0], want[0], rtol=1e-5, atol=1e-6) for o in outs)
    pool = plan.pool(feeds)
    assert pool.size == 2 and pool.setting == serving["setting"] and pool.run(feeds) is not None
    # one request at a time (no serving record): the compiled model itself, no pool
    (tmp_path / "plan.json").write_text(json.dumps(plan_content(execution_path=path)))
    assert not load_plan(tmp_path).pooled


def test_serving_a_plan_imports_neither_the_search_nor_the_orchestration():
    import subprocess
    import sys

    code = ("import sys; from metainfer_core.plan.deployable import load_plan; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('catboost', 'prefect', 'hydra', 'mlflow') "
            "or m.startswith(('metainfer_core.search', 'metainfer_core.predictor'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_plans_are_served_under_load_in_a_worker_process_of_their_own():
    from metainfer_core.verify.worker import serve_isolated

    model = build("mlp", seed=0)
    out = serve_isolated(backend("cpu"), [("default", model)], {"default": [{"sessions": 2, "intra_op_threads": 1}]},
                         random_feeds(model, seed=0), 2, 0.2)
    (f,) = out["default"]
    assert f.error is None and f.requests > 0 and f.throughput_per_s > 0


def test_a_request_that_never_returns_ends_the_load_with_an_error(monkeypatch):
    import metainfer_core.serving.load as load

    monkeypatch.setattr(load, "HUNG_S", 0.3)
    hung = threading.Event()
    f = load.under_load(lambda feeds: hung.wait(), {}, 2, 0.1, warm_s=0)
    assert f.error and "did not return" in f.error and f.requests == 0
    hung.set()


def test_a_worker_that_does_not_answer_in_time_is_stopped():
    from metainfer_core.errors import MetaInferError
    from metainfer_core.verify.worker import _call, recipe

    model = build("mlp", seed=0)
    job = {"job": "load", "backend": recipe(backend("cpu")), "models": [("default", model.SerializeToString())],
           "settings": {"default": [{"sessions": 1, "intra_op_threads": 1}]}, "feed": random_feeds(model, seed=0),
           "concurrency": 1, "duration_s": 60.0}
    with pytest.raises(MetaInferError, match="did not answer within 3 s") as stopped:
        _call(job, timeout_s=3)
    assert "Thread 0x" in stopped.value.stacks and "under_load" in stopped.value.stacks    # where it stood
