"""The offline training set: micro-benchmarks and whole-model runs of every candidate plan."""
from __future__ import annotations

from metainfer_core.predictor.dataset.training_set import build, zoo_entries
from metainfer_core.predictor.dataset.plans import candidate_plans
from app.compose import compose_raw, zoo_input_shapes

from predictor.conftest import MODELS


def test_every_model_has_its_default_and_rewritten_plans(npu_set):
    runs = npu_set.runs()
    assert {r["model"] for r in runs} == set(MODELS)
    for m in MODELS:
        labels = [r["label"] for r in runs if r["model"] == m]
        assert labels[0] == "default" and len(labels) > 1, labels
    default = next(r for r in runs if r["label"] == "default")
    assert default["graph"]["record_keys"]            # provenance for leave-one-model-out
    k = default["graph"]["kernels"][0]
    assert {"features", "inputs", "layout", "host"} <= set(k)
    assert all(r["median_ms"] > 0 for r in runs)


def test_a_second_build_reuses_what_the_library_holds(npu_set):
    shapes = zoo_input_shapes(["mlp"])
    space = compose_raw([])["action_space"]["actions"]
    again = build(npu_set.backend, npu_set.library, zoo_entries(shapes, 0, 2), space, [1, 2], reps=3, warmup=0, runs=5,
                  plan_depth=1, max_plans=10)
    assert again.plans_measured == 0 and again.plans_reused > 0 and again.kernels_measured == 0


def test_candidate_plans_are_distinct_graphs(npu_set):
    entry = zoo_entries(zoo_input_shapes(["mlp"]), 0, 2)[0]
    space = compose_raw([])["action_space"]["actions"]
    # the npu offers 14 one-step plans of the mlp (its channel splits among them): room for sequences
    plans = candidate_plans(entry.model, space, npu_set.backend.info, entry.feeds, depth=2, max_plans=20)
    assert plans[0].steps == () and 1 < len(plans) <= 20
    assert len({p.key for p in plans}) == len(plans)
    assert any(len(p.steps) == 2 for p in plans)      # sequences, as the beam search builds them
