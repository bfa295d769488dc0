"""Micro-benchmarks: every distinct kernel of the given graphs is cut out as a standalone
ONNX model and timed on the target, at the deployment batch and along a batch gradient.
Kernels already in the library for the current fingerprint version are not measured again."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import onnx
from onnx import helper

from metainfer_core.backends.base import Backend
from metainfer_core.fingerprint.kernel_store import save_kernels
from metainfer_core.fingerprint.library import FingerprintLibrary, Measurement
from metainfer_core.ir.features import kernel_features
from metainfer_core.ir.kernels import Kernel, group_kernels
from metainfer_core.ir.tensors import TensorInfo, tensor_infos


@dataclass
class ProfileReport:
    fingerprint_version: str
    measured: int = 0
    reused: int = 0
    skipped: list[str] = field(default_factory=list)     # kernels that cannot run standalone, with why
    seconds: float = 0.0
    left: int = 0           # (kernel, batch) measurements the time allowance left for a later run


_BATCHED: dict[int, tuple[onnx.ModelProto, set[str]]] = {}


def batched_tensors(model: onnx.ModelProto) -> set[str]:
    """Tensors computed from a fed graph input: only those carry the batch. A weight that a
    node computes from constants (ConstantOfShape of a shape too big to fold) does not. Cached
    per model object, since every kernel of a model asks."""
    hit = _BATCHED.get(id(model))
    if hit is not None and hit[0] is model:
        return hit[1]
    inits = {t.name for t in model.graph.initializer}
    live = {i.name for i in model.graph.input if i.name not in inits}
    for n in model.graph.node:      # topological order
        # a node with a body may read live tensors from the outer scope: count it as batched
        if any(i in live for i in n.input) or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                                  for a in n.attribute):
            live.update(o for o in n.output if o)
    if len(_BATCHED) > 8:
        _BATCHED.clear()
    _BATCHED[id(model)] = (model, live)
    return live


def kernel_model(model: onnx.ModelProto, k: Kernel, infos: dict[str, TensorInfo], batch_scale: int = 1) -> onnx.ModelProto:
    """The kernel alone: its activations become graph inputs (first dim scaled where they carry
    the batch), its weights are copied, its external outputs become graph outputs."""
    batched = batched_tensors(model) if batch_scale != 1 else set()

    def vi(name: str, scale: bool) -> onnx.ValueInfoProto:
        info = infos[name]
        shape = list(info.shape)
        if scale and shape and name in batched:
            shape[0] *= batch_scale
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(info.dtype), shape)

    weights = set(k.weights)
    inits = [i for i in model.graph.initializer if i.name in weights]
    # outputs keep their rank; sizes are left to shape inference since inputs may be scaled
    out_vis = [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(infos[o].dtype), [None] * len(infos[o].shape))
               for o in k.outputs]
    graph = helper.make_graph([n for n in k.nodes], f"kernel_{k.key()}", [vi(i, True) for i in k.inputs], out_vis, inits)
    km = helper.make_model(graph, opset_imports=list(model.opset_import))
    km.ir_version = model.ir_version
    km.functions.extend(model.functions)
    onnx.checker.check_model(km)
    inferred = onnx.shape_inference.infer_shapes(km, strict_mode=True)
    if batch_scale != 1:
        _check_reshapes(inferred)
    return inferred


def _check_reshapes(km: onnx.ModelProto) -> None:
    """Refuse a Reshape whose constant target (baked at the deployment batch, e.g. [1, 200])
    cannot take the scaled input: ONNX shape inference does not compare element counts, and
    ONNX Runtime would fail only at run time, after logging an error line to the terminal."""
    dims = {vi.name: [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
            for vi in [*km.graph.value_info, *km.graph.input, *km.graph.output]}
    for node in km.graph.node:
        if node.op_type != "Reshape":
            continue
        before, after = dims.get(node.input[0]), dims.get(node.output[0])
        if before and after and None not in before + after and math.prod(before) != math.prod(after):
            raise ValueError(f"Reshape {node.name} has a fixed target {after} that a batch-scaled input "
                             f"{before} does not fit")


def distinct_kernels(models: list[onnx.ModelProto], op_filter: set[str] | None = None
                     ) -> list[tuple[onnx.ModelProto, Kernel, dict[str, TensorInfo]]]:
    seen, out = set(), []
    for m in models:
        infos = tensor_infos(m)
        for k in group_kernels(m, infos):
            if op_filter is not None and k.op_type.split("+")[0] not in op_filter:
                continue
            if k.key() not in seen and k.outputs and all(i in infos for i in k.inputs + k.outputs):
                seen.add(k.key())
                out.append((m, k, infos))
    return out


def profile(backend: Backend, library: FingerprintLibrary, models: list[onnx.ModelProto], batch_gradient: list[int],
            reps: int, warmup: int, progress: Callable[[int, int], None] | None = None,
            op_filter: set[str] | None = None, deadline_s: float | None = None) -> ProfileReport:
    """Measure every kernel of `models` (only those whose op is in `op_filter`, when given), in
    the order of `models` (the default graph's kernels, then the variants'). With `deadline_s`,
    every kernel at the first batch of the gradient comes before the other batches, and past
    that many seconds the rest is left (report.left) to a later run; the first graph's kernels
    at the first batch are always measured (the predictor needs them)."""
    info = backend.info
    version = library.register_version(info)
    report = ProfileReport(version)
    t0 = time.perf_counter()
    known = library.known_keys(version)
    kernels = distinct_kernels(models, op_filter)
    todo = ([(m, k, infos, scale) for scale in batch_gradient for m, k, infos in kernels] if deadline_s is not None
            else [(m, k, infos, scale) for m, k, infos in kernels for scale in batch_gradient])
    needed = sum(1 for m, _, _ in kernels if m is models[0]) if models else 0
    batch: list[Measurement] = []
    kernel_files: dict[str, onnx.ModelProto] = {}
    for done, (m, k, infos, scale) in enumerate(todo, 1):
        if deadline_s is not None and done > needed and time.perf_counter() - t0 > deadline_s:
            report.left = len(todo) - done + 1
            break
        _measure_one(backend, m, k, infos, scale, reps, warmup, known, report, batch, kernel_files)
        if progress:
            progress(done, len(todo))
    report.measured = library.add(info, batch)
    save_kernels(library, kernel_files)
    report.seconds = time.perf_counter() - t0
    return report


def _measure_one(backend: Backend, m: onnx.ModelProto, k: Kernel, infos: dict[str, TensorInfo], scale: int, reps: int,
                 warmup: int, known: set[str], report: ProfileReport, batch: list[Measurement],
                 kernel_files: dict[str, onnx.ModelProto]) -> None:
    try:
        km = kernel_model(m, k, infos, scale)
        standalone = group_kernels(km)
    except Exception as exc:  # noqa: BLE001 - any op may refuse a scaled or cut-out shape
        report.skipped.append(f"{k.op_type} {k.node_names[0]} x{scale}: {str(exc).splitlines()[0][:160]}")
        return
    if len(standalone) != 1:
        report.skipped.append(f"{k.op_type} {k.node_names[0]}: splits into {len(standalone)} kernels standalone")
        return
    sk = standalone[0]
    if sk.key() in known:
        report.reused += 1
        return
    try:
        timing = backend.benchmark(km, reps=reps, warmup=warmup)
    except Exception as exc:  # noqa: BLE001 - e.g. no kernel for this dtype on this provider
        report.skipped.append(f"{k.op_type} {k.node_names[0]} x{scale}: {str(exc).splitlines()[0][:160]}")
        return
    known.add(sk.key())
    kernel_files[sk.key()] = km
    # normalized graphs express every layout as NCHW (layout changes are explicit Transposes)
    batch.append(Measurement(sk.key(), sk.op_type, sk.dtype, "NCHW", sk.signature(), kernel_features(sk), timing,
                             sk.bytes_in + sk.bytes_weights + sk.bytes_out))
