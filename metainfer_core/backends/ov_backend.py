"""Measured backend: OpenVINO's CPU plugin, reading the ONNX graph directly.

Threads are pinned like the ONNX Runtime backend's (`intra_op_threads`), with the latency hint
and one stream, so both paths are compared on equal resources. `inference_precision` sets
OpenVINO's INFERENCE_PRECISION_HINT (f32 | bf16 | f16; always explicit: the plugin's default
on a CPU with AVX512_BF16 is bf16, which changes the numerics). Inputs with dynamic dims are
reshaped to the feeds' shapes before compiling, one compile per shape, the last few kept
(OvCompiled): the plugin is faster on static shapes, in verify as in deployment."""
from __future__ import annotations

import functools
import time
from collections import OrderedDict
from typing import Any

import numpy as np
import onnx

from metainfer_core.backends import cpu_features
from metainfer_core.backends.base import Backend, Compiled, TargetInfo, Timing
from metainfer_core.backends.peak_probe import probe
from metainfer_core.backends.timing import scaled_reps
from metainfer_core.ir.tensors import random_feeds

_PRECISION = {"f32": "f32", "bf16": "bf16", "f16": "f16"}


@functools.lru_cache(maxsize=1)
def ov_core():
    """One OpenVINO Core per process: creating one loads the plugins, every compile reuses it."""
    import openvino as ov

    core = ov.Core()
    core.set_property({"LOG_LEVEL": "LOG_NONE"})
    return core


def read_onnx(model_bytes: bytes, shapes: dict[str, list[int]] | None = None):
    """The serialized ONNX model as OpenVINO reads it, reshaped to `shapes` (input -> dims) when given."""
    ov_model = ov_core().read_model(model_bytes, b"")
    if shapes is not None:
        ov_model.reshape(shapes)
    return ov_model


