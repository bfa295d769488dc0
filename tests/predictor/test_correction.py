"""The model-level correction: terms chosen by leave-one-model-out error, fitted on relative
error, shrunk towards "whole = sum of kernels"."""
from __future__ import annotations

import numpy as np
import pytest

from metainfer_core.predictor.model.correction import Correction
from metainfer_core.predictor.features.plan_features import TERMS, terms
from metainfer_core.predictor.features.target_join import TargetSpec


def _synthetic(seed: int = 0):
    rng = np.random.default_rng(seed)
    n, groups = 120, np.repeat(["a", "b", "c", "d", "e", "f"], 20)
    X = np.zeros((n, len(TERMS)))
    X[:, TERMS.index("one")] = 1.0
    X[:, TERMS.index("sum")] = rng.uniform(0.5, 5.0, n)
    X[:, TERMS.index("n_qdq")] = rng.integers(0, 40, n)
    X[:, TERMS.index("link_crossing_ms")] = rng.uniform(0.0, 1.0, n)
    X[:, TERMS.index("ms_movement")] = rng.uniform(0.0, 0.5, n)       # irrelevant to the truth below
    y = 0.9 * X[:, 1] + 0.02 + X[:, TERMS.index("link_crossing_ms")] - 0.004 * X[:, TERMS.index("n_qdq")]
    return X, y * rng.lognormal(0, 0.005, n), list(groups)


def test_recovers_the_terms_that_matter():
    X, y, groups = _synthetic()
    c = Correction.fit(X, y, groups)
    assert {"sum", "link_crossing_ms", "n_qdq"} <= set(c.active)
    assert "ms_movement" not in c.active
    assert np.median(np.abs(c.apply(X) - y) / y) < 0.01
    assert c.theta[TERMS.index("link_crossing_ms")] == pytest.approx(1.0, abs=0.1)


def test_identity_without_runs_and_json_roundtrip():
    X, y, groups = _synthetic(1)
    assert np.allclose(Correction.identity().apply(X), X[:, TERMS.index("sum")])
    c = Correction.fit(X, y, groups)
    again = Correction.from_dict(c.as_dict())
    assert np.allclose(again.apply(X), c.apply(X)) and again.active == c.active


def test_link_terms_follow_placement():
    """x (graph input) -> Conv (device) -> Tanh (host: not in the op set) -> Relu (device)."""
    spec = TargetSpec(name="t", supported_ops=("Conv", "Relu"), peak_gflops={"float32": 100.0}, link_gbps=1.0)

    def k(op, inputs, out=1000):
        return {"features": {"op_type": op, "dtype": "float32"}, "layout": "NCHW", "host": False,
                "inputs": inputs, "bytes_out": out}

    graph = {"kernels": [k("Conv", [[-1, 4000]]), k("Tanh", [[0, 1000]]), k("Relu", [[1, 1000]])]}
    t = terms(graph, np.array([1.0, 2.0, 3.0]), spec)
    per_ms = 1 / 1e6          # 1 GB/s: one byte costs 1e-6 ms
    assert t["sum"] == 6.0 and t["n_anchor"] == 1 and t["n_epilogue"] == 2
    assert t["link_crossing_ms"] == pytest.approx((4000 + 1000 + 1000) * per_ms)     # in, down, up
    assert t["link_host_staging_ms"] == pytest.approx((1000 + 1000) * per_ms)        # Tanh's in and out
