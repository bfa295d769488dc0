"""Modeled backend: a device simulated from the spec in conf/target/<name>.yaml.

Latencies are MODELED, not measured: each kernel costs max(compute, memory traffic) plus a
launch overhead, where compute uses the device's peak throughput for the kernel's precision
(times an op efficiency and channel-alignment padding) and memory traffic is served from
on-chip SRAM when the kernel's working set fits and from DRAM when it spills. Kernels the
device cannot run (op outside its op set, or a precision it has no datapath for) run on the
host and pay the link transfer of every tensor that crosses between host and device. A
seeded log-normal noise imitates run-to-run jitter. Numerics run on ONNX Runtime's CPU
provider with the graph's own precision, so fp16/int8 plans show their real accuracy loss."""
from __future__ import annotations

import math
import time

import numpy as np
import onnx
import onnxruntime as ort

from metainfer_core.backends.base import Backend, Compiled, TargetInfo, Timing
from metainfer_core.kernels import Kernel, group_kernels
from metainfer_core.memory import peak_memory_bytes
from metainfer_core.tensors import tensor_infos

_ALIGNED = {"Conv", "ConvTranspose", "MatMul", "Gemm"}
HOST_LAUNCH_US = 5.0


class DeviceModel:
    """The cost model of one spec; pure functions of kernels."""

    def __init__(self, spec: dict):
        self.spec = spec

    def unsupported_reason(self, k: Kernel) -> str | None:
        ops = self.spec.get("supported_ops")
        if ops is not None:
            missing = sorted({n.op_type for n in k.nodes} - set(ops))
            if missing:
                return f"op {missing[0]} is not in the device op set"
        if k.dtype not in self.spec["peak_gflops"]:
            return f"no {k.dtype} datapath"
        return None

    def _aligned_flops(self, k: Kernel) -> float:
        align = int(self.spec.get("channel_align", 1))
        primary = k.op_type.split("+")[0]
        if align <= 1 or primary not in _ALIGNED or not k.out_shapes or not k.out_shapes[0]:
            return float(k.flops)
        # channels are dim 1 for Conv outputs, the last dim for MatMul/Gemm
        c = k.out_shapes[0][1] if primary.startswith("Conv") and len(k.out_shapes[0]) > 1 else k.out_shapes[0][-1]
        return k.flops * (math.ceil(c / align) * align) / max(c, 1)

    def device_us(self, k: Kernel) -> float:
        s = self.spec
        eff = s.get("op_efficiency", {})
        primary = k.op_type.split("+")[0]
        gflops = s["peak_gflops"][k.dtype] * eff.get(primary, eff.get("default", 0.5))
        compute_us = self._aligned_flops(k) / (gflops * 1e3)
        working = k.bytes_in + k.bytes_weights + k.bytes_out
        bw = s["sram_gbps"] if working <= s["sram_bytes"] else s["dram_gbps"]
        mem_us = working / (bw * 1e3)
        slow = max(float(s.get("op_slowdown", {}).get(n.op_type, 1.0)) for n in k.nodes)
        return (max(compute_us, mem_us) + s["launch_overhead_us"]) * slow

    def host_us(self, k: Kernel) -> float:
        s = self.spec
        return k.flops / (s["host_gflops"] * 1e3) + (k.bytes_in + k.bytes_weights + k.bytes_out) / (s["host_gbps"] * 1e3) + HOST_LAUNCH_US

    def link_us(self, nbytes: int) -> float:
        return nbytes / (self.spec["link_gbps"] * 1e3)

    def graph_us(self, kernels: list[Kernel], infos) -> tuple[float, int]:
        """Total modeled latency and the number of kernels that fell back to the host."""
        on_device = {}
        placement = []
        for k in kernels:
            dev = self.unsupported_reason(k) is None
            placement.append(dev)
            for t in k.outputs:
                on_device[t] = dev
        total = 0.0
        for k, dev in zip(kernels, placement):
            total += self.device_us(k) if dev else self.host_us(k)
            # tensors crossing the host/device boundary pay the link; graph inputs start on the host
            crossing = sum(infos[t].nbytes for t in k.inputs if t in infos and on_device.get(t, False) != dev)
            total += self.link_us(crossing)
        return total, placement.count(False)


class SimulatedModel(Compiled):
    def __init__(self, backend: "SimulatedBackend", model: onnx.ModelProto):
        t0 = time.perf_counter()
        infos = tensor_infos(model)
        kernels = group_kernels(model, infos)
        self.base_us, self.host_kernels = backend.device.graph_us(kernels, infos)
        inits = {i.name for i in model.graph.initializer}
        inputs = [i.name for i in model.graph.input if i.name not in inits]
        self.peak_bytes = peak_memory_bytes(kernels, infos, inputs)
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
            runtime=f"meta-infer-simulator-1 (numerics: onnxruntime-{ort.__version__} CPU)",
            memory_limit_bytes=int(s["memory_limit_bytes"]),
            supported_ops=tuple(s["supported_ops"]) if s.get("supported_ops") is not None else None,
            dtypes=tuple(s["peak_gflops"]), quantization=tuple(s.get("quantization", [])),
            preferred_layout=s.get("preferred_layout", "NCHW"), static_shapes=bool(s.get("static_shapes", False)),
            max_fusion_depth=int(s.get("max_fusion_depth", 1)),
            extra={"op_slowdown": dict(s.get("op_slowdown", {}))})

    def noise_source(self):
        """Seeded multiplicative jitter; each compiled model gets its own stream."""
        self._streams += 1
        rng = np.random.default_rng([self.seed, self._streams])
        sigma = float(self.spec.get("noise", 0.0))
        return lambda: float(rng.lognormal(0.0, sigma)) if sigma > 0 else 1.0

    def compile(self, model: onnx.ModelProto) -> SimulatedModel:
        return SimulatedModel(self, model)

    def benchmark(self, model: onnx.ModelProto, reps: int, warmup: int) -> Timing:
        infos = tensor_infos(model)
        kernels = group_kernels(model, infos)
        base_us, host = self.device.graph_us(kernels, infos)
        noise = self.noise_source()
        inits = {i.name for i in model.graph.initializer}
        peak = peak_memory_bytes(kernels, infos, [i.name for i in model.graph.input if i.name not in inits])
        return Timing.from_samples([base_us * noise() / 1e3 for _ in range(reps)], fallback=host > 0, peak_mem_bytes=peak)
