"""Leave-one-model-out validation: the scored model is absent from training."""
from __future__ import annotations

import math

from metainfer_core.predictor.lifecycle.validation import held_out_split, leave_one_model_out, provenance

from predictor.conftest import MODELS, PARAMS


def test_held_out_model_is_absent_from_training(npu_set):
    records, runs = npu_set.records(), npu_set.runs()
    prov = provenance(runs)
    train_records, train_runs, test_runs = held_out_split(records, runs, "bert_tiny", prov)
    assert {r["model"] for r in test_runs} == {"bert_tiny"} and "bert_tiny" not in {r["model"] for r in train_runs}
    kept = {r["kernel_key"] for r in train_records}
    others = set().union(*[k for m, k in prov.items() if m != "bert_tiny"])
    # bert's own micro-benchmarks are gone; kernels another model shares stay
    assert not (prov["bert_tiny"] - others) & kept
    assert (prov["bert_tiny"] & others) <= kept
    assert len(train_records) < len(records)


def test_figures_on_a_modeled_target(npu_set):
    result = leave_one_model_out(npu_set.records(), npu_set.runs(), npu_set.spec, PARAMS)
    m = result.metrics
    assert m["models"] == len(MODELS) and m["plans"] == len(npu_set.runs())
    assert m["mape"] < 0.15 and m["within_10"] > 0.6 and m["spearman_mean"] > 0.8
    assert not math.isnan(m["kernel_mape"]) and set(result.per_model) == set(MODELS)
