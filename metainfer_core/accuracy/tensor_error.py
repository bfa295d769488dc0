"""Error statistics of a low-precision tensor against its fp32 value: the guard's mean relative
error per channel (channel_error), and the sensitivities' squared errors, per channel where
channels differ, from a strided sample of a large tensor (sq, sq_err)."""
from __future__ import annotations

import math

import numpy as np


def channel_error(ref: np.ndarray, out: np.ndarray) -> float:
    """Mean relative L2 error per channel (axis 1). Unlike a whole-tensor norm it sees small
    channels wiped out next to a large one, which is what coarse quantization scales do."""
    a, b = np.asarray(ref, dtype=np.float64), np.asarray(out, dtype=np.float64)
    if a.shape != b.shape or a.size == 0:
        return 0.0
    if a.ndim < 2:
        a, b = a.reshape(1, -1), b.reshape(1, -1)
    a2 = np.moveaxis(a, 1, 0).reshape(a.shape[1], -1)
    b2 = np.moveaxis(b, 1, 0).reshape(b.shape[1], -1)
    den = np.linalg.norm(a2, axis=1)
    keep = den > 1e-12
    return float(np.mean(np.linalg.norm(a2 - b2, axis=1)[keep] / den[keep])) if keep.any() else 0.0


# errors are relative to the whole tensor, and per channel (axis 1, as channel_error
# above) in a tensor whose channels' energies differ by more than CHANNEL_SPREAD: there a
# whole-tensor norm would not see small channels wiped out next to a large one by a coarse scale;
# channels far below the median (dead ones) are measured against a floor, not against ~0
CHANNEL_SPREAD = 1e3


def channel_spread_ratio(den: np.ndarray) -> float:
    median = float(np.median(den)) if den.size else 0.0
    return float(den.max()) / median if median > 0 else (float("inf") if den.size and den.max() > 0 else 1.0)


# the error statistics read a strided sample of about this many elements of a larger tensor
# (per-channel sums scaled up by the sampling factor): a large graph's activations give stable
# relative errors from a sample, and reading them whole cost more than the runs
SAMPLED = 1 << 20


def _view(a: np.ndarray) -> tuple[np.ndarray, float]:
    """a as (batch, channel, rest), every step-th element of rest (a step sharing no factor with
    the last axis, so a channels-last tensor's channels are all sampled), and rest's size over
    the sample's."""
    a = np.asarray(a)
    a3 = a.reshape(1, 1, -1) if a.ndim < 2 else a.reshape(a.shape[0], a.shape[1], -1)
    step = min(max(1, -(-a3.size // SAMPLED)), a3.shape[2] or 1)
    while step > 1 and math.gcd(step, a.shape[-1] if a.ndim else 1) != 1:
        step += 1
    v = a3[:, :, ::step]
    return v, (a3.shape[2] / v.shape[2]) if v.shape[2] else 1.0


def _channels(a: np.ndarray) -> np.ndarray:
    """Sum of squares per channel (axis 1; one value for a tensor of rank < 2), from the sample."""
    v, k = _view(a)
    return np.square(np.asarray(v, dtype=np.float32)).sum(axis=(0, 2), dtype=np.float64) * k


def floored(den: np.ndarray) -> np.ndarray:
    return np.maximum(den, 1e-4 * float(np.median(den))) if den.size else den


def sq(v: np.ndarray) -> np.ndarray:
    total = _channels(v)
    return np.where(np.isfinite(total), total, 0.0)


def sq_err(ref: np.ndarray, low: np.ndarray) -> np.ndarray:
    """|low - ref|^2 per channel (float32 differences: these tensors are large, and the sums
    need no more); a non-finite channel counts as large as the tensor's channel itself."""
    (r, k), (lo, _) = _view(ref), _view(low)
    total = np.square(np.subtract(lo, r, dtype=np.float32)).sum(axis=(0, 2), dtype=np.float64) * k
    bad = ~np.isfinite(total)
    if bad.any():
        total[bad] = np.maximum(sq(ref)[bad], 1.0)
    return total
