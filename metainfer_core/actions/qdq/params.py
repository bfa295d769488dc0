"""int8 quantization parameters: activation scale and zero point from a calibrated range
(asymmetric, or symmetric for OpenVINO's form), weights quantized per channel or per tensor, and
which axis a weight's scales run along."""
from __future__ import annotations

import numpy as np
import onnx

from metainfer_core.actions.qdq.calibration import Range
from metainfer_core.ir.graph_utils import attr_value


def act_params(r: Range, qtype: str) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = r
    qmin, qmax, dt = (0, 255, np.uint8) if qtype == "QUInt8" else (-128, 127, np.int8)
    scale = (hi - lo) / (qmax - qmin) or 1.0
    zp = int(np.clip(round(qmin - lo / scale), qmin, qmax))
    return np.array(scale, np.float32), np.array(zp, dt)


def symmetric_act_params(r: Range) -> tuple[np.ndarray, np.ndarray]:
    """Zero point 0: uint8 over [0, hi] for a non-negative tensor, else int8 over [-amax, amax]."""
    lo, hi = r
    if lo >= 0:
        return np.array(hi / 255.0 or 1.0, np.float32), np.array(0, np.uint8)
    return np.array(max(-lo, hi) / 127.0 or 1.0, np.float32), np.array(0, np.int8)


def concat_act_params(r: Range) -> tuple[np.ndarray, np.ndarray]:
    """symmetric_act_params for the inputs a Concat joins, with a signed range written as uint8
    with zero point 128: the same grid as int8 with zero point 0 (ONNX Runtime computes the same
    values), but OpenVINO's CPU plugin concatenates signed int8 data wrongly on some CPUs (AVX2
    ones: a large error behind one Concat, enough to make a detector unusable) and uint8
    correctly (docs/decisions/2026-12-05-measured-reasons-from-docstrings.md)."""
    s, z = symmetric_act_params(r)
    return (s, np.array(128, np.uint8)) if z.dtype == np.int8 else (s, z)


def weight_quant(w: np.ndarray, axis: int | None, qtype: str, min_scale: np.ndarray | None = None):
    """(quantized weights, scale, zero point) per channel along `axis`, or per tensor; scales no
    smaller than `min_scale` (what the int32 bias needs)."""
    reduce = tuple(i for i in range(w.ndim) if i != axis) if axis is not None else None
    if qtype == "QInt8":    # symmetric, zero point 0
        amax = np.abs(w).max(axis=reduce)
        scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
        zp = np.zeros_like(scale, dtype=np.int8)
        lo_q, hi_q, dt = -127, 127, np.int8
    else:                   # asymmetric uint8
        lo = np.minimum(w.min(axis=reduce), 0.0)
        hi = np.maximum(w.max(axis=reduce), 0.0)
        scale = np.where(hi > lo, (hi - lo) / 255.0, 1.0).astype(np.float32)
        zp = np.clip(np.round(-lo / scale), 0, 255).astype(np.uint8)
        lo_q, hi_q, dt = 0, 255, np.uint8
    if min_scale is not None:
        scale = np.maximum(scale, min_scale).astype(np.float32)
        if qtype != "QInt8":
            zp = np.clip(np.round(-lo / scale), 0, 255).astype(np.uint8)
    shape = [1] * w.ndim
    if axis is not None:
        shape[axis] = -1
    q = np.clip(np.round(w / scale.reshape(shape)) + zp.reshape(shape).astype(np.float32), lo_q, hi_q).astype(dt)
    return q, scale, zp


# per_channel="auto": a weight keeps one scale per output channel only where its channels'
# ranges differ by more than this (largest channel abs-max over the median one); elsewhere one
# scale loses little and integer kernels can run faster on some models
# (docs/decisions/2026-12-05-measured-reasons-from-docstrings.md)
AUTO_SPREAD = 2.0


def channel_spread(w: np.ndarray, axis: int) -> float:
    """Largest per-channel abs-max over the median one (1.0: all channels alike)."""
    amax = np.abs(w).max(axis=tuple(i for i in range(w.ndim) if i != axis))
    median = float(np.median(amax)) if amax.size else 0.0
    return float(amax.max()) / median if median > 0 else float("inf")


def weight_axis(node: onnx.NodeProto, w: np.ndarray, per_channel: bool | str, opset: int) -> int | None:
    """The axis of a weight's scales (None: one scale for the tensor) under `per_channel`:
    True, False, or "auto" (per channel where channels differ: AUTO_SPREAD; per tensor below
    opset 13, which has no per-channel DequantizeLinear). Per tensor too where ONNX Runtime
    runs no per-channel scales (per_channel_runs)."""
    if not per_channel or not per_channel_runs(node, w.ndim):
        return None
    axis = channel_axis(node, w.ndim)
    if per_channel == "auto":
        return axis if opset >= 13 and channel_spread(w, axis) > AUTO_SPREAD else None
    return axis


def per_channel_runs(node: onnx.NodeProto, rank: int) -> bool:
    """Whether ONNX Runtime runs the consumer with one weight scale per output channel. Not a
    MatMul whose B has rank other than 2: ORT fuses DQ -> MatMul into MatMulIntegerToFloat /
    QLinearMatMul, whose B scale and zero point must be one value (or one per column of a 2-D
    B): a batched weight [..., K, N] with scales on N fails at run time ("b zero point is not
    valid"; "For per axis quantization, scale must be 1D tensor with size 1" on a jax2tf model)."""
    return not (node.op_type == "MatMul" and rank != 2)


def channel_axis(node: onnx.NodeProto, rank: int = 2) -> int:
    """The output-channel axis of the consumer's weight (input 1), by the op's semantics:
    Conv W [M, C/g, k...]: 0; ConvTranspose W [C, M/g, k...]: 1; Gemm B [K, N] (or [N, K] with
    transB): 1 (0); MatMul B [..., K, N]: the last axis (a rank-1 B, [K], has none: 0)."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "ConvTranspose":
        return 1
    if node.op_type == "Gemm":
        return 0 if attr_value(node, "transB", 0) else 1
    if node.op_type == "MatMul":
        return max(rank - 1, 0)
    raise ValueError(f"no weight axis for a {node.op_type} node ({node.name})")
