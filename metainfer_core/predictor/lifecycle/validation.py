"""Leave-one-model-out validation: for each zoo model, a predictor trained without it (its
kernel micro-benchmarks that no other model shares, and its whole-model runs, are left out)
scores every candidate plan of it, against the plan's measured whole-model latency.

Reported: MAPE of whole-model latency, the share of plans within +-10 %, and the mean over
held-out models of Spearman's rank correlation between predicted and measured latency over
that model's candidate plans (ranking is what the search needs). The same figures for the
default plans alone are reported beside them."""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy.stats import spearmanr

from metainfer_core.predictor.dataset import in_graph

from metainfer_core.predictor.features import plan_features
from metainfer_core.predictor.model.cost_model import CostModel, fit_correction, kernel_rows
from metainfer_core.predictor.model.kernel_model import LATENCY_PARAMS, KernelModel
from metainfer_core.predictor.model.labels import latency_ms
from metainfer_core.predictor.features.target_join import TargetSpec

WITHIN = 0.10


@dataclass
class Scored:
    model: str
    label: str
    measured_ms: float
    predicted_ms: float
    kernel_sum_ms: float

    @property
    def error(self) -> float:
        return (self.predicted_ms - self.measured_ms) / self.measured_ms


@dataclass
class LomoResult:
    scored: list[Scored] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    per_model: dict = field(default_factory=dict)


def provenance(plan_runs: list[dict]) -> dict[str, set[str]]:
    """Model -> the library keys of micro-benchmarks cut from its plans (dataset.record_keys)."""
    out: dict[str, set[str]] = defaultdict(set)
    for r in plan_runs:
        out[r["model"]].update(r["graph"].get("record_keys") or [])
    return out


def held_out_split(records: list[dict], plan_runs: list[dict], model: str,
                   prov: dict[str, set[str]]) -> tuple[list[dict], list[dict], list[dict]]:
    """(kernel records, training runs, held-out runs) with `model` left out."""
    others = set().union(*[keys for m, keys in prov.items() if m != model])
    exclusive = prov.get(model, set()) - others
    train_records = [r for r in records if r["kernel_key"] not in exclusive]
    return (train_records, [r for r in plan_runs if r["model"] != model],
            [r for r in plan_runs if r["model"] == model])


def score(cm_kernels: KernelModel, correction, runs: list[dict]) -> list[Scored]:
    preds = cm_kernels.predict_many([r["graph"]["kernels"] for r in runs])
    whole = correction.apply(plan_features.matrix([r["graph"] for r in runs], preds, cm_kernels.spec)) if runs else []
    return [Scored(r["model"], r["label"], latency_ms(r, cm_kernels.spec), float(w), float(p.sum()))
            for r, p, w in zip(runs, preds, whole)]


def metrics(scored: list[Scored]) -> tuple[dict, dict]:
    """(overall figures, per-model figures)."""
    by_model: dict[str, list[Scored]] = defaultdict(list)
    for s in scored:
        by_model[s.model].append(s)
    per_model = {}
    rhos = []
    for m, ss in by_model.items():
        errs = np.array([abs(s.error) for s in ss])
        rho = _spearman([s.measured_ms for s in ss], [s.predicted_ms for s in ss])
        if not math.isnan(rho):
            rhos.append(rho)
        default = next((s for s in ss if s.label == "default"), ss[0])
        per_model[m] = {"plans": len(ss), "mape": float(errs.mean()), "within_10": float((errs <= WITHIN).mean()),
                        "spearman": rho, "default_error": default.error}
    errs = np.array([abs(s.error) for s in scored]) if scored else np.zeros(0)
    defaults = np.array([abs(v["default_error"]) for v in per_model.values()])
    overall = {
        "models": len(per_model), "plans": len(scored),
        "mape": float(errs.mean()) if len(errs) else float("nan"),
        "within_10": float((errs <= WITHIN).mean()) if len(errs) else float("nan"),
        "spearman_mean": float(np.mean(rhos)) if rhos else float("nan"),
        "default_mape": float(defaults.mean()) if len(defaults) else float("nan"),
        "default_within_10": float((defaults <= WITHIN).mean()) if len(defaults) else float("nan"),
    }
    return overall, per_model


def _spearman(a: list[float], b: list[float]) -> float:
    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return float("nan")
    return float(spearmanr(a, b).statistic)


def leave_one_model_out(records: list[dict], plan_runs: list[dict], spec: TargetSpec, params: dict | None = None,
                        ridge: float = 1e-3, seed: int = 0) -> LomoResult:
    params = dict(params or LATENCY_PARAMS, random_seed=seed)
    prov = provenance(plan_runs)
    scored: list[Scored] = []
    kernel_errors: list[np.ndarray] = []
    for model in sorted({r["model"] for r in plan_runs}):
        train_records, train_runs, test_runs = held_out_split(records, plan_runs, model, prov)
        feats, ms, _ = kernel_rows(train_records, spec)
        km = KernelModel.fit(feats, ms, spec, params=params, in_graph=in_graph.training_rows(train_runs))
        scored.extend(score(km, fit_correction(km, train_runs, ridge), test_runs))
        kept = {r["kernel_key"] for r in train_records}
        left_out = [r for r in records if r["kernel_key"] not in kept]
        if left_out:        # the micro-benchmarks only this model had
            feats, ms, _ = kernel_rows(left_out, spec)
            kernel_errors.append(np.abs(km.predict_ms(feats) - ms) / ms)
    overall, per_model = metrics(scored)
    overall["kernel_mape"] = float(np.concatenate(kernel_errors).mean()) if kernel_errors else float("nan")
    return LomoResult(scored, overall, per_model)


def in_sample(cm: CostModel, plan_runs: list[dict]) -> list[Scored]:
    """The deployed model on runs it may have learned from (for plots and drift baselines)."""
    return score(cm.kernels, cm.correction, plan_runs)


def as_rows(scored: list[Scored]) -> list[dict]:
    return [asdict(s) | {"error": s.error} for s in scored]
