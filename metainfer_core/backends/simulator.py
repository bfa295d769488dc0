"""Modeled backend: a device simulated from the spec in conf/target/<name>.yaml.

Latencies are MODELED, not measured: each kernel costs max(compute, memory traffic) plus a
launch overhead, where compute uses the device's peak throughput for the kernel's precision
(times an op efficiency and channel-alignment padding) and memory traffic is served from
on-chip SRAM when the kernel's working set fits and from DRAM when it spills. A
layout-sensitive kernel (conv, pooling) away from the device's `preferred_layout` runs at
`layout_penalty` times its efficiency and pays a reformat pass (one more launch reading and
writing its input and output), as cuDNN/TensorRT reformat layers do; the `layout` action
removes that.

Operator binding is explicit (metainfer_core.ir.kernels.bind): kernels the device cannot run (op
outside its op set, a precision it has no datapath for, or pinned to the host) run on the host
and every tensor crossing between host and device pays the link. Transfers add to the
latency, unless the model records double buffering (metadata `metainfer.double_buffer`): then
a transfer overlaps the previous kernel and only the part longer than it shows, at the price
of a second staging buffer. Peak memory is the liveness planner's, with the model's buffer
sharing policy (metadata `metainfer.memory_strategy`) or the device runtime's default
(`memory_strategy`); a device with `weights_streamed` keeps weights in external memory (flash)
and loads them kernel by kernel at `weight_gbps`, so its memory holds the activations and the
largest kernel's weights. The load precedes the kernel; with double buffering it streams while
the previous kernel runs (the DMA prefetch microNPU compilers schedule) and only the part longer
than that kernel shows, at the price of a second weight buffer.

A seeded log-normal noise imitates run-to-run jitter. Numerics run on ONNX Runtime's CPU
provider with the graph's own precision, so fp16/int8 plans show their real accuracy loss."""
from __future__ import annotations

import math
import time

import numpy as np
import onnx
import onnxruntime as ort

from metainfer_core.backends.base import Backend, Compiled, TargetInfo, Timing
from metainfer_core.ir.directives import double_buffered
from metainfer_core.ir.kernels import Kernel, bind, crossings, group_kernels, unsupported_reason
from metainfer_core.ir.memory import DEFAULT_STRATEGY, MemoryPlan, model_strategy, plan_memory
from metainfer_core.ir.tensors import tensor_infos

_ALIGNED = {"Conv", "ConvTranspose", "MatMul", "Gemm"}
LAYOUT_SENSITIVE = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}
HOST_LAUNCH_US = 5.0


