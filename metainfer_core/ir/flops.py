"""Floating-point (or integer MAC) operation counts per ONNX node, from concrete shapes.

A multiply-accumulate counts as 2 operations. Ops not listed cost one operation per output
element, which is right for element-wise ops and a fair floor for data movement ops."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from metainfer_core.ir.tensors import TensorInfo

_PER_ELEMENT = {"Softmax": 5, "LogSoftmax": 5, "LayerNormalization": 8, "BatchNormalization": 2,
                "InstanceNormalization": 8, "Erf": 8, "Sigmoid": 4, "Tanh": 4, "Exp": 4, "Gelu": 8,
                "HardSwish": 3, "Pow": 4, "Sqrt": 2, "Div": 1, "Resize": 4}


# recurrent operators: gates per hidden unit, element-wise ops per gate value per step (the
# activations and the state update)
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_PER_GATE = 4


def _recurrent_flops(node: onnx.NodeProto, x: tuple, w: tuple, r: tuple) -> int:
    """Every step's input and recurrent products (W: [dirs, gates*H, I], R: [dirs, gates*H, H])
    plus the gates' element-wise work, over the sequence (X: [T, B, I], or [B, T, I] with layout 1)."""
    dirs, gates, inputs = (int(d) for d in w[:3])
    hidden = int(r[2])
    steps_batch = int(x[0]) * int(x[1])
    return steps_batch * dirs * gates * (2 * (inputs + hidden) + _PER_GATE)


def attrs(node: onnx.NodeProto) -> dict:
    """Plain-python attributes (subgraphs left out)."""
    out = {}
    for a in node.attribute:
        if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            continue
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else (list(v) if isinstance(v, (list, tuple)) else v)
    return out


def node_flops(node: onnx.NodeProto, infos: dict[str, TensorInfo]) -> int:
    ins = [infos.get(n) for n in node.input]
    outs = [infos.get(n) for n in node.output]
    out0 = outs[0] if outs and outs[0] is not None else None
    op = node.op_type
    if op in ("Conv", "ConvInteger", "QLinearConv") and out0 is not None and ins[1 if op != "QLinearConv" else 3] is not None:
        w = ins[1 if op != "QLinearConv" else 3].shape
        return 2 * out0.numel * int(np.prod(w[1:]))
    if op == "ConvTranspose" and ins[0] is not None and ins[1] is not None:
        # W is [C_in, C_out / group, kh, kw]: every input element feeds prod(W[1:]) MACs
        return 2 * ins[0].numel * int(np.prod(ins[1].shape[1:]))
    if op in ("MatMul", "MatMulInteger", "Gemm") and out0 is not None and ins[0] is not None:
        a = ins[0].shape
        k = a[-1] if not (op == "Gemm" and attrs(node).get("transA", 0)) else a[0]
        return 2 * out0.numel * int(k)
    if op in _GATES and len(ins) > 2 and ins[0] is not None and ins[1] is not None and ins[2] is not None:
        return _recurrent_flops(node, ins[0].shape, ins[1].shape, ins[2].shape)
    if op in ("MaxPool", "AveragePool") and out0 is not None:
        return out0.numel * int(np.prod(attrs(node).get("kernel_shape", [1])))
    if op in ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "ReduceMax") and ins[0] is not None:
        return ins[0].numel
    if out0 is None:
        return 0
    return out0.numel * _PER_ELEMENT.get(op, 1)
