"""Conv(x, W, B) -> BatchNormalization(scale, bias, mean, var) => Conv(x, W', B'),
and the same for ConvTranspose,

with k = scale / sqrt(var + epsilon) per output channel, W' = W scaled by k along the output
channels, B' = (B - mean) * k + bias (B = 0 when the conv has none). Conv weights are
[M, C/group, ...] (output channels first); ConvTranspose weights are [C, M/group, ...], so there
output channel g * M/group + j sits in column j of the rows of group g.
Requires: the conv output has the BatchNormalization as its only reader and is no graph output;
W, B and the four BN parameters are constants; BN in inference form (one output).
Ensures: the conv takes over the BN output name, so readers and graph outputs are unchanged.
"""

from __future__ import annotations

import numpy as np
import onnx

from metainfer_core.ir.graph_utils import GraphIndex, attr_value, is_op, sweep

CONVS = ("Conv", "ConvTranspose")


def run(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    return sweep(model, rewrite)


def check(index: GraphIndex, conv: onnx.NodeProto) -> str | None:
    if not any(is_op(conv, op) for op in CONVS):
        return "not a Conv or ConvTranspose"
    bn = index.sole_consumer(conv.output[0])
    if not is_op(bn, "BatchNormalization") or bn.input[0] != conv.output[0]:
        return "the conv output does not feed only a BatchNormalization"
    if any(bn.output[1:]) or attr_value(bn, "training_mode", 0):
        return "the BatchNormalization is in training mode"
    params = [n for n in conv.input[1:] if n] + list(bn.input[1:5])
    if not all(index.is_constant(n) for n in params):
        return "a weight or BN parameter is not constant"
    if not np.issubdtype(index.constant(conv.input[1]).dtype, np.floating):
        return "the weights are not floating point"
    return None


def scale_output_channels(conv: onnx.NodeProto, weight: np.ndarray, k: np.ndarray) -> np.ndarray:
    """W with output channel m multiplied by k[m], for either weight layout."""
    if conv.op_type == "Conv":
        return weight * k.reshape(-1, *[1] * (weight.ndim - 1))
    group = attr_value(conv, "group", 1)
    grouped = weight.reshape(group, weight.shape[0] // group, *weight.shape[1:])
    return (grouped * k.reshape(group, 1, weight.shape[1], *[1] * (weight.ndim - 2))).reshape(weight.shape)


def rewrite(index: GraphIndex, conv: onnx.NodeProto) -> int:
    if check(index, conv) is not None:
        return 0
    bn = index.sole_consumer(conv.output[0])
    weight = index.constant(conv.input[1])
    scale, shift, mean, var = (index.constant(n).astype(np.float64) for n in bn.input[1:5])
    bias = index.constant(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else np.zeros(len(scale))
    k = scale / np.sqrt(var + attr_value(bn, "epsilon", 1e-5))
    new_weight = scale_output_channels(conv, weight.astype(np.float64), k)
    new_bias = (bias.astype(np.float64) - mean) * k + shift
    base = conv.name or conv.output[0]
    index.set_input(conv, 1, index.add_initializer(new_weight.astype(weight.dtype), index.fresh_name(f"{base}_W_bn")))
    index.set_input(conv, 2, index.add_initializer(new_bias.astype(weight.dtype), index.fresh_name(f"{base}_B_bn")))
    index.remove(bn)
    index.set_output(conv, 0, bn.output[0])
    return 1
