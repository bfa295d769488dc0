"""Flatten(x, axis=r-1) -> Softmax(axis=-1) -> Reshape(shape of x) => Softmax(x, axis=-1);
Flatten(x, axis=1) -> Softmax(axis=-1), x of rank 2 => Softmax(x, axis=-1).
(The same for LogSoftmax and Hardmax.)

Before opset 13 these ops flattened their input to 2-D at `axis`; ONNX's version converter keeps
that meaning by wrapping each one in a Flatten and a Reshape back, so every upgraded model spells
a last-axis softmax three ops long. When the flatten point is the last axis the wrapper changes
nothing, and the canonical spelling is the single op. The Reshape's target must be x's shape:
Shape(x) (dynamic dims) or a constant equal to x's static shape.
Requires: x's rank known; the Flatten and the softmax outputs each read only by the next op and
no graph output. Ensures: the softmax takes over the Reshape's output name.
"""

from __future__ import annotations

import onnx
from onnx import helper

from metainfer_core.ir.graph_utils import GraphIndex, attr_value, is_op, static_shape, sweep

SOFTMAX_LIKE = ("Softmax", "LogSoftmax", "Hardmax")


def run(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    return sweep(model, _rewrite)


def _rewrite(index: GraphIndex, node: onnx.NodeProto) -> int:
    found = _match(index, node)
    if isinstance(found, str):
        return 0
    flatten, reshape = found
    index.set_input(node, 0, flatten.input[0])
    set_axis_last(node)  # axis 1 of the 2-D view was x's last axis
    index.remove(flatten)
    if reshape is not None:
        index.remove(reshape)
        index.set_output(node, 0, reshape.output[0])
    return 1


def set_axis_last(node: onnx.NodeProto) -> None:
    kept = [a for a in node.attribute if a.name != "axis"]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute("axis", -1)])


def _match(index: GraphIndex, node: onnx.NodeProto) -> tuple[onnx.NodeProto, onnx.NodeProto | None] | str:
    """The Flatten and the Reshape back (None when x is 2-D), or why the pattern does not hold."""
    if not any(is_op(node, op) for op in SOFTMAX_LIKE) or attr_value(node, "axis", -1) not in (-1, 1):
        return "not a softmax over the last of two axes"
    flatten = index.producer.get(node.input[0])
    if not is_op(flatten, "Flatten") or index.sole_consumer(flatten.output[0]) is not node:
        return "not fed only by a Flatten"
    shape = index.shapes.get(flatten.input[0])
    if shape is None:
        return "the rank of the flattened tensor is unknown"
    rank = len(shape)
    axis = attr_value(flatten, "axis", 1)
    if rank < 2 or axis % rank != rank - 1:  # also rejects axis == rank (Flatten to [n, 1])
        return "the Flatten does not split off the last axis"
    if rank == 2:
        return flatten, None
    reshape = index.sole_consumer(node.output[0])
    if not is_op(reshape, "Reshape") or reshape.input[0] != node.output[0]:
        return "the result is not reshaped back"
    if not _is_shape_of(index, reshape.input[1], flatten.input[0]):
        return "the Reshape target is not the shape of the flattened tensor"
    return flatten, reshape


def _is_shape_of(index: GraphIndex, target: str, x: str) -> bool:
    producer = index.producer.get(target)
    if is_op(producer, "Shape") and producer.input[0] == x:
        return attr_value(producer, "start", 0) == 0 and attr_value(producer, "end") is None
    dims, value = static_shape(index.shapes.get(x)), index.constant(target)
    return dims is not None and value is not None and value.tolist() == dims
