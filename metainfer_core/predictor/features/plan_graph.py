"""A plan as the predictor sees it: its kernels in execution order, each a descriptor (its
feature dict from metainfer_core.ir.features, the ops it holds, its layout, whether it is pinned
to the host, whether its int8 activations are signed) plus where its inputs come from
(producer kernel index, -1 for a graph input, and the bytes that flow); and the plan-wide
directives (model metadata `metainfer.*`). JSON-serialisable, so a whole-model run can be
stored in the library and learned from without the ONNX graph."""
from __future__ import annotations

import math

import onnx

from metainfer_core.ir.directives import BIND_KEY, node_meta, plan_meta
from metainfer_core.ir.features import kernel_features
from metainfer_core.ir.kernels import Kernel, group_kernels
from metainfer_core.ir.tensors import TensorInfo, tensor_infos


def describe_kernels(kernels: list[Kernel], infos: dict[str, TensorInfo] | None = None,
                     model_meta: dict[str, str] | None = None) -> dict:
    producer = {t: i for i, k in enumerate(kernels) for t in k.outputs}
    rows = []
    for i, k in enumerate(kernels):
        sizes = _input_bytes(k, infos)
        # a tensor no earlier kernel produced (graph input, or a group ordered before its producer) comes from the host
        sources = [producer[t] if producer.get(t, i) < i else -1 for t in k.inputs]
        rows.append({
            "key": k.key(),
            "features": kernel_features(k),
            "ops": [n.op_type for n in k.nodes],
            "layout": k.attrs.get("layout", "NCHW"),
            "host": any(node_meta(n, BIND_KEY) == "host" for n in k.nodes),
            "inputs": [[src, b] for src, b in zip(sources, sizes)],
            "bytes_out": k.bytes_out,
            "act_signed": _signed_activations(k, infos),
        })
    return {"kernels": rows, "meta": dict(model_meta or {})}


def describe(model: onnx.ModelProto) -> dict:
    infos = tensor_infos(model)
    return describe_kernels(group_kernels(model, infos), infos, plan_meta(model))


def _input_bytes(k: Kernel, infos: dict[str, TensorInfo] | None) -> list[int]:
    if infos is not None:
        return [infos[t].nbytes if t in infos else 0 for t in k.inputs]
    # kernels alone (no tensor facts): split bytes_in by element count
    counts = [math.prod(s) for s in k.in_shapes] if len(k.in_shapes) == len(k.inputs) else [1] * len(k.inputs)
    total = sum(counts) or 1
    return [int(k.bytes_in * c / total) for c in counts]


def _signed_activations(k: Kernel, infos: dict[str, TensorInfo] | None) -> bool:
    """int8 (not uint8) activations: runtimes pick different integer kernels for them, and
    kernel keys do not tell the two apart."""
    if infos is None:
        return False
    return any(n.op_type == "QuantizeLinear" and n.output[0] in infos and infos[n.output[0]].dtype.name == "int8"
               for n in k.nodes)
