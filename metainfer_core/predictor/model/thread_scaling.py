"""How a kernel's cost scales with its intra-op threads, learned from the fingerprint: the
graph's kernels measured at the request's threads (the reference) and again at each other
thread count a serving setting gives a session (fingerprint/thread_counts.py), every count a
fingerprint version of its own. CatBoost regresses log2(ms at t / ms at the reference) on the
kernel's features and log2(t / reference); a plan's ratio is its kernels' ratios (measured where
the library holds the pair, learned elsewhere: an int8 or tiled kernel only ever measured at
the reference) weighted by their cost at the reference."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
import pandas as pd
from catboost import CatBoostRegressor

from metainfer_core.ir.features import CATEGORICAL, NUMERIC, kernel_features
from metainfer_core.ir.kernels import Kernel, group_kernels
from metainfer_core.ir.tensors import tensor_infos

MIN_PAIRS = 4           # fewer kernels measured at two thread counts teach nothing: no model
PARAMS = dict(iterations=200, depth=4, learning_rate=0.1, loss_function="RMSE", random_seed=0, verbose=False,
              thread_count=2, allow_writing_files=False)
COLUMNS = CATEGORICAL + NUMERIC + ["log2_threads"]

# a plan's kernels -> each one's cost at the reference threads (ms; NaN: unknown)
KernelCosts = Callable[[list[Kernel]], np.ndarray]


def _frame(features: list[dict], log2_threads: list[float]) -> pd.DataFrame:
    df = pd.DataFrame([{c: f.get(c) for c in CATEGORICAL + NUMERIC} for f in features], columns=CATEGORICAL + NUMERIC)
    for c in CATEGORICAL:
        df[c] = df[c].fillna("").astype(str)
    df["log2_threads"] = log2_threads
    return df[COLUMNS]


@dataclass
class ThreadScaling:
    """`reference`: the threads the reference records were measured at; `measured`: {(kernel key,
    threads): ms at threads / ms at the reference}; `reference_ms`: {kernel key: ms}."""
    reference: int
    measured: dict[tuple[str, int], float]
    reference_ms: dict[str, float]
    model: CatBoostRegressor | None = None
    threads: list[int] = field(default_factory=list)

    @property
    def pairs(self) -> int:
        return len(self.measured)

    @staticmethod
    def learn(reference: int, at_reference: list[dict], at_threads: dict[int, list[dict]]) -> "ThreadScaling | None":
        """From library records (FingerprintLibrary.records) of the reference version and of each
        other thread count's version; None where fewer than MIN_PAIRS kernels were measured at both."""
        ref = {r["kernel_key"]: r for r in at_reference if r["source"] == "microbench" and r["median_ms"] > 0}
        measured, feats, xs, ys = {}, [], [], []
        for t, records in sorted(at_threads.items()):
            for r in records:
                base = ref.get(r["kernel_key"])
                if base is None or r["source"] != "microbench" or r["median_ms"] <= 0:
                    continue
                ratio = r["median_ms"] / base["median_ms"]
                measured[(r["kernel_key"], t)] = ratio
                feats.append(base["features"])
                xs.append(math.log2(t / reference))
                ys.append(math.log2(ratio))
        if len(measured) < MIN_PAIRS:
            return None
        model = CatBoostRegressor(**PARAMS)
        model.fit(_frame(feats, xs), np.asarray(ys), cat_features=list(range(len(CATEGORICAL))))
        return ThreadScaling(reference, measured, {k: r["median_ms"] for k, r in ref.items()}, model,
                             sorted(at_threads))

    def kernel_ratios(self, kernels: list[Kernel], threads: int) -> np.ndarray:
        """ms at `threads` / ms at the reference, per kernel: measured where known, else learned."""
        if threads == self.reference or not kernels:
            return np.ones(len(kernels))
        keys = [k.key() for k in kernels]
        out = np.array([self.measured.get((key, threads), np.nan) for key in keys])
        unknown = np.isnan(out)
        if unknown.any() and self.model is not None:
            feats = [kernel_features(k) for k, u in zip(kernels, unknown) if u]
            out[unknown] = np.exp2(self.model.predict(_frame(feats, [math.log2(threads / self.reference)] * len(feats))))
        return out

    def plan_ratio(self, model: onnx.ModelProto, threads: int, costs: KernelCosts | None = None) -> float:
        """The plan's latency at `threads` over its latency at the reference: its kernels' ratios
        weighted by their cost at the reference (the library's measurement, else `costs`')."""
        if threads == self.reference:
            return 1.0
        kernels = group_kernels(model, tensor_infos(model))
        if not kernels:
            return 1.0
        weights = np.array([self.reference_ms.get(k.key(), np.nan) for k in kernels])
        if np.isnan(weights).any() and costs is not None:
            unknown = np.isnan(weights)
            weights[unknown] = np.asarray(costs([k for k, u in zip(kernels, unknown) if u]), dtype=float)
        ratios = self.kernel_ratios(kernels, threads)
        ok = ~np.isnan(weights) & ~np.isnan(ratios) & (weights > 0)
        if not ok.any():
            return float(np.nanmedian(ratios)) if not np.isnan(ratios).all() else 1.0
        return float(np.sum(weights[ok] * ratios[ok]) / np.sum(weights[ok]))
