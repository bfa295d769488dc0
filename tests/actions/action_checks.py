"""The three checks every action's test makes (CONVENTIONS.md): the op types the rewrite
produces, numerics against ONNX Runtime on the graph before it, and onnx.checker's full check.

Lossless actions must match the graph before them within RTOL/ATOL (float summation order is
all that may differ: merged or tiled convolutions add the same products in another order).
Lossy actions report their accuracy effect instead: 1 - cosine similarity to the fp32 outputs."""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx

from metainfer_core.accuracy import plan_loss, run_cpu
from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.tensors import random_feeds

from twins import backend

RTOL, ATOL = 1e-4, 1e-5


def apply(name: str, model: onnx.ModelProto, params: dict, target: str = "gpu", site: int = 0, feeds=None,
          **spec) -> tuple[onnx.ModelProto, list[dict]]:
    """Sites, legality, apply, then the full checker; returns the rewritten graph and the feeds."""
    info = backend(target, **spec).info
    sites = ACTIONS[name].sites(model, params, info)
    assert sites, f"{name} found no site"
    assert ACTIONS[name].legal(model, sites[site], params, info) is None
    feeds = feeds or [random_feeds(model, seed=i) for i in range(2)]
    out = ACTIONS[name].apply(model, sites[site], params, ActionContext(target=info, calibration_feeds=feeds))
    onnx.checker.check_model(out, full_check=True)
    return out, feeds


def same_numerics(before: onnx.ModelProto, after: onnx.ModelProto, feeds, rtol: float = RTOL, atol: float = ATOL) -> None:
    for ra, rb in zip(run_cpu(before, feeds), run_cpu(after, feeds)):
        for x, y in zip(ra, rb):
            np.testing.assert_allclose(y, x, rtol=rtol, atol=atol)


def loss(before: onnx.ModelProto, after: onnx.ModelProto, feeds) -> float:
    return plan_loss(run_cpu(before, feeds), run_cpu(after, feeds))


def ops(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node)
