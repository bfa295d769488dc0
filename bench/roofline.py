"""The physical limit of a model on `cpu`: its work (FLOPs, compulsory bytes) and the machine's
peaks (fp32 and int8 throughput, memory bandwidth), measured here by micro-benchmarks in ONNX
Runtime with the cpu target's own session settings (one intra-op thread), so the limit and the
plan's latency come from the same engine and thread count.

The roofline time of a model is max(FLOPs / peak, bytes / bandwidth). Bytes are the compulsory
traffic (weights + graph inputs + graph outputs, each read or written once): a lower bound, so
the limit is one too, and `latency / limit` says how far a plan is from what the silicon allows.
A model served again and again keeps a footprint that fits the per-core cache there, so its
bytes move at the cache bandwidth (measured over a working set that fits it); larger footprints
at the large-array bandwidth (64 MiB: the last-level cache or DRAM, whichever holds it).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

from metainfer_core.ir.flops import node_flops
from metainfer_core.ir.tensors import tensor_infos


@dataclass(frozen=True)
class Work:
    flops: int               # multiply-accumulate = 2 operations (metainfer_core.ir.flops)
    weight_bytes: int        # fp32 weights as stored in the default model
    io_bytes: int            # graph inputs + outputs

    @property
    def bytes_fp32(self) -> int:
        return self.weight_bytes + self.io_bytes

    @property
    def bytes_int8(self) -> int:
        """Weights stored as int8 (a quarter of fp32); inputs and outputs stay float."""
        return self.weight_bytes // 4 + self.io_bytes


@dataclass(frozen=True)
class Peaks:
    fp32_gflops: float
    int8_gops: float
    bandwidth_gbs: float            # large arrays (64 MiB)
    cache_bandwidth_gbs: float      # a working set inside the per-core cache
    cache_bytes: int                # that cache's size (L2 from sysfs)

    def bandwidth_for(self, nbytes: int) -> float:
        return self.cache_bandwidth_gbs if nbytes <= self.cache_bytes else self.bandwidth_gbs

    def as_dict(self) -> dict:
        return asdict(self)


def model_work(model: onnx.ModelProto) -> Work:
    infos = tensor_infos(model)
    flops = sum(node_flops(n, infos) for n in model.graph.node)
    inits = {i.name for i in model.graph.initializer}
    weights = sum(infos[i].nbytes for i in inits if i in infos)
    io = sum(infos[v.name].nbytes for v in list(model.graph.input) + list(model.graph.output)
             if v.name in infos and v.name not in inits)
    return Work(int(flops), int(weights), int(io))


def roofline_ms(flops: int, nbytes: int, peak_gops: float, bandwidth_gbs: float) -> float:
    """max(compute time, memory time) in ms; a peak of 1 GOP/s is 1e6 operations per ms."""
    if peak_gops <= 0 or bandwidth_gbs <= 0:
        raise ValueError(f"peaks must be positive (got {peak_gops} GOP/s, {bandwidth_gbs} GB/s)")
    return max(flops / (peak_gops * 1e6), nbytes / (bandwidth_gbs * 1e6))


def limits_ms(work: Work, peaks: Peaks) -> dict[str, float]:
    """The fp32 limit (every op at the fp32 peak) and the int8 one (every op at the int8 peak,
    weights a byte each): an int8 plan is held to the int8 limit, any other to the fp32 one."""
    b32, b8 = work.bytes_fp32, work.bytes_int8
    return {"fp32": roofline_ms(work.flops, b32, peaks.fp32_gflops, peaks.bandwidth_for(b32)),
            "int8": roofline_ms(work.flops, b8, peaks.int8_gops, peaks.bandwidth_for(b8))}


def bound_by(work: Work, peaks: Peaks, precision: str) -> str:
    """'compute', 'memory (cache)' or 'memory (large arrays)': the term that sets the limit."""
    if precision == "int8":
        compute, nbytes = work.flops / peaks.int8_gops, work.bytes_int8
    else:
        compute, nbytes = work.flops / peaks.fp32_gflops, work.bytes_fp32
    if compute >= nbytes / peaks.bandwidth_for(nbytes):
        return "compute"
    return "memory (cache)" if nbytes <= peaks.cache_bytes else "memory (large arrays)"


# ---- micro-benchmarks -------------------------------------------------------------------------

def _model(nodes, inputs, outputs, inits=()) -> bytes:
    g = helper.make_graph(nodes, "peak", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _best_ms(session, feeds: dict, reps: int) -> float:
    """Fastest of `reps` runs: a peak is what the machine can do, not what it did on average
    while shared."""
    session.run(None, feeds)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        session.run(None, feeds)
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def best(a: Peaks, b: Peaks) -> Peaks:
    """Each peak at its best of two measurements (taken at the start and the end of the suite: on a
    shared machine the quieter moment is the closer to what the silicon can do)."""
    return Peaks(max(a.fp32_gflops, b.fp32_gflops), max(a.int8_gops, b.int8_gops), max(a.bandwidth_gbs, b.bandwidth_gbs),
                 max(a.cache_bandwidth_gbs, b.cache_bandwidth_gbs), a.cache_bytes)


def cache_size(level: int = 2, default: int = 1 << 20) -> int:
    """The per-core cache's size from Linux sysfs (e.g. '2048K'); `default` elsewhere."""
    from pathlib import Path

    for idx in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if int((idx / "level").read_text()) == level and (idx / "type").read_text().strip() != "Instruction":
                size = (idx / "size").read_text().strip()
                mult = {"K": 1 << 10, "M": 1 << 20}.get(size[-1], 1)
                return int(size.rstrip("KM")) * mult
        except (OSError, ValueError):
            continue
    return default


