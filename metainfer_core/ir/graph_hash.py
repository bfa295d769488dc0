"""The canonical hash of a graph: what the search merges equivalent plans by and the fingerprint
library keys whole-model runs by."""
from __future__ import annotations

import hashlib

import onnx

from metainfer_core.ir.directives import FUSION_KEY, SCHEDULE_KEY


def _h(*parts) -> str:
    return hashlib.sha1("\x1f".join(map(str, parts)).encode()).hexdigest()


def _tensor_digest(t: onnx.TensorProto) -> str:
    if t.raw_data:
        payload = t.raw_data
    else:                  # typed fields: hash a nameless copy of the proto
        c = onnx.TensorProto()
        c.CopyFrom(t)
        c.name = ""
        payload = c.SerializeToString(deterministic=True)
    return hashlib.sha1(bytes([t.data_type]) + str(list(t.dims)).encode() + payload).hexdigest()


def graph_hash(model: onnx.ModelProto) -> str:
    """Identity of the computation, independent of node and intermediate tensor names and of
    which equivalent order the nodes are listed in: each node is hashed from its op, attributes,
    metadata and the hashes of what it reads (a Merkle DAG); weights by content; the graph by
    its interface, its output hashes, every node hash, its fusion groups (as sets of member
    hashes, so group labels do not matter) and the plan-wide metadata. The execution order
    counts only when a plan chose it (metadata `metainfer.schedule`)."""
    g = model.graph
    value: dict[str, str] = {i.name: _tensor_digest(i) for i in g.initializer}
    for i in g.input:
        if i.name not in value:
            value[i.name] = _h("in", i.name, i.type.SerializeToString(deterministic=True))
    node_hashes: list[str] = []
    groups: dict[str, list[str]] = {}
    sha1 = hashlib.sha1
    for n in g.node:
        attrs = ",".join(sorted(a.SerializeToString(deterministic=True).hex() for a in n.attribute)) if len(n.attribute) else ""
        tag, meta = None, ""
        if len(n.metadata_props):
            pairs = sorted((p.key, p.value) for p in n.metadata_props)
            tag = next((v for k, v in pairs if k == FUSION_KEY), None)
            meta = ";".join(f"{k}={v}" for k, v in pairs if k != FUSION_KEY)
        reads = ",".join(value.get(i, "?" + i) if i else "" for i in n.input)
        h = sha1(f"{n.op_type}|{n.domain}|{attrs}|{meta}|{reads}".encode()).hexdigest()
        node_hashes.append(h)
        for k, o in enumerate(n.output):
            if o:
                value[o] = f"{h}.{k}"
        if tag is not None:
            groups.setdefault(tag, []).append(h)
    outputs = [(o.name, value.get(o.name, "")) for o in g.output]
    plan_meta = sorted((p.key, p.value) for p in model.metadata_props)
    ordered = node_hashes if any(k == SCHEDULE_KEY for k, _ in plan_meta) else sorted(node_hashes)
    fused = sorted(_h(*sorted(v)) for v in groups.values())
    return _h(outputs, ",".join(ordered), fused, plan_meta)[:16]
