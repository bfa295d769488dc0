"""The cost model: kernel CatBoost plus the learned model-level correction, its revisions on
disk, and the interface the search uses (predict_ms on a graph's kernels)."""
from __future__ import annotations

import numpy as np
import pytest

from metainfer_core.errors import MetaInferError
from metainfer_core.ir.kernels import group_kernels
from metainfer_core.normalize import normalize
from metainfer_core.predictor import CostModel, PredictorStore, load_or_train
from metainfer_core.predictor.features.plan_graph import describe
from metainfer_core.ir.tensors import tensor_infos
from metainfer_core.zoo import build

from predictor.conftest import PARAMS


@pytest.fixture(scope="module")
def npu_model(npu_set) -> CostModel:
    return CostModel.train(npu_set.records(), npu_set.version, spec=npu_set.spec, plan_runs=npu_set.runs(),
                           params=PARAMS)


def test_whole_model_prediction_matches_whole_model_runs(npu_model, npu_set):
    runs = npu_set.runs()
    pred = np.array([npu_model.predict_graph_ms(r["graph"]) for r in runs])
    meas = np.array([r["median_ms"] for r in runs])
    assert np.median(np.abs(pred - meas) / meas) < 0.05
    assert npu_model.meta.n_plan_runs == len(runs) and npu_model.meta.metrics["calibration_ratio"] > 0


def test_the_search_interface_scores_a_graph_from_its_kernels(npu_model, npu_set):
    m = normalize(build("mlp"), {"input": [1, 256]}).model
    infos = tensor_infos(m)
    kernels = group_kernels(m, infos)
    whole = npu_model.predict_ms(kernels, infos)
    assert whole == pytest.approx(npu_model.predict_model_ms(m))
    assert whole == pytest.approx(npu_model.predict_graph_ms(describe(m)))
    assert npu_model.predict_kernels_ms(kernels).shape == (len(kernels),)
    assert npu_model.predict_kernels_peak_bytes(kernels).min() > 0
    measured = npu_set.backend.compile(m).base_us / 1e3
    assert 0.8 < whole / measured < 1.25


def test_without_whole_model_runs_the_prediction_is_the_kernel_sum(npu_set):
    cm = CostModel.train(npu_set.records(), npu_set.version, spec=npu_set.spec, params=PARAMS, validate=False)
    graph = npu_set.runs()[0]["graph"]
    assert cm.predict_graph_ms(graph) == pytest.approx(cm.predict_graph_kernels_ms(graph).sum())


def test_revisions_reuse_and_reload(npu_set, tmp_path):
    records, runs = npu_set.records(), npu_set.runs()
    cm, trained = load_or_train(records, npu_set.version, tmp_path, spec=npu_set.spec, plan_runs=runs, params=PARAMS)
    assert trained and cm.meta.revision == 1
    again, trained_again = load_or_train(records, npu_set.version, tmp_path, spec=npu_set.spec, plan_runs=runs,
                                         params=PARAMS)
    assert not trained_again and again.meta.revision == 1
    graph = runs[0]["graph"]
    assert again.predict_graph_ms(graph) == pytest.approx(cm.predict_graph_ms(graph))
    # whole-model runs changed (one fewer here stands for one more there): the correction is fitted again
    grown, trained_grown = load_or_train(records, npu_set.version, tmp_path, spec=npu_set.spec, plan_runs=runs[:-1],
                                         params=PARAMS)
    assert trained_grown and grown.meta.revision == 2 and grown.meta.kind == "recalibrated"
    assert np.allclose(grown.predict_graph_kernels_ms(graph), cm.predict_graph_kernels_ms(graph))
    r1, r2 = (tmp_path / "r1" / "kernel_latency.cbm").stat(), (tmp_path / "r2" / "kernel_latency.cbm").stat()
    assert (r1.st_ino, r1.st_dev) == (r2.st_ino, r2.st_dev)       # its kernels are r1's file, not a copy
    # kernel records changed: trained anew
    fresh, _ = load_or_train(records[:-5], npu_set.version, tmp_path, spec=npu_set.spec, plan_runs=runs[:-1],
                             params=PARAMS)
    assert fresh.meta.revision == 3 and fresh.meta.kind == "trained"
    assert PredictorStore(tmp_path).revisions() == [1, 2, 3] and PredictorStore(tmp_path).current() == 3
    assert CostModel.load(tmp_path, 1).predict_graph_ms(graph) == pytest.approx(cm.predict_graph_ms(graph))


def test_too_few_records_is_a_clear_error():
    with pytest.raises(MetaInferError, match="at least"):
        CostModel.train([], "v")


def test_a_missing_revision_is_a_clear_error(tmp_path):
    with pytest.raises(MetaInferError, match="No predictor revision"):
        CostModel.load(tmp_path)
