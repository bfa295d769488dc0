"""The beam search's loop (search/beam.py): better plans found without running each candidate,
the dive to full depth before the widening, hard constraints pruning, the time budget ending
the search (on a fake clock), the weights' effect on the chosen plan, and the leanest plan named
when none fits."""
from __future__ import annotations

import numpy as np
import pytest

from metainfer_core.actions import ActionContext
from metainfer_core.decide.stage import decide_stage
from metainfer_core.plan.report import search_text
from metainfer_core.search import Evaluator, Weights, beam_search
from metainfer_core.search import accuracy_estimate
from metainfer_core.search.stage import SearchOutcome
from metainfer_core.verify.stage import VerifyOutcome

from search.fakes import FakeClock
from search.helpers import INT8, LOSSY, SPACE, search
from twins import BALANCED, FakeCostModel, backend


class LaunchBound(FakeCostModel):
    """A kernel costs its launch (1 ms) above its work: fewer kernels are a clear gain."""
    def predict_kernels_ms(self, kernels):
        return 1.0 + super().predict_kernels_ms(kernels)


class Int8Pays(FakeCostModel):
    """int8 kernels a tenth of their float cost: the gain is in the precision alone."""
    def predict_kernels_ms(self, kernels):
        return np.array([(0.1 if k.dtype == "int8" else 1.0) * (0.01 + k.flops * 1e-9) for k in kernels])


def _conf_weights(name: str) -> Weights:
    import yaml

    from app.compose import CONF_DIR

    w = yaml.safe_load((CONF_DIR / "weights" / f"{name}.yaml").read_text())
    return Weights(w["latency"], w["memory"], w["accuracy"], w["change_penalty"])


def test_finds_better_plans_without_running_each_candidate(models, predictors, monkeypatch):
    runs = []
    real = accuracy_estimate.run_cpu
    monkeypatch.setattr(accuracy_estimate, "run_cpu", lambda m, f: runs.append(1) or real(m, f))
    res = search(models, predictors, "gpu")
    assert res.top and all(c.score < res.default.score for c in res.top)
    assert len({c.key for c in res.top}) == len(res.top)
    assert all(1 <= c.changes <= 2 for c in res.top)
    # the dive's levels, then the widening's, each from the first on; the deepest is reported
    dive = res.progress_levels[:next((i for i, lvl in enumerate(res.progress_levels) if i and lvl == 1),
                                     len(res.progress_levels))]
    widen = res.progress_levels[len(dive):]
    assert dive == list(range(1, len(dive) + 1)) and widen == list(range(1, len(widen) + 1))
    assert res.levels == max(res.progress_levels) == res.depth == 2
    assert {"expand_s", "apply_s", "hash_s", "evaluate_s", "sensitivity_s", "total_s"} <= set(res.timings)
    assert res.timings["total_s"] == pytest.approx(res.search_s, abs=1e-3)
    # accuracy: estimated from per-node sensitivity; only the best few get an exact run
    assert any(s.kind in LOSSY for c in res.top for s in c.steps)
    assert all(c.accuracy_exact for c in res.top)
    assert len(runs) <= 3 * 3 and res.evaluated > 3 * len(runs)
    # the search log: every scored plan once, with its level, steps and figures, in the order scored
    scored = [e for e in res.log if "n" in e and "event" not in e]
    assert [e["n"] for e in scored] == list(range(1, res.evaluated + 1))
    assert all(1 <= e["level"] <= 2 and len(e["steps"]) == e["level"] and e["predicted_ms"] > 0 for e in scored)
    assert {e["steps"][0].split("(")[0] for e in scored} >= {s.kind for c in res.top for s in c.steps[:1]}
    assert sum(e.get("pruned") == "duplicate" for e in res.log) == res.duplicates


def test_npu_prefers_int8_and_reports_binding(models, predictors):
    # no fp32 datapath; memory raised: resnet's 147 KB int8 conv weights do not fit the npu's 96 KiB
    res = search(models, predictors, "npu", depth=1, space={"int8": INT8, "fp16": {}}, memory_limit_bytes=1 << 22)
    assert res.top[0].steps[0].kind == "int8"
    assert res.default.binding["host"] and all("float32" in h["reason"] for h in res.default.binding["host"])
    assert len(res.top[0].binding["host"]) < len(res.default.binding["host"])
    assert "binding" in res.top[0].summary()


