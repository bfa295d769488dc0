"""Online fine-tuning from runtime records (whole-model runs of deployed or verified plans).

A runtime run only says how long the whole plan took, so its kernels get pseudo labels: the
current predictions of the kernels the library has not measured, scaled so that the plan's
predicted latency would match the measurement (measured kernels and the correction's
constant part left as they are). Training continues from the
current kernel model (CatBoost init_model) on those labels plus the library's records (so
the extra trees fit the new plans without forgetting the rest), then the model-level
correction is fitted again over every run, the new ones included. The new revision is kept
only if the error on held-out runs (every stored run not in this fine-tune) does not get
worse beyond run-to-run noise (`tolerance`, relative); either way the decision is logged in
the store's history, and both revisions stay loadable."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from metainfer_core.errors import MetaInferError
from metainfer_core.predictor.features import plan_features
from metainfer_core.predictor.model.cost_model import CostModel, PredictorMeta, fit_correction, kernel_rows, predict_runs
from metainfer_core.predictor.model.labels import latency_ms
from metainfer_core.predictor.lifecycle.store import PredictorStore

RATIO_CLAMP = (0.1, 10.0)


@dataclass
class FineTuneResult:
    accepted: bool
    reason: str
    revision: int | None            # the new revision (saved even when refused, for inspection)
    current: int                    # the current revision after the decision
    held_out_before: float          # MAPE on held-out runs
    held_out_after: float
    new_before: float               # MAPE on the fine-tune runs themselves
    new_after: float
    n_runs: int


def mape(cm: CostModel, runs: list[dict]) -> float:
    if not runs:
        return float("nan")
    whole = predict_runs(cm.kernels, cm.correction, runs)
    y = np.array([latency_ms(r, cm.spec) for r in runs])
    return float(np.mean(np.abs(whole - y) / y))


def pseudo_labels(cm: CostModel, runs: list[dict], known: set[str] | None = None) -> tuple[list[dict], np.ndarray]:
    """Kernel descriptors of the runs' plans and the latency each kernel would need for its
    plan's prediction to equal the measurement. The gap goes to the kernels the library has
    no measurement of (`known`: keys it has); only when it knows them all, to every kernel."""
    known = known or set()
    descs, labels = [], []
    preds = cm.kernels.predict_many([r["graph"]["kernels"] for r in runs])
    theta = cm.correction.theta
    for r, p in zip(runs, preds):
        graph = r["graph"]
        whole = cm.predict_graph_ms(graph, p)
        w = plan_features.kernel_weights(graph, theta)
        free = np.array([k.get("key") not in known for k in graph["kernels"]])
        if not free.any():
            free[:] = True
        share = float(w[free] @ p[free])
        ratio = 1.0 + (latency_ms(r, cm.spec) - whole) / share if share > 0 else 1.0
        labels.extend(np.where(free, p * float(np.clip(ratio, *RATIO_CLAMP)), p))
        descs.extend(cm.kernels.graph_descs(graph["kernels"]))     # in their context, as predicted
    return descs, np.array(labels)


def fine_tune(folder: Path, runtime_runs: list[dict], held_out_runs: list[dict], records: list[dict],
              iterations: int = 30, learning_rate: float = 0.05, weight: float = 1.0,
              tolerance: float = 0.1, ridge: float = 1e-3) -> FineTuneResult:
    """Fine-tune the current revision in `folder` on `runtime_runs`; keep the result only if
    MAPE on `held_out_runs` does not grow by more than `tolerance` of itself (relative: run-to-
    run noise moves it a little either way; 0 is strict)."""
    store = PredictorStore(folder)
    current = store.current()
    if current is None:
        raise MetaInferError(f"No current predictor in {folder} to fine-tune; train one first with flows/train.py.")
    if not runtime_runs:
        raise MetaInferError("fine_tune got no runtime records: append verified or deployed runs to the library "
                             "(FingerprintLibrary.add_plan_runs with source='runtime') first.")
    t0 = time.perf_counter()
    cm = CostModel.load(folder, current)
    descs, labels = pseudo_labels(cm, runtime_runs, {r["kernel_key"] for r in records})
    rec_descs, rec_ms, _ = kernel_rows(records, cm.spec)
    w = np.concatenate([np.full(len(descs), weight), np.ones(len(rec_descs))])
    kernels = cm.kernels.continue_fit(descs + rec_descs, np.concatenate([labels, rec_ms]), iterations, learning_rate, w)
    # the correction re-learns over every run, the new ones included, on the new kernel predictions
    correction = fit_correction(kernels, held_out_runs + runtime_runs, ridge)
    meta = PredictorMeta(**{**cm.meta.__dict__, "parent": current, "kind": "fine_tuned",
                            "n_plan_runs": cm.meta.n_plan_runs + len(runtime_runs),
                            "last_run_id": max([cm.meta.last_run_id] + [r.get("id") or 0 for r in runtime_runs]),
                            "train_s": time.perf_counter() - t0,
                            "created_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()),
                            "metrics": {k: v for k, v in cm.meta.metrics.items() if not k.startswith("lomo")}})
    tuned = CostModel(kernels, correction, meta)
    before, after = mape(cm, held_out_runs), mape(tuned, held_out_runs)
    new_before, new_after = mape(cm, runtime_runs), mape(tuned, runtime_runs)
    worse = not np.isnan(before) and after > before * (1 + tolerance)
    tuned.meta.metrics.update({"fine_tune_held_out_mape": after, "fine_tune_runs_mape": new_after})
    rev = tuned.save(folder)
    figures = {"held_out_before": before, "held_out_after": after, "runs_before": new_before,
               "runs_after": new_after, "n_runs": len(runtime_runs), "n_held_out": len(held_out_runs)}
    if worse:
        reason = (f"held-out MAPE would rise from {before:.2%} to {after:.2%} (tolerance {tolerance:.0%} of it); "
                  f"revision r{rev} kept on disk but r{current} stays current")
        store.log("fine_tune_refused", revision=rev, parent=current, reason=reason, **figures)
        return FineTuneResult(False, reason, rev, current, before, after, new_before, new_after, len(runtime_runs))
    store.set_current(rev)
    reason = f"held-out MAPE {before:.2%} -> {after:.2%}; runtime runs {new_before:.2%} -> {new_after:.2%}"
    store.log("fine_tune_accepted", revision=rev, parent=current, reason=reason, **figures)
    return FineTuneResult(True, reason, rev, rev, before, after, new_before, new_after, len(runtime_runs))
