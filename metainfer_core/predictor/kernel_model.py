"""Kernel level: CatBoost regression of log10 latency (ms) per kernel, and of log10 peak
memory (bytes), on kernel features joined with the target's spec features.

Latency is learned relative to a calibrated roofline hint: hint = a_g * roofline + c_g, with
(a_g, c_g) fitted per placement (device / host) on the training records, so the trees learn
a bounded ratio (op efficiency, fusion) and a kernel larger than any in the training set is
still scaled by its own compute and traffic. Targets without spec figures (measured: cpu)
have no hint and the trees learn latency itself."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from catboost import CatBoostRegressor, Pool
from scipy.optimize import nnls

from metainfer_core.predictor.target_join import CAT_FEATURES, TargetSpec, baseline_ms, frame

# Pinned so that continued training (init_model) never silently changes the model's shape;
# thread_count: the machines this runs on have two cores.
LATENCY_PARAMS = dict(iterations=600, depth=6, learning_rate=0.1, loss_function="RMSE", random_seed=0,
                      verbose=False, thread_count=2, allow_writing_files=False)
MEMORY_PARAMS = dict(LATENCY_PARAMS, iterations=200)


def kernel_params(iterations: int, learning_rate: float, depth: int) -> dict:
    return dict(LATENCY_PARAMS, iterations=iterations, learning_rate=learning_rate, depth=depth)


def _group(df: pd.DataFrame) -> np.ndarray:
    return np.where(df["on_device"].fillna(1.0).to_numpy() > 0, "device", "host")


def fit_hint(df: pd.DataFrame, ms: np.ndarray) -> dict[str, list[float]]:
    """(a, c) per placement group: ms ~ a * roofline + c, least squares on relative error."""
    raw = baseline_ms(df)
    if df["on_device"].isna().all():
        return {}
    out = {}
    groups = _group(df)
    for g in np.unique(groups):
        sel = groups == g
        A = np.stack([raw[sel], np.ones(sel.sum())], axis=1) / ms[sel, None]
        coef, _ = nnls(A, np.ones(sel.sum()))
        out[str(g)] = [float(coef[0]) or 1.0, float(coef[1])]
    return out


def hint_ms(df: pd.DataFrame, hint: dict[str, list[float]]) -> np.ndarray:
    raw = baseline_ms(df)
    if not hint:
        return raw
    a_c = np.array([hint.get(g, [1.0, 0.0]) for g in _group(df)]).reshape(-1, 2)
    return np.maximum(a_c[:, 0] * raw + a_c[:, 1], 1e-6)


class KernelModel:
    def __init__(self, latency: CatBoostRegressor, memory: CatBoostRegressor | None, spec: TargetSpec,
                 hint: dict[str, list[float]] | None = None):
        self.latency, self.memory, self.spec, self.hint = latency, memory, spec, hint or {}

    def _pool(self, descs: list[dict], ms=None, weight=None) -> tuple[Pool, np.ndarray]:
        """CatBoost pool of log10(latency / hint), and the hint (ms)."""
        df = frame(descs, self.spec)
        base = hint_ms(df, self.hint)
        y = None if ms is None else np.log10(np.maximum(ms, 1e-6) / base)
        return Pool(df, label=y, weight=weight, cat_features=CAT_FEATURES), base

    @staticmethod
    def fit(descs: list[dict], ms: np.ndarray, spec: TargetSpec, peak_bytes: np.ndarray | None = None,
            params: dict | None = None, weight: np.ndarray | None = None) -> "KernelModel":
        df = frame(descs, spec)
        km = KernelModel(CatBoostRegressor(**(params or LATENCY_PARAMS)), None, spec, fit_hint(df, ms))
        km.latency.fit(km._pool(descs, ms=ms, weight=weight)[0])
        if peak_bytes is not None and len(peak_bytes) and np.all(peak_bytes > 0):
            km.memory = CatBoostRegressor(**MEMORY_PARAMS)
            km.memory.fit(Pool(df, label=np.log10(peak_bytes), cat_features=CAT_FEATURES))
        return km

    def continue_fit(self, descs: list[dict], ms: np.ndarray, iterations: int, learning_rate: float,
                     weight: np.ndarray | None = None) -> "KernelModel":
        """More trees on top of this model (CatBoost init_model); this model is unchanged."""
        kept = {k: v for k, v in self.latency.get_params().items() if k in ("depth", "loss_function", "random_seed")}
        params = {**LATENCY_PARAMS, **kept, "iterations": iterations, "learning_rate": learning_rate}
        km = KernelModel(CatBoostRegressor(**params), self.memory, self.spec, self.hint)
        km.latency.fit(self._pool(descs, ms=ms, weight=weight)[0], init_model=self.latency)
        return km

    def predict_ms(self, descs: list[dict]) -> np.ndarray:
        if not descs:
            return np.zeros(0)
        pool, base = self._pool(descs)
        return base * 10 ** self.latency.predict(pool)

    def predict_many(self, graphs: list[list[dict]]) -> list[np.ndarray]:
        """predict_ms for several kernel lists at once (one CatBoost call: much faster)."""
        pred = self.predict_ms([d for g in graphs for d in g])
        out, i = [], 0
        for g in graphs:
            out.append(pred[i:i + len(g)])
            i += len(g)
        return out

    def predict_peak_bytes(self, descs: list[dict]) -> np.ndarray | None:
        if self.memory is None or not descs:
            return None
        return 10 ** self.memory.predict(Pool(frame(descs, self.spec), cat_features=CAT_FEATURES))

    def save(self, folder: Path) -> None:
        self.latency.save_model(str(folder / "kernel_latency.cbm"))
        if self.memory is not None:
            self.memory.save_model(str(folder / "kernel_memory.cbm"))
        (folder / "kernel_hint.json").write_text(json.dumps(self.hint))

    @staticmethod
    def load(folder: Path, spec: TargetSpec) -> "KernelModel":
        lat = CatBoostRegressor()
        lat.load_model(str(folder / "kernel_latency.cbm"))
        mem = None
        if (folder / "kernel_memory.cbm").is_file():
            mem = CatBoostRegressor()
            mem.load_model(str(folder / "kernel_memory.cbm"))
        hint = json.loads((folder / "kernel_hint.json").read_text()) if (folder / "kernel_hint.json").is_file() else {}
        return KernelModel(lat, mem, spec, hint)
