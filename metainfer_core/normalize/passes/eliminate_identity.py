"""Identity(x) -> x;  Dropout(x) -> x in inference mode (no training_mode, or a constant False).

Requires: main-graph nodes in topological order.
Ensures: graph output names are kept (the producer of x is renamed instead, when it can be);
subgraphs that read the removed output by outer-scope name read x instead. A Dropout whose mask
output is used stays: the mask is a value in its own right.
"""

from __future__ import annotations

import onnx

from metainfer_core.ir.graph_utils import GraphIndex, is_op, sweep


# Kept over onnx_ir's IdentityEliminationPass: it leaves inference Dropouts, and its IR round trip costs more than this pass.
def run(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    return sweep(model, _rewrite)


def _rewrite(index: GraphIndex, node: onnx.NodeProto) -> int:
    if _check(index, node) is not None or not index.forward(node.output[0], node.input[0]):
        return 0
    index.remove(node)
    return 1


def _check(index: GraphIndex, node: onnx.NodeProto) -> str | None:
    """None when `node` is a pass-through, else why it is not."""
    if not (is_op(node, "Identity") or is_op(node, "Dropout")):
        return "not an Identity or Dropout"
    mask = node.output[1] if len(node.output) > 1 else ""
    if mask and (index.consumers(mask) or mask in index.outputs):
        return "the Dropout mask is used"
    training = node.input[2] if len(node.input) > 2 else ""
    if training and (not index.is_constant(training) or bool(index.constant(training))):
        return "training_mode is not a constant False"
    return None
