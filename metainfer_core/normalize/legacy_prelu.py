"""PRelu converted from opset <= 6 => PRelu whose per-channel slope is shaped [C, 1, ..., 1].

Before opset 7, a PRelu slope of C values applied per channel (axis 1); opset 7 made the slope
broadcast numpy-style (from the last axis). ONNX's version converter keeps the [C] slope, so the
converted model either fails to run (when the last axis is not C) or scales the wrong axis. A
constant slope of more than one value is reshaped to channel form for inputs of rank 3 and more.
Requires: the model just converted from an opset below 7, shapes of PRelu inputs known after
inference. Ensures: the old numerics, in every graph including If/Loop bodies.
"""
from __future__ import annotations

import onnx
from onnx import helper, numpy_helper, shape_inference

from metainfer_core.ir.graph_utils import is_op, iter_graphs, tensor_shapes

FIRST_BROADCAST_OPSET = 7


def keep_channel_slopes(model: onnx.ModelProto, opset_from: int) -> int:
    """Reshape each per-channel constant slope to [C, 1, ...], in place; returns how many."""
    if opset_from >= FIRST_BROADCAST_OPSET:
        return 0
    ranks = {k: len(v) for k, v in tensor_shapes(shape_inference.infer_shapes(model).graph).items() if v is not None}
    changed = 0
    for graph in iter_graphs(model.graph):
        slopes = {t.name: t for t in graph.initializer}
        declared = {i.name: i for i in graph.input}       # old IR versions list weights as inputs too
        for node in graph.node:
            slope = slopes.get(node.input[1]) if is_op(node, "PRelu") and len(node.input) > 1 else None
            if slope is None or len(slope.dims) != 1 or slope.dims[0] <= 1 or ranks.get(node.input[0], 0) < 3:
                continue
            rank = ranks[node.input[0]]
            value = numpy_helper.to_array(slope).reshape([slope.dims[0]] + [1] * (rank - 2))
            slope.CopyFrom(numpy_helper.from_array(value, slope.name))
            if slope.name in declared:
                declared[slope.name].CopyFrom(helper.make_tensor_value_info(
                    slope.name, slope.data_type, list(value.shape)))
            changed += 1
    return changed
