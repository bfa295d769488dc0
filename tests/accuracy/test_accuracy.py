"""Accuracy-loss metrics and the degenerate-reference warning."""
from __future__ import annotations

import numpy as np
import pytest

from metainfer_core.accuracy.metric import degenerate_outputs, make_loss, plan_loss, rel_l2_loss, top1_loss


def _logits(n=8, c=5, seed=0):
    return [[np.random.default_rng(seed + i).standard_normal((1, c))] for i in range(n)]


def test_cosine_and_rel_l2():
    ref = [[np.array([1.0, 2.0, 3.0])]]
    assert plan_loss(ref, ref) == pytest.approx(0.0, abs=1e-12)
    assert plan_loss(ref, [[np.array([2.0, 4.0, 6.0])]]) == pytest.approx(0.0, abs=1e-12)   # scale-blind
    assert rel_l2_loss(ref, [[np.array([2.0, 4.0, 6.0])]]) == pytest.approx(1.0)              # not scale-blind
    assert plan_loss(ref, [[np.array([np.nan, 0, 0])]]) == 1.0


def test_top1_with_and_without_labels():
    ref = _logits()
    labels = np.array([s[0].argmax() for s in ref])
    flipped = [[-s[0]] for s in ref]
    assert top1_loss(ref, ref, None) == 0.0 and top1_loss(ref, flipped, None) == 1.0
    assert top1_loss(ref, flipped, labels) == 1.0 and top1_loss(ref, ref, labels) == 0.0
    assert make_loss("top1", labels)(ref, flipped) == 1.0


def test_user_metric_by_import_path():
    fn = make_loss("numpy:size")         # any importable callable(reference, outputs, labels)
    with pytest.raises(TypeError):
        fn([[np.zeros(1)]], [[np.zeros(1)]])
    with pytest.raises(ModuleNotFoundError):
        make_loss("no_such_module:f")


def test_bad_metric_is_a_config_error(settings_for):
    from metainfer_core.errors import MetaInferError

    with pytest.raises(MetaInferError, match="accuracy.metric"):
        settings_for("accuracy.metric=psnr")
    assert settings_for("accuracy.metric=top1").accuracy.metric == "top1"


def test_degenerate_reference_is_flagged():
    rng = np.random.default_rng(0)
    ref = [[np.full((1, 10), 0.5), rng.standard_normal((1, 10)), rng.random((1, 10)) * 3.7e-6] for _ in range(3)]
    assert degenerate_outputs(ref, ["flat", "varied", "near_zero"]) == ["flat", "near_zero"]
