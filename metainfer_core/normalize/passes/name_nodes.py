"""Give every main-graph node a unique, non-empty name (`<OpType>_<index>` where missing or
repeated). Plans, fusion groups and quantization scopes refer to nodes by name; exporters
often leave names empty. Names never change the math."""

from __future__ import annotations

import onnx

from metainfer_core.ir.graph_utils import clone


def run(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    out = clone(model)
    taken = {n.name for n in out.graph.node if n.name}
    seen: set[str] = set()
    changes = 0
    for i, node in enumerate(out.graph.node):
        if node.name and node.name not in seen:
            seen.add(node.name)
            continue
        base = f"{node.op_type}_{i}"
        name, k = base, 1
        while name in taken or name in seen:
            name, k = f"{base}_{k}", k + 1
        node.name = name
        seen.add(name)
        taken.add(name)
        changes += 1
    return out, changes
