"""The CatBoost cost model trained on fingerprint records."""
from __future__ import annotations

import numpy as np
import pytest

from metainfer_core.errors import MetaInferError
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.fingerprint.profiler import profile
from metainfer_core.kernels import group_kernels
from metainfer_core.predictor import CostModel, load_or_train
from metainfer_core.zoo import build

from backends.test_simulator import backend


@pytest.fixture(scope="module")
def gpu_records(tmp_path_factory):
    lib = FingerprintLibrary(f"sqlite:///{tmp_path_factory.mktemp('fp')}/fp.db")
    gpu = backend("gpu")
    rep = profile(gpu, lib, [build(n) for n in ("resnet_tiny", "mobilenet_v2_tiny", "mlp")], [1, 2, 4], reps=5, warmup=0)
    return lib.records(rep.fingerprint_version), rep.fingerprint_version


def test_predicts_an_unseen_model_within_reason(gpu_records):
    records, version = gpu_records
    cm = CostModel.train(records, version)
    assert cm.meta.n_records == len(records) and cm.meta.val_mape < 0.5
    m = build("efficientnet_tiny")                 # not in the training set
    predicted = cm.predict_ms(group_kernels(m))
    simulated = backend("gpu").compile(m).base_us / 1e3
    assert 0.5 < predicted / simulated < 2.0


def test_save_load_roundtrip_and_reuse(gpu_records, tmp_path):
    records, version = gpu_records
    cm, trained = load_or_train(records, version, tmp_path / "p")
    assert trained
    again, trained_again = load_or_train(records, version, tmp_path / "p")
    assert not trained_again
    ks = group_kernels(build("mlp"))
    np.testing.assert_allclose(cm.predict_kernels_ms(ks), again.predict_kernels_ms(ks))


def test_too_few_records_is_a_clear_error():
    with pytest.raises(MetaInferError, match="at least"):
        CostModel.train([], "v")
