"""Calibration signal: every verification run is stored as a runtime record with the
predicted latency beside the measured one (metainfer_core.predictor.lifecycle.feedback.record_verified_runs).
When the median ratio measured / predicted over the recent runs drifts from the ratio the
predictor had on its own training runs by more than the configured threshold, the predictor is
marked stale (store.PredictorStore.mark_stale; the re-profiling job reads and clears it)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from metainfer_core.fingerprint.library import FingerprintLibrary
from metainfer_core.predictor.lifecycle.store import PredictorStore
from metainfer_core.predictor.model.cost_model import CostModel


@dataclass
class Drift:
    runs: int                 # runtime runs in the window
    ratio: float              # median measured / predicted over them
    reference: float          # the same ratio on the predictor's training runs
    drift: float              # |log(ratio / reference)|, in the units of log(1 + threshold)
    threshold: float
    stale: bool

    def as_dict(self) -> dict:
        return asdict(self)


def drift(library: FingerprintLibrary, version: str, reference: float | None = 1.0, threshold: float = 0.25,
          window: int = 20, since: datetime | None = None) -> Drift:
    """The ratio over the last `window` runtime runs of `version` that carry a prediction
    (stored after `since`, UTC), against `reference`; None: against the first `window` such
    runs (a predictor that never saw whole-model runs has no ratio of its own, and its bias
    is not drift)."""
    runs = [r for r in library.plan_runs(version, source="runtime")
            if r.get("predicted_ms") and (since is None or _utc(r["created_at"]) >= since)]
    ratios = [r["median_ms"] / r["predicted_ms"] for r in runs]
    if reference is None:
        reference = float(np.median(ratios[:window])) if ratios else 1.0
    runs = runs[-window:]
    if not runs:
        return Drift(0, float("nan"), reference, 0.0, threshold, False)
    ratio = float(np.median(ratios[-window:]))
    d = abs(math.log(ratio / reference))
    return Drift(len(runs), ratio, reference, d / math.log1p(threshold), threshold, d > math.log1p(threshold))


def check(library: FingerprintLibrary, version: str, folder: Path, threshold: float, window: int,
          min_runs: int = 3) -> Drift:
    """Compute the drift for the current predictor in `folder`; mark it stale when past the
    threshold (with at least `min_runs` runs, so one outlier does not)."""
    store = PredictorStore(folder)
    reference, since = None, None
    if store.current() is not None:     # only runs the current revision predicted count
        meta = CostModel.load(folder).meta
        reference = meta.metrics.get("calibration_ratio")
        since = datetime.strptime(meta.created_at, "%Y-%m-%dT%H:%M:%S") if meta.created_at else None
    d = drift(library, version, reference, threshold, window, since)
    d.stale = d.stale and d.runs >= min_runs
    if d.stale and store.stale() is None:
        store.mark_stale(f"measured/predicted latency ratio {d.ratio:.3f} drifted from {d.reference:.3f} past "
                         f"the threshold {threshold:.0%} over the last {d.runs} verified runs", **d.as_dict())
    return d


def _utc(t: datetime) -> datetime:
    """Naive UTC (SQLite hands stored times back without their zone)."""
    return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo else t
