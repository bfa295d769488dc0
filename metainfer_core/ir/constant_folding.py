"""Constant() -> initializer;  Op(c1, c2, ...) with only constant inputs -> initializer(result);
Shape(x) with x's shape fully static -> initializer(shape).

Results are computed with onnx.reference.ReferenceEvaluator at the model's own opsets.
Skipped: non-deterministic ops (Random*, Multinomial, Bernoulli), nodes with subgraphs,
Quantize/DequantizeLinear (they mark quantization, which later stages decide on), results over
MAX_ELEMENTS elements (folding would bloat the file), and ops the evaluator cannot run.
Ensures: each folded output keeps its name, now an initializer, so readers (including subgraphs
and graph outputs) are untouched.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator

from metainfer_core.ir.graph_utils import (
    NON_DETERMINISTIC,
    GraphIndex,
    attr_value,
    is_op,
    static_shape,
    subgraphs,
    sweep,
)

MAX_ELEMENTS = 1_000_000
_KEEP = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})


# Kept over onnxscript's FoldConstantsPass: it folds less, renames every node, and is slower on some quantized models.
def run(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    return sweep(model, lambda index, node: _rewrite(index, node, model))


def _rewrite(index: GraphIndex, node: onnx.NodeProto, model: onnx.ModelProto) -> int:
    values = _fold(index, node, model)
    if isinstance(values, str):
        return 0
    for name, value in zip([n for n in node.output if n], values):
        index.add_initializer(value, name)
    index.remove(node)
    return 1


def _fold(index: GraphIndex, node: onnx.NodeProto, model: onnx.ModelProto) -> list[np.ndarray] | str:
    """The node's output values, or why it cannot be folded."""
    if node.op_type in NON_DETERMINISTIC or node.op_type in _KEEP or subgraphs(node):
        return f"{node.op_type} is never folded"
    if is_op(node, "Shape"):
        dims = static_shape(index.shapes.get(node.input[0]))
        if dims is None:
            return "the input shape is not static"
        return [np.array(dims[attr_value(node, "start", 0) : attr_value(node, "end", len(dims))], np.int64)]
    if not all(index.is_constant(n) for n in node.input if n):
        return "an input is not constant"
    for out in node.output:
        dims = static_shape(index.shapes.get(out))
        if dims is not None and math.prod(dims) > MAX_ELEMENTS:
            return "the result is too large"
    try:
        values = ReferenceEvaluator(_probe(index, node, model)).run(None, {})
    except Exception as exc:  # an op the evaluator lacks (custom domains...) simply stays
        return f"evaluation failed: {exc}"
    if not all(isinstance(v, (np.ndarray, np.generic)) for v in values):
        return "a result is a sequence, map or optional, not a tensor"
    if any(v.size > MAX_ELEMENTS for v in values):
        return "the result is too large"
    return [np.asarray(v) for v in values]


def _probe(index: GraphIndex, node: onnx.NodeProto, model: onnx.ModelProto) -> onnx.ModelProto:
    """A one-node model holding the node's constant inputs as initializers."""
    weights = [index.initializers[n] for n in dict.fromkeys(node.input) if n]
    outputs = [helper.make_value_info(n, onnx.TypeProto()) for n in node.output if n]
    graph = helper.make_graph([node], "fold", [], outputs, weights)
    return helper.make_model(
        graph, opset_imports=model.opset_import, functions=model.functions, ir_version=model.ir_version
    )
