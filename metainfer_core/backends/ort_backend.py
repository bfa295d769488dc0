"""Measured backend: ONNX Runtime with a configurable execution-provider list.

Latencies are wall-clock times of real runs on this machine; peak memory is the process's
resident high-water mark while a fresh session is created and run."""
from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from metainfer_core.backends import cpu_features
from metainfer_core.backends.base import Backend, Compiled, TargetInfo, Timing
from metainfer_core.backends.peak_probe import probe
from metainfer_core.backends.timing import scaled_reps
from metainfer_core.ir.tensors import ORT_LOG_SEVERITY, random_feeds

_LEVELS = {"ORT_DISABLE_ALL": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
           "ORT_ENABLE_BASIC": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
           "ORT_ENABLE_EXTENDED": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
           "ORT_ENABLE_ALL": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}


def end_profiling(sess: ort.InferenceSession) -> list[dict[str, Any]]:
    """Stop a profiling session and return its events; the trace file and its folder go."""
    path = sess.end_profiling()
    try:
        with open(path) as f:
            return json.load(f)
    finally:
        os.remove(path)
        os.rmdir(os.path.dirname(path))


def node_durations(events: list[dict[str, Any]]) -> tuple[dict[str, list[float]], dict[str, str]]:
    """From a profile's events: each runtime node's kernel times (us, one per run, in run order,
    nodes in execution order) and its op type."""
    per: dict[str, list[float]] = {}
    ops: dict[str, str] = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            name = e["name"].removesuffix("_kernel_time")
            per.setdefault(name, []).append(float(e["dur"]))
            ops.setdefault(name, e.get("args", {}).get("op_name", ""))
    return per, ops


class OrtSession(Compiled):
    def __init__(self, backend: "OrtBackend", model: onnx.ModelProto):
        self._bytes = model.SerializeToString()
        self._backend = backend
        t0 = time.perf_counter()
        self.session = backend.new_session(self._bytes)
        self.compile_s = time.perf_counter() - t0

    def run(self, feeds):
        return self.session.run(None, feeds)

    def time_once(self, feeds) -> float:
        t0 = time.perf_counter()
        self.session.run(None, feeds)
        return (time.perf_counter() - t0) * 1e3

    def peak_memory(self, feeds) -> int:
        """Session creation plus one run, measured in a fresh process (see peak_probe)."""
        return self._backend.probe_peak_memory(self._bytes, feeds)

    def node_times_us(self, feeds, runs: int = 10) -> dict[str, float]:
        """Median per-node kernel time from ONNX Runtime's profiler."""
        per, _ = node_durations(self._backend.profile_events(self._bytes, feeds, runs))
        return {k: float(np.median(v)) for k, v in per.items()}


