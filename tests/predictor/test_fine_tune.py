"""Online fine-tuning: runtime records of a model the predictor has not seen reduce its
error; a fine-tune that would make held-out error worse is refused, logged, and both
revisions stay loadable."""
from __future__ import annotations

import numpy as np
import pytest

from metainfer_core.backends.base import Timing
from metainfer_core.errors import MetaInferError
from metainfer_core.fingerprint.library import PlanRun
from metainfer_core.predictor import CostModel, PredictorStore
from metainfer_core.predictor.lifecycle.fine_tune import fine_tune, mape
from metainfer_core.predictor.lifecycle.validation import held_out_split, provenance

from predictor.conftest import PARAMS

UNSEEN = "mobilenet_v2_tiny"


def _runtime(npu_set, runs: list[dict], scale: float = 1.0) -> list[dict]:
    """Store `runs` again as runtime records (what deployments measured), scaled, and return them."""
    npu_set.library.add_plan_runs(npu_set.backend.info, [
        PlanRun(r["model"], r["plan_key"], f"deployed:{r['label']}", r["graph"],
                Timing.from_samples([r["median_ms"] * scale] * 3), source="runtime") for r in runs])
    keys = {r["plan_key"] for r in runs}
    return [r for r in npu_set.library.plan_runs(npu_set.version, source="runtime")
            if r["plan_key"] in keys and r["label"].startswith("deployed:")][-len(runs):]


@pytest.fixture
def without_unseen(npu_set, tmp_path):
    """A predictor trained without UNSEEN (its own micro-benchmarks and runs left out)."""
    records, zoo_runs = npu_set.records(), npu_set.runs()
    train_records, train_runs, unseen_runs = held_out_split(records, zoo_runs, UNSEEN, provenance(zoo_runs))
    cm = CostModel.train(train_records, npu_set.version, spec=npu_set.spec, plan_runs=train_runs, params=PARAMS)
    PredictorStore(tmp_path).set_current(cm.save(tmp_path))
    return tmp_path, train_records, train_runs, unseen_runs


def test_runtime_records_of_an_unseen_model_reduce_its_error(npu_set, without_unseen):
    folder, records, seen_runs, unseen = without_unseen
    deployed, later = unseen[::2], unseen[1::2]          # fine-tune on half its plans, judge on the rest too
    runtime = _runtime(npu_set, deployed)
    before = CostModel.load(folder)
    result = fine_tune(folder, runtime, seen_runs, records)
    after = CostModel.load(folder)
    assert result.accepted and after.meta.revision == 2 and after.meta.parent == 1 and after.meta.kind == "fine_tuned"
    assert result.new_after < result.new_before
    assert mape(after, later) < mape(before, later)
    assert result.held_out_after <= result.held_out_before * 1.1      # within the noise tolerance
    assert PredictorStore(folder).history()[-1]["event"] == "fine_tune_accepted"


def test_a_fine_tune_that_hurts_held_out_runs_is_refused_and_logged(npu_set, without_unseen):
    folder, records, seen_runs, _ = without_unseen
    resnet = [r for r in seen_runs if r["model"] == "resnet_tiny"]
    runtime = _runtime(npu_set, resnet[:3], scale=4.0)      # nonsense: 4x what resnet plans take
    held_out = [r for r in seen_runs if r not in resnet[:3]]
    result = fine_tune(folder, runtime, held_out, records)
    store = PredictorStore(folder)
    assert not result.accepted and result.held_out_after > result.held_out_before
    assert store.current() == 1 and store.revisions() == [1, 2]
    event = store.history()[-1]
    assert event["event"] == "fine_tune_refused" and "held-out MAPE" in event["reason"]
    graph = seen_runs[0]["graph"]       # both revisions load and differ
    kept, refused = CostModel.load(folder, 1), CostModel.load(folder, 2)
    assert refused.predict_graph_ms(graph) != pytest.approx(kept.predict_graph_ms(graph))


def test_fine_tune_needs_a_current_predictor_and_records(tmp_path, npu_set):
    with pytest.raises(MetaInferError, match="No current predictor"):
        fine_tune(tmp_path, npu_set.runs()[:1], [], npu_set.records())


def test_pseudo_labels_move_kernels_towards_the_measurement(npu_set, without_unseen):
    from metainfer_core.predictor.lifecycle.fine_tune import pseudo_labels
    folder, _, _, unseen = without_unseen
    cm = CostModel.load(folder)
    run = dict(unseen[0], median_ms=unseen[0]["median_ms"] * 2)
    descs, labels = pseudo_labels(cm, [run])
    assert len(descs) == len(run["graph"]["kernels"])
    assert np.all(labels > cm.predict_graph_kernels_ms(run["graph"]))
