"""The predictor of a new fingerprint version, fine-tuned from the previous version's instead of
trained from nothing: re-profiling re-measures only the kernels that drifted, and
the previous predictor already knows the rest, plus the model-level correction it learned from
whole-model runs, which the new version has none of yet.

Training continues from the previous kernel model (CatBoost init_model) on the new version's
records (re-measured and carried). It is kept only if, on a held-out quarter of the
re-measured kernels, it predicts no worse than the previous model does (beyond `tolerance`,
relative); otherwise the caller trains a fresh predictor. Both versions' predictors stay on
disk, each in its own folder.

Only the default execution path has a predictor. A target's other paths (OpenVINO on `cpu`)
have none to fine-tune: the search costs a graph bound to one as its default-path prediction
times a ratio it measures on the host during each adapt (search/path_costs.py);
`path_predictors` says so per path in the re-profiling report."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from metainfer_core.fingerprint.library import FingerprintLibrary
from metainfer_core.fingerprint.reprofile import DriftReport
from metainfer_core.predictor.lifecycle import offline
from metainfer_core.predictor.lifecycle.store import PredictorStore
from metainfer_core.predictor.model.cost_model import CostModel, PredictorMeta, kernel_rows
from metainfer_core.predictor.stage import predictor_folder, train_stage
from metainfer_core.settings import Settings

HOLD_OUT_EVERY = 4          # every 4th re-measured kernel judges the fine-tune


@dataclass
class CarryResult:
    accepted: bool
    reason: str
    parent: str                  # the previous version's predictor, "<version>/r<revision>"
    revision: int | None         # the new version's revision (when accepted)
    held_out_before: float       # kernel MAPE of the previous predictor on held-out re-measured kernels
    held_out_after: float
    n_remeasured: int
    seconds: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _mape(km, descs: list[dict], ms: np.ndarray) -> float:
    return float(np.mean(np.abs(km.predict_ms(descs) - ms) / ms)) if len(ms) else float("nan")


def carry_over(old_folder: Path, new_folder: Path, version: str, records: list[dict], plan_runs: list[dict],
               iterations: int, learning_rate: float, tolerance: float = 0.1) -> CarryResult | None:
    """Fine-tune the previous version's current predictor on `records` of `version` and save it as
    the new version's current revision. None when there is no previous predictor."""
    if PredictorStore(old_folder).current() is None:
        return None
    t0 = time.perf_counter()
    old = CostModel.load(old_folder)
    descs, ms, _ = kernel_rows(records, old.spec)    # the label the previous model learned (p10 on measured targets)
    fresh = [i for i, r in enumerate(records) if r["source"] != "carried"]
    held = set(fresh[::HOLD_OUT_EVERY]) if len(fresh) >= HOLD_OUT_EVERY else set()
    train_idx = [i for i in range(len(records)) if i not in held]
    held_descs, held_ms = [descs[i] for i in sorted(held)], ms[sorted(held)]
    before = _mape(old.kernels, held_descs, held_ms)
    if held:
        trial = old.kernels.continue_fit([descs[i] for i in train_idx], ms[train_idx], iterations, learning_rate)
        after = _mape(trial, held_descs, held_ms)
    else:           # nothing drifted, or too little to judge: the previous model carries over as it is
        after = before
    parent = old.meta.id
    if held and after > before * (1 + tolerance):
        reason = (f"fine-tuning {parent} would raise held-out kernel MAPE from {before:.1%} to {after:.1%}: "
                  f"refused, a fresh predictor is trained instead")
        PredictorStore(new_folder).log("carry_over_refused", parent=parent, reason=reason)
        return CarryResult(False, reason, parent, None, before, after, len(fresh), time.perf_counter() - t0)
    kernels = old.kernels.continue_fit(descs, ms, iterations, learning_rate) if fresh else old.kernels
    meta = PredictorMeta(**{**old.meta.__dict__, "fingerprint_version": version, "n_records": len(records),
                            "n_plan_runs": len(plan_runs),
                            "last_run_id": max([r.get("id") or 0 for r in plan_runs], default=0),
                            "parent": None, "kind": "fine_tuned", "train_s": time.perf_counter() - t0,
                            "created_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()),
                            "metrics": {k: v for k, v in old.meta.metrics.items() if not k.startswith("lomo")}})
    tuned = CostModel(kernels, old.correction, meta)      # the whole-model correction carries over
    rev = tuned.save(new_folder)
    store = PredictorStore(new_folder)
    store.set_current(rev)
    reason = (f"fine-tuned from {parent} on {len(fresh)} re-measured and {len(records) - len(fresh)} carried "
              f"kernels; held-out kernel MAPE {before:.1%} -> {after:.1%}" if fresh
              else f"no kernel was re-measured: {parent} carried over unchanged")
    store.log("fine_tuned_from_previous_version", revision=rev, parent=parent, reason=reason,
              held_out_before=before, held_out_after=after, n_remeasured=len(fresh))
    return CarryResult(True, reason, parent, rev, before, after, len(fresh), time.perf_counter() - t0)


