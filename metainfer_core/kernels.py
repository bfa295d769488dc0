"""Group a graph's nodes into the kernels a device actually launches.

One kernel is: a plain node; or a quantized op in QDQ form (its exclusive DequantizeLinear
inputs, the op, and the QuantizeLinear on its output, which runtimes fuse into one integer
kernel); or a fusion group marked by the `fuse_chain` action (node metadata
`metainfer.fusion_group`). Kernels are the unit the fingerprint library measures, the
predictor scores and the simulator times."""
from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass, field

import onnx

from metainfer_core.flops import attrs, node_flops
from metainfer_core.tensors import TensorInfo, tensor_infos

FUSION_KEY = "metainfer.fusion_group"
QDQ_OPS = {"QuantizeLinear", "DequantizeLinear"}
_ATTR_FEATURES = ("kernel_shape", "strides", "group", "dilations", "pads", "axis", "perm")


@dataclass
class Kernel:
    nodes: list[onnx.NodeProto]
    op_type: str                      # "Conv", or "Conv+Relu" for a fused group
    dtype: str                        # compute precision: float32 / float16 / bfloat16 / int8 ...
    inputs: list[str]                 # external activation inputs (no initializers)
    weights: list[str]                # initializers read
    outputs: list[str]                # tensors used outside the kernel
    flops: int
    bytes_in: int
    bytes_weights: int
    bytes_out: int
    in_shapes: list[tuple[int, ...]]
    out_shapes: list[tuple[int, ...]]
    attrs: dict = field(default_factory=dict)

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    @property
    def n_ops(self) -> int:
        return sum(1 for n in self.nodes if n.op_type not in QDQ_OPS)

    def signature(self) -> str:
        """Identity of what is measured: op, precision, shapes and shape-relevant attributes."""
        return json.dumps({"op": self.op_type, "dtype": self.dtype, "in": self.in_shapes,
                           "w": self.bytes_weights, "out": self.out_shapes, "attrs": self.attrs},
                          sort_keys=True, default=str)

    def key(self) -> str:
        return hashlib.sha1(self.signature().encode()).hexdigest()[:16]


def _fusion_group(node: onnx.NodeProto) -> str | None:
    for p in node.metadata_props:
        if p.key == FUSION_KEY:
            return p.value
    return None


def _consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    cons: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for n in graph.node:
        for i in n.input:
            if i:
                cons[i].append(n)
    return cons


def _qdq_groups(graph: onnx.GraphProto, inits: set[str]) -> list[list[onnx.NodeProto]]:
    """[DQ..., op, Q] clusters a QDQ-aware runtime fuses into one integer kernel."""
    producer = {o: n for n in graph.node for o in n.output}
    cons = _consumers(graph)
    groups = []
    for n in graph.node:
        if n.op_type in QDQ_OPS or len(n.output) != 1:
            continue
        dqs = [producer[i] for i in n.input if i in producer and producer[i].op_type == "DequantizeLinear"]
        users = cons.get(n.output[0], [])
        if not dqs or len(users) != 1 or users[0].op_type != "QuantizeLinear":
            continue
        exclusive = [d for d in dqs if len(cons[d.output[0]]) == 1]
        groups.append(exclusive + [n, users[0]])
    return groups


def _dtype_of(nodes: list[onnx.NodeProto], infos: dict[str, TensorInfo]) -> str:
    # a quantized op, or a lone (de)quantize at a boundary: both run on the integer units
    if any(n.op_type == "QuantizeLinear" for n in nodes) or all(n.op_type in QDQ_OPS for n in nodes):
        return "int8"
    for n in nodes:
        for i in n.input:
            if i in infos and infos[i].dtype.kind == "f":
                return str(infos[i].dtype)
    first = nodes[0].input[0] if nodes[0].input else ""
    return str(infos[first].dtype) if first in infos else "float32"


def make_kernel(nodes: list[onnx.NodeProto], graph: onnx.GraphProto, infos: dict[str, TensorInfo],
                inits: set[str], consumers: dict[str, list[onnx.NodeProto]]) -> Kernel:
    names = {id(n) for n in nodes}
    produced = {o for n in nodes for o in n.output}
    graph_outputs = {o.name for o in graph.output}
    ext_in: list[str] = []
    weights: list[str] = []
    for n in nodes:
        for i in n.input:
            if not i or i in produced:
                continue
            target = weights if i in inits else ext_in
            if i not in target:
                target.append(i)
    outputs = [o for o in produced if o in graph_outputs or any(id(c) not in names for c in consumers.get(o, []))]
    compute = [n for n in nodes if n.op_type not in QDQ_OPS] or nodes
    op_type = "+".join(n.op_type for n in compute)
    attr = {}
    for n in compute:
        attr.update({k: v for k, v in attrs(n).items() if k in _ATTR_FEATURES})
        # kernel_shape is optional in ONNX (implied by the weight); exporters often omit it
        if n.op_type in ("Conv", "ConvTranspose") and "kernel_shape" not in attr and len(n.input) > 1:
            w = infos.get(n.input[1])
            if w is not None:
                attr["kernel_shape"] = list(w.shape[2:])

    def size(names_):
        return sum(infos[t].nbytes for t in names_ if t in infos)

    return Kernel(nodes=nodes, op_type=op_type, dtype=_dtype_of(nodes, infos), inputs=ext_in, weights=weights,
                  outputs=sorted(outputs), flops=sum(node_flops(n, infos) for n in compute),
                  bytes_in=size(ext_in), bytes_weights=size(weights), bytes_out=size(outputs),
                  in_shapes=[infos[t].shape for t in ext_in if t in infos],
                  out_shapes=[infos[t].shape for t in sorted(outputs) if t in infos], attrs=attr)


def group_kernels(model: onnx.ModelProto, infos: dict[str, TensorInfo] | None = None) -> list[Kernel]:
    """Kernels in execution (topological) order."""
    graph = model.graph
    infos = infos if infos is not None else tensor_infos(model)
    inits = {i.name for i in graph.initializer}
    owner: dict[int, int] = {}          # id(node) -> group index
    groups: list[list[onnx.NodeProto]] = []
    fused: dict[str, int] = {}
    for grp in _qdq_groups(graph, inits):
        if any(id(n) in owner for n in grp):
            continue
        for n in grp:
            owner[id(n)] = len(groups)
        groups.append(list(grp))
    for n in graph.node:                # fusion groups absorb the QDQ clusters inside them
        tag = _fusion_group(n)
        if tag is None:
            continue
        if tag not in fused:
            fused[tag] = owner.get(id(n), len(groups))
            if fused[tag] == len(groups):
                groups.append([])
        dest = fused[tag]
        src = owner.get(id(n))
        if src is not None and src != dest:
            for m in groups[src]:
                owner[id(m)] = dest
            groups[dest].extend(groups[src])
            groups[src] = []
        elif src is None:
            owner[id(n)] = dest
            groups[dest].append(n)
    order = {id(n): i for i, n in enumerate(graph.node)}
    consumers = _consumers(graph)
    kernels, seen = [], set()
    for n in graph.node:
        g = owner.get(id(n))
        if g is None:
            kernels.append(make_kernel([n], graph, infos, inits, consumers))
        elif g not in seen:
            seen.add(g)
            kernels.append(make_kernel(sorted(groups[g], key=lambda m: order[id(m)]), graph, infos, inits, consumers))
    return kernels
