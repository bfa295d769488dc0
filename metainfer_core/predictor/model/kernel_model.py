"""Kernel level: CatBoost regression of log10 latency (ms) per kernel, and of log10 peak
memory (bytes), on kernel features joined with the target's spec features.

Latency is learned relative to a calibrated roofline hint: hint = a_g * roofline + c_g, with
(a_g, c_g) fitted per placement (device / host) on the training records, so the trees learn
a bounded ratio (op efficiency, fusion) and a kernel larger than any in the training set is
still scaled by its own compute and traffic. Targets without spec figures (measured: cpu)
get a hint of the same kind fitted on the micro-benchmarks alone: hint = c + flops * f +
bytes * b per op class (convolution/matmul anchors, everything else), so that a kernel larger
than any measured (a segmentation network's full-resolution convolutions) is not capped at the largest leaf.

A contextual model (measured targets, whose whole-model runs come with the runtime's per-node
profile: in_graph) also sees each kernel's place in its graph (graph_context) and learns from
in-graph kernel times beside the micro-benchmarks; it predicts a plan's kernels in their
context (what they cost inside the graph) and a lone descriptor as a micro-benchmark."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from catboost import CatBoostRegressor, Pool
from scipy.optimize import nnls

from metainfer_core.predictor.features.graph_context import in_context
from metainfer_core.predictor.features.target_join import (CAT_FEATURES, CONTEXT_NUMERIC, CONTEXT_NUMERIC_V1, TargetSpec,
                                                  baseline_ms, cat_features, frame)

# Pinned so that continued training (init_model) never silently changes the model's shape;
# thread_count: the machines this runs on have two cores.
LATENCY_PARAMS = dict(iterations=600, depth=6, learning_rate=0.1, loss_function="RMSE", random_seed=0,
                      verbose=False, thread_count=2, allow_writing_files=False)
# A contextual model (measured targets) learns in-graph times of a handful of zoo models: shallow,
# strongly regularised trees fit each one's quirks less (they rank held-out models better than
# CatBoost's default depth and l2_leaf_reg, and fit faster, which keeps training under 2 minutes).
# They override conf/predictor's depth. A simulator's clean labels want the deeper default trees
# (docs/decisions/2026-12-05-measured-reasons-from-docstrings.md).
CONTEXTUAL_PARAMS = dict(depth=4, l2_leaf_reg=10.0)
MEMORY_PARAMS = dict(LATENCY_PARAMS, iterations=200)
# weight of a micro-benchmark row beside in-graph rows (contextual models): they still teach
# how cost scales with shape, but whole graphs are predicted from in-graph rows (a small weight
# predicts held-out models better than an equal one)
STANDALONE_WEIGHT = 0.02


def kernel_params(iterations: int, learning_rate: float, depth: int) -> dict:
    return dict(LATENCY_PARAMS, iterations=iterations, learning_rate=learning_rate, depth=depth)


MEASURED = "measured:"     # hint keys of a target without spec figures (linear in flops and bytes)
ANCHORS = ("Conv", "ConvTranspose", "MatMul", "Gemm")


def _group(df: pd.DataFrame) -> np.ndarray:
    return np.where(df["on_device"].fillna(1.0).to_numpy() > 0, "device", "host")


def _measured_group(df: pd.DataFrame) -> np.ndarray:
    """Op class and precision: an int8 or fp16 kernel's cost per flop and per byte differs from
    an fp32 one's by several times (with the precision in the group, held-out models are
    predicted and ranked better)."""
    klass = np.where(df["primary_op"].isin(ANCHORS).to_numpy(), MEASURED + "anchor", MEASURED + "other")
    return np.char.add(np.char.add(klass.astype(str), ":"), df["dtype"].astype(str).to_numpy().astype(str))


def _work(df: pd.DataFrame) -> np.ndarray:
    """[1, flops, bytes moved] per row."""
    u = lambda c: np.power(10.0, df[c].fillna(0.0).to_numpy()) - 1.0  # noqa: E731
    moved = u("log_bytes_in") + u("log_bytes_weights") + u("log_bytes_out")
    return np.stack([np.ones(len(df)), u("log_flops"), moved], axis=1)


def _fit_measured_hint(df: pd.DataFrame, ms: np.ndarray) -> dict[str, list[float]]:
    """(c, f, b) per op class: ms ~ c + f * flops + b * bytes, non-negative, on relative error."""
    out = {}
    groups = _measured_group(df)
    work = _work(df)
    for g in np.unique(groups):
        sel = groups == g
        coef, _ = nnls(work[sel] / ms[sel, None], np.ones(sel.sum()))
        out[str(g)] = [float(x) for x in coef] if coef.any() else [float(np.median(ms[sel])), 0.0, 0.0]
    return out


def fit_hint(df: pd.DataFrame, ms: np.ndarray) -> dict[str, list[float]]:
    """(a, c) per placement group: ms ~ a * roofline + c, least squares on relative error."""
    raw = baseline_ms(df)
    if df["on_device"].isna().all():
        return _fit_measured_hint(df, ms) if len(ms) else {}
    out = {}
    groups = _group(df)
    for g in np.unique(groups):
        sel = groups == g
        A = np.stack([raw[sel], np.ones(sel.sum())], axis=1) / ms[sel, None]
        coef, _ = nnls(A, np.ones(sel.sum()))
        out[str(g)] = [float(coef[0]) or 1.0, float(coef[1])]
    return out


def _measured_coef(hint: dict[str, list[float]], group: str) -> list[float]:
    """A group's (c, f, b); a precision no micro-benchmark had takes its class's fp32 figures,
    and a hint saved before groups had a precision is keyed by class alone."""
    klass = group.rsplit(":", 1)[0]
    for key in (group, f"{klass}:float32", klass):
        if key in hint:
            return hint[key]
    return [1.0, 0.0, 0.0]


def hint_ms(df: pd.DataFrame, hint: dict[str, list[float]]) -> np.ndarray:
    raw = baseline_ms(df)
    if not hint:
        return raw
    if next(iter(hint)).startswith(MEASURED):
        coef = np.array([_measured_coef(hint, g) for g in _measured_group(df)]).reshape(-1, 3)
        return np.maximum((_work(df) * coef).sum(axis=1), 1e-4)
    a_c = np.array([hint.get(g, [1.0, 0.0]) for g in _group(df)]).reshape(-1, 2)
    return np.maximum(a_c[:, 0] * raw + a_c[:, 1], 1e-6)


class KernelModel:
    def __init__(self, latency: CatBoostRegressor, memory: CatBoostRegressor | None, spec: TargetSpec,
                 hint: dict[str, list[float]] | None = None, contextual: bool = False,
                 context_numeric: list[str] | None = None):
        self.latency, self.memory, self.spec, self.hint = latency, memory, spec, hint or {}
        self.contextual = contextual
        self.context_numeric = list(context_numeric or CONTEXT_NUMERIC)

    def _pool(self, descs: list[dict], ms=None, weight=None) -> tuple[Pool, np.ndarray]:
        """CatBoost pool of log10(latency / hint), and the hint (ms)."""
        df = frame(descs, self.spec, self.contextual, self.context_numeric)
        base = hint_ms(df, self.hint)
        y = None if ms is None else np.log10(np.maximum(ms, 1e-6) / base)
        return Pool(df, label=y, weight=weight, cat_features=cat_features(self.contextual)), base

    @staticmethod
    def fit(descs: list[dict], ms: np.ndarray, spec: TargetSpec, peak_bytes: np.ndarray | None = None,
            params: dict | None = None, weight: np.ndarray | None = None, in_graph: tuple[list[dict], np.ndarray]
            | None = None) -> "KernelModel":
        """`descs`/`ms`: micro-benchmarks (peak memory is learned from them alone); `in_graph`:
        kernels in their graph context (graph_context) with their in-graph times, which make
        the model contextual."""
        df = frame(descs, spec)
        contextual = in_graph is not None and len(in_graph[1]) > 0
        params = dict(params or LATENCY_PARAMS, **(CONTEXTUAL_PARAMS if contextual else {}))
        km = KernelModel(CatBoostRegressor(**params), None, spec, fit_hint(df, ms), contextual)
        all_descs, all_ms, all_w = descs, ms, weight
        if contextual:
            all_descs = list(descs) + list(in_graph[0])
            all_ms = np.concatenate([ms, in_graph[1]])
            base_w = np.ones(len(ms)) * STANDALONE_WEIGHT if weight is None else weight * STANDALONE_WEIGHT
            all_w = np.concatenate([base_w, np.ones(len(in_graph[1]))])
        km.latency.fit(km._pool(all_descs, ms=all_ms, weight=all_w)[0])
        if peak_bytes is not None and len(peak_bytes) and np.all(peak_bytes > 0):
            km.memory = CatBoostRegressor(**MEMORY_PARAMS)
            km.memory.fit(Pool(df, label=np.log10(peak_bytes), cat_features=CAT_FEATURES))
        return km

    def continue_fit(self, descs: list[dict], ms: np.ndarray, iterations: int, learning_rate: float,
                     weight: np.ndarray | None = None) -> "KernelModel":
        """More trees on top of this model (CatBoost init_model); this model is unchanged."""
        kept = {k: v for k, v in self.latency.get_params().items()
                if k in ("depth", "loss_function", "random_seed", "l2_leaf_reg")}
        params = {**LATENCY_PARAMS, **kept, "iterations": iterations, "learning_rate": learning_rate}
        km = KernelModel(CatBoostRegressor(**params), self.memory, self.spec, self.hint, self.contextual,
                         self.context_numeric)
        km.latency.fit(self._pool(descs, ms=ms, weight=weight)[0], init_model=self.latency)
        return km

    def predict_ms(self, descs: list[dict]) -> np.ndarray:
        if not descs:
            return np.zeros(0)
        pool, base = self._pool(descs)
        return base * 10 ** self.latency.predict(pool)

    def graph_descs(self, kernels: list[dict]) -> list[dict]:
        """A plan's kernel descriptors as this model scores them (in their context if it learned that)."""
        return in_context(kernels) if self.contextual else kernels

    def predict_many(self, graphs: list[list[dict]]) -> list[np.ndarray]:
        """Each plan's kernels (plan_graph order) as they cost inside it, for several plans at
        once (one CatBoost call: much faster)."""
        pred = self.predict_ms([d for g in graphs for d in self.graph_descs(g)])
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
        if self.contextual:
            (folder / "kernel_context.json").write_text(json.dumps({"contextual": True,
                                                                    "numeric": self.context_numeric}))

    @staticmethod
    def load(folder: Path, spec: TargetSpec) -> "KernelModel":
        lat = CatBoostRegressor()
        lat.load_model(str(folder / "kernel_latency.cbm"))
        mem = None
        if (folder / "kernel_memory.cbm").is_file():
            mem = CatBoostRegressor()
            mem.load_model(str(folder / "kernel_memory.cbm"))
        hint = json.loads((folder / "kernel_hint.json").read_text()) if (folder / "kernel_hint.json").is_file() else {}
        context = folder / "kernel_context.json"
        numeric = json.loads(context.read_text()).get("numeric", CONTEXT_NUMERIC_V1) if context.is_file() else None
        return KernelModel(lat, mem, spec, hint, context.is_file(), numeric)
