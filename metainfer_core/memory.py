"""Peak-memory planner: tensor liveness over the execution order.

Weights stay resident; an activation lives from the kernel that produces it until its last
consumer has run. `greedy` frees a buffer after its last use (what an arena planner reaches
in the best case); `none` keeps every activation alive to the end (no buffer sharing)."""
from __future__ import annotations

from metainfer_core.kernels import Kernel
from metainfer_core.tensors import TensorInfo

STRATEGIES = ("greedy", "none")


def peak_memory_bytes(kernels: list[Kernel], infos: dict[str, TensorInfo], graph_inputs: list[str],
                      strategy: str = "greedy") -> int:
    if strategy not in STRATEGIES:
        raise ValueError(f"memory strategy {strategy!r} is not one of {STRATEGIES}")
    weights = sum(infos[w].nbytes for w in {w for k in kernels for w in k.weights} if w in infos)
    last_use: dict[str, int] = {}
    for step, k in enumerate(kernels):
        for t in k.inputs:
            last_use[t] = step
    live = {t: infos[t].nbytes for t in graph_inputs if t in infos}
    peak = sum(live.values())
    for step, k in enumerate(kernels):
        for t in k.outputs:
            if t in infos:
                live[t] = infos[t].nbytes
        peak = max(peak, sum(live.values()))
        if strategy == "greedy":
            for t in k.inputs:
                if last_use.get(t) == step:
                    live.pop(t, None)
    return weights + peak
