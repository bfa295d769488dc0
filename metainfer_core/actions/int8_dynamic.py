"""Float32 -> int8 with dynamic activation scales (lossy): the MatMul/Gemm nodes in scope get
int8 weights, and their activations are quantized at run time (DynamicQuantizeLinear ->
MatMulInteger -> scale), what ONNX Runtime's quantize_dynamic writes. No calibration: each run
measures its own activation range, so it suits transformer and MLP blocks whose activation
ranges vary with the input; integer MatMul kernels pay where the weights are large.
The rewrite is onnxruntime.quantization.quantize_dynamic restricted to the site's nodes."""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import onnx

from metainfer_core.actions.base import Action, Param, Site, lowered
from metainfer_core.actions.fp16 import is_float32_model

OPS = ("MatMul", "Gemm")


def _weighted(model: onnx.ModelProto) -> list[str]:
    """MatMul/Gemm nodes whose second operand is a weight (quantize_dynamic quantizes only those)."""
    inits = {i.name for i in model.graph.initializer}
    return [n.name for n in model.graph.node if n.op_type in OPS and len(n.input) > 1 and n.input[1] in inits]


class Int8Dynamic(Action):
    name = "int8_dynamic"
    summary = ("ONNX Runtime's dynamic quantization of the MatMul/Gemm nodes with weights: int8 weights, activations "
               "quantized at run time (MatMulInteger), no calibration; where the target lists `dynamic` quantization "
               "(`cpu`)")
    lossy = True
    width = 8
    params = {"weight_type": Param("QInt8", ("QInt8", "QUInt8"), "weight type"),
              "per_channel": Param(False, (False, True), "weight scales per output channel, or one per tensor")}


    def words(self, params, scope=""):
        return ("int8 dynamic", f"quantize MatMul/Gemm weights to {params.get('weight_type', 'int8')} with activation "
                "scales computed at run time")

    def sites(self, model, params, target):
        nodes = _weighted(model) if is_float32_model(model) else []
        return [Site(tuple(nodes), "matmul")] if nodes else []

    def legal(self, model, site, params, target):
        if "int8" not in target.dtypes:
            return f"target {target.name} has no int8 datapath"
        if "dynamic" not in target.quantization:
            return f"target {target.name} does not run dynamically quantized (MatMulInteger) graphs"
        return lowered(model)

    def apply(self, model, site, params, ctx):
        from onnxruntime.quantization import QuantType, quantize_dynamic

        logging.getLogger().setLevel(max(logging.getLogger().level, logging.ERROR))   # its pre-processing hint
        with tempfile.TemporaryDirectory(prefix="metainfer-dyn-") as tmp:
            src, dst = Path(tmp) / "in.onnx", Path(tmp) / "out.onnx"
            onnx.save(model, src)
            quantize_dynamic(src, dst, weight_type=getattr(QuantType, params["weight_type"]),
                             per_channel=bool(params["per_channel"]), op_types_to_quantize=list(OPS),
                             # it splits a Gemm into <name>_MatMul + <name>_Add before quantizing
                             nodes_to_quantize=[*site.nodes, *(f"{n}_MatMul" for n in site.nodes)],
                             extra_options={"MatMulConstBOnly": True})
            out = onnx.load(str(dst))
        del out.metadata_props[:]
        out.metadata_props.extend(model.metadata_props)
        return out
