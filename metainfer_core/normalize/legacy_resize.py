"""Resize converted from opset <= 10 => Resize(coordinate_transformation_mode="asymmetric",
nearest_mode="floor" when upsampling, "ceil" when downsampling).

Before opset 11, Upsample and Resize mapped output pixel x to input pixel x / scale, and nearest
rounded that down when upsampling and up when downsampling (ONNX Runtime's "simple" mode). Opset
11 made half_pixel and round_prefer_floor the defaults, but ONNX's version converter only renames
the op, so a converted model silently computes a shifted image (a linear 2x upsample differs by up
to the full pixel range). Every Resize of a converted pre-11 model came from an old Upsample or
Resize (nothing else converts to Resize), so each one without an explicit coordinate mode gets the
old semantics spelled out.
A nearest Resize that upsamples some axes and downsamples others has no opset-11 spelling (one
nearest_mode for all axes): it is refused by name. Scales computed at run time are taken as
upsampling (what Upsample allowed and old exporters used Resize for); the equivalence check
catches the rest.
Requires: the model just converted from an opset below 11. Ensures: the old numerics, in every
graph including If/Loop bodies.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from metainfer_core.errors import MetaInferError
from metainfer_core.ir.graph_utils import attr_value, describe, is_op, iter_graphs

FIRST_HALF_PIXEL_OPSET = 11


def keep_old_semantics(model: onnx.ModelProto, opset_from: int) -> int:
    """Spell out the pre-11 coordinate mapping on each Resize, in place; returns how many."""
    if opset_from >= FIRST_HALF_PIXEL_OPSET:
        return 0
    changed = 0
    for graph in iter_graphs(model.graph):
        constants = _constants(graph)
        for node in graph.node:
            if not is_op(node, "Resize") or attr_value(node, "coordinate_transformation_mode") is not None:
                continue
            node.attribute.append(helper.make_attribute("coordinate_transformation_mode", "asymmetric"))
            if attr_value(node, "mode", b"nearest") == b"nearest" and attr_value(node, "nearest_mode") is None:
                mode = _nearest_mode(node, constants.get(node.input[2]) if len(node.input) > 2 else None)
                node.attribute.append(helper.make_attribute("nearest_mode", mode))
            changed += 1
    return changed


def _nearest_mode(node: onnx.NodeProto, scales: np.ndarray | None) -> str:
    if scales is None or not scales.size or np.all(scales >= 1):
        return "floor"
    if np.all(scales <= 1):
        return "ceil"
    raise MetaInferError(
        f"Node {describe(node)} (a nearest Resize/Upsample from before opset 11) enlarges some axes and "
        f"shrinks others (scales {scales.tolist()}), which opset {FIRST_HALF_PIXEL_OPSET} and later cannot "
        "express in one Resize; re-export the model at opset 11 or newer, or resize in two steps."
    )


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Initializers and Constant(value=...) outputs of one graph: where a converted scales input lives."""
    found = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        value = attr_value(node, "value") if is_op(node, "Constant") else None
        if isinstance(value, onnx.TensorProto):
            found[node.output[0]] = numpy_helper.to_array(value)
    return found
