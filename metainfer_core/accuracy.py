"""Accuracy loss of a plan against the fp32 reference: 1 - cosine similarity of outputs,
worst case over outputs and validation samples (0 = identical direction, 1 = orthogonal)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import onnx


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


def degenerate_outputs(reference: list[list[np.ndarray]], names: list[str], rel_std: float = 1e-3) -> list[str]:
    """Outputs that are near-constant across elements and samples: an accuracy figure on them
    means nothing (typical of detectors fed random noise)."""
    bad = []
    for o, name in enumerate(names):
        vals = np.concatenate([np.asarray(s[o], dtype=np.float64).ravel() for s in reference])
        scale = max(np.abs(vals).max(initial=0.0), 1e-12)
        if vals.size == 0 or vals.std() / scale < rel_std:
            bad.append(name)
    return bad


def run_cpu(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
    """Reference-grade numerics: ONNX Runtime CPU, no graph optimisations that change math."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return [sess.run(None, f) for f in feeds]
