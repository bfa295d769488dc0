"""Graph input with an initializer of the same name => plain initializer (a constant).

Old exporters list every weight as a graph input; such a weight only acts as a default that a
caller could override, which hides it from every constant rewrite. Deployment never overrides
weights, so the canonical graph treats them as constants.
Requires: IR version 4 or newer (before that, initializers had to be graph inputs); older models
are left as they are. Ensures: the inputs a caller feeds are unchanged.
"""

from __future__ import annotations

import onnx

from metainfer_core.ir.graph_utils import clone, set_repeated


# Kept over onnx_ir's RemoveInitializersFromInputsPass: the same result, but its IR round trip costs many times this pass.
def run(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    weights = {t.name for t in model.graph.initializer}
    if model.ir_version < 4 or not any(i.name in weights for i in model.graph.input):
        return model, 0
    model = clone(model)
    inputs = [i for i in model.graph.input if i.name not in weights]
    changes = len(model.graph.input) - len(inputs)
    set_repeated(model.graph.input, inputs)
    return model, changes
