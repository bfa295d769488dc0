"""Transpose(p1) -> Transpose(p2) => Transpose(p) with p[i] = p1[p2[i]];
the merged Transpose is removed when p is the identity (the two cancel).

One sweep in topological order collapses a whole chain: each Transpose, once rewritten to read
the chain's start, is the producer the next one merges with.
Requires: main-graph nodes in topological order. Ensures: the second Transpose keeps its output
name; the first stays only while something else reads it.
"""

from __future__ import annotations

import onnx
from onnx import helper

from metainfer_core.ir.graph_utils import GraphIndex, is_op, sweep, transpose_perm


def run(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    return sweep(model, rewrite)


def rewrite(index: GraphIndex, node: onnx.NodeProto) -> int:
    if merge_with_producer(index, node) is not None:
        return 0
    drop_if_identity(index, node)
    return 1


def perm_of(index: GraphIndex, node: onnx.NodeProto) -> list[int] | None:
    shape = index.shapes.get(node.input[0])
    return transpose_perm(node, None if shape is None else len(shape))


def set_perm(node: onnx.NodeProto, perm: list[int]) -> None:
    kept = [a for a in node.attribute if a.name != "perm"]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute("perm", perm, attr_type=onnx.AttributeProto.INTS)])


def merge_with_producer(index: GraphIndex, node: onnx.NodeProto) -> str | None:
    """Rewrite a Transpose fed by a Transpose to read that one's input; None when done, else why not."""
    if not is_op(node, "Transpose"):
        return "not a Transpose"
    first = index.producer.get(node.input[0])
    if not is_op(first, "Transpose"):
        return "not fed by a Transpose"
    p1, p2 = perm_of(index, first), perm_of(index, node)
    if p1 is None and p2 is None:  # two axis reversals cancel at any rank
        p1 = p2 = []
    p1 = p1 if p1 is not None else list(reversed(range(len(p2))))
    p2 = p2 if p2 is not None else list(reversed(range(len(p1))))
    if len(p1) != len(p2):
        return "the permutations disagree on the rank"
    perm = [p1[i] for i in p2]
    if perm == list(range(len(perm))) and not index.can_forward(node.output[0], first.input[0]):
        return "the pair cancels, but a graph output would then be a graph input"
    index.set_input(node, 0, first.input[0])
    set_perm(node, perm)
    return None


def drop_if_identity(index: GraphIndex, node: onnx.NodeProto) -> bool:
    """Remove a Transpose whose permutation leaves every axis in place."""
    perm = transpose_perm(node, None)
    if perm != list(range(len(perm or []))) or not index.forward(node.output[0], node.input[0]):
        return False
    index.remove(node)
    return True
