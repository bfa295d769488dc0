"""Output-channel split (lossless), the tiling action's `axis=channels`: a Conv, MatMul or Gemm
with constant weights runs as several ops, each computing a contiguous block of output channels
with its slice of the weights (and bias), and a Concat joins the blocks. A device that streams
weights from flash then holds one block's weights at a time instead of the whole layer's, as
microNPU compilers split a layer whose weights do not fit; the price: each block re-reads the
input, one more launch per block, and the Concat's pass over the output.

In a QDQ graph the weight's DequantizeLinear is sliced with it (a per-channel scale and zero
point along the output-channel axis), each block gets its own copy of the input's
DequantizeLinear and of the output's QuantizeLinear, so it stays one integer kernel, and the
Concat joins the quantized blocks (same scale: exact). Nodes and tensors of a block are named
"<original>|ch<i>"."""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from metainfer_core.actions.base import commit_rewrite, derived, wiring
from metainfer_core.ir.graph_utils import attr_value, clone

OPS = ("Conv", "MatMul", "Gemm")


def _const(graph_inits: dict, producer: dict, consumers, t: str):
    """(initializer, its DequantizeLinear or None) when `t` is a constant only `consumers` read."""
    if t in graph_inits:
        return graph_inits[t], None
    dq = producer.get(t)
    if dq is not None and dq.op_type == "DequantizeLinear" and dq.input[0] in graph_inits \
            and all(i in graph_inits for i in dq.input[1:] if i) and len(consumers.get(t, [])) == 1:
        return graph_inits[dq.input[0]], dq
    return None, None


def _out_axis(n: onnx.NodeProto, w: onnx.TensorProto) -> int | None:
    """The weight axis holding the output channels (None: the op cannot be split)."""
    if n.op_type == "Conv":
        return 0 if len(w.dims) >= 3 and attr_value(n, "group", 1) == 1 else None
    if n.op_type == "MatMul":
        return 1 if len(w.dims) == 2 else None
    if n.op_type == "Gemm":
        return 0 if attr_value(n, "transB", 0) else 1
    return None


def splittable(n: onnx.NodeProto, inits: dict, producer, consumers) -> int | None:
    """The number of output channels of `n` when it can be split, else None."""
    if n.op_type not in OPS or len(n.input) < 2 or len(n.output) != 1:
        return None
    w, dq = _const(inits, producer, consumers, n.input[1])
    if w is None:
        return None
    axis = _out_axis(n, w)
    if axis is None:
        return None
    if dq is not None and not _sliceable_dq(dq, inits, axis, len(w.dims)):
        return None
    if len(n.input) > 2 and n.input[2]:
        b, bdq = _const(inits, producer, consumers, n.input[2])
        if b is None or len(b.dims) > 1 or (bdq is not None and not _sliceable_dq(bdq, inits, 0, 1)):
            return None         # a [1, N] or [M, N] Gemm bias is left alone
    return int(w.dims[axis])


def _sliceable_dq(dq: onnx.NodeProto, inits: dict, axis: int, rank: int) -> bool:
    scale = inits[dq.input[1]]
    if math.prod(scale.dims) == 1:
        return True
    return attr_value(dq, "axis", 1) % rank == axis


def _slice(arr: np.ndarray, axis: int, lo: int, hi: int) -> np.ndarray:
    index = [slice(None)] * arr.ndim
    index[axis] = slice(lo, hi)
    return np.ascontiguousarray(arr[tuple(index)])


