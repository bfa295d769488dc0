"""What double buffering hides on a modeled device, from its spec's typed transfer figures: each
load (inputs over the host link, streamed weights from flash) streams while the kernel before it
runs, so that much of it is hidden. The search's predictions subtract it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metainfer_core.backends.base import TargetInfo
from metainfer_core.ir.kernels import Kernel, crossings


@dataclass(frozen=True)
class Transfers:
    link_gbps: float = 0.0          # host <-> device link
    weights_streamed: bool = False  # weights load from flash kernel by kernel...
    weight_gbps: float = 0.0        # ...at this rate

    @classmethod
    def of(cls, target: TargetInfo) -> "Transfers":
        extra = target.extra
        return cls(float(extra.get("link_gbps") or 0), bool(extra.get("weights_streamed")),
                   float(extra.get("weight_gbps") or 0))

    @property
    def any(self) -> bool:
        return bool(self.link_gbps or self.weights_streamed)


def hidden_ms(transfers: Transfers, kernels: list[Kernel], infos, on_device: list[bool],
              per_kernel_ms: np.ndarray) -> tuple[float, int]:
    """(the ms of loads hidden behind the kernel before each, the largest staging buffer in bytes)."""
    moved = crossings(kernels, infos, on_device)
    load_ms = (np.asarray(moved, dtype=float) / (transfers.link_gbps * 1e6) if transfers.link_gbps
               else np.zeros(len(moved)))
    run_ms = per_kernel_ms
    if transfers.weights_streamed and transfers.weight_gbps:
        weights = np.asarray([k.bytes_weights if dev else 0 for k, dev in zip(kernels, on_device)], float)
        weight_ms = weights / (transfers.weight_gbps * 1e6)
        load_ms = load_ms + weight_ms
        # a kernel was profiled with its own weight load: the next load hides behind the rest of
        # it only (a kernel waiting on flash computes nothing)
        run_ms = np.maximum(per_kernel_ms - weight_ms, 0.0)
    hidden = float(np.minimum(load_ms[1:], run_ms[:-1]).sum()) if len(per_kernel_ms) > 1 else 0.0
    return hidden, max(moved, default=0)
