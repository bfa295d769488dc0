"""ONNX Runtime's own post-training quantizer (`onnxruntime.quantization.quantize_static`, QDQ
format) as an engine behind int8's QDQ form (`int8 engine: onnxruntime`). It places its Q/DQ by
its own rules (which ops, which tensors share a scale, how biases are quantized), the graph ONNX
Runtime's QDQ fusions were written for; on some models ONNX Runtime runs it faster than
meta-infer's own rewrite of the same form (actions/qdq/), on others it loses more accuracy, so the
search offers both and measurement decides.

The quantizer calibrates (it runs the graph on every calibration input), so it runs once per
graph and numeric variant, whole, kept in the run's shared cache; layers kept in float then read
their original inputs and weights again (float_rewire.py)."""
from __future__ import annotations

import contextlib
import hashlib
import logging
import tempfile
from pathlib import Path

import numpy as np
import onnx

from metainfer_core.actions.float_rewire import with_float
from metainfer_core.ir.directives import INT8_ENGINE_KEY, set_model_meta

ORT = "onnxruntime"
_CACHE_KEY = "int8.ort_results"
_KEPT = 4       # results kept per run (each holds a whole graph)

Feeds = dict[str, np.ndarray]


class _Reader:
    """onnxruntime.quantization.CalibrationDataReader over a list of feeds."""

    def __init__(self, feeds: list[Feeds]):
        self._it = iter(feeds)

    def get_next(self):
        return next(self._it, None)


def quantize_static_qdq(model: onnx.ModelProto, feeds: list[Feeds], activation_type: str = "QUInt8",
                        weight_type: str = "QInt8", per_channel: bool = True, calibrate_method: str = "MinMax",
                        op_types: tuple[str, ...] | None = None) -> onnx.ModelProto:
    """`model` through `quantize_static` in QDQ format, calibrated on `feeds`; op_types: the op
    types to quantize (None: the quantizer's own default set)."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    with tempfile.TemporaryDirectory(prefix="metainfer-ortq-") as tmp:
        src, dst = Path(tmp) / "model.onnx", Path(tmp) / "quantized.onnx"
        onnx.save(model, src)
        with quiet_quantizer():
            quantize_static(src, dst, _Reader(feeds), quant_format=QuantFormat.QDQ,
                            activation_type=getattr(QuantType, activation_type),
                            weight_type=getattr(QuantType, weight_type), per_channel=per_channel,
                            calibrate_method=getattr(CalibrationMethod, calibrate_method),
                            op_types_to_quantize=list(op_types) if op_types else None)
        return onnx.load(dst)


@contextlib.contextmanager
def quiet_quantizer():
    """The quantizer logs its "consider pre-processing" advice on the root logger, once per call."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def ort_quantize(model: onnx.ModelProto, feeds: list[Feeds], floats: list[str], params: dict,
                 op_types: tuple[str, ...] | None, cache: dict | None = None) -> onnx.ModelProto:
    """`model` quantized by ONNX Runtime's quantizer under int8's `params` (activation and weight
    types, per_channel, calibrate_method; op_types from its scope), the nodes named in `floats`
    left in float; the result is marked as ONNX Runtime's (INT8_ENGINE_KEY)."""
    per_channel = params["per_channel"]
    if per_channel == "auto":       # the quantizer's per-channel scales need opset 13
        per_channel = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0) >= 13
    args = (params["activation_type"], params["weight_type"], bool(per_channel), params["calibrate_method"], op_types)
    key = (hashlib.sha1(model.SerializeToString(deterministic=True)).hexdigest(), args)
    results = cache.setdefault(_CACHE_KEY, {}) if cache is not None else {}
    if key not in results:
        if len(results) >= _KEPT:
            results.pop(next(iter(results)))
        out = quantize_static_qdq(model, feeds, *args)
        kept = {p.key for p in out.metadata_props}
        for p in model.metadata_props:      # the plan's directives so far travel with the graph
            if p.key not in kept:
                out.metadata_props.add(key=p.key, value=p.value)
        set_model_meta(out, INT8_ENGINE_KEY, ORT)
        results[key] = out
    return with_float(results[key], model, set(floats))
