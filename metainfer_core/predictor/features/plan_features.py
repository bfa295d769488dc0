"""Plan-level terms of the model-level correction, from a plan's kernel graph (plan_graph)
and the kernel model's predictions for it.

Each term is in milliseconds of predicted kernel time (or a count) summed over a class of
kernels, so that a linear fit learns an in-context factor per class: what a kernel costs
inside the whole graph relative to standalone. Classes follow what makes whole-graph runs
differ from the sum of micro-benchmarks: the per-run overhead each micro-benchmark pays
(counts), element-wise epilogues a runtime fuses into the op before them, lone
(de)quantize and Cast kernels, signed int8 activations, data movement, and on modeled
targets the host/device link: what the graph moves between host and device, and what the
micro-benchmarks of host-fallback kernels staged over the link (their fit coefficients say
how much of each the whole-model runs actually pay). Transfers a plan double-buffers are
predicted in full here: the search subtracts the part that hides behind compute
(search/evaluate.py)."""
from __future__ import annotations

import numpy as np

from metainfer_core.predictor.features.target_join import QDQ, TargetSpec, kernel_ops, on_device

ANCHORS = {"Conv", "ConvTranspose", "MatMul", "Gemm"}
ELEMENTWISE = {"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Add", "Mul", "Sub",
               "Div", "BatchNormalization", "Erf", "Pow", "Sqrt", "Where", "Neg", "Exp"}
MOVEMENT = {"Reshape", "Transpose", "Flatten", "Concat", "Squeeze", "Unsqueeze", "Gather", "Slice", "Split",
            "Expand", "Shape", "Tile", "Pad", "Identity"}
CLASSES = ("anchor", "epilogue", "elementwise", "qdq", "cast", "movement", "other")
TERMS = (["one", "sum"] + [f"ms_{c}" for c in CLASSES] + [f"n_{c}" for c in CLASSES]
         + ["ms_int8_signed", "ms_fp16", "link_crossing_ms", "link_host_staging_ms"])


def kernel_class(k: dict, klass: list[str], i: int) -> str:
    ops = [o for o in kernel_ops(k) if o not in QDQ]
    if not ops:
        return "qdq" if k["features"]["op_type"] in QDQ else "movement"
    primary = ops[0]
    if primary in ANCHORS:
        return "anchor"
    if primary == "Cast":
        return "cast"
    if primary in ELEMENTWISE:
        producers = [p for p, _ in k["inputs"] if p >= 0]
        if producers and klass[producers[0]] in ("anchor", "epilogue"):
            return "epilogue"
        return "elementwise"
    if primary in MOVEMENT:
        return "movement"
    return "other"


def terms(graph: dict, pred_ms: np.ndarray, spec: TargetSpec) -> dict[str, float]:
    kernels = graph["kernels"]
    klass: list[str] = []
    for i, k in enumerate(kernels):
        klass.append(kernel_class(k, klass, i))
    out = {t: 0.0 for t in TERMS}
    out["one"] = 1.0
    out["sum"] = float(np.sum(pred_ms))
    for k, c, p in zip(kernels, klass, pred_ms):
        out[f"ms_{c}"] += float(p)
        out[f"n_{c}"] += 1.0
        if k.get("act_signed"):
            out["ms_int8_signed"] += float(p)
        if k["features"]["dtype"] == "float16":
            out["ms_fp16"] += float(p)
    if spec.modeled and spec.link_gbps:
        _link_terms(kernels, spec, out)
    return out


def _link_terms(kernels: list[dict], spec: TargetSpec, out: dict) -> None:
    """In the graph, a tensor moves when producer and consumer sit on different sides (graph
    inputs start on the host); a kernel benchmarked alone on the host fallback path staged
    all its inputs and outputs over the link."""
    per_ms = 1.0 / (spec.link_gbps * 1e6)
    dev = [on_device(k, spec) for k in kernels]
    for i, k in enumerate(kernels):
        for producer, nbytes in k["inputs"]:
            if dev[i] != (dev[producer] if producer >= 0 else False):
                out["link_crossing_ms"] += nbytes * per_ms
        if not dev[i]:
            out["link_host_staging_ms"] += (sum(b for _, b in k["inputs"]) + k["bytes_out"]) * per_ms


def kernel_weights(graph: dict, theta: np.ndarray) -> np.ndarray:
    """d(prediction)/d(kernel prediction) per kernel under coefficients `theta`: the terms
    that sum kernel predictions (overall, per class, signed int8, fp16) are linear in them."""
    coef = dict(zip(TERMS, theta))
    klass: list[str] = []
    w = []
    for i, k in enumerate(graph["kernels"]):
        klass.append(kernel_class(k, klass, i))
        w.append(coef["sum"] + coef[f"ms_{klass[-1]}"] + (coef["ms_int8_signed"] if k.get("act_signed") else 0.0)
                 + (coef["ms_fp16"] if k["features"]["dtype"] == "float16" else 0.0))
    return np.array(w)


def matrix(graphs: list[dict], preds: list[np.ndarray], spec: TargetSpec) -> np.ndarray:
    rows = [terms(g, p, spec) for g, p in zip(graphs, preds)]
    return np.array([[row[t] for t in TERMS] for row in rows]).reshape(len(rows), len(TERMS))