def test_the_npu_memory_limit_is_met_by_tiling_a_wide_cnn(models, predictors):
    res = search(models, predictors, "npu", name="mobilenet_v2_tiny", depth=2, beam=3,
                 space={"int8": INT8, "tiling": SPACE["tiling"]})
    best = res.top[0]
    assert {s.kind for s in best.steps} == {"int8", "tiling"}
    assert best.peak_mem_bytes <= backend("npu").info.memory_limit_bytes < res.default.peak_mem_bytes
    assert res.pruned.get("memory", 0) > 0                      # int8 alone does not fit: expanded, not returned


def test_accuracy_bound_prunes(models, predictors):
    res = search(models, predictors, "npu", max_loss=0.0, depth=1, space={"int8": INT8, "fuse_chain": {}},
                 memory_limit_bytes=1 << 22)
    assert all(not any(s.kind in LOSSY for s in c.steps) for c in res.top)
    assert res.pruned.get("accuracy", 0) > 0


def test_memory_limit_prunes_everything_over_it(models):
    res = search(models, None, "gpu", memory_limit_bytes=1000, depth=1, cost_model=FakeCostModel(),
                 space={"fuse_chain": {}, "layout": {}})
    assert not res.top and res.pruned.get("memory", 0) > 0


def test_time_budget_stops_the_search(models, monkeypatch):
    """A budget shorter than measuring the default plan took (on the fake clock, a millisecond):
    nothing is scored."""
    m, feeds, reference = models["resnet_tiny"]
    be = backend("gpu")
    clock = FakeClock()
    ev = Evaluator(FakeCostModel(), be.info, BALANCED, 0.01, feeds, reference, LOSSY, clock=clock)
    monkeypatch.setattr(Evaluator, "set_baseline", clock.slowed(Evaluator.set_baseline, 1e-3))
    res = beam_search(m, SPACE, ev, ActionContext(target=be.info, calibration_feeds=feeds), 3, 5, 3, 1e-9, clock=clock)
    assert res.stopped_by_budget and res.evaluated == 0


def test_embedded_weights_choose_a_plan_with_less_peak_memory(models, predictors):
    """conf/weights/embedded.yaml against conf/weights/latency.yaml, same model, target and space."""
    # epilogue fusion only: layer fusion keeps the intermediates on chip, the fastest plan and the
    # leanest at once, so with it both weights choose it and there is no trade-off left to show
    space = {"int8": INT8, "fuse_chain": {"max_depth": [2, 8], "span": ["epilogue"]}, "layout": {},
             "memory_reuse": {}, "schedule": {}}
    embedded = search(models, predictors, "fpga", name="mobilenet_v2_tiny", weights=_conf_weights("embedded"), space=space)
    latency = search(models, predictors, "fpga", name="mobilenet_v2_tiny", weights=_conf_weights("latency"), space=space)
    e, lat = embedded.top[0], latency.top[0]
    assert e.peak_mem_bytes < 0.5 * lat.peak_mem_bytes
    assert e.score < embedded.default.score and lat.score < latency.default.score


def test_on_the_npu_embedded_weights_buy_less_peak_memory_than_latency_weights(models, predictors):
    """resnet_tiny fits the npu only in int8 with its heaviest convs split into output-channel
    blocks; splitting further shrinks the streamed weight buffer (a real saving) for more
    launches. weights=embedded buys it, weights=latency does not: both plans fit."""
    space = {"int8": INT8, "tiling": {"tiles": [2, 4, 8], "axis": ["channels"]}}
    embedded = search(models, predictors, "npu", weights=_conf_weights("embedded"), space=space, depth=3, beam=2)
    latency = search(models, predictors, "npu", weights=_conf_weights("latency"), space=space, depth=3, beam=2)
    e, lat = embedded.top[0], latency.top[0]
    limit = backend("npu").info.memory_limit_bytes
    assert embedded.default.peak_mem_bytes > limit                  # the default does not fit
    assert e.peak_mem_bytes < 0.95 * lat.peak_mem_bytes and lat.peak_mem_bytes <= limit
    assert lat.latency_ms < e.latency_ms                            # what the saving costs


def test_when_no_plan_fits_the_decision_names_the_leanest_plans_peak(models, predictors, settings_for):
    space = {"int8": INT8, "tiling": {"tiles": [8], "axis": ["channels"]}}
    res = search(models, predictors, "npu", name="resnet_tiny", depth=2, space=space, memory_limit_bytes=20000)
    assert not res.top and res.leanest is not None and res.leanest.peak_mem_bytes < res.default.peak_mem_bytes
    npu = backend("npu", memory_limit_bytes=20000)
    d, chosen = decide_stage(settings_for("target=npu"), npu, SearchOutcome(res, default=res.default),
                                    VerifyOutcome(None, [], [], [], 0.0))
    assert d.decision == "default" and chosen is None
    assert f"the leanest (int8 + tiling) needs {res.leanest.peak_mem_bytes} B" in d.reason
    assert "B of activations are alive (the largest 'input' (49152 B)" in d.reason      # the fp32 input
    assert "over the 20000 B limit" in d.reason