class DeviceModel:
    """The cost model of one spec; pure functions of kernels."""

    def __init__(self, spec: dict):
        self.spec = spec

    @property
    def supported_ops(self):
        return self.spec.get("supported_ops")

    def unsupported_reason(self, k: Kernel) -> str | None:
        return unsupported_reason(k, self.supported_ops, tuple(self.spec["peak_gflops"]))

    def _aligned_flops(self, k: Kernel) -> float:
        align = int(self.spec.get("channel_align", 1))
        primary = k.op_type.split("+")[0]
        if align <= 1 or primary not in _ALIGNED or not k.out_shapes or not k.out_shapes[0]:
            return float(k.flops)
        # channels are dim 1 for Conv outputs, the last dim for MatMul/Gemm
        c = k.out_shapes[0][1] if primary.startswith("Conv") and len(k.out_shapes[0]) > 1 else k.out_shapes[0][-1]
        return k.flops * (math.ceil(c / align) * align) / max(c, 1)

    def off_layout(self, k: Kernel) -> bool:
        """A layout-sensitive kernel not in the device's preferred layout."""
        return k.op_type.split("+")[0] in LAYOUT_SENSITIVE and k.layout != self.spec.get("preferred_layout", "NCHW")

    def efficiency(self, k: Kernel) -> float:
        eff = self.spec.get("op_efficiency", {})
        e = eff.get(k.op_type.split("+")[0], eff.get("default", 0.5))
        return e * float(self.spec.get("layout_penalty", 1.0)) if self.off_layout(k) else e

    @property
    def streams_weights(self) -> bool:
        return bool(self.spec.get("weights_streamed", False))

    def weight_load_us(self, k: Kernel) -> float:
        """Loading a kernel's weights from external memory (0 where weights are resident)."""
        if not self.streams_weights or not k.bytes_weights:
            return 0.0
        return k.bytes_weights / (float(self.spec.get("weight_gbps", self.spec["dram_gbps"])) * 1e3)

    def device_us(self, k: Kernel) -> float:
        """One kernel on the device, its streamed weights' load excluded (graph_us adds it)."""
        s = self.spec
        gflops = s["peak_gflops"][k.dtype] * self.efficiency(k)
        compute_us = self._aligned_flops(k) / (gflops * 1e3)
        working = k.bytes_in + k.bytes_out + (0 if self.streams_weights else k.bytes_weights)
        bw = s["sram_gbps"] if working <= s["sram_bytes"] else s["dram_gbps"]
        mem_us = working / (bw * 1e3)
        slow = max(float(s.get("op_slowdown", {}).get(n.op_type, 1.0)) for n in k.nodes)
        # away from its layout, the runtime reformats the kernel's input and output around it
        # (one more launch that reads and writes both), as cuDNN/TensorRT reformat layers do
        reformat = (s["launch_overhead_us"] + 2 * (k.bytes_in + k.bytes_out) / (bw * 1e3)
                    if self.off_layout(k) and float(s.get("layout_penalty", 1.0)) < 1.0 else 0.0)
        return (max(compute_us, mem_us) + s["launch_overhead_us"] + reformat) * slow

    def host_us(self, k: Kernel) -> float:
        s = self.spec
        return k.flops / (s["host_gflops"] * 1e3) + (k.bytes_in + k.bytes_weights + k.bytes_out) / (s["host_gbps"] * 1e3) + HOST_LAUNCH_US

    def link_us(self, nbytes: int) -> float:
        return nbytes / (self.spec["link_gbps"] * 1e3)

    def placement(self, kernels: list[Kernel]) -> list[bool]:
        """True where the kernel runs on the device."""
        return [r is None for r in bind(kernels, self.supported_ops, tuple(self.spec["peak_gflops"]))]

    def transfers(self, kernels: list[Kernel], infos, placement: list[bool], inputs_on_device: bool = False,
                  outputs: set[str] = frozenset()) -> list[int]:
        """Bytes crossing the link before each kernel runs (graph inputs start on the host, or
        on the device for a standalone micro-benchmark), plus, as one more entry, the
        host-computed outputs a standalone benchmark returns to the device."""
        moved = crossings(kernels, infos, placement, inputs_on_device)
        host_made = {t for k, dev in zip(kernels, placement) if not dev for t in k.outputs}
        return moved + [sum(infos[t].nbytes for t in outputs if t in infos and t in host_made)]

    def graph_us(self, kernels: list[Kernel], infos, double_buffer: bool = False, standalone: bool = False,
                 outputs: set[str] = frozenset()) -> tuple[float, int]:
        """Total modeled latency and the number of kernels bound to the host.

        standalone: a micro-benchmark of one kernel: its inputs already sit on the device and
        a host-bound kernel returns its outputs there (the round trip of the fallback path)."""
        placement = self.placement(kernels)
        moved = self.transfers(kernels, infos, placement, standalone, outputs if standalone else frozenset())
        total, prev = 0.0, 0.0
        for k, dev, nbytes in zip(kernels, placement, moved):
            run = self.device_us(k) if dev else self.host_us(k)
            # what must arrive before the kernel starts: its inputs over the link, its weights from flash
            load = self.link_us(nbytes) + (self.weight_load_us(k) if dev else 0.0)
            # double buffering: the loads stream while the previous kernel runs
            total += run + (max(0.0, load - prev) if double_buffer else load)
            prev = run
        total += self.link_us(moved[-1])
        return total, placement.count(False)

    def staging_bytes(self, kernels: list[Kernel], infos) -> int:
        """The second staging buffer double buffering needs: the largest single transfer."""
        moved = self.transfers(kernels, infos, self.placement(kernels))
        return max(moved[:-1], default=0)

    def memory(self, model: onnx.ModelProto, kernels: list[Kernel], infos) -> MemoryPlan:
        inits = {i.name for i in model.graph.initializer}
        inputs = [i.name for i in model.graph.input if i.name not in inits]
        strategy = model_strategy(model, self.spec.get("memory_strategy", DEFAULT_STRATEGY))
        extra = self.staging_bytes(kernels, infos) if double_buffered(model) else 0
        return plan_memory(kernels, infos, inputs, strategy, {o.name for o in model.graph.output},
                           extra_bytes=extra, streamed_weights=self.streams_weights,
                           double_buffer=double_buffered(model))


