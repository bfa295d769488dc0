"""Feature maps: per kernel (the predictor's input) and per model (logged with every plan).

Per kernel: op type and precision as categories; FLOPs, bytes, arithmetic intensity, shape
and attribute facts as numbers. Per model: op-type histogram, depth, width, connection
density, branch/merge counts, where compute concentrates, and recognised patterns."""
from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np
import onnx

from metainfer_core.ir.kernels import Kernel, group_kernels
from metainfer_core.ir.tensors import TensorInfo, tensor_infos

CATEGORICAL = ["op_type", "primary_op", "dtype"]
NUMERIC = ["log_flops", "log_bytes_in", "log_bytes_weights", "log_bytes_out", "log_intensity", "n_ops",
           "batch", "in_channels", "out_channels", "log_out_spatial", "kernel_area", "stride", "group",
           "n_inputs"]
FEATURES = CATEGORICAL + NUMERIC


def _log(x: float) -> float:
    return math.log10(1.0 + max(x, 0.0))


def kernel_features(k: Kernel) -> dict:
    first_in = k.in_shapes[0] if k.in_shapes else ()
    out = k.out_shapes[0] if k.out_shapes else ()
    total_bytes = k.bytes_in + k.bytes_weights + k.bytes_out
    ks = k.attrs.get("kernel_shape") or []
    strides = k.attrs.get("strides") or [1]
    return {
        "op_type": k.op_type,
        "primary_op": k.op_type.split("+")[0],
        "dtype": k.dtype,
        "log_flops": _log(k.flops),
        "log_bytes_in": _log(k.bytes_in),
        "log_bytes_weights": _log(k.bytes_weights),
        "log_bytes_out": _log(k.bytes_out),
        "log_intensity": _log(k.flops / total_bytes if total_bytes else 0.0),
        "n_ops": k.n_ops,
        "batch": first_in[0] if first_in else 1,
        "in_channels": first_in[1] if len(first_in) > 1 else (first_in[-1] if first_in else 1),
        "out_channels": out[1] if len(out) > 1 else (out[-1] if out else 1),
        "log_out_spatial": _log(float(np.prod(out[2:])) if len(out) > 2 else 1.0),
        "kernel_area": int(np.prod(ks)) if ks else 0,
        "stride": int(max(strides)),
        "group": int(k.attrs.get("group", 1)),
        "n_inputs": len(k.inputs),
    }


def _patterns(graph: onnx.GraphProto) -> dict[str, int]:
    producer = {o: n for n in graph.node for o in n.output}
    consumers = defaultdict(list)
    for n in graph.node:
        for i in n.input:
            consumers[i].append(n)

    def prev(n, i=0):
        return producer.get(n.input[i]) if len(n.input) > i else None

    found = Counter()
    for n in graph.node:
        p = prev(n)
        if n.op_type in ("Relu", "Clip", "Sigmoid", "HardSwish") and p is not None and p.op_type == "BatchNormalization":
            pp = prev(p)
            if pp is not None and pp.op_type == "Conv":
                found["conv_bn_act"] += 1
        if n.op_type == "Add" and len(n.input) == 2:
            srcs = [producer.get(i) for i in n.input]
            if all(s is not None for s in srcs) and any(s.op_type in ("Conv", "BatchNormalization", "MatMul") for s in srcs):
                found["residual_add"] += 1
        if n.op_type == "Conv":
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            if attrs.get("group", 1) > 1:
                nxt = [c for o in n.output for c in consumers[o]]
                seen = list(nxt)
                for _ in range(3):   # a pointwise conv within a few element-wise steps
                    if any(c.op_type == "Conv" for c in seen):
                        found["depthwise_separable"] += 1
                        break
                    seen = [c2 for c in seen for o in c.output for c2 in consumers[o]]
        if n.op_type == "MatMul":
            p0, p1 = prev(n, 0), prev(n, 1)
            chain = [p0, p1]
            for _ in range(2):
                chain = chain + [prev(c) for c in chain if c is not None]
            if any(c is not None and c.op_type == "Softmax" for c in chain):
                found["attention"] += 1
        if n.op_type == "Mul" and len(n.input) == 2:
            srcs = [producer.get(i) for i in n.input]
            if any(s is not None and s.op_type == "Sigmoid" and prev(s) is not None and prev(s).op_type == "Conv"
                   and any(x.op_type == "GlobalAveragePool" for x in graph.node) for s in srcs):
                found["squeeze_excite"] += 1
    return dict(found)


def model_feature_map(model: onnx.ModelProto, infos: dict[str, TensorInfo] | None = None) -> dict:
    """Per-model summary plus per-node rows; JSON-serialisable."""
    infos = infos if infos is not None else tensor_infos(model)
    graph = model.graph
    kernels = group_kernels(model, infos)
    producer = {o: n.name for n in graph.node for o in n.output}
    fan_out = Counter(i for n in graph.node for i in n.input if i in producer)
    level: dict[str, int] = {}
    for n in graph.node:
        level[n.name] = 1 + max((level[producer[i]] for i in n.input if i in producer), default=0)
    width = Counter(level.values())
    edges = sum(1 for n in graph.node for i in n.input if i in producer)
    total_flops = sum(k.flops for k in kernels) or 1
    nodes = []
    for k in kernels:
        f = kernel_features(k)
        nodes.append({"nodes": k.node_names, "op_type": k.op_type, "dtype": k.dtype, "flops": k.flops,
                      "bytes_in": k.bytes_in, "bytes_weights": k.bytes_weights, "bytes_out": k.bytes_out,
                      "intensity": round(10 ** f["log_intensity"] - 1, 3), "in_shapes": k.in_shapes,
                      "out_shapes": k.out_shapes, "attrs": k.attrs, "flops_share": round(k.flops / total_flops, 4)})
    n = max(len(graph.node), 1)
    return {
        "n_nodes": len(graph.node),
        "n_kernels": len(kernels),
        "op_histogram": dict(Counter(nd.op_type for nd in graph.node).most_common()),
        "depth": max(level.values(), default=0),
        "max_width": max(width.values(), default=0),
        "connection_density": round(edges / n, 3),
        "branches": sum(1 for c in fan_out.values() if c > 1),
        "merges": sum(1 for nd in graph.node if sum(1 for i in nd.input if i in producer) > 1),
        "total_flops": sum(k.flops for k in kernels),
        "weight_bytes": sum(k.bytes_weights for k in kernels),
        "patterns": _patterns(graph),
        "top_compute": sorted(nodes, key=lambda r: -r["flops"])[:5],
        "nodes": nodes,
    }
