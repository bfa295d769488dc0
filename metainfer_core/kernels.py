"""Group a graph's nodes into the kernels a device actually launches, and bind each kernel to
the device or the host.

One kernel is: a plain node; or a quantized op in QDQ form (its exclusive DequantizeLinear
inputs, the op, and the QuantizeLinear on its output, which runtimes fuse into one integer
kernel); or an op in emulated bfloat16 (its exclusive bf16->fp32 Casts in, the op, the
fp32->bf16 Cast out, all marked `metainfer.precision`); or a fusion group marked by the
`fuse_chain` action (node metadata `metainfer.fusion_group`). Layout adapters (Transposes the
`layout` action marks `metainfer.layout=adapter` so that an ONNX op, channels-first by
definition, can read and write channels-last tensors) belong to the kernel of the node they
adapt: the device kernel reads that layout natively. Kernels are the unit the fingerprint
library measures, the predictor scores and the simulator times."""
from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field

import onnx

from metainfer_core.flops import attrs, node_flops
from metainfer_core.tensors import TensorInfo, tensor_infos

# node metadata (directives the actions leave for devices; ONNX runtimes ignore them)
FUSION_KEY = "metainfer.fusion_group"
LAYOUT_KEY = "metainfer.layout"          # "NHWC" on a node computing channels-last; "adapter" on its Transposes
PRECISION_KEY = "metainfer.precision"    # "bfloat16" on the Casts that hold a tensor in emulated bf16
BIND_KEY = "metainfer.bind"              # "host": pinned to the host whatever the device supports
# model metadata (plan-wide directives)
DOUBLE_BUFFER_KEY = "metainfer.double_buffer"   # "1": host<->device transfers use two staging buffers
ADAPTER = "adapter"
TO_NCHW, TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]
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
    in_shapes: list[tuple[int, ...]]  # logical (channels-first) shapes; attrs["layout"] says how they are stored
    out_shapes: list[tuple[int, ...]]
    attrs: dict = field(default_factory=dict)

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    @property
    def n_ops(self) -> int:
        """ONNX ops the kernel holds; storage-format nodes (QDQ, bf16 Casts) do not count,
        layout adapters do (a channels-last kernel holds its two Transposes)."""
        return sum(1 for n in self.nodes if not is_format_node(n))

    @property
    def layout(self) -> str:
        return self.attrs.get("layout", "NCHW")

    def signature(self) -> str:
        """Identity of what is measured: op, precision, shapes and shape-relevant attributes."""
        return json.dumps({"op": self.op_type, "dtype": self.dtype, "in": self.in_shapes,
                           "w": self.bytes_weights, "out": self.out_shapes, "attrs": self.attrs},
                          sort_keys=True, default=str)

    def key(self) -> str:
        return hashlib.sha1(self.signature().encode()).hexdigest()[:16]


def node_meta(node: onnx.NodeProto, key: str) -> str | None:
    for p in node.metadata_props:
        if p.key == key:
            return p.value
    return None


def set_node_meta(node: onnx.NodeProto, key: str, value: str) -> None:
    for p in node.metadata_props:
        if p.key == key:
            p.value = value
            return
    node.metadata_props.add(key=key, value=value)


def is_adapter(node: onnx.NodeProto) -> bool:
    return node.op_type == "Transpose" and node_meta(node, LAYOUT_KEY) == ADAPTER


def is_precision_cast(node: onnx.NodeProto) -> bool:
    return node.op_type == "Cast" and node_meta(node, PRECISION_KEY) is not None


def is_format_node(node: onnx.NodeProto) -> bool:
    """Nodes that only hold a tensor in a storage format (absorbed by the kernel using it)."""
    return node.op_type in QDQ_OPS or is_precision_cast(node)


def _fusion_group(node: onnx.NodeProto) -> str | None:
    return node_meta(node, FUSION_KEY)


def _consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    cons: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for n in graph.node:
        for i in n.input:
            if i:
                cons[i].append(n)
    return cons


