"""Conv(x, W, B) -> Add(c) => Conv(x, W, B + c)   for a constant per-channel c of shape
[M, 1, ...] or [1, M, 1, ...] (M output channels; B = 0 when the Conv has none); the same for
ConvTranspose (M = W.shape[1] * group there);
MatMul(a, W) -> Add(b) => Gemm(a, W, b)   for a 2-D a, a constant 2-D W and a constant b of
shape [N] or [1, N] (float or double). A MatMul on batched (N-D) inputs is left alone: Gemm is 2-D.

Requires: the conv / MatMul output has the Add as its only reader and is no graph output.
Ensures: the conv / Gemm takes over the Add output name; readers and graph outputs are unchanged.
"""

from __future__ import annotations

import numpy as np
import onnx

from metainfer_core.ir.graph_utils import GraphIndex, attr_value, is_op, sweep

_GEMM_DTYPES = (np.float32, np.float64)  # what ONNX Runtime's CPU Gemm kernels take


def run(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    return sweep(model, _rewrite)


def _rewrite(index: GraphIndex, node: onnx.NodeProto) -> int:
    found = _match(index, node)
    if isinstance(found, str):
        return 0
    add, bias = found
    if node.op_type != "MatMul":
        extra = index.constant(bias).reshape(-1)
        own = index.constant(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros_like(extra)
        name = index.fresh_name(f"{node.name or node.output[0]}_B_add")
        index.set_input(node, 2, index.add_initializer((own + extra).astype(extra.dtype), name))
    else:
        node.op_type = "Gemm"
        index.set_input(node, 2, bias)
    index.remove(add)
    index.set_output(node, 0, add.output[0])
    return 1


def _match(index: GraphIndex, node: onnx.NodeProto) -> tuple[onnx.NodeProto, str] | str:
    """The Add and its constant operand's name, or why the pattern does not hold."""
    if not (is_op(node, "Conv") or is_op(node, "ConvTranspose") or is_op(node, "MatMul")):
        return "not a Conv, ConvTranspose or MatMul"
    add = index.sole_consumer(node.output[0])
    if not is_op(add, "Add"):
        return "the output does not feed only an Add"
    others = [n for n in add.input if n != node.output[0]]
    if len(others) != 1 or not index.is_constant(others[0]):
        return "the Add's other operand is not constant"
    bias = others[0]
    weight = index.constant(node.input[1])
    if weight is None or not all(index.is_constant(n) for n in node.input[2:] if n):
        return "the weight or the conv's own bias is not constant"
    shape = list(index.constant(bias).shape)
    if node.op_type != "MatMul":
        outputs = weight.shape[0] if node.op_type == "Conv" else weight.shape[1] * attr_value(node, "group", 1)
        channel = [outputs] + [1] * (weight.ndim - 2)
        return (add, bias) if shape in (channel, [1, *channel]) else "the bias is not per-channel"
    input_shape = index.shapes.get(node.input[0])
    if weight.ndim != 2 or input_shape is None or len(input_shape) != 2:
        return "the MatMul is not 2-D (Gemm is 2-D only)"
    if weight.dtype not in _GEMM_DTYPES or shape not in ([weight.shape[1]], [1, weight.shape[1]]):
        return "the bias shape or dtype does not fit Gemm"
    return add, bias

