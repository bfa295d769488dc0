"""NNCF's post-training quantizer (its ONNX backend) as the engine behind int8's OpenVINO form
(`int8 engine: nncf`). It writes the QDQ graph OpenVINO's CPU plugin was tuned for: where the
Q/DQ go, symmetric scales, bias correction; on some models OpenVINO runs it faster than
meta-infer's own rewrite of the same form (_qdq.py), on others slower, so the search offers both
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
from onnx import numpy_helper

from metainfer_core.normalize.graph_utils import GraphIndex, clone
from metainfer_core.directives import INT8_ENGINE_KEY, set_model_meta

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
    return _with_float(results[key], model, set(floats))


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


def _with_float(quantized: onnx.ModelProto, original: onnx.ModelProto, floats: set[str]) -> onnx.ModelProto:
    """A copy of NNCF's graph whose `floats` read what they read in `original` (NNCF keeps node
    and activation names); an original weight or bias NNCF changed comes back under a new name."""
    out = clone(quantized)
    if not floats:
        return out
    index = GraphIndex(out.graph)
    before = {n.name: n for n in original.graph.node if n.name in floats}
    weights = {t.name: t for t in original.graph.initializer}
    for node in index.nodes:
        src = before.get(node.name)
        if src is None:
            continue
        for slot, name in enumerate(src.input):
            if name in weights:
                name = _original_weight(index, weights[name])
            index.set_input(node, slot, name)
    index.commit()
    return out


def _original_weight(index: GraphIndex, weight: onnx.TensorProto) -> str:
    have = index.initializers.get(weight.name)
    if have is not None and have.SerializeToString() == weight.SerializeToString():
        return weight.name
    name = weight.name if have is None else index.fresh_name(f"{weight.name}_float")
    return index.add_initializer(numpy_helper.to_array(weight), name)