class _Adjacency:
    """Producer/consumer lookups that see through layout adapters."""

    def __init__(self, graph: onnx.GraphProto):
        self.producer = {o: n for n in graph.node for o in n.output}
        self.cons = _consumers(graph)

    def up(self, tensor: str) -> tuple[onnx.NodeProto | None, list[onnx.NodeProto]]:
        """The producer of `tensor` behind exclusive adapters, and those adapters."""
        seen: list[onnx.NodeProto] = []
        p = self.producer.get(tensor)
        while p is not None and is_adapter(p) and len(self.cons[p.output[0]]) == 1:
            seen.append(p)
            p = self.producer.get(p.input[0])
        return p, seen

    def down(self, tensor: str) -> tuple[list[onnx.NodeProto], list[onnx.NodeProto]]:
        """The consumers of `tensor` behind a sole adapter, and that adapter."""
        users = self.cons.get(tensor, [])
        seen: list[onnx.NodeProto] = []
        while len(users) == 1 and is_adapter(users[0]):
            seen.append(users[0])
            users = self.cons.get(users[0].output[0], [])
        return users, seen


def _clusters(graph: onnx.GraphProto, adj: _Adjacency) -> list[list[onnx.NodeProto]]:
    """[DQ..., op, Q] clusters a QDQ-aware runtime fuses into one integer kernel, and
    [Cast(bf16->f32)..., op, Cast(f32->bf16)] clusters of emulated bfloat16."""
    groups = []
    for n in graph.node:
        if is_format_node(n) or is_adapter(n) or len(n.output) != 1:
            continue
        ins, absorbed = [], []
        for i in n.input:
            p, through = adj.up(i) if i else (None, [])
            if p is not None and (p.op_type == "DequantizeLinear" or (is_precision_cast(p))):
                ins.append((p, through))
        users, out_adapters = adj.down(n.output[0])
        if not ins or len(users) != 1:
            continue
        last = users[0]
        q = last.op_type == "QuantizeLinear" and all(p.op_type == "DequantizeLinear" for p, _ in ins)
        bf = is_precision_cast(last) and all(is_precision_cast(p) for p, _ in ins)
        if not (q or bf):
            continue
        for p, through in ins:
            absorbed.extend(through)
            if len(adj.cons[p.output[0]]) == 1:
                absorbed.append(p)
        groups.append(absorbed + [n] + out_adapters + [last])
    return groups


def _dtype_of(nodes: list[onnx.NodeProto], infos: dict[str, TensorInfo]) -> str:
    # a quantized op, or a lone (de)quantize at a boundary: both run on the integer units
    if any(n.op_type == "QuantizeLinear" for n in nodes) or all(n.op_type in QDQ_OPS for n in nodes):
        return "int8"
    if any(is_precision_cast(n) for n in nodes):
        return "bfloat16"
    for n in nodes:
        for i in n.input:
            if i in infos and infos[i].dtype.kind == "f":
                return str(infos[i].dtype)
    first = nodes[0].input[0] if nodes[0].input else ""
    dtype = str(infos[first].dtype) if first in infos else "float32"
    return "int8" if dtype == "uint8" else dtype       # 8-bit data movement runs on the integer units


def _nbytes(info: TensorInfo) -> int:
    return math.prod(info.shape) * info.dtype.itemsize


def make_kernel(nodes: list[onnx.NodeProto], graph: onnx.GraphProto, infos: dict[str, TensorInfo],
                inits: set[str], consumers: dict[str, list[onnx.NodeProto]],
                graph_outputs: set[str] | None = None) -> Kernel:
    names = {id(n) for n in nodes}
    produced = {o for n in nodes for o in n.output}
    graph_outputs = graph_outputs if graph_outputs is not None else {o.name for o in graph.output}
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
    compute = [n for n in nodes if not is_format_node(n) and not is_adapter(n)] or \
              [n for n in nodes if not is_format_node(n)] or nodes
    op_type = "+".join(n.op_type for n in compute)
    attr = {}
    for n in compute:
        attr.update({k: v for k, v in attrs(n).items() if k in _ATTR_FEATURES})
        # kernel_shape is optional in ONNX (implied by the weight); exporters often omit it
        if n.op_type in ("Conv", "ConvTranspose") and "kernel_shape" not in attr and len(n.input) > 1:
            w = infos.get(n.input[1])
            if w is not None:
                attr["kernel_shape"] = list(w.shape[2:])
    adapters = [n for n in nodes if is_adapter(n)]
    if adapters:
        attr["layout"] = next((node_meta(n, LAYOUT_KEY) for n in compute if node_meta(n, LAYOUT_KEY)), "NHWC")
    # shapes are logical: a tensor read or written through an adapter has the adapted op's shape
    logical = {n.input[0]: n.output[0] for n in adapters if n.input[0] not in produced}
    logical.update({n.output[0]: n.input[0] for n in adapters})

    def size(names_):
        return sum(_nbytes(infos[t]) for t in names_ if t in infos)

    def shape(t):
        return infos[logical.get(t, t)].shape if logical.get(t, t) in infos else infos[t].shape

    sorted_out = sorted(outputs)
    return Kernel(nodes=nodes, op_type=op_type, dtype=_dtype_of(nodes, infos), inputs=ext_in, weights=weights, outputs=sorted_out,
                  flops=sum(node_flops(n, infos) for n in compute),
                  bytes_in=size(ext_in), bytes_weights=size(weights), bytes_out=size(outputs),
                  in_shapes=[shape(t) for t in ext_in if t in infos],
                  out_shapes=[shape(t) for t in sorted_out if t in infos], attrs=attr)


