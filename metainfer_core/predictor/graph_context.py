"""A kernel's place in its plan, for kernel models that learn what a kernel costs inside a
whole graph (in_graph): its class there (an anchor, an element-wise epilogue the runtime may
fuse into the anchor before it, a lone element-wise op, (de)quantize, cast, data movement),
the op of the kernel it reads from and of the first kernel that reads it, and how many
kernels read its producer (a runtime fuses an epilogue only into a producer nobody else reads),
and whether its int8 activations are signed (ONNX Runtime runs those through channels-last
transposes: another kernel, twice the time, and kernel keys do not tell the two apart).
The same kernel costs nothing fused after a Conv and a full pass over memory elsewhere."""
from __future__ import annotations

from metainfer_core.predictor.plan_features import kernel_class


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
    out = []
    for i, (k, c) in enumerate(zip(kernels, klass)):
        producers = [p for p, _ in k["inputs"] if p >= 0]
        first = producers[0] if producers else None
        readers = consumers.get(i, [])
        out.append({**k, "context": c,
                    "producer": kernels[first]["features"]["op_type"] if first is not None else "input",
                    "consumer": kernels[readers[0]]["features"]["op_type"] if readers else "output",
                    "producer_fan_out": float(len(consumers.get(first, []))) if first is not None else 0.0,
                    "act_signed": float(bool(k.get("act_signed")))})
    return out
