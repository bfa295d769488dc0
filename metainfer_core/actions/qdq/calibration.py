"""int8 calibration: the graph run once on the calibration inputs with every float activation
exposed, one range per tensor (MinMax, Percentile or Entropy), cached per run (RangeTable); a
derived tensor ("x|nhwc", "a&b") takes the range of its origins, and only a tensor without any
is calibrated again on the graph that holds it."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from metainfer_core.actions.base import origins
from metainfer_core.ir.runs import exposed_runs
from metainfer_core.ir.tensors import tensor_infos

Range = tuple[float, float]
_F32 = onnx.TensorProto.FLOAT


def _entropy_threshold(values: np.ndarray, bins: int = 2048, qbins: int = 128) -> float:
    """The clipping threshold of |x| whose 128-level quantization keeps the distribution
    closest in KL divergence (TensorRT's entropy calibration, on a coarse threshold grid)."""
    a = np.abs(values)
    a = a[a > 0]            # exact zeros (a ReLU's half) quantize exactly at any threshold
    amax = float(a.max(initial=0.0))
    if amax == 0.0:
        return 0.0
    hist, edges = np.histogram(a, bins=bins, range=(0.0, amax))
    best, best_t = np.inf, amax
    for i in range(qbins, bins + 1, qbins // 4):
        p = hist[:i].astype(np.float64)
        p[-1] += hist[i:].sum()           # the reference: everything beyond the threshold clipped onto it
        # the candidate: the unclipped bins merged into qbins levels, spread back over their nonzero bins
        chunks = hist[:i].astype(np.float64)[: i - i % qbins].reshape(qbins, -1) if i % qbins == 0 else \
            np.array_split(hist[:i].astype(np.float64), qbins)
        q = np.concatenate([np.where(c > 0, c.sum() / max(int((c > 0).sum()), 1), 0.0) for c in chunks])
        mask = p > 0
        if q.sum() <= 0:
            continue
        ps, qs = p[mask] / p.sum(), q[mask] / q.sum()
        kl = float(np.sum(ps * np.log(ps / np.maximum(qs, 1e-12))))
        if kl < best:
            best, best_t = kl, float(edges[i])
    return best_t


def value_range(values: np.ndarray, method: str) -> Range:
    v = values.astype(np.float64, copy=False)
    if method == "MinMax":
        lo, hi = float(v.min()), float(v.max())
    elif method == "Percentile":
        lo, hi = float(np.percentile(v, 0.001)), float(np.percentile(v, 99.999))
    elif method == "Entropy":
        t = _entropy_threshold(v)
        lo, hi = (-t if v.min() < 0 else 0.0), t
    else:
        raise ValueError(f"unknown calibrate_method {method!r}")
    return min(lo, 0.0), max(hi, 0.0)


def calibrate(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], method: str) -> dict[str, Range]:
    """One range per float32 activation (graph inputs included), from a run on `feeds`."""
    if not feeds:
        raise ValueError("int8 needs calibration inputs")
    infos = tensor_infos(model)
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    names += [o for n in model.graph.node for o in n.output if o]
    names = [t for t in dict.fromkeys(names) if t in infos and infos[t].dtype == np.float32]
    runs = exposed_runs(model, names, feeds, {t: _F32 for t in names},
                        optimization=ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if method == "MinMax":
        # reduced one input at a time, exactly: holding every input's intermediates took
        # gigabytes (and minutes of fresh pages) on a large detector
        lo: dict[str, float] = {}
        hi: dict[str, float] = {}
        for run in runs:
            for t, v in zip(names, run):
                lo[t] = min(lo.get(t, np.inf), float(np.min(v)))
                hi[t] = max(hi.get(t, -np.inf), float(np.max(v)))
        return {t: (min(lo[t], 0.0), max(hi[t], 0.0)) for t in names}
    held = list(runs)       # a percentile or an entropy threshold needs every value at once
    return {t: value_range(np.concatenate([np.asarray(r[j]).ravel() for r in held]), method) for j, t in enumerate(names)}


class RangeTable:
    """Calibrated ranges of one run, shared by every int8 apply and sensitivity probe."""

    def __init__(self, feeds: list[dict[str, np.ndarray]], method: str):
        self.feeds, self.method = feeds, method
        self.ranges: dict[str, Range] = {}

    def lookup(self, t: str) -> Range | None:
        if t in self.ranges:
            return self.ranges[t]
        found = [self.ranges[o] for o in origins(t) if o in self.ranges]
        return (min(r[0] for r in found), max(r[1] for r in found)) if found else None

    def ensure(self, model: onnx.ModelProto, tensors: list[str]) -> None:
        if any(self.lookup(t) is None for t in tensors):
            for t, r in calibrate(model, self.feeds, self.method).items():
                self.ranges.setdefault(t, r)


def range_table(cache: dict, feeds: list[dict[str, np.ndarray]], method: str) -> RangeTable:
    key = f"int8.ranges.{method}"
    if key not in cache:
        cache[key] = RangeTable(feeds, method)
    return cache[key]