def group_kernels(model: onnx.ModelProto, infos: dict[str, TensorInfo] | None = None) -> list[Kernel]:
    """Kernels in execution (topological) order."""
    graph = model.graph
    infos = infos if infos is not None else tensor_infos(model)
    inits = {i.name for i in graph.initializer}
    adj = _Adjacency(graph)
    owner: dict[int, int] = {}          # id(node) -> group index
    groups: list[list[onnx.NodeProto]] = []

    def add_group(nodes):
        for n in nodes:
            owner[id(n)] = len(groups)
        groups.append(list(nodes))

    for grp in _clusters(graph, adj):
        if not any(id(n) in owner for n in grp):
            add_group(grp)
    # a layout adapter joins the kernel of the node it adapts: an input adapter (to channels-first)
    # its consumer, an output adapter (back to channels-last) its producer
    for n in graph.node:
        if not is_adapter(n) or id(n) in owner:
            continue
        users = adj.cons.get(n.output[0], [])
        to_first = list(attrs(n).get("perm", [])) == TO_NCHW
        mate = (users[0] if len(users) == 1 else None) if to_first else adj.producer.get(n.input[0])
        if mate is None or is_adapter(mate):
            continue
        if id(mate) not in owner:
            add_group([mate])
        owner[id(n)] = owner[id(mate)]
        groups[owner[id(n)]].append(n)
    fused: dict[str, int] = {}
    for n in graph.node:                # fusion groups absorb the clusters inside them
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
    graph_outputs = {o.name for o in graph.output}
    kernels, seen = [], set()
    for n in graph.node:
        g = owner.get(id(n))
        if g is None:
            kernels.append(make_kernel([n], graph, infos, inits, adj.cons, graph_outputs))
        elif g not in seen:
            seen.add(g)
            kernels.append(make_kernel(sorted(groups[g], key=lambda m: order[id(m)]), graph, infos, inits,
                                       adj.cons, graph_outputs))
    return kernels


# --- operator binding ----------------------------------------------------------------------

def unsupported_reason(k: Kernel, supported_ops: tuple[str, ...] | list[str] | set[str] | None,
                       dtypes: tuple[str, ...] | list[str] | set[str]) -> str | None:
    """Why the device cannot run kernel `k` (None: it can). Layout adapters and bf16 storage
    Casts are absorbed by the device kernel and need no op of their own."""
    pinned = next((node_meta(n, BIND_KEY) for n in k.nodes if node_meta(n, BIND_KEY)), None)
    if pinned == "host":
        return "pinned to the host"
    if supported_ops is not None:
        ops = {n.op_type for n in k.nodes if not is_adapter(n) and not is_precision_cast(n)}
        missing = sorted(ops - set(supported_ops))
        if missing:
            return f"op {missing[0]} is not in the device op set"
    if k.dtype not in dtypes:
        return f"no {k.dtype} datapath"
    return None


def bind(kernels: list[Kernel], supported_ops, dtypes) -> list[str | None]:
    """Per kernel: None when it runs on the device, else why it is bound to the host."""
    return [unsupported_reason(k, supported_ops, dtypes) for k in kernels]


def crossings(kernels: list[Kernel], infos: dict[str, TensorInfo], on_device: list[bool],
              inputs_on_device: bool = False) -> list[int]:
    """Bytes that cross the host<->device link before each kernel runs (graph inputs start on
    the host, or on the device when `inputs_on_device`)."""
    where: dict[str, bool] = {}
    moved = []
    for k, dev in zip(kernels, on_device):
        moved.append(sum(_nbytes(infos[t]) for t in k.inputs if t in infos and where.get(t, inputs_on_device) != dev))
        for t in k.outputs:
            where[t] = dev
    return moved
