"""Reshape(Reshape(x, s1), s2) => Reshape(x, s2)   when s2 is constant with no 0 entry;
Reshape(x, s) => x   when x's static shape already is the result.

A 0 in s2 copies a dim of the *intermediate* tensor, which x need not have, so such a pair
stays; a -1 is fine, it is solved from the element count, the same for x and the intermediate.
Requires: main-graph nodes in topological order. Ensures: the last Reshape keeps its output name;
the first stays only while something else reads it.
"""

from __future__ import annotations

import math

import onnx

from metainfer_core.ir.graph_utils import GraphIndex, attr_value, is_op, static_shape, sweep


def run(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    return sweep(model, _rewrite)


def _rewrite(index: GraphIndex, node: onnx.NodeProto) -> int:
    if not is_op(node, "Reshape"):
        return 0
    changes = 0
    if is_op(index.producer.get(node.input[0]), "Reshape") and _no_zero(index, node):
        index.set_input(node, 0, index.producer[node.input[0]].input[0])
        changes += 1
    in_shape = static_shape(index.shapes.get(node.input[0]))
    if in_shape is not None and _result_shape(index, node) == in_shape and index.forward(node.output[0], node.input[0]):
        index.remove(node)
        changes += 1
    return changes


def _no_zero(index: GraphIndex, node: onnx.NodeProto) -> bool:
    shape = index.constant(node.input[1])
    return shape is not None and 0 not in shape.tolist()


def _result_shape(index: GraphIndex, node: onnx.NodeProto) -> list[int] | None:
    """The Reshape's output shape when its input shape is static and its target constant."""
    dims = static_shape(index.shapes.get(node.input[0]))
    target = index.constant(node.input[1])
    if dims is None or target is None:
        return None
    out = target.tolist()
    if not attr_value(node, "allowzero", 0):
        out = [dims[i] if d == 0 and i < len(dims) else d for i, d in enumerate(out)]
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        out[out.index(-1)] = math.prod(dims) // known if known else 0
    return out