class OrtBackend(Backend):
    @property
    def info(self) -> TargetInfo:
        s = self.spec
        return TargetInfo(
            name=self.name, measurement=self.measurement, firmware=cpu_features.cpu_firmware(),
            driver=f"providers={','.join(self.providers)};threads={s.get('intra_op_threads', 0)};"
                   f"opt={s.get('graph_optimization_level', 'ORT_ENABLE_ALL')}",
            runtime=f"onnxruntime-{ort.__version__}", memory_limit_bytes=int(s["memory_limit_bytes"]),
            memory_budget_bytes=int(s.get("memory_budget_bytes") or 0),
            supported_ops=None, dtypes=tuple(s.get("dtypes", ["float32"])),
            quantization=tuple(s.get("quantization", [])), preferred_layout=s.get("preferred_layout", "NCHW"),
            static_shapes=bool(s.get("static_shapes", False)), max_fusion_depth=1)

    @property
    def providers(self) -> list[str]:
        return list(self.spec.get("providers", ["CPUExecutionProvider"]))

    def session_options(self, profile: bool = False) -> ort.SessionOptions:
        so = ort.SessionOptions()
        so.intra_op_num_threads = int(self.spec.get("intra_op_threads", 0))
        so.inter_op_num_threads = 1
        so.graph_optimization_level = _LEVELS[self.spec.get("graph_optimization_level", "ORT_ENABLE_ALL")]
        so.log_severity_level = ORT_LOG_SEVERITY
        if so.intra_op_num_threads != 1:
            # idle pool threads that spin steal the cores from the next run of another session (a
            # plan timed beside the default, sessions serving requests at once): they sleep instead
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if profile:
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="metainfer-prof-"), "ort")
        return so

    def new_session(self, model_bytes: bytes, profile: bool = False) -> ort.InferenceSession:
        return ort.InferenceSession(model_bytes, self.session_options(profile), providers=self.providers)

    def profile_events(self, model_bytes: bytes, feeds: dict[str, np.ndarray], runs: int) -> list[dict[str, Any]]:
        sess = self.new_session(model_bytes, profile=True)
        for _ in range(runs):
            sess.run(None, feeds)
        return end_profiling(sess)

    def probe_peak_memory(self, model_bytes: bytes, feeds: dict[str, np.ndarray]) -> int:
        return probe(model_bytes, feeds, {
            "runtime": "onnxruntime", "providers": self.providers,
            "intra_op_threads": int(self.spec.get("intra_op_threads", 0)),
            "graph_optimization_level": self.spec.get("graph_optimization_level", "ORT_ENABLE_ALL")})

    def compile(self, model: onnx.ModelProto) -> OrtSession:
        return OrtSession(self, model)

    def benchmark(self, model: onnx.ModelProto, reps: int, warmup: int) -> Timing:
        data = model.SerializeToString()
        feeds = random_feeds(model, seed=self.seed)
        sess = self.new_session(data)
        outputs = sess.run(None, feeds)
        t0 = time.perf_counter()
        sess.run(None, feeds)
        reps, warmup = scaled_reps(reps, warmup, (time.perf_counter() - t0) * 1e3)
        for _ in range(warmup):
            sess.run(None, feeds)
        # a kernel's footprint is its working set; a per-kernel process probe would cost more than the timing
        working_set = (sum(a.nbytes for a in feeds.values()) + sum(o.nbytes for o in outputs)
                       + sum(numpy_helper.to_array(i).nbytes for i in model.graph.initializer))
        samples = []
        for _ in range(reps):
            t0 = time.perf_counter()
            sess.run(None, feeds)
            samples.append((time.perf_counter() - t0) * 1e3)
        return Timing.from_samples(samples, fallback=self._fell_back(data, model, feeds), peak_mem_bytes=working_set)

    def _fell_back(self, data: bytes, model: onnx.ModelProto, feeds) -> bool:
        """A node placed on a later provider in the list, or a runtime-inserted Cast (the slow
        path ONNX Runtime takes when a kernel lacks the requested precision)."""
        if len(self.providers) == 1 and not _holds_float16(model):
            return False        # no other provider to fall to, and ONNX Runtime inserts such Casts for float16 only
        primary = self.providers[0]
        for e in self.profile_events(data, feeds, runs=1):
            if e.get("cat") != "Node":
                continue
            provider = e.get("args", {}).get("provider")
            if (provider and provider != primary) or "InsertedPrecisionFreeCast" in e["name"]:
                return True
        return False


def _holds_float16(model: onnx.ModelProto) -> bool:
    """Any 16-bit float tensor in the graph's interface, weights or Casts (float16 is what ONNX
    Runtime's InsertCastTransformer acts on; bfloat16 kernels are probed too, to be safe).
    Skipping the profiled probe for the rest halves the sessions a micro-benchmark creates."""
    g = model.graph
    half = {onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
    if any(v.type.tensor_type.elem_type in half for v in list(g.input) + list(g.output) + list(g.value_info)):
        return True
    if any(i.data_type in half for i in g.initializer):
        return True
    return any(a.name == "to" and a.i in half for n in g.node if n.op_type == "Cast" for a in n.attribute)
