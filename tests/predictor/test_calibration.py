"""Calibration: the measured/predicted ratio of recent verify runs; drift past the threshold
marks the predictor stale."""
from __future__ import annotations

from metainfer_core.backends.base import Timing
from metainfer_core.fingerprint import FingerprintLibrary
from metainfer_core.fingerprint.library import PlanRun
from metainfer_core.predictor import PredictorStore
from metainfer_core.predictor.lifecycle.calibration import check, drift

from predictor.conftest import target


def _verified(lib, info, ratios):
    lib.add_plan_runs(info, [PlanRun("m", f"k{i}", "verify:default", {"kernels": []}, Timing.from_samples([r]),
                                     source="runtime", predicted_ms=1.0) for i, r in enumerate(ratios)])


def test_drift_past_the_threshold_marks_stale(tmp_path):
    backend, _ = target("gpu")
    lib = FingerprintLibrary(f"sqlite:///{tmp_path}/fp.db")
    version = backend.info.fingerprint_version
    _verified(lib, backend.info, [1.02, 0.98, 1.05])
    ok = check(lib, version, tmp_path / "p", threshold=0.25, window=20)
    assert ok.runs == 3 and not ok.stale and PredictorStore(tmp_path / "p").stale() is None
    _verified(lib, backend.info, [1.6, 1.7, 1.5, 1.6])            # the device got slower
    d = drift(lib, version, threshold=0.25, window=4)
    assert d.ratio == 1.6 and d.stale
    marked = check(lib, version, tmp_path / "p", threshold=0.25, window=4)
    assert marked.stale and "drifted" in PredictorStore(tmp_path / "p").stale()["reason"]


def test_a_predictor_biased_from_the_start_is_not_stale(tmp_path):
    """Drift is relative to the ratio the predictor had on its own training runs."""
    backend, _ = target("gpu")
    lib = FingerprintLibrary(f"sqlite:///{tmp_path}/fp.db")
    _verified(lib, backend.info, [1.3, 1.31, 1.29])
    assert not drift(lib, backend.info.fingerprint_version, reference=1.3, threshold=0.25).stale
