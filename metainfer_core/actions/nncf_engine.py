"""NNCF's post-training quantizer (its ONNX backend) as the engine behind int8's OpenVINO form
(`int8 engine: nncf`). It writes the QDQ graph OpenVINO's CPU plugin was tuned for: where the
Q/DQ go, symmetric scales, bias correction; on some models OpenVINO runs it faster than
meta-infer's own rewrite of the same form (actions/qdq/), on others slower, so the search offers both
and measurement decides.

NNCF's quantizer costs seconds on a large graph (its pattern matching, then calibration runs), so
it runs once per graph, whole, kept in the run's shared cache: the layers kept in float are then
read from the graph as it was (their original inputs, weights and biases: NNCF's bias correction
undone), and the quantizers nothing reads any more are dropped. A quantizer NNCF shares between a
float layer and an int8 one stays for the int8 one, as NNCF's ignored scope would leave it."""
from __future__ import annotations

import contextlib
import hashlib
import io
import logging

import numpy as np
import onnx

from metainfer_core.actions.float_rewire import with_float
from metainfer_core.ir.directives import INT8_ENGINE_KEY, set_model_meta

NNCF = "nncf"
_CACHE_KEY = "int8.nncf_results"
_KEPT = 4       # results kept per run (each holds a whole graph)


def nncf_quantize(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], floats: list[str],
                  cache: dict | None = None) -> onnx.ModelProto:
    """`model` quantized by `nncf.quantize` (calibrated on every one of `feeds`), the nodes named
    in `floats` left in float; the result is marked as NNCF's (INT8_ENGINE_KEY)."""
    key = hashlib.sha1(model.SerializeToString(deterministic=True)).hexdigest()
    results = cache.setdefault(_CACHE_KEY, {}) if cache is not None else {}
    if key not in results:
        if len(results) >= _KEPT:
            results.pop(next(iter(results)))
        results[key] = _quantize(model, feeds)
    return with_float(results[key], model, set(floats))


def quiet_nncf():
    """nncf, imported on first use (seconds: only runs that quantize with it pay them), its log
    turned down. Its usage telemetry is off as OpenVINO's is (metainfer_core/__init__.py)."""
    import nncf

    logging.getLogger("nncf").setLevel(logging.ERROR)
    nncf.set_log_level(logging.ERROR)
    return nncf


def _quantize(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> onnx.ModelProto:
    nncf = quiet_nncf()
    # its progress bars write to the terminal directly, past the logger
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        out = nncf.quantize(model, nncf.Dataset(list(feeds)), subset_size=len(feeds))
    kept = {p.key for p in out.metadata_props}
    for p in model.metadata_props:      # the plan's directives so far travel with the graph
        if p.key not in kept:
            out.metadata_props.add(key=p.key, value=p.value)
    set_model_meta(out, INT8_ENGINE_KEY, NNCF)
    return out
