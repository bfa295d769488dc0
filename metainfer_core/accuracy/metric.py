"""Accuracy loss of a plan against the fp32 reference. The default metric is 1 - cosine
similarity of outputs, worst case over outputs and validation samples (0 = identical direction,
1 = orthogonal); relative L2, top-1 (against labels when the validation .npz has them) and a
user function are the alternatives (`accuracy.metric`)."""
from __future__ import annotations

import importlib
from typing import Callable

import numpy as np
import onnx

from metainfer_core.ir.runs import cpu_session


def cosine_loss(ref: np.ndarray, out: np.ndarray) -> float:
    a = np.asarray(ref, dtype=np.float64).ravel()
    b = np.asarray(out, dtype=np.float64).ravel()
    if a.size == 0:
        return 0.0
    if not np.all(np.isfinite(b)):
        return 1.0
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return 0.0 if na == nb else 1.0
    return float(max(0.0, 1.0 - np.dot(a, b) / (na * nb)))


def plan_loss(reference: list[list[np.ndarray]], outputs: list[list[np.ndarray]]) -> float:
    """reference[s][o], outputs[s][o]: sample s, output o."""
    return max((cosine_loss(r, o) for rs, os_ in zip(reference, outputs) for r, o in zip(rs, os_)), default=0.0)


def degenerate_outputs(reference: list[list[np.ndarray]], names: list[str], rel_std: float = 1e-3,
                       near_zero: float = 1e-4) -> list[str]:
    """Outputs that are near-constant across elements and samples, or near zero everywhere: an
    accuracy figure on them means nothing (typical of detectors fed random noise, whose
    probability maps stay at ~1e-6)."""
    bad = []
    for o, name in enumerate(names):
        if not reference or not np.issubdtype(np.asarray(reference[0][o]).dtype, np.floating):
            continue        # integer outputs (indices, counts) are compared exactly, not by scale
        vals = np.concatenate([np.asarray(s[o], dtype=np.float64).ravel() for s in reference])
        if vals.size == 0:
            continue
        scale = np.abs(vals).max(initial=0.0)
        if scale < near_zero or vals.std() / max(scale, 1e-12) < rel_std:
            bad.append(name)
    return bad


def run_cpu(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
    """Reference-grade numerics: ONNX Runtime CPU, one thread."""
    sess = cpu_session(model)
    return [sess.run(None, f) for f in feeds]


Outputs = list[list[np.ndarray]]
LossFn = Callable[[Outputs, Outputs], float]
METRICS = ("cosine", "rel_l2", "top1")


def rel_l2_loss(reference: Outputs, outputs: Outputs) -> float:
    worst = 0.0
    for rs, os_ in zip(reference, outputs):
        for r, o in zip(rs, os_):
            r64, o64 = np.asarray(r, dtype=np.float64), np.asarray(o, dtype=np.float64)
            if not np.all(np.isfinite(o64)):
                return 1.0
            worst = max(worst, float(np.linalg.norm(o64 - r64) / max(np.linalg.norm(r64), 1e-12)))
    return worst


def top1_loss(reference: Outputs, outputs: Outputs, labels: np.ndarray | None) -> float:
    """With labels: the drop in top-1 accuracy of the first output. Without: the share of
    samples whose top-1 class differs from the fp32 reference's."""
    ref = np.concatenate([np.asarray(s[0]).reshape(-1, np.asarray(s[0]).shape[-1]) for s in reference])
    out = np.concatenate([np.asarray(s[0]).reshape(-1, np.asarray(s[0]).shape[-1]) for s in outputs])
    if labels is None:
        return float(np.mean(ref.argmax(-1) != out.argmax(-1)))
    lab = np.asarray(labels).reshape(-1)[: len(ref)]
    return max(0.0, float(np.mean(ref.argmax(-1) == lab) - np.mean(out.argmax(-1) == lab)))


def make_loss(metric: str, labels: np.ndarray | None = None) -> LossFn:
    """The accuracy-loss function named by `accuracy.metric`: cosine (1 - cosine similarity),
    rel_l2, top1, or 'package.module:function' called as fn(reference, outputs, labels)."""
    if metric == "cosine":
        return plan_loss
    if metric == "rel_l2":
        return rel_l2_loss
    if metric == "top1":
        return lambda ref, out: top1_loss(ref, out, labels)
    module, _, name = metric.partition(":")
    fn = getattr(importlib.import_module(module), name)
    return lambda ref, out: float(fn(ref, out, labels))
