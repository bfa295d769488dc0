"""Peak memory of a plan on one execution path, from what the liveness planner plans for its
graph: measured peak = footprint + scale x planned peak, fitted on that path's measured runs
in the fingerprint library (verify writes each plan's measured peak beside its planned one).
The footprint is the runtime's own (its libraries, thread pools, kernel caches: a few MiB for
ONNX Runtime's CPU provider, tens for OpenVINO's plugin); the scale what the runtime holds
beyond the planner's tensors (weights repacked for its kernels, arena rounding). Without runs
on a path the plan is predicted as planned."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

PLANNED_KEY = "planned_peak_bytes"       # in a run's graph record: the planner's peak for that plan
MIN_MODELS = 3               # a scale needs runs of several models (one model's plans sit close in size:
MIN_SPREAD = 1.5             # a scale fitted on them swung to its bounds) of different sizes; else 1
SCALE_RANGE = (0.5, 4.0)


@dataclass(frozen=True)
class MemoryFit:
    footprint_bytes: float = 0.0
    scale: float = 1.0
    runs: int = 0
    models: int = 0

    def predict(self, planned_bytes: int) -> int:
        return int(round(self.footprint_bytes + self.scale * planned_bytes))

    def as_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def fit(runs: list[dict]) -> "MemoryFit":
        """From library runs ({peak_mem_bytes, graph: {planned_peak_bytes}, model}): least squares on
        relative error (small models weigh as much as large ones), the scale kept within
        SCALE_RANGE and the footprint non-negative (the median of what the scale leaves); runs of
        fewer models or of one size give the footprint at scale 1."""
        pts = [(float(r["graph"][PLANNED_KEY]), float(r["peak_mem_bytes"]), r.get("model"))
               for r in runs if (r.get("graph") or {}).get(PLANNED_KEY) and (r.get("peak_mem_bytes") or 0) > 0]
        if not pts:
            return MemoryFit()
        planned, measured = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
        models = len({p[2] for p in pts})
        scale = 1.0
        if models >= MIN_MODELS and planned.max() >= MIN_SPREAD * planned.min():
            w = 1.0 / measured
            (footprint, scale), *_ = np.linalg.lstsq(np.stack([w, planned * w], axis=1), np.ones_like(w), rcond=None)
            scale = float(np.clip(scale, *SCALE_RANGE))
        footprint = max(0.0, float(np.median(measured - scale * planned)))
        return MemoryFit(footprint, scale, len(pts), models)
