"""The three checks every action's test makes (CONVENTIONS.md): the op types the rewrite
produces, numerics against ONNX Runtime on the graph before it, and onnx.checker's full check.

Lossless actions must match the graph before them within RTOL/ATOL (float summation order is
all that may differ: merged or tiled convolutions add the same products in another order).
Lossy actions report their accuracy effect instead: 1 - cosine similarity to the fp32 outputs."""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx

from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.actions import ACTIONS, ActionContext
from metainfer_core.ir.tensors import random_feeds

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


def reads_int8(model: onnx.ModelProto, node_name: str) -> bool:
    """Whether the node reads any of its inputs through a DequantizeLinear."""
    dq = {o for n in model.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    node = next(n for n in model.graph.node if n.name == node_name)
    return bool(set(node.input) & dq)


def check_float_layers_rewired(params: dict, cache_key: str) -> None:
    """An outside quantizer's int8 (`params`' engine) with two Convs kept in float, on resnet_tiny:
    the float layers read their original weights and biases (not dequantized int8 copies, nor
    bias-corrected ones), the rest stays int8, the quantizer ran once for the mixed and the
    whole plan (its results under `cache_key` in the run's cache), the mixed plan loses no more
    than the whole one, and the float layers' quantizers are gone."""
    from onnx import numpy_helper

    from metainfer_core.actions import Site
    from metainfer_core.normalize import normalize
    from metainfer_core.zoo import build

    m = normalize(build("resnet_tiny"), None).model
    info = backend("cpu").info
    whole = ACTIONS["int8"].sites(m, params, info)[0]
    floats = [n for n in whole.nodes if next(x for x in m.graph.node if x.name == n).op_type == "Conv"][:2]
    site = Site(tuple(n for n in whole.nodes if n not in floats), "compute, 2 float")
    _, feeds = apply("int8", m, params, target="cpu")      # for the feeds
    ctx = ActionContext(target=info, calibration_feeds=feeds)
    mixed = ACTIONS["int8"].apply(m, site, params, ctx)
    onnx.checker.check_model(mixed, full_check=True)
    assert not any(reads_int8(mixed, f) for f in floats)
    assert any(reads_int8(mixed, n) for n in site.nodes)
    original = {i.name: i for i in m.graph.initializer}
    values = {i.name: numpy_helper.to_array(i) for i in mixed.graph.initializer}
    for f in floats:
        src, now = (next(n for n in g.graph.node if n.name == f) for g in (m, mixed))
        for a, b in zip(src.input, now.input):
            if a in original:
                np.testing.assert_array_equal(values[b], numpy_helper.to_array(original[a]))
    full = ACTIONS["int8"].apply(m, whole, params, ctx)
    assert len(ctx.cache[cache_key]) == 1
    assert loss(m, mixed, feeds) <= loss(m, full, feeds) + 1e-4
    quantizers = ("QuantizeLinear", "DequantizeLinear")
    assert sum(n.op_type in quantizers for n in mixed.graph.node) < sum(n.op_type in quantizers for n in full.graph.node)
