"""Canonical layout expression: NCHW is the canonical layout.

ONNX defines Conv, pooling, BatchNormalization and friends channels-first (NCHW), so a model can
only express another layout through Transposes. The canonical spelling of those is:
Transpose(p1) -> ... -> Transpose(pn) => one Transpose(p1 composed ... pn);
Transpose(identity perm) => removed;  Transpose() without perm => Transpose(perm=reversed axes).
Changing the layout itself (NCHW <-> NHWC, blocked layouts) is a search action, not this pass.

Requires: main-graph nodes in topological order. Ensures: output names are kept, as in
cancel_transposes, whose merge and identity rules this pass shares.
"""

from __future__ import annotations

import onnx

from metainfer_core.ir.graph_utils import GraphIndex, attr_value, is_op, sweep
from metainfer_core.normalize.passes.cancel_transposes import (
    drop_if_identity,
    merge_with_producer,
    perm_of,
    set_perm,
)


def run(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    return sweep(model, _rewrite)


def _rewrite(index: GraphIndex, node: onnx.NodeProto) -> int:
    if not is_op(node, "Transpose"):
        return 0
    merged = merge_with_producer(index, node) is None
    if drop_if_identity(index, node):
        return 1
    if attr_value(node, "perm") is None and perm_of(index, node) is not None:
        set_perm(node, perm_of(index, node))  # spell the implicit axis reversal out
        return 1
    return int(merged)
