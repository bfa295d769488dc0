"""Learned cost model: CatBoost regression of log10 kernel latency on kernel features.

A model's predicted latency is the sum of its kernels' predicted latencies. Trained from the
fingerprint library of one fingerprint version and saved beside its metadata (training-set
size, validation error), so a model is always tied to the version it learned from."""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from catboost import CatBoostRegressor, Pool

from metainfer_core.errors import MetaInferError
from metainfer_core.features import CATEGORICAL, FEATURES, kernel_features
from metainfer_core.kernels import Kernel

# Pinned so that continued training (init_model) never silently changes the model's shape.
PARAMS = dict(iterations=400, depth=6, learning_rate=0.08, loss_function="RMSE", random_seed=0,
              verbose=False, thread_count=2, allow_writing_files=False)
MIN_RECORDS = 8


@dataclass
class PredictorMeta:
    fingerprint_version: str
    n_records: int
    val_mape: float             # on a held-out fifth of the records (kernel level)
    train_s: float


def _frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame([{f: r.get(f) for f in FEATURES} for r in rows], columns=FEATURES)
    for c in CATEGORICAL:
        df[c] = df[c].astype(str)
    return df


class CostModel:
    def __init__(self, model: CatBoostRegressor, meta: PredictorMeta):
        self.model, self.meta = model, meta

    @staticmethod
    def train(records: list[dict], fingerprint_version: str, seed: int = 0) -> "CostModel":
        if len(records) < MIN_RECORDS:
            raise MetaInferError(f"Only {len(records)} fingerprint records for {fingerprint_version}; the predictor "
                                 f"needs at least {MIN_RECORDS}. Run the profile stage on a larger model first.")
        t0 = time.perf_counter()
        X = _frame([r["features"] for r in records])
        y = np.log10(np.array([max(r["median_ms"], 1e-6) for r in records]))
        rng = np.random.default_rng(seed)
        val = rng.random(len(records)) < 0.2
        probe = CatBoostRegressor(**PARAMS)
        probe.fit(Pool(X[~val], y[~val], cat_features=CATEGORICAL))
        pred = probe.predict(Pool(X[val], cat_features=CATEGORICAL)) if val.any() else np.array([])
        mape = float(np.mean(np.abs(10 ** pred - 10 ** y[val]) / 10 ** y[val])) if val.any() else float("nan")
        final = CatBoostRegressor(**PARAMS)      # the deployed model learns from every record
        final.fit(Pool(X, y, cat_features=CATEGORICAL))
        return CostModel(final, PredictorMeta(fingerprint_version, len(records), mape, time.perf_counter() - t0))

    def predict_kernels_ms(self, kernels: list[Kernel]) -> np.ndarray:
        if not kernels:
            return np.zeros(0)
        X = _frame([kernel_features(k) for k in kernels])
        return 10 ** self.model.predict(Pool(X, cat_features=CATEGORICAL))

    def predict_ms(self, kernels: list[Kernel]) -> float:
        return float(self.predict_kernels_ms(kernels).sum())

    def save(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save_model(str(folder / "model.cbm"))
        (folder / "meta.json").write_text(json.dumps(asdict(self.meta), indent=2))
        return folder

    @staticmethod
    def load(folder: Path) -> "CostModel":
        model = CatBoostRegressor()
        model.load_model(str(folder / "model.cbm"))
        meta = PredictorMeta(**json.loads((folder / "meta.json").read_text()))
        return CostModel(model, meta)


def load_or_train(records: list[dict], fingerprint_version: str, folder: Path, seed: int = 0) -> tuple[CostModel, bool]:
    """Re-use the saved model when it was trained on exactly these records; else train anew.
    Returns (model, trained_now)."""
    if (folder / "meta.json").is_file():
        cm = CostModel.load(folder)
        if cm.meta.n_records == len(records) and cm.meta.fingerprint_version == fingerprint_version:
            return cm, False
    cm = CostModel.train(records, fingerprint_version, seed)
    cm.save(folder)
    return cm, True


def nan_to_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x