def split_channels(model: onnx.ModelProto, node: str, tiles: int) -> onnx.ModelProto:
    out = clone(model)
    g = out.graph
    inits = {i.name: i for i in g.initializer}
    producer, consumers = wiring(g)
    n = next((m for m in g.node if m.name == node), None)
    if n is None:
        raise ValueError(f"no node {node}")
    cout = splittable(n, inits, producer, consumers)
    if cout is None or cout < tiles:
        raise ValueError(f"{node} cannot be split into {tiles} output-channel blocks")
    w_init, w_dq = _const(inits, producer, consumers, n.input[1])
    axis = _out_axis(n, w_init)
    w = numpy_helper.to_array(w_init)
    bias = None
    if len(n.input) > 2 and n.input[2]:
        bias = _const(inits, producer, consumers, n.input[2])
    x = n.input[0]
    x_dq = producer.get(x) if producer.get(x) is not None and producer[x].op_type == "DequantizeLinear" else None
    y = n.output[0]
    users = consumers.get(y, [])
    q = users[0] if len(users) == 1 and users[0].op_type == "QuantizeLinear" and users[0].input[1] in inits and \
        math.prod(inits[users[0].input[1]].dims) == 1 and y not in {o.name for o in g.output} else None
    concat_axis = 1 if n.op_type in ("Conv", "Gemm") else -1
    bounds = np.linspace(0, cout, tiles + 1).round().astype(int)
    new_inits: list[onnx.TensorProto] = []
    new_nodes: list[onnx.NodeProto] = []
    pieces = []

    def sliced(init: onnx.TensorProto, ax: int, lo: int, hi: int, tag: str) -> str:
        name = derived(init.name, tag)
        new_inits.append(numpy_helper.from_array(_slice(numpy_helper.to_array(init), ax, lo, hi), name))
        return name

    def dq_of(dq: onnx.NodeProto, data: str, lo: int, hi: int, tag: str) -> str:
        """A copy of weight/bias DequantizeLinear `dq` on sliced `data` (its scale sliced if per channel)."""
        ins = [data]
        for t in dq.input[1:]:
            if t and math.prod(inits[t].dims) > 1:
                ins.append(sliced(inits[t], 0, lo, hi, tag))
            else:
                ins.append(t)
        m = onnx.NodeProto()
        m.CopyFrom(dq)
        m.name, m.input[:], m.output[:] = derived(dq.name, tag), ins, [derived(dq.output[0], tag)]
        new_nodes.append(m)
        return m.output[0]

    for t in range(tiles):
        lo, hi, tag = int(bounds[t]), int(bounds[t + 1]), f"ch{t}"
        wt = sliced(w_init, axis, lo, hi, tag)
        if w_dq is not None:
            wt = dq_of(w_dq, wt, lo, hi, tag)
        ins = [x, wt]
        if x_dq is not None:        # its own copy: each block stays one integer kernel
            m = onnx.NodeProto()
            m.CopyFrom(x_dq)
            m.name, m.output[:] = derived(x_dq.name, tag), [derived(x, tag)]
            new_nodes.append(m)
            ins[0] = m.output[0]
        if bias is not None:
            b_init, b_dq = bias
            if math.prod(b_init.dims) > 1:
                bt = sliced(b_init, 0, lo, hi, tag)
                bt = dq_of(b_dq, bt, lo, hi, tag) if b_dq is not None else bt
            else:
                bt = n.input[2]
            ins.append(bt)
        m = onnx.NodeProto()
        m.CopyFrom(n)
        m.name, m.input[:], m.output[:] = derived(n.name, tag), ins, [derived(y, tag)]
        new_nodes.append(m)
        piece = m.output[0]
        if q is not None:
            mq = onnx.NodeProto()
            mq.CopyFrom(q)
            mq.name, mq.input[0], mq.output[:] = derived(q.name, tag), piece, [derived(q.output[0], tag)]
            new_nodes.append(mq)
            piece = mq.output[0]
        pieces.append(piece)
    joined = q.output[0] if q is not None else y
    new_nodes.append(helper.make_node("Concat", pieces, [joined], name=derived(n.name, "concat"), axis=concat_axis))
    drop = {id(n)} | ({id(q)} if q is not None else set()) | ({id(w_dq)} if w_dq is not None else set())
    if bias is not None and bias[1] is not None:
        drop.add(id(bias[1]))
    if x_dq is not None and len(consumers.get(x, [])) == 1:
        drop.add(id(x_dq))
    anchor = q if q is not None else n
    nodes = []
    for m in g.node:
        if id(m) == id(anchor):
            nodes.extend(new_nodes)     # the blocks and the Concat take the anchor's place
        elif id(m) not in drop:
            nodes.append(m)
    del g.node[:]
    g.node.extend(nodes)
    commit_rewrite(g, new_inits)
    return out
