"""A kernel's place in its plan, for kernel models that learn what a kernel costs inside a
whole graph (in_graph): its class there (an anchor, an element-wise epilogue the runtime may
fuse into the anchor before it, a lone element-wise op, (de)quantize, cast, data movement),
the op of the kernel it reads from and of the first kernel that reads it, and how many
kernels read its producer (a runtime fuses an epilogue only into a producer nobody else reads),
and whether its int8 activations are signed (ONNX Runtime runs those through channels-last
transposes: another kernel, twice the time, and kernel keys do not tell the two apart).
The same kernel costs nothing fused after a Conv and a full pass over memory elsewhere.

Also how many bytes cross into or out of an integer region at the kernel (int8 compute kernels
whose tensors carry spatial or sequence axes): a runtime runs such regions in its own layout
(ONNX Runtime on x86: channels-last integer convolutions) and converts where they meet float
kernels, and its profiler puts those Transpose nodes on the kernels at the border. An int8
plan of a network whose every convolution sits between float activations (a Swish after each)
pays that at each one; the feature improves leave-one-model-out ranking on cpu most on such
networks (docs/decisions/2026-12-05-measured-reasons-from-docstrings.md)."""
from __future__ import annotations

import math

from metainfer_core.predictor.features.plan_features import kernel_class
from metainfer_core.predictor.features.target_join import QDQ


def in_int8_region(k: dict) -> bool:
    f = k["features"]
    return f["dtype"] == "int8" and f["op_type"].split("+")[0] not in QDQ and (f.get("log_out_spatial") or 0) > 0


def region_crossings(kernels: list[dict]) -> tuple[list[float], list[float]]:
    """Bytes each kernel reads from, and writes to, the other side of an int8 region's border."""
    inside = [in_int8_region(k) for k in kernels]
    read, written = [0.0] * len(kernels), [0.0] * len(kernels)
    for i, k in enumerate(kernels):
        for p, nbytes in k["inputs"]:
            if p >= 0 and inside[p] != inside[i]:
                read[i] += nbytes
                written[p] += nbytes
    return read, written


def in_context(kernels: list[dict]) -> list[dict]:
    """The plan's kernel descriptors (plan_graph order) with their context fields added."""
    klass: list[str] = []
    for i, k in enumerate(kernels):
        klass.append(kernel_class(k, klass, i))
    consumers: dict[int, list[int]] = {}
    for i, k in enumerate(kernels):
        for p, _ in k["inputs"]:
            if p >= 0:
                consumers.setdefault(p, []).append(i)
    read, written = region_crossings(kernels)
    out = []
    for i, (k, c) in enumerate(zip(kernels, klass)):
        producers = [p for p, _ in k["inputs"] if p >= 0]
        first = producers[0] if producers else None
        readers = consumers.get(i, [])
        out.append({**k, "context": c,
                    "producer": kernels[first]["features"]["op_type"] if first is not None else "input",
                    "consumer": kernels[readers[0]]["features"]["op_type"] if readers else "output",
                    "producer_fan_out": float(len(consumers.get(first, []))) if first is not None else 0.0,
                    "act_signed": float(bool(k.get("act_signed"))),
                    "int8_region": float(in_int8_region(k)),
                    "log_region_in": math.log10(1.0 + read[i]), "log_region_out": math.log10(1.0 + written[i])})
    return out
