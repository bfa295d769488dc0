"""Offline training of one target's predictor on the zoo: the training set (dataset.build),
leave-one-model-out validation, the deployed model trained on everything, saved as a new
revision with its metrics and the predicted-vs-measured plot."""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from metainfer_core.fingerprint.library import FingerprintLibrary
from metainfer_core.predictor.model.cost_model import CostModel
from metainfer_core.predictor.lifecycle.fine_tune import FineTuneResult, fine_tune
from metainfer_core.predictor.model.kernel_model import kernel_params  # noqa: F401 - re-exported for the tasks
from metainfer_core.predictor.lifecycle.plot import predicted_vs_measured
from metainfer_core.predictor.lifecycle.store import PredictorStore
from metainfer_core.predictor.features.target_join import TargetSpec
from metainfer_core.predictor.lifecycle.validation import LomoResult, as_rows, in_sample, leave_one_model_out

Progress = Callable[[str], None]


@dataclass
class TrainReport:
    fingerprint_version: str
    folder: str
    revision: int
    reused: bool
    n_records: int
    n_plan_runs: int
    n_models: int
    metrics: dict = field(default_factory=dict)      # leave-one-model-out figures (+ per model)
    files: list[str] = field(default_factory=list)    # model files, meta.json, plot, validation rows
    seconds: float = 0.0


def train(library: FingerprintLibrary, version: str, spec: TargetSpec, folder: Path, params: dict, ridge: float,
          lomo: bool = True, seed: int = 0, progress: Progress = print) -> TrainReport:
    """Train on every record and zoo run of `version`; validate leave-one-model-out first.
    Re-uses the current revision when it learned from exactly the same data."""
    t0 = time.perf_counter()
    records = library.training_records(version)
    runs = library.plan_runs(version, source="zoo")
    store = PredictorStore(folder)
    models = sorted({r["model"] for r in runs})
    if store.current() is not None:
        cm = CostModel.load(folder)
        if (cm.meta.n_records == len(records) and cm.meta.n_plan_runs == len(runs)
                and cm.meta.fingerprint_version == version and "lomo" in cm.meta.metrics):
            progress(f"train: the library has not changed since revision r{cm.meta.revision}: re-used")
            return _report(cm, folder, True, len(models), time.perf_counter() - t0)
    result: LomoResult | None = None
    if lomo and len(models) >= 3:
        progress(f"train: leave-one-model-out over {len(models)} models, {len(runs)} plans")
        result = leave_one_model_out(records, runs, spec, params, ridge, seed)
    progress(f"train: final model on {len(records)} kernel records and {len(runs)} whole-model runs")
    cm = CostModel.train(records, version, seed, spec=spec, plan_runs=runs, params=params, ridge=ridge,
                         validate=result is None)
    if result is not None:
        cm.meta.val_mape = result.metrics["kernel_mape"]       # kernels of models left out, not a random fifth
        cm.meta.metrics["lomo"] = result.metrics
        cm.meta.metrics["lomo_per_model"] = result.per_model
    cm.meta.train_s = time.perf_counter() - t0
    rev = cm.save(folder)
    store.set_current(rev)
    store.log("trained", revision=rev, n_records=len(records), n_plan_runs=len(runs),
              lomo=result.metrics if result else None)
    path = store.path(rev)
    scored = result.scored if result is not None else in_sample(cm, runs)
    title = (f"{spec.name or version}: predicted vs measured "
             f"({'leave-one-model-out' if result is not None else 'in-sample'})")
    predicted_vs_measured(scored, path / "predicted_vs_measured.png", title)
    (path / "validation.json").write_text(json.dumps(_finite(as_rows(scored)), indent=1))
    return _report(cm, folder, False, len(models), time.perf_counter() - t0)


def fine_tune_from_library(library: FingerprintLibrary, version: str, folder: Path, iterations: int,
                           learning_rate: float, weight: float, tolerance: float, ridge: float) -> FineTuneResult:
    """Fine-tune the current revision on the runtime runs stored since it was trained; every
    other stored run is the held-out set."""
    cm = CostModel.load(folder)
    runs = library.plan_runs(version)
    new = [r for r in runs if r["source"] == "runtime" and r["id"] > cm.meta.last_run_id]
    new_ids = {r["id"] for r in new}
    held_out = [r for r in runs if r["id"] not in new_ids]
    return fine_tune(folder, new, held_out, library.training_records(version), iterations, learning_rate, weight,
                     tolerance, ridge)


def _report(cm: CostModel, folder: Path, reused: bool, n_models: int, seconds: float) -> TrainReport:
    path = PredictorStore(folder).path(cm.meta.revision)
    files = sorted(str(p) for p in path.iterdir() if p.is_file())
    return TrainReport(cm.meta.fingerprint_version, str(folder), cm.meta.revision, reused, cm.meta.n_records,
                       cm.meta.n_plan_runs, n_models, dict(cm.meta.metrics), files, seconds)


def _finite(x):
    """JSON-safe: NaN and infinities become null."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x
