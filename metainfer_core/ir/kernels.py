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

from metainfer_core.ir.directives import ADAPTER, BIND_KEY, FUSION_KEY, LAYOUT_KEY, PRECISION_KEY, node_meta
from metainfer_core.ir.flops import attrs, node_flops
from metainfer_core.ir.tensors import TensorInfo, tensor_infos

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


def is_adapter(node: onnx.NodeProto) -> bool:
    return node.op_type == "Transpose" and node_meta(node, LAYOUT_KEY) == ADAPTER


def is_precision_cast(node: onnx.NodeProto) -> bool:
    return node.op_type == "Cast" and node_meta(node, PRECISION_KEY) is not None


def is_format_node(node: onnx.NodeProto) -> bool:
    """Nodes that only hold a tensor in a storage format (absorbed by the kernel using it)."""
    return node.op_type in QDQ_OPS or is_precision_cast(node)


class _Facts:
    """What the grouping asks of each node, read from the protos once (repeated protobuf field
    access dominates otherwise), with producer/consumer lookups that see through adapters."""

    def __init__(self, graph: onnx.GraphProto):
        self.nodes = list(graph.node)
        self.ins: dict[int, list[str]] = {}
        self.outs: dict[int, list[str]] = {}
        self.adapter: set[int] = set()
        self.fmt: set[int] = set()
        self.prec: set[int] = set()
        self.tag: dict[int, str] = {}
        self.producer: dict[str, onnx.NodeProto] = {}
        self.cons: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        for n in self.nodes:
            i = id(n)
            ins, outs = list(n.input), list(n.output)
            self.ins[i], self.outs[i] = ins, outs
            op = n.op_type
            if len(n.metadata_props):
                meta = {p.key: p.value for p in n.metadata_props}
                if op == "Transpose" and meta.get(LAYOUT_KEY) == ADAPTER:
                    self.adapter.add(i)
                if op == "Cast" and PRECISION_KEY in meta:
                    self.prec.add(i)
                if FUSION_KEY in meta:
                    self.tag[i] = meta[FUSION_KEY]
            if op in QDQ_OPS or i in self.prec:
                self.fmt.add(i)
            for o in outs:
                self.producer[o] = n
            for t in ins:
                if t:
                    self.cons[t].append(n)

    def up(self, tensor: str) -> tuple[onnx.NodeProto | None, list[onnx.NodeProto]]:
        """The producer of `tensor` behind exclusive adapters, and those adapters."""
        seen: list[onnx.NodeProto] = []
        p = self.producer.get(tensor)
        while p is not None and id(p) in self.adapter and len(self.cons[self.outs[id(p)][0]]) == 1:
            seen.append(p)
            p = self.producer.get(self.ins[id(p)][0])
        return p, seen

    def down(self, tensor: str) -> tuple[list[onnx.NodeProto], list[onnx.NodeProto]]:
        """The consumers of `tensor` behind a sole adapter, and that adapter."""
        users = self.cons.get(tensor, [])
        seen: list[onnx.NodeProto] = []
        while len(users) == 1 and id(users[0]) in self.adapter:
            seen.append(users[0])
            users = self.cons.get(self.outs[id(users[0])][0], [])
        return users, seen


def _clusters(f: _Facts) -> list[list[onnx.NodeProto]]:
    """[DQ..., op, Q] clusters a QDQ-aware runtime fuses into one integer kernel, and
    [Cast(bf16->f32)..., op, Cast(f32->bf16)] clusters of emulated bfloat16."""
    groups = []
    for n in f.nodes:
        i = id(n)
        if i in f.fmt or i in f.adapter or len(f.outs[i]) != 1:
            continue
        ins, absorbed = [], []
        for t in f.ins[i]:
            p, through = f.up(t) if t else (None, [])
            if p is not None and (p.op_type == "DequantizeLinear" or id(p) in f.prec):
                ins.append((p, through))
        if not ins:
            continue
        users, out_adapters = f.down(f.outs[i][0])
        if len(users) != 1:
            continue
        last = users[0]
        q = last.op_type == "QuantizeLinear" and all(p.op_type == "DequantizeLinear" for p, _ in ins)
        bf = id(last) in f.prec and all(id(p) in f.prec for p, _ in ins)
        if not (q or bf):
            continue
        for p, through in ins:
            absorbed.extend(through)
            if len(f.cons[f.outs[id(p)][0]]) == 1:
                absorbed.append(p)
        groups.append(absorbed + [n] + out_adapters + [last])
    return groups


_DTYPE_NAMES: dict = {}


def _name(dtype) -> str:
    if dtype not in _DTYPE_NAMES:
        _DTYPE_NAMES[dtype] = str(dtype)
    return _DTYPE_NAMES[dtype]


def _dtype_of(nodes: list[onnx.NodeProto], infos: dict[str, TensorInfo], f: _Facts | None = None) -> str:
    # a quantized op, or a lone (de)quantize at a boundary: both run on the integer units
    if any(n.op_type == "QuantizeLinear" for n in nodes) or all(n.op_type in QDQ_OPS for n in nodes):
        return "int8"
    if any((id(n) in f.prec) if f is not None else is_precision_cast(n) for n in nodes):
        return "bfloat16"
    for n in nodes:
        for i in (f.ins[id(n)] if f is not None else n.input):
            info = infos.get(i)
            if info is not None and info.dtype.kind == "f":
                return _name(info.dtype)
    first = nodes[0].input[0] if nodes[0].input else ""
    dtype = _name(infos[first].dtype) if first in infos else "float32"
    return "int8" if dtype == "uint8" else dtype       # 8-bit data movement runs on the integer units


