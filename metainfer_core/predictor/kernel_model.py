"""Kernel level: CatBoost regression of log10 latency (ms) per kernel, and of log10 peak
memory (bytes), on kernel features joined with the target's spec features."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from catboost import CatBoostRegressor, Pool

from metainfer_core.predictor.target_join import CAT_FEATURES, TargetSpec, baseline_ms, frame

# Pinned so that continued training (init_model) never silently changes the model's shape;
# thread_count: the machines this runs on have two cores.
LATENCY_PARAMS = dict(iterations=600, depth=6, learning_rate=0.1, loss_function="RMSE", random_seed=0,
                      verbose=False, thread_count=2, allow_writing_files=False)
MEMORY_PARAMS = dict(LATENCY_PARAMS, iterations=200)


def _pool(descs: list[dict], spec: TargetSpec, ms=None, weight=None) -> tuple[Pool, np.ndarray]:
    """CatBoost pool of log10(latency / roofline hint), and the hint (ms)."""
    df = frame(descs, spec)
    base = baseline_ms(df)
    y = None if ms is None else np.log10(np.maximum(ms, 1e-6) / base)
    return Pool(df, label=y, weight=weight, cat_features=CAT_FEATURES), base


class KernelModel:
    def __init__(self, latency: CatBoostRegressor, memory: CatBoostRegressor | None, spec: TargetSpec):
        self.latency, self.memory, self.spec = latency, memory, spec

    @staticmethod
    def fit(descs: list[dict], ms: np.ndarray, spec: TargetSpec, peak_bytes: np.ndarray | None = None,
            params: dict | None = None, weight: np.ndarray | None = None) -> "KernelModel":
        lat = CatBoostRegressor(**(params or LATENCY_PARAMS))
        lat.fit(_pool(descs, spec, ms=ms, weight=weight)[0])
        mem = None
        if peak_bytes is not None and len(peak_bytes) and np.all(peak_bytes > 0):
            mem = CatBoostRegressor(**MEMORY_PARAMS)
            mem.fit(Pool(frame(descs, spec), label=np.log10(peak_bytes), cat_features=CAT_FEATURES))
        return KernelModel(lat, mem, spec)

    def continue_fit(self, descs: list[dict], ms: np.ndarray, iterations: int, learning_rate: float,
                     weight: np.ndarray | None = None) -> "KernelModel":
        """More trees on top of this model (CatBoost init_model); this model is unchanged."""
        params = dict(LATENCY_PARAMS, iterations=iterations, learning_rate=learning_rate)
        lat = CatBoostRegressor(**params)
        lat.fit(_pool(descs, self.spec, ms=ms, weight=weight)[0], init_model=self.latency)
        return KernelModel(lat, self.memory, self.spec)

    def predict_ms(self, descs: list[dict]) -> np.ndarray:
        if not descs:
            return np.zeros(0)
        pool, base = _pool(descs, self.spec)
        return base * 10 ** self.latency.predict(pool)

    def predict_peak_bytes(self, descs: list[dict]) -> np.ndarray | None:
        if self.memory is None or not descs:
            return None
        return 10 ** self.memory.predict(Pool(frame(descs, self.spec), cat_features=CAT_FEATURES))

    def save(self, folder: Path) -> None:
        self.latency.save_model(str(folder / "kernel_latency.cbm"))
        if self.memory is not None:
            self.memory.save_model(str(folder / "kernel_memory.cbm"))

    @staticmethod
    def load(folder: Path, spec: TargetSpec) -> "KernelModel":
        lat = CatBoostRegressor()
        lat.load_model(str(folder / "kernel_latency.cbm"))
        mem = None
        if (folder / "kernel_memory.cbm").is_file():
            mem = CatBoostRegressor()
            mem.load_model(str(folder / "kernel_memory.cbm"))
        return KernelModel(lat, mem, spec)
