"""Low-precision substitution (lossy).

fp16: float tensors and weights of the nodes in scope become float16, with Casts where the
scope meets float32 (ONNX Runtime's float16 converter; graph inputs and outputs keep fp32).
int8: the ops in scope are quantized in QDQ form with ONNX Runtime's static quantization,
calibrated on the run's calibration inputs (random or the user's .npz)."""
from __future__ import annotations

import logging
import tempfile
from contextlib import contextmanager
from pathlib import Path

import onnx
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
from onnxruntime.transformers.float16 import convert_float_to_float16

from metainfer_core.actions.base import Action, Param, Site, has_op
from metainfer_core.normalize.graph_utils import clone, topological_sort
from metainfer_core.tensors import input_feeds_spec

COMPUTE_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")
_FLOAT32 = onnx.TensorProto.FLOAT


def _is_float32_model(model: onnx.ModelProto) -> bool:
    return any(i.data_type == _FLOAT32 for i in model.graph.initializer) and not has_op(model, "QuantizeLinear")


def _already_lowered(model: onnx.ModelProto) -> str | None:
    if has_op(model, "QuantizeLinear", "DequantizeLinear"):
        return "the graph is already quantized"
    if any(i.data_type in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16) for i in model.graph.initializer):
        return "the graph already holds reduced-precision floats"
    return None


def _scope_nodes(model: onnx.ModelProto, scope: str) -> tuple[str, ...]:
    return tuple(n.name for n in model.graph.node if scope == "all" or n.op_type in COMPUTE_OPS)


class Fp16(Action):
    name = "fp16"
    lossy = True
    params = {"scope": Param("all", ("all", "compute"), "every float node, or only Conv/MatMul/Gemm")}

    def sites(self, model, params, target):
        if not _is_float32_model(model) or not any(n.op_type in COMPUTE_OPS for n in model.graph.node):
            return []
        return [Site(_scope_nodes(model, params["scope"]), params["scope"])]

    def legal(self, model, site, params, target):
        if "float16" not in target.dtypes:
            return f"target {target.name} has no float16 datapath"
        return _already_lowered(model)

    def apply(self, model, site, params, ctx):
        keep = set(site.nodes)
        blocked = [n.name for n in model.graph.node if n.name not in keep]
        # the converter rewrites its input in place and appends its Casts at the end of the graph
        out = convert_float_to_float16(clone(model), keep_io_types=True, node_block_list=blocked)
        return onnx.shape_inference.infer_shapes(topological_sort(out))


@contextmanager
def _quiet_root_logger():
    """The quantizer advises pre-processing through the root logger on every call; shapes are
    already inferred here, so the advice is noise."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


class _FeedReader(CalibrationDataReader):
    def __init__(self, feeds, names):
        self._it = iter([{k: v for k, v in f.items() if k in names} for f in feeds])

    def get_next(self):
        return next(self._it, None)


class Int8(Action):
    name = "int8"
    lossy = True
    params = {
        "scope": Param("compute", ("all", "compute"), "quantize every supported op, or only Conv/MatMul/Gemm"),
        "activation_type": Param("QUInt8", ("QUInt8", "QInt8"), "activation type (U8S8 vs S8S8 differ in speed on x86)"),
        "weight_type": Param("QInt8", ("QInt8", "QUInt8"), "weight type"),
        "per_channel": Param(True, (True, False), "per-channel weight scales (needs opset >= 13)"),
        "calibrate_method": Param("MinMax", ("MinMax", "Entropy", "Percentile"), "calibration method"),
    }

    def sites(self, model, params, target):
        if not _is_float32_model(model) or not any(n.op_type in COMPUTE_OPS for n in model.graph.node):
            return []
        return [Site(_scope_nodes(model, params["scope"]), params["scope"])]

    def legal(self, model, site, params, target):
        if "int8" not in target.dtypes:
            return f"target {target.name} has no int8 datapath"
        if "QDQ" not in target.quantization:
            return f"target {target.name} does not take QDQ-quantized graphs"
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        if params["per_channel"] and opset < 13:
            return f"per-channel quantization needs opset >= 13 (graph has {opset})"
        return _already_lowered(model)

    def apply(self, model, site, params, ctx):
        if not ctx.calibration_feeds:
            raise ValueError("int8 needs calibration inputs")
        names = set(input_feeds_spec(model))
        with tempfile.TemporaryDirectory(prefix="metainfer-int8-") as tmp, _quiet_root_logger():
            out_path = Path(tmp) / "q.onnx"
            quantize_static(  # on a clone: the quantizer rewrites its input in place
                clone(model), out_path, _FeedReader(ctx.calibration_feeds, names), quant_format=QuantFormat.QDQ,
                nodes_to_quantize=list(site.nodes), per_channel=params["per_channel"],
                activation_type=QuantType[params["activation_type"]], weight_type=QuantType[params["weight_type"]],
                calibrate_method=CalibrationMethod[params["calibrate_method"]],
                extra_options={"CalibTensorRangeSymmetric": False})
            out = onnx.load(str(out_path))
        return onnx.shape_inference.infer_shapes(out)