def device_precisions() -> set[str]:
    """Inference precisions the CPU plugin reports a datapath for (OPTIMIZATION_CAPABILITIES)."""
    caps = set(ov_core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    return {p for p, cap in (("f32", "FP32"), ("bf16", "BF16"), ("f16", "FP16")) if cap in caps}


def _static(model: onnx.ModelProto) -> bool:
    inits = {i.name for i in model.graph.initializer}
    return all(d.HasField("dim_value") for i in model.graph.input if i.name not in inits
               for d in i.type.tensor_type.shape.dim)


MAX_SHAPES = 8      # compiles of one graph kept, one per input shape (least recently run dropped)


def _shape_key(feeds: dict[str, np.ndarray]) -> tuple:
    return tuple((k, tuple(np.shape(v))) for k, v in sorted(feeds.items()))


class OvCompiled(Compiled):
    """OpenVINO compiled model(s) and infer request(s); outputs in the graph's output order."""

    def __init__(self, backend: "OpenVinoBackend", model: onnx.ModelProto, profile: bool = False):
        """A graph with dynamic dims is compiled for each input shape it meets, and the last
        MAX_SHAPES compiles are kept (a shape met again runs at once): a static compile ran
        faster than one for a range's bounds, and an int8 or CTC graph compiled for bounds gave
        wrong outputs (docs/decisions/2026-12-06-shape-ranges.md)."""
        self._backend, self._profile = backend, profile
        self._bytes = model.SerializeToString()
        self._outputs = [o.name for o in model.graph.output]
        self._shapes: tuple | None = None
        self._kept: OrderedDict[tuple | None, tuple] = OrderedDict()
        self.compile_s = 0.0
        self.request = None
        self.compiles_per_shape = not _static(model)
        if not self.compiles_per_shape:
            self._compile(None)

    def _read(self, feeds: dict[str, np.ndarray] | None):
        if feeds is None:
            return read_onnx(self._bytes)
        return read_onnx(self._bytes, {k: list(v.shape) for k, v in feeds.items()})

    def _compile(self, feeds: dict[str, np.ndarray] | None) -> None:
        t0 = time.perf_counter()
        ov_model = self._read(feeds)
        self.compiled = ov_core().compile_model(ov_model, "CPU", self._backend.config(self._profile))
        self.request = self.compiled.create_infer_request()
        self._ports = {self._port_name(p): i for i, p in enumerate(self.compiled.outputs)}
        self.compile_s += time.perf_counter() - t0
        self._shapes = None if feeds is None else _shape_key(feeds)
        self._kept[self._shapes] = (self.compiled, self.request, self._ports)
        while len(self._kept) > MAX_SHAPES:
            self._kept.popitem(last=False)

    @staticmethod
    def _port_name(port) -> str:
        names = port.get_names()
        return next(iter(sorted(names)), "") if names else ""

    def _ready(self, feeds) -> None:
        if self.request is not None and (self._shapes is None or self._shapes == _shape_key(feeds)):
            return
        hit = self._kept.get(_shape_key(feeds))
        if hit is None:
            self._compile(feeds)
            return
        self._kept.move_to_end(_shape_key(feeds))
        self.compiled, self.request, self._ports = hit
        self._shapes = _shape_key(feeds)

    def run(self, feeds):
        self._ready(feeds)
        return self._outputs_of(self.compiled, self.request.infer(feeds))

    def _outputs_of(self, compiled, result) -> list[np.ndarray]:
        values = list(result.values())
        by_name = {}
        for port, value in zip(compiled.outputs, values):
            for n in port.get_names():
                by_name[n] = value
        return [np.array(by_name[n]) if n in by_name else np.array(values[i]) for i, n in enumerate(self._outputs)]

    def slots(self, n: int, feeds: dict[str, np.ndarray]) -> list:
        """`n` infer requests of the model compiled for `feeds`' shapes: the plugin runs them on
        its streams at once (one request is not safe to run from two threads). Each is run once
        here, one after another: a request's first run specializes it, and requests specializing at
        once on a machine with few cores were reported to hang the CPU plugin, as a load here once
        did (docs/decisions/2026-12-07-a-load-that-hung.md)."""
        self._ready(feeds)
        compiled = self.compiled
        requests = [compiled.create_infer_request() for _ in range(n)]
        for request in requests:
            request.infer(feeds)

        def slot(request):
            return lambda f: self._outputs_of(compiled, request.infer(f))

        return [slot(r) for r in requests]

    def time_once(self, feeds) -> float:
        self._ready(feeds)
        t0 = time.perf_counter()
        self.request.infer(feeds)
        return (time.perf_counter() - t0) * 1e3

    def peak_memory(self, feeds) -> int:
        return self._backend.probe_peak_memory(self._bytes, feeds)

    def node_times_us(self, feeds, runs: int = 10) -> dict[str, float]:
        """Median per-node time from OpenVINO's performance counters (executed nodes only)."""
        profiled = OvCompiled(self._backend, onnx.load_from_string(self._bytes), profile=True)
        profiled._ready(feeds)
        per: dict[str, list[float]] = {}
        for _ in range(runs):
            profiled.request.infer(feeds)
            for info in profiled.request.get_profiling_info():
                if str(info.status).endswith("EXECUTED"):
                    per.setdefault(info.node_name, []).append(info.real_time.total_seconds() * 1e6)
        return {k: float(np.median(v)) for k, v in per.items()}


class OvModelCompiled(OvCompiled):
    """A model already in OpenVINO's form (NNCF's quantized output has no ONNX one), compiled as
    it is, shapes included, with its backend's settings; its peak memory is not probed (the
    probe runs the ONNX model)."""

    def __init__(self, backend: "OpenVinoBackend", ov_model):
        self._backend, self._profile, self._ov_model = backend, False, ov_model
        self._bytes = b""
        self._outputs = [self._port_name(p) for p in ov_model.outputs]
        self._shapes = None
        self._kept = OrderedDict()
        self.compile_s = 0.0
        self._compile(None)

    def _read(self, feeds):
        return self._ov_model

    def peak_memory(self, feeds) -> int:
        raise NotImplementedError("the peak-memory probe runs an ONNX model; this one is in OpenVINO's form only")

    def node_times_us(self, feeds, runs: int = 10) -> dict[str, float]:
        raise NotImplementedError("per-node times are profiled on an ONNX model; this one is in OpenVINO's form only")


def ov_firmware(device: str) -> str:
    """The host CPU's identity (as on the ONNX Runtime path: vendor, family, model, kernel-relevant
    extensions), with the plugin's device name where it reads otherwise than the CPU's model name;
    the plugin's capability list (which separates bf16 only) stays in the driver string."""
    cpu = cpu_features.host_cpu()
    tag = cpu.tag if not device or device.strip() == cpu.name else f"{cpu.tag} ov=\"{device.strip()}\""
    return tag[:256]


class OpenVinoBackend(Backend):
    @property
    def precision(self) -> str:
        p = str(self.spec.get("inference_precision", "f32"))
        if p not in _PRECISION:
            raise ValueError(f"inference_precision {p!r}: use one of {sorted(_PRECISION)}")
        return p

    def config(self, profile: bool = False) -> dict[str, Any]:
        hint = str(self.spec.get("performance_hint", "LATENCY"))
        out = {"INFERENCE_NUM_THREADS": int(self.spec.get("intra_op_threads", 1)), "PERFORMANCE_HINT": hint,
               "INFERENCE_PRECISION_HINT": _PRECISION[self.precision], "PERF_COUNT": bool(profile)}
        streams = self.spec.get("num_streams", 1 if hint == "LATENCY" else None)
        if streams is not None:     # THROUGHPUT without num_streams: the plugin picks them
            out["NUM_STREAMS"] = int(streams)
        return out

    @property
    def info(self) -> TargetInfo:
        import openvino as ov

        core = ov_core()
        caps = ",".join(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
        s = self.spec
        return TargetInfo(
            name=self.name, measurement=self.measurement,
            firmware=ov_firmware(core.get_property("CPU", "FULL_DEVICE_NAME")),
            driver=f"plugin=CPU;caps={caps};threads={s.get('intra_op_threads', 1)};precision={self.precision};"
                   f"hint={s.get('performance_hint', 'LATENCY')}",
            runtime=f"openvino-{ov.__version__.split('-')[0]}", memory_limit_bytes=int(s["memory_limit_bytes"]),
            memory_budget_bytes=int(s.get("memory_budget_bytes") or 0),
            supported_ops=None, dtypes=tuple(s.get("dtypes", ["float32"])),
            quantization=tuple(s.get("quantization", [])), preferred_layout=s.get("preferred_layout", "NCHW"),
            static_shapes=False, max_fusion_depth=1, extra={"execution_path": f"openvino:{self.precision}"})

    def compile(self, model: onnx.ModelProto) -> OvCompiled:
        return OvCompiled(self, model)

    def compile_ov(self, ov_model) -> OvModelCompiled:
        """An `openvino.Model` compiled and timed as compile() does an ONNX one (bench/peers.py)."""
        return OvModelCompiled(self, ov_model)

    def benchmark(self, model: onnx.ModelProto, reps: int, warmup: int) -> Timing:
        feeds = random_feeds(model, seed=self.seed)
        c = self.compile(model)
        outputs = c.run(feeds)
        reps, warmup = scaled_reps(reps, warmup, c.time_once(feeds))
        for _ in range(warmup):
            c.run(feeds)
        working_set = (sum(a.nbytes for a in feeds.values()) + sum(o.nbytes for o in outputs)
                       + sum(onnx.numpy_helper.to_array(i).nbytes for i in model.graph.initializer))
        return Timing.from_samples([c.time_once(feeds) for _ in range(reps)], peak_mem_bytes=working_set)

    def probe_peak_memory(self, model_bytes: bytes, feeds: dict[str, np.ndarray]) -> int:
        return probe(model_bytes, feeds, {"runtime": "openvino", "config": self.config()})
