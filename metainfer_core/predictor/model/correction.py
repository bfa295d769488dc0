"""Model level: whole-graph latency from the kernel predictions, learned from whole-model runs.

latency = sum_j theta_j * term_j over plan_features.TERMS (a constant per-run overhead, the
sum of kernel predictions, per-class sums and counts, host/device link terms). Which terms
enter is chosen by forward selection under leave-one-model-out error on the training runs
(a term joins only if it helps predict models the fit has not seen; the runs come from a
handful of models, and correlated terms would otherwise fit them and not carry over); theta
is then fitted by least squares on relative error with a light ridge towards the prior
"whole = sum of kernels". Terms left out keep the prior."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from metainfer_core.predictor.features.plan_features import TERMS

PRIOR = np.array([1.0 if t == "sum" else 0.0 for t in TERMS])
FLOOR = 0.2             # a prediction never drops below this share of the kernel sum
MIN_GAIN = 0.002        # a term must cut the held-out error by this much (relative) to join
MAX_TERMS = 8


def _solve(X: np.ndarray, y: np.ndarray, active: np.ndarray, ridge: float) -> np.ndarray:
    """theta minimising sum((X theta - y) / y)^2 + ridge * n * sum((s_j (theta_j - prior_j))^2)
    over the active terms (s_j: the term's RMS size relative to y, so ridge is unit-free)."""
    theta = PRIOR.copy()
    idx = np.flatnonzero(active)
    if len(idx) == 0:
        return theta
    rel = X / y[:, None]
    fixed = rel[:, ~active] @ PRIOR[~active]
    A = rel[:, idx]
    b = 1.0 - fixed
    scale = np.sqrt(np.mean(A ** 2, axis=0))
    scale = np.where(scale > 0, scale, 1.0)
    reg = np.sqrt(ridge * len(y)) * np.diag(scale)
    sol, *_ = np.linalg.lstsq(np.vstack([A, reg]), np.concatenate([b, reg @ PRIOR[idx]]), rcond=None)
    theta[idx] = sol
    return theta


def _predict(X: np.ndarray, theta: np.ndarray) -> np.ndarray:
    return np.maximum(X @ theta, FLOOR * X[:, TERMS.index("sum")])


def _cv_error(X: np.ndarray, y: np.ndarray, groups: np.ndarray, active: np.ndarray, ridge: float) -> float:
    """Mean over held-out groups (models) of their mean absolute relative error."""
    errs = []
    for g in np.unique(groups):
        test = groups == g
        theta = _solve(X[~test], y[~test], active, ridge)
        errs.append(np.mean(np.abs(_predict(X[test], theta) - y[test]) / y[test]))
    return float(np.mean(errs))


@dataclass
class Correction:
    theta: np.ndarray
    n_runs: int = 0
    active: list[str] = field(default_factory=list)
    cv_error: float | None = None

    @staticmethod
    def identity() -> "Correction":
        return Correction(PRIOR.copy(), 0, [])

    @staticmethod
    def fit(X: np.ndarray, measured_ms: np.ndarray, groups: list[str] | None = None, ridge: float = 1e-3,
            max_terms: int = MAX_TERMS) -> "Correction":
        if len(measured_ms) == 0:
            return Correction.identity()
        y = np.asarray(measured_ms, dtype=np.float64)
        groups_arr = np.asarray(groups if groups is not None else ["all"] * len(y))
        active = np.zeros(len(TERMS), dtype=bool)
        useful = np.abs(X).sum(axis=0) > 0
        cv = None
        if len(np.unique(groups_arr)) >= 3:
            cv = _cv_error(X, y, groups_arr, active, ridge)
            while active.sum() < max_terms:
                trials = []
                for j in np.flatnonzero(~active & useful):
                    trial = active.copy()
                    trial[j] = True
                    trials.append((_cv_error(X, y, groups_arr, trial, ridge), j))
                if not trials:
                    break
                best, j = min(trials)
                if best > cv * (1 - MIN_GAIN):
                    break
                active[j], cv = True, best
        else:           # too few models to judge terms by: only the overall scale
            active[TERMS.index("sum")] = True
        theta = _solve(X, y, active, ridge)
        return Correction(theta, len(y), [t for t, a in zip(TERMS, active) if a], cv)

    def apply(self, X: np.ndarray) -> np.ndarray:
        return _predict(np.atleast_2d(X), self.theta)

    def as_dict(self) -> dict:
        return {"terms": list(TERMS), "theta": [float(x) for x in self.theta], "n_runs": self.n_runs,
                "active": self.active, "cv_error": self.cv_error}

    @staticmethod
    def from_dict(d: dict) -> "Correction":
        by_name = dict(zip(d["terms"], d["theta"]))
        theta = np.array([by_name.get(t, p) for t, p in zip(TERMS, PRIOR)])
        return Correction(theta, int(d.get("n_runs", 0)), list(d.get("active", [])), d.get("cv_error"))
