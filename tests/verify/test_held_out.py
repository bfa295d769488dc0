"""Held-out accuracy (issue 47): the samples that calibrate a plan never judge it. data.inputs'
every third sample is held out; verify judges the bound on those and keeps the calibration loss
beside it; a plan under the bound on its calibration samples and over it on the held-out ones is
rejected, and the reason names the held-out loss."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from metainfer_core.accuracy.holdout import HOLD_OUT_EVERY, MIN_TO_SPLIT, held_out_indices, split
from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.actions.base import Step
from metainfer_core.backends import backend_for
from metainfer_core.decide.stage import decide_stage
from metainfer_core.errors import MetaInferError
from metainfer_core.prepare.stage import prepare_stage
from metainfer_core.search.beam import SearchResult
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.stage import SearchOutcome
from metainfer_core.verify.stage import verify_stage
from metainfer_core.zoo import build

INT8 = {"scope": "all"}


def test_every_third_sample_is_held_out_from_four_on():
    assert held_out_indices(MIN_TO_SPLIT - 1) == []
    assert held_out_indices(6) == [2, 5]
    assert held_out_indices(12) == [2, 5, 8, 11]
    feeds = [{"x": np.full(1, i)} for i in range(7)]
    (cal, cal_labels), (held, held_labels) = split(feeds, np.arange(7))
    assert [int(f["x"][0]) for f in cal] == [0, 1, 3, 4, 6] and cal_labels.tolist() == [0, 1, 3, 4, 6]
    assert [int(f["x"][0]) for f in held] == [2, 5] and held_labels.tolist() == [2, 5]
    assert split(feeds[:3], None) == ((feeds[:3], None), None)
    assert HOLD_OUT_EVERY == 3


def _mlp_with_samples(tmp_path, n: int, held_scale: float):
    """The zoo MLP saved as a file, and n real-valued samples whose held-out ones (every third) are
    `held_scale` times larger than the calibration ones: int8 ranges fitted to the calibration
    samples clip them."""
    path = tmp_path / "mlp.onnx"
    onnx.save(build("mlp"), path)
    x = np.random.default_rng(3).standard_normal((n, 1, 256)).astype(np.float32)
    for i in held_out_indices(n):
        x[i] *= held_scale
    npz = tmp_path / "inputs.npz"
    np.savez(npz, input=x)
    return path, npz, x


def test_prepare_splits_data_inputs_and_warns_when_too_few(settings_for, tmp_path):
    path, npz, x = _mlp_with_samples(tmp_path, 6, 1.0)
    prepared = prepare_stage(settings_for("model=file", f"model.path={path}", f"data.inputs={npz}"), False,
                             progress=lambda _m: None)
    assert len(prepared.feeds) == 4 and len(prepared.held_out.feeds) == 2
    np.testing.assert_array_equal(prepared.held_out.feeds[1]["input"], x[5])
    assert len(prepared.held_out.reference) == 2 and not prepared.warnings
    assert prepared.judge is prepared.held_out

    path, npz, _ = _mlp_with_samples(tmp_path, 3, 1.0)
    few = prepare_stage(settings_for("model=file", f"model.path={path}", f"data.inputs={npz}"), False,
                        progress=lambda _m: None)
    assert few.held_out is None and len(few.feeds) == 3
    assert "only 3 validation sample(s)" in few.warnings[0] and few.judge.feeds is few.feeds


def test_data_validation_judges_and_needs_data_inputs(settings_for, tmp_path):
    path, npz, _ = _mlp_with_samples(tmp_path, 3, 1.0)
    val = tmp_path / "val.npz"
    np.savez(val, input=np.ones((2, 1, 256), np.float32))
    prepared = prepare_stage(settings_for("model=file", f"model.path={path}", f"data.inputs={npz}",
                                          f"data.validation={val}"), False, progress=lambda _m: None)
    assert len(prepared.feeds) == 3 and len(prepared.held_out.feeds) == 2 and not prepared.warnings
    with pytest.raises(MetaInferError, match="without data.inputs"):
        prepare_stage(settings_for("model=file", f"model.path={path}", "model.input_shapes={input:[1,256]}",
                                   f"data.validation={val}"), False, progress=lambda _m: None)


def test_a_plan_over_the_bound_only_on_held_out_samples_is_rejected_naming_that_loss(settings_for, tmp_path):
    path, npz, _ = _mlp_with_samples(tmp_path, 6, 40.0)
    s = settings_for("model=file", f"model.path={path}", f"data.inputs={npz}")
    prepared = prepare_stage(s, False, progress=lambda _m: None)
    backend = backend_for(s)
    action = ACTIONS["int8"]
    params = action.with_defaults(INT8)
    site = action.sites(prepared.model, params, backend.info)[0]
    ctx = ActionContext(target=backend.info, calibration_feeds=prepared.feeds, cache=prepared.action_cache)
    q = action.apply(prepared.model, site, params, ctx)
    onnx.checker.check_model(q, full_check=True)
    default = Candidate(prepared.model)
    plan = Candidate(q, (Step("int8", site, tuple(sorted(params.items()))),))
    outcome = SearchOutcome(SearchResult(default, [plan]), default=default)

    said: list[str] = []
    verified = verify_stage(s, prepared, backend, outcome, progress=said.append)
    v = verified.candidates[0]
    assert v.ok
    assert v.calibration_loss <= s.accuracy.max_loss < v.accuracy_loss    # fitted where it was calibrated only
    assert any("held-out" in m or "held out" in m for m in said)

    decision, chosen = decide_stage(s, backend, outcome, verified)
    assert chosen is None and decision.chosen is None
    verdict = decision.verdicts[v.label]
    assert "held-out samples" in verdict and f"{v.accuracy_loss:.4g}" in verdict
