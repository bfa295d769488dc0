"""Layers kept in float in a graph an outside quantizer (NNCF, ONNX Runtime's quantize_static)
wrote whole: each reads again what it read before quantization (its original activations,
weights and biases), and the quantizers nothing reads any more are dropped (GraphIndex.commit).
So the quantizer runs once per graph, however many float-layer choices the search tries."""
from __future__ import annotations

import onnx
from onnx import numpy_helper

from metainfer_core.ir.graph_utils import GraphIndex, clone


def with_float(quantized: onnx.ModelProto, original: onnx.ModelProto, floats: set[str]) -> onnx.ModelProto:
    """A copy of the quantizer's graph whose `floats` read what they read in `original` (the
    quantizers keep node and activation names); an original weight or bias the quantizer changed
    comes back under a new name."""
    out = clone(quantized)
    if not floats:
        return out
    index = GraphIndex(out.graph)
    before = {n.name: n for n in original.graph.node if n.name in floats}
    weights = {t.name: t for t in original.graph.initializer}
    for node in index.nodes:
        src = before.get(node.name)
        if src is None:
            continue
        for slot, name in enumerate(src.input):
            if name in weights:
                name = _original_weight(index, weights[name])
            index.set_input(node, slot, name)
    index.commit()
    return out


def _original_weight(index: GraphIndex, weight: onnx.TensorProto) -> str:
    have = index.initializers.get(weight.name)
    if have is not None and have.SerializeToString() == weight.SerializeToString():
        return weight.name
    # a quantizer may have given its dequantized copy the original name (ONNX Runtime's biases)
    free = have is None and weight.name not in index.producer
    name = weight.name if free else index.fresh_name(f"{weight.name}_float")
    return index.add_initializer(numpy_helper.to_array(weight), name)
