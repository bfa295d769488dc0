"""Common-subexpression elimination: two nodes with the same domain, op type, inputs (in order)
and attributes => one; readers of the second node's outputs read the first node's outputs.

Never merged: nodes with subgraph attributes (bodies are not compared) and non-deterministic ops
(two draws are two different values).
Requires: main-graph nodes in topological order, so the kept node precedes every reader and one
sweep also merges what becomes identical downstream. Ensures: graph output names are kept.
"""

from __future__ import annotations

import onnx

from metainfer_core.ir.graph_utils import NON_DETERMINISTIC, GraphIndex, subgraphs, sweep


# Kept over onnx_ir's CommonSubexpressionEliminationPass: it joins equal graph outputs by an Identity, merges Bernoulli draws.
def run(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    seen: dict[tuple, onnx.NodeProto] = {}  # first node of each key, in sweep order

    def rewrite(index: GraphIndex, node: onnx.NodeProto) -> int:
        if node.op_type in NON_DETERMINISTIC or subgraphs(node):
            return 0
        kept = seen.setdefault(_key(node), node)
        if kept is node or _check(index, node, kept) is not None:
            return 0
        for old, new in zip(node.output, kept.output):
            if old:
                index.forward(old, new)
        index.remove(node)
        return 1

    return sweep(model, rewrite)


def _key(node: onnx.NodeProto) -> tuple:
    attrs = tuple(sorted((a.name, a.SerializeToString(deterministic=True)) for a in node.attribute))
    return node.domain or "ai.onnx", node.op_type, tuple(node.input), len(node.output), attrs


def _check(index: GraphIndex, node: onnx.NodeProto, kept: onnx.NodeProto) -> str | None:
    for old, new in zip(node.output, kept.output):
        if old and not new:
            return "the kept node leaves an output out that this node produces"
        if old and not index.can_forward(old, new):
            return f"both '{old}' and '{new}' must stay graph outputs"
    return None