def measure_peaks(new_session, n: int = 512, mem_mib: int = 64, reps: int = 60) -> Peaks:
    """new_session(model_bytes) -> an ONNX Runtime session with the target's settings.
    fp32: an n x n x n MatMul. int8: the same MatMulInteger (uint8 x int8 -> int32, what a QDQ
    plan's quantized MatMul/Conv reduce to). Bandwidth: y = x + 1 over mem_mib MiB of fp32
    (reads and writes every byte once: 2 x size of traffic)."""
    rng = np.random.default_rng(0)
    f = helper.make_tensor_value_info
    a32, b32 = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    mm = _model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                [f("a", TensorProto.FLOAT, [n, n]), f("b", TensorProto.FLOAT, [n, n])], [f("y", TensorProto.FLOAT, [n, n])])
    fp32_ms = _best_ms(new_session(mm), {"a": a32, "b": b32}, reps)
    a8 = rng.integers(0, 255, (n, n), dtype=np.uint8)
    b8 = rng.integers(-127, 127, (n, n), dtype=np.int8)
    mmi = _model([helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
                 [f("a", TensorProto.UINT8, [n, n]), f("b", TensorProto.INT8, [n, n])], [f("y", TensorProto.INT32, [n, n])])
    int8_ms = _best_ms(new_session(mmi), {"a": a8, "b": b8}, reps)
    elems = mem_mib * (1 << 20) // 4
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    add = _model([helper.make_node("Add", ["x", "one"], ["y"])], [f("x", TensorProto.FLOAT, [elems])],
                 [f("y", TensorProto.FLOAT, [elems])], [one])
    add_ms = _best_ms(new_session(add), {"x": rng.standard_normal(elems, dtype=np.float32)}, reps)
    # in cache: a chain of 32 Adds over a quarter of the cache (in + out buffers stay resident), so
    # the per-run overhead of ONNX Runtime is shared by 32 passes
    cache = cache_size()
    small, chain = max(cache // 4 // 4, 1024), 32
    nodes = [helper.make_node("Add", ["x" if i == 0 else f"t{i}", "one"], [f"t{i + 1}" if i < chain - 1 else "y"])
             for i in range(chain)]
    chained = _model(nodes, [f("x", TensorProto.FLOAT, [small])], [f("y", TensorProto.FLOAT, [small])], [one])
    chain_ms = _best_ms(new_session(chained), {"x": rng.standard_normal(small, dtype=np.float32)}, reps * 5)
    ops = 2.0 * n ** 3
    return Peaks(fp32_gflops=ops / (fp32_ms * 1e6), int8_gops=ops / (int8_ms * 1e6),
                 bandwidth_gbs=2 * elems * 4 / (add_ms * 1e6), cache_bandwidth_gbs=chain * 2 * small * 4 / (chain_ms * 1e6),
                 cache_bytes=cache)
