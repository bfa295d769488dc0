"""Float32 -> float16 substitution (lossy): the float tensors and weights of the nodes in
scope become float16, with Casts where the scope meets float32 (ONNX Runtime's float16
converter; graph inputs and outputs keep fp32). Legal where the target has a float16
datapath."""
from __future__ import annotations

import onnx
from onnxruntime.transformers.float16 import convert_float_to_float16

from metainfer_core.actions.base import Action, Param, Site, lowered
from metainfer_core.normalize.graph_utils import clone, topological_sort

COMPUTE_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")


def is_float32_model(model: onnx.ModelProto) -> bool:
    return any(i.data_type == onnx.TensorProto.FLOAT for i in model.graph.initializer) and lowered(model) is None


def scope_nodes(model: onnx.ModelProto, scope: str, exclude=("Transpose",)) -> tuple[str, ...]:
    """Nodes in a precision scope: every node, or only Conv/MatMul/Gemm (layout Transposes
    and other data movement keep the precision of what they move)."""
    return tuple(n.name for n in model.graph.node
                 if (scope == "all" and n.op_type not in exclude) or n.op_type in COMPUTE_OPS)


def lossy_sites(model: onnx.ModelProto, scope: str) -> list[Site]:
    if not is_float32_model(model) or not any(n.op_type in COMPUTE_OPS for n in model.graph.node):
        return []
    return [Site(scope_nodes(model, scope), scope)]


class Fp16(Action):
    name = "fp16"
    lossy = True
    params = {"scope": Param("all", ("all", "compute"), "every float node, or only Conv/MatMul/Gemm")}

    def sites(self, model, params, target):
        return lossy_sites(model, params["scope"])

    def legal(self, model, site, params, target):
        if "float16" not in target.dtypes:
            return f"target {target.name} has no float16 datapath"
        return lowered(model)

    def apply(self, model, site, params, ctx):
        keep = set(site.nodes)
        blocked = [n.name for n in model.graph.node if n.name not in keep]
        # the converter rewrites its input in place and appends its Casts at the end of the graph
        out = convert_float_to_float16(clone(model), keep_io_types=True, node_block_list=blocked)
        return onnx.shape_inference.infer_shapes(topological_sort(out))
