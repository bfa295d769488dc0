"""The train_predictor stage: the cost model of a fingerprint version, re-used while the library
has not grown, re-trained when it has; a drifted calibration marks it stale first."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from metainfer_core.fingerprint.library import FingerprintLibrary
from metainfer_core.predictor import CostModel, load_or_train
from metainfer_core.settings import Settings

Progress = Callable[[str], None]


def predictor_folder(s: Settings, fingerprint_version: str) -> Path:
    """Where a fingerprint version's predictor revisions live."""
    return s.artifacts / "predictors" / fingerprint_version


def train_stage(s: Settings, fingerprint_version: str, progress: Progress = print) -> tuple[CostModel, bool]:
    """The predictor of this fingerprint version: kernel records plus whole-model runs (zoo
    runs from flows/train.py, runtime runs from verify and deployments). The current revision
    is re-used while the library has not grown; first, recent verify runs are checked for
    calibration drift (past predictor.drift_threshold the predictor is marked stale)."""
    from metainfer_core.predictor import PredictorStore, TargetSpec, kernel_params
    from metainfer_core.predictor.lifecycle import calibration

    library = FingerprintLibrary(s.tracking.fingerprint_db)
    folder = predictor_folder(s, fingerprint_version)
    p = s.predictor
    if p.frozen and PredictorStore(folder).current() is not None:
        cm = CostModel.load(folder)
        progress(f"train: frozen CatBoost predictor r{cm.meta.revision} (predictor.frozen)")
        return cm, False
    was_stale = PredictorStore(folder).stale() is not None
    drift = calibration.check(library, fingerprint_version, folder, p.drift_threshold, p.drift_window)
    if drift.stale and not was_stale:
        progress(f"train: predictor calibration drifted (measured/predicted {drift.ratio:.3f} over {drift.runs} "
                 f"verified runs, reference {drift.reference:.3f}): marked stale for re-profiling")
    cm, trained = load_or_train(library.training_records(fingerprint_version), fingerprint_version, folder,
                                seed=s.seed, spec=TargetSpec.from_spec(s.target.name, s.target.spec),
                                plan_runs=library.plan_runs(fingerprint_version),
                                params=kernel_params(p.iterations, p.learning_rate, p.depth), ridge=p.ridge)
    progress(f"train: {cm.meta.kind if trained else 'reused'} CatBoost predictor r{cm.meta.revision} on "
             f"{cm.meta.n_records} kernel records and {cm.meta.n_plan_runs} whole-model runs "
             f"(held-out kernel MAPE {cm.meta.val_mape:.1%})")
    return cm, trained