def test_a_budget_that_ends_early_has_still_searched_to_full_depth(models, monkeypatch):
    """Each candidate's scoring slowed as on a large model (0.1 s on the fake clock): the budget
    ends during the widening's first level, yet the dive has scored plans at the configured depth
    (each kernel costs a launch, so every fusion gains); no plan is scored twice (the widening
    re-uses the dive's children), and the search ends near its budget."""
    m, feeds, reference = models["resnet_tiny"]
    be = backend("gpu")
    clock = FakeClock()
    ev = Evaluator(LaunchBound(), be.info, BALANCED, 0.01, feeds, reference, LOSSY, clock=clock)
    scored, real = [], Evaluator.evaluate

    def slow(self, c, parent=None, origin=None, whole=None):
        clock.advance(0.1)
        scored.append(c.key)
        return real(self, c, parent, origin, whole)

    monkeypatch.setattr(Evaluator, "evaluate", slow)
    levels = []
    res = beam_search(m, SPACE, ev, ActionContext(target=be.info, calibration_feeds=feeds), beam_width=3, depth=3,
                      top_k=3, time_budget_s=6.0, progress=lambda lvl, n, best: levels.append(lvl), clock=clock)
    assert res.depth == res.levels == 3 and levels[:3] == [1, 2, 3] and not res.dive_stalled_at
    assert res.stopped_by_budget and res.skipped > 0
    assert len(scored) == len(set(scored)) == res.evaluated
    assert res.search_s < 6.0 + 3.0         # the exact checks of the best few come after


def test_past_a_level_where_no_child_gains_the_dive_coasts_to_full_depth(models):
    """Tiling only adds kernels here: no child of the default is predicted to gain. The dive still
    goes to the configured depth (combinations get scored), says where gains stopped, and the
    widening then starts from the root."""
    m, feeds, reference = models["mobilenet_v2_tiny"]
    be = backend("gpu")
    clock = FakeClock()
    ev = Evaluator(LaunchBound(), be.info, BALANCED, 0.01, feeds, reference, LOSSY, clock=clock)
    levels = []
    res = beam_search(m, {"tiling": {"tiles": [2, 4], "axis": ["height"]}}, ev,
                      ActionContext(target=be.info, calibration_feeds=feeds), beam_width=2, depth=3, top_k=3,
                      time_budget_s=60, progress=lambda lvl, n, best: levels.append(lvl), clock=clock)
    assert res.dive_stalled_at == 1 and levels[:4] == [1, 2, 3, 1]      # the dive, then the widening
    assert res.levels == res.depth == 3 and not res.top
    assert "past depth 1 no step was predicted to gain" in search_text(
        {"levels": res.levels, "depth": res.depth, "evaluated": 1, "dive_stalled_at": res.dive_stalled_at})


def test_the_dive_measures_a_new_precision_past_its_level_slice(models, monkeypatch):
    """A new precision priced as on a large model (its sensitivity seconds long) does not fit the
    dive's first level slice, where only cheap rewrites that gain nothing do. The dive still
    scores the level's first child that measures something new: int8, the gain, is what its
    next levels grow (before, the dive stalled on the rewrites and never measured int8)."""
    m, feeds, reference = models["resnet_tiny"]
    be = backend("cpu")
    ctx = ActionContext(target=be.info, calibration_feeds=feeds)
    clock = FakeClock()
    ev = Evaluator(Int8Pays(), be.info, BALANCED, 0.05, feeds, reference, LOSSY, ctx=ctx, clock=clock)
    priced = Evaluator.fresh_cost_prior_s
    monkeypatch.setattr(Evaluator, "fresh_cost_prior_s",
                        lambda self, lossy=True: {k: max(v, 4.0) for k, v in priced(self, lossy).items()})
    dive = []
    res = beam_search(m, {"tiling": {"tiles": [2, 4], "axis": ["height"]}, "int8": INT8}, ev, ctx, beam_width=2,
                      depth=3, top_k=3, time_budget_s=16,
                      progress=lambda lvl, n, best: dive.append((lvl, best)) if len(dive) < 3 else None, clock=clock)
    default_score = res.default.score
    assert dive[0][0] == 1 and dive[0][1] < default_score       # the dive's first level already gains
    assert res.levels == 3