class SimulatedModel(Compiled):
    def __init__(self, backend: "SimulatedBackend", model: onnx.ModelProto):
        t0 = time.perf_counter()
        infos = tensor_infos(model)
        kernels = group_kernels(model, infos)
        dev = backend.device
        self.base_us, self.host_kernels = dev.graph_us(kernels, infos, double_buffer=double_buffered(model))
        self.peak_bytes = dev.memory(model, kernels, infos).peak_bytes
        self.session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        self.compile_s = time.perf_counter() - t0
        self._noise = backend.noise_source()

    def run(self, feeds):
        return self.session.run(None, feeds)

    def time_once(self, feeds) -> float:
        return self.base_us * self._noise() / 1e3

    def peak_memory(self, feeds) -> int:
        return self.peak_bytes


class SimulatedBackend(Backend):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.device = DeviceModel(self.spec)
        self._streams = 0

    @property
    def info(self) -> TargetInfo:
        s = self.spec
        return TargetInfo(
            name=self.name, measurement="modeled", firmware=str(s["firmware"]), driver=str(s["driver"]),
            # the cost model's version: a library's records measured under another one are not reused
            runtime=f"meta-infer-simulator-3 (numerics: onnxruntime-{ort.__version__} CPU)",
            memory_limit_bytes=int(s["memory_limit_bytes"]),
            # on an accelerator a plan competes for its on-chip memory (beyond it, traffic goes off chip)
            memory_budget_bytes=int(s.get("memory_budget_bytes") or min(s["sram_bytes"], s["memory_limit_bytes"])),
            supported_ops=tuple(s["supported_ops"]) if s.get("supported_ops") is not None else None,
            dtypes=tuple(s["peak_gflops"]), quantization=tuple(s.get("quantization", [])),
            preferred_layout=s.get("preferred_layout", "NCHW"), static_shapes=bool(s.get("static_shapes", False)),
            max_fusion_depth=int(s.get("max_fusion_depth", 1)),
            extra={"op_slowdown": dict(s.get("op_slowdown", {})), "link_gbps": float(s["link_gbps"]),
                   "memory_strategy": s.get("memory_strategy", DEFAULT_STRATEGY),
                   "weights_streamed": bool(s.get("weights_streamed", False)),
                   "weight_gbps": float(s.get("weight_gbps", s["dram_gbps"])),
                   "fuse_layers": bool(s.get("fuse_layers", False)),
                   "schedulable": True})

    def noise_source(self):
        """Seeded multiplicative jitter; each compiled model gets its own stream."""
        self._streams += 1
        rng = np.random.default_rng([self.seed, self._streams])
        sigma = float(self.spec.get("noise", 0.0))
        return lambda: float(rng.lognormal(0.0, sigma)) if sigma > 0 else 1.0

    def compile(self, model: onnx.ModelProto) -> SimulatedModel:
        return SimulatedModel(self, model)

    def benchmark(self, model: onnx.ModelProto, reps: int, warmup: int) -> Timing:
        """A kernel timed as it runs inside a graph: inputs already resident on the device; a
        kernel bound to the host pays the round trip over the link."""
        infos = tensor_infos(model)
        kernels = group_kernels(model, infos)
        base_us, host = self.device.graph_us(kernels, infos, double_buffer=double_buffered(model), standalone=True,
                                             outputs={o.name for o in model.graph.output})
        noise = self.noise_source()
        peak = self.device.memory(model, kernels, infos).peak_bytes
        return Timing.from_samples([base_us * noise() / 1e3 for _ in range(reps)], fallback=host > 0, peak_mem_bytes=peak)