def _nbytes(info: TensorInfo) -> int:
    return math.prod(info.shape) * info.dtype.itemsize


def make_kernel(nodes: list[onnx.NodeProto], graph: onnx.GraphProto, infos: dict[str, TensorInfo],
                inits: set[str], consumers: dict[str, list[onnx.NodeProto]],
                graph_outputs: set[str] | None = None, facts: _Facts | None = None) -> Kernel:
    f = facts if facts is not None else _Facts(graph)
    names = {id(n) for n in nodes}
    produced = {o for n in nodes for o in f.outs[id(n)]}
    graph_outputs = graph_outputs if graph_outputs is not None else {o.name for o in graph.output}
    ext_in: list[str] = []
    weights: list[str] = []
    for n in nodes:
        for i in f.ins[id(n)]:
            if not i or i in produced:
                continue
            target = weights if i in inits else ext_in
            if i not in target:
                target.append(i)
    outputs = [o for o in produced if o in graph_outputs or any(id(c) not in names for c in consumers.get(o, []))]
    compute = [n for n in nodes if id(n) not in f.fmt and id(n) not in f.adapter] or \
              [n for n in nodes if id(n) not in f.fmt] or nodes
    op_type = "+".join(n.op_type for n in compute)
    attr = {}
    for n in compute:
        if len(n.attribute):
            attr.update({k: v for k, v in attrs(n).items() if k in _ATTR_FEATURES})
        # kernel_shape is optional in ONNX (implied by the weight); exporters often omit it
        if n.op_type in ("Conv", "ConvTranspose") and "kernel_shape" not in attr and len(n.input) > 1:
            w = infos.get(n.input[1])
            if w is not None:
                attr["kernel_shape"] = list(w.shape[2:])
    adapters = [n for n in nodes if id(n) in f.adapter]
    if adapters:
        attr["layout"] = next((node_meta(n, LAYOUT_KEY) for n in compute if node_meta(n, LAYOUT_KEY)), "NHWC")
    # shapes are logical: a tensor read or written through an adapter has the adapted op's shape
    logical = {f.ins[id(n)][0]: f.outs[id(n)][0] for n in adapters if f.ins[id(n)][0] not in produced}
    logical.update({f.outs[id(n)][0]: f.ins[id(n)][0] for n in adapters})

    def size(names_):
        return sum(_nbytes(infos[t]) for t in names_ if t in infos)

    def shape(t):
        return infos[logical.get(t, t)].shape if logical.get(t, t) in infos else infos[t].shape

    sorted_out = sorted(outputs)
    return Kernel(nodes=nodes, op_type=op_type, dtype=_dtype_of(nodes, infos, f), inputs=ext_in, weights=weights,
                  outputs=sorted_out, flops=sum(node_flops(n, infos) for n in compute),
                  bytes_in=size(ext_in), bytes_weights=size(weights), bytes_out=size(outputs),
                  in_shapes=[shape(t) for t in ext_in if t in infos],
                  out_shapes=[shape(t) for t in sorted_out if t in infos], attrs=attr)


def group_kernels(model: onnx.ModelProto, infos: dict[str, TensorInfo] | None = None) -> list[Kernel]:
    """Kernels in execution (topological) order."""
    graph = model.graph
    infos = infos if infos is not None else tensor_infos(model)
    inits = {i.name for i in graph.initializer}
    f = _Facts(graph)
    owner: dict[int, int] = {}          # id(node) -> group index
    groups: list[list[onnx.NodeProto]] = []

    def add_group(nodes):
        for n in nodes:
            owner[id(n)] = len(groups)
        groups.append(list(nodes))

    for grp in _clusters(f):
        if not any(id(n) in owner for n in grp):
            add_group(grp)
    # a layout adapter joins the kernel of the node it adapts: an input adapter (to channels-first)
    # its consumer, an output adapter (back to channels-last) its producer
    for n in f.nodes:
        if id(n) not in f.adapter or id(n) in owner:
            continue
        users = f.cons.get(f.outs[id(n)][0], [])
        to_first = list(attrs(n).get("perm", [])) == TO_NCHW
        mate = (users[0] if len(users) == 1 else None) if to_first else f.producer.get(f.ins[id(n)][0])
        if mate is None or id(mate) in f.adapter:
            continue
        if id(mate) not in owner:
            add_group([mate])
        owner[id(n)] = owner[id(mate)]
        groups[owner[id(n)]].append(n)
    fused: dict[str, int] = {}
    for n in f.nodes:                   # fusion groups absorb the clusters inside them
        tag = f.tag.get(id(n))
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
    order = {id(n): i for i, n in enumerate(f.nodes)}
    graph_outputs = {o.name for o in graph.output}
    kernels, seen = [], set()
    for n in f.nodes:
        g = owner.get(id(n))
        if g is None:
            kernels.append(make_kernel([n], graph, infos, inits, f.cons, graph_outputs, f))
        elif g not in seen:
            seen.add(g)
            kernels.append(make_kernel(sorted(groups[g], key=lambda m: order[id(m)]), graph, infos, inits,
                                       f.cons, graph_outputs, f))
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