def has_new_runtime_runs(library: FingerprintLibrary, version: str, folder: Path) -> bool:
    """Runtime runs (verify, deployments) stored since the current predictor learned: what the
    next re-profiling fine-tunes on when the version has not changed."""
    last = CostModel.load(folder).meta.last_run_id
    return any(r["source"] == "runtime" and r["id"] > last for r in library.plan_runs(version))


def refresh(s: Settings, report: DriftReport, progress: Callable[[str], None] = print) -> dict | None:
    """After a drift check: a new fingerprint version's predictor is fine-tuned from the previous
    version's (trained afresh when there is none, or when fine-tuning would predict worse); on
    the same version, the runtime runs stored since the predictor learned fine-tune it. Either
    way the predictor is no longer stale. None when there was nothing to refresh."""
    p = s.predictor
    library = FingerprintLibrary(s.tracking.fingerprint_db)
    folder = predictor_folder(s, report.new_version)
    out = None
    if report.version_changed:
        carried = carry_over(predictor_folder(s, report.old_version), folder, report.new_version,
                             library.training_records(report.new_version), library.plan_runs(report.new_version),
                             s.reprofile.fine_tune_iterations, s.reprofile.fine_tune_learning_rate,
                             p.fine_tune_tolerance)
        accepted = carried is not None and carried.accepted
        if carried is not None:
            progress(f"reprofile: predictor {'fine-tuned' if accepted else 'not fine-tuned'}: {carried.reason}")
        revision = carried.revision if accepted else train_stage(s, report.new_version, progress)[0].meta.revision
        out = {"version": report.new_version, "action": "fine_tuned" if accepted else "trained",
               "carry_over": carried.as_dict() if carried else None, "revision": revision}
    elif PredictorStore(folder).current() is not None and has_new_runtime_runs(library, report.new_version, folder):
        tuned = offline.fine_tune_from_library(library, report.new_version, folder, p.fine_tune_iterations,
                                               p.fine_tune_learning_rate, p.fine_tune_weight, p.fine_tune_tolerance,
                                               p.ridge)
        progress(f"reprofile: predictor fine-tune on runtime runs {'kept' if tuned.accepted else 'refused'}: "
                 f"{tuned.reason}")
        out = {"version": report.new_version, "action": "fine_tuned" if tuned.accepted else "fine_tune_refused",
               "revision": tuned.current, "runtime_runs": tuned.n_runs, "reason": tuned.reason}
    if out is not None:
        PredictorStore(folder).clear_stale()
    return out


def path_predictors(s: Settings, report: DriftReport) -> list[dict]:
    """What re-profiling does for the predictor of each non-default execution path: nothing,
    since there is none (see the module docstring); the path's runtime runs stay under its
    own fingerprint version."""
    library = FingerprintLibrary(s.tracking.fingerprint_db)
    out = []
    for r in report.paths:
        runs = len(library.plan_runs(r.new_version, source="runtime"))
        out.append({"path": r.path, "version": r.new_version, "action": "none",
                    "reason": "no predictor of its own to fine-tune: the search costs a graph bound to this path as "
                              "its default-path prediction times a latency ratio measured on the host in each adapt "
                              f"(search/path_costs.py); its {runs} runtime run(s) and its kernel records stay under "
                              f"{r.new_version}"})
    return out
