"""Subgraph splitting (lossless): a chain of ops runs as several executions on tiles of its
input, and a Concat joins the results. Spatial tiles split the height: each tile's Slice takes
its rows plus the halo its convolutions and pools need (computed backwards through the chain,
stride, kernel, dilation and padding included), and each op keeps its padding only at the
true image border, so every tile computes exactly its rows of the original output. Batch
tiles split the first axis, with no halo.

Tiles run one after the other, so only one tile's intermediates are alive at a time: the
planner's peak drops by the chain's widest intermediates (minus the halo's overlap), and
each tile kernel's working set shrinks towards the device SRAM. The price: more kernel
launches, recomputed halo rows, and the Slice/Concat traffic. In a QDQ graph each tile gets its
own copy of a weight's DequantizeLinear, so each tile stays one integer kernel. Nodes and tensors
of a tile are named "<original>|tile<i>".

A chain: single-input single-output ops (Conv, pooling, element-wise with constant operands,
per-tensor QDQ), each feeding only the next, two ops at least. Sites are the chains whose
intermediates are largest (where the peak is).

Channel tiles (`axis=channels`, metainfer_core.actions.channel_split) split a Conv, MatMul or
Gemm along its output channels instead, so a device that streams weights from flash holds one
block's weights at a time; offered only on such devices. Sites: the layer with the most weight
bytes, and every layer whose weights exceed the heaviest's share of one tile (all split at once)."""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from metainfer_core.actions.base import (Action, Param, Site, cached, commit_rewrite, derived, infos_of, missing_ops,
                                         opset_of, wiring)
from metainfer_core.actions.channel_split import split_channels, splittable
from metainfer_core.ir.directives import FUSION_KEY, LAYOUT_KEY, node_meta, set_node_meta
from metainfer_core.ir.graph_utils import attr_value, clone
from metainfer_core.ir.tensors import tensor_infos

WINDOWED = {"Conv", "MaxPool", "AveragePool"}
ELEMENTWISE = {"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Erf", "Cast",
               "QuantizeLinear", "DequantizeLinear", "Add", "Mul", "Sub", "Div"}
MAX_SITES = 2


def _window(n: onnx.NodeProto, infos) -> tuple[int, int, int, int, int] | None:
    """(kernel, stride, dilation, pad_begin, pad_end) along the height, None if not tileable."""
    if attr_value(n, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or attr_value(n, "ceil_mode", 0):
        return None
    if n.op_type == "Conv":
        w = infos.get(n.input[1])
        if w is None or len(w.shape) != 4:
            return None
        k = w.shape[2]
    else:
        ks = attr_value(n, "kernel_shape")
        if not ks or len(ks) != 2:
            return None
        k = ks[0]
    s = list(attr_value(n, "strides", [1, 1]))[0]
    d = list(attr_value(n, "dilations", [1, 1]))[0]
    p = list(attr_value(n, "pads", [0, 0, 0, 0]))
    return k, s, d, p[0], p[2]


class _Chains:
    def __init__(self, model: onnx.ModelProto, axis: str, infos=None):
        g = model.graph
        self.g, self.axis = g, axis
        self.infos = infos if infos is not None else tensor_infos(model)
        self._sizes: dict[str, int] = {}
        self.inits = {i.name: i for i in g.initializer}
        self.outputs = {o.name for o in g.output}
        self.producer, self.consumers = wiring(g)

    def _const(self, t: str) -> bool:
        """A parameter: an initializer, or computed from initializers only (a weight's DQ)."""
        if t in self.inits:
            return True
        p = self.producer.get(t)
        return p is not None and p.op_type == "DequantizeLinear" and all(i in self.inits for i in p.input if i)

    def tileable(self, n: onnx.NodeProto) -> bool:
        if len(n.output) != 1 or not n.input or node_meta(n, LAYOUT_KEY):
            return False
        x, y = self.infos.get(n.input[0]), self.infos.get(n.output[0])
        if x is None or y is None or len(x.shape) != 4 or len(y.shape) != 4 or n.input[0] in self.inits:
            return False
        if not all(not t or self._const(t) for t in n.input[1:]):
            return False
        if n.op_type in WINDOWED:
            return self.axis == "batch" or _window(n, self.infos) is not None
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            scale = self.inits.get(n.input[1])
            return scale is not None and int(np.prod(scale.dims)) == 1
        if n.op_type in ELEMENTWISE:
            # a constant operand must not vary along the tiled axis
            for t in n.input[1:]:
                if t in self.inits:
                    dims = list(self.inits[t].dims)
                    ax = 0 if self.axis == "batch" else 2
                    if len(dims) >= 4 - ax and dims[len(dims) - 4 + ax] != 1:
                        return False
            return True
        return self.axis == "batch" and n.op_type in ("GlobalAveragePool", "GlobalMaxPool")

    def chains(self) -> list[list[onnx.NodeProto]]:
        ok = {id(n) for n in self.g.node if self.tileable(n)}
        out, taken = [], set()
        for n in self.g.node:
            if id(n) not in ok or id(n) in taken:
                continue
            p = self.producer.get(n.input[0])
            if p is not None and id(p) in ok and self._sole(p, n):
                continue          # not a chain start
            chain = [n]
            while True:
                cur = chain[-1]
                users = self.consumers.get(cur.output[0], [])
                if len(users) != 1 or cur.output[0] in self.outputs or id(users[0]) not in ok \
                        or users[0].input[0] != cur.output[0]:
                    break
                chain.append(users[0])
            if len(chain) >= 2 and (self.axis == "batch" or any(c.op_type in WINDOWED for c in chain)):
                out.append(chain)
                taken |= {id(c) for c in chain}
        return out

    def _sole(self, p, n) -> bool:
        return self.consumers.get(p.output[0], []) == [n] and p.output[0] not in self.outputs

    def size(self, t: str) -> int:
        if t not in self._sizes:
            info = self.infos.get(t)
            self._sizes[t] = math.prod(info.shape) * info.dtype.itemsize if info is not None else 0
        return self._sizes[t]

    def best_span(self, chain: list[onnx.NodeProto], tiles: int) -> tuple[int, int, int]:
        """The sub-chain [i, j] whose tiling cuts the chain's local peak the most, and by how
        much: untiled, the widest op holds its input and output; tiled, the span's input stays
        whole, its output is built whole from the tiles, and each op holds a tile's share."""
        best = (0, len(chain) - 1, -1)
        for i in range(len(chain)):
            for j in range(i + 1, len(chain)):
                span = chain[i:j + 1]
                if self.axis == "height" and not any(c.op_type in WINDOWED for c in span):
                    continue
                widest = max(self.size(c.input[0]) + self.size(c.output[0]) for c in span)
                tiled = self.size(span[0].input[0]) + 2 * self.size(span[-1].output[0]) + widest // tiles
                if widest - tiled > best[2]:
                    best = (i, j, widest - tiled)
        return best


def _analysis(model: onnx.ModelProto, axis: str) -> tuple[_Chains, list[list[onnx.NodeProto]]]:
    C = _Chains(model, axis, infos_of(model))
    return C, C.chains()


def _rows_backwards(chain, infos, a: int, b: int, axis: str):
    """For output rows [a, b) of the chain: per op (in_lo, in_hi, pad_begin, pad_end), first op first."""
    plan = []
    for n in reversed(chain):
        h_in = infos[n.input[0]].shape[0 if axis == "batch" else 2]
        if axis == "height" and n.op_type in WINDOWED:
            k, s, d, pb, _ = _window(n, infos)
            keff = d * (k - 1) + 1
            lo_need, hi_need = a * s - pb, (b - 1) * s - pb + keff
            lo, hi = max(0, lo_need), min(h_in, hi_need)
            plan.append((lo, hi, lo - lo_need, hi_need - hi))
        else:
            lo, hi = a, b
            plan.append((lo, hi, 0, 0))
        a, b = lo, hi
    return list(reversed(plan))


def tile(model: onnx.ModelProto, first: str, last: str, tiles: int, axis: str) -> onnx.ModelProto:
    out = clone(model)
    C = _Chains(out, axis, infos_of(model))      # the copy has the input's tensors
    chain = None
    for c in C.chains():
        names = [n.name for n in c]
        if first in names and last in names and names.index(first) < names.index(last):
            chain = c[names.index(first):names.index(last) + 1]
    if chain is None:
        raise ValueError(f"no tileable chain {first}..{last}")
    ax = 0 if axis == "batch" else 2
    y = chain[-1].output[0]
    h_out = C.infos[y].shape[ax]
    if h_out < tiles:
        raise ValueError(f"{h_out} rows cannot make {tiles} tiles")
    bounds = np.linspace(0, h_out, tiles + 1).round().astype(int)
    g = out.graph
    new_nodes: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []
    pieces = []
    axes = derived(first, "axes")
    new_inits.append(numpy_helper.from_array(np.array([ax], np.int64), axes))
    weight_dqs = _weight_dequantizers(chain, C)
    for t in range(tiles):
        rows = _rows_backwards(chain, C.infos, int(bounds[t]), int(bounds[t + 1]), axis)
        x = chain[0].input[0]
        lo, hi = rows[0][0], rows[0][1]
        sl = derived(x, f"tile{t}.{first}")
        st, en = derived(sl, "starts"), derived(sl, "ends")
        new_inits += [numpy_helper.from_array(np.array([lo], np.int64), st),
                      numpy_helper.from_array(np.array([hi], np.int64), en)]
        new_nodes.append(helper.make_node("Slice", [x, st, en, axes], [sl], name=derived(first, f"slice{t}")))
        cur = sl
        for n, (_, _, pb, pe) in zip(chain, rows):
            m = onnx.NodeProto()
            m.CopyFrom(n)
            m.name = derived(n.name, f"tile{t}")
            m.input[0] = cur
            m.output[0] = derived(n.output[0], f"tile{t}")
            for i, w in enumerate(m.input):
                if i and w in weight_dqs:       # its own copy: each tile stays one integer kernel
                    dq = onnx.NodeProto()
                    dq.CopyFrom(weight_dqs[w])
                    dq.name, dq.output[:] = derived(dq.name, f"tile{t}"), [derived(w, f"tile{t}")]
                    new_nodes.append(dq)
                    m.input[i] = dq.output[0]
            if axis == "height" and n.op_type in WINDOWED:
                pads = list(attr_value(n, "pads", [0, 0, 0, 0]))
                pads[0], pads[2] = pb, pe
                for a_ in list(m.attribute):
                    if a_.name == "pads":
                        m.attribute.remove(a_)
                m.attribute.append(helper.make_attribute("pads", pads))
            tag = node_meta(m, FUSION_KEY)
            if tag is not None:      # each tile is its own fused kernel
                set_node_meta(m, FUSION_KEY, derived(tag, f"tile{t}"))
            new_nodes.append(m)
            cur = m.output[0]
        pieces.append(cur)
    new_nodes.append(helper.make_node("Concat", pieces, [y], name=derived(last, "concat"), axis=ax))
    ids = {id(n) for n in chain}
    pos = max(i for i, n in enumerate(g.node) if id(n) in ids)
    ids |= {id(dq) for dq in weight_dqs.values()}
    nodes = list(g.node)
    kept = [n for i, n in enumerate(nodes) if id(n) not in ids and i < pos] + new_nodes + \
           [n for i, n in enumerate(nodes) if id(n) not in ids and i > pos]
    del g.node[:]
    g.node.extend(kept)
    commit_rewrite(g, new_inits)
    return out          # value_info dropped: shapes are inferred where they are needed


def _weight_dequantizers(chain, C: _Chains) -> dict[str, onnx.NodeProto]:
    """The DequantizeLinear of each quantized weight only the chain reads, by its output. Shared
    by the tiles, it would run once as a float kernel of its own, its float weights alive across
    all the tiles; copied into each tile, it stays part of that tile's integer kernel."""
    members = {id(n) for n in chain}
    out = {}
    for n in chain:
        for w in n.input[1:]:
            p = C.producer.get(w)
            if p is not None and p.op_type == "DequantizeLinear" and all(i in C.inits for i in p.input if i) \
                    and all(id(u) in members for u in C.consumers.get(w, [])) and w not in C.outputs:
                out[w] = p
    return out


class Tiling(Action):
    name = "tiling"
    summary = ("splits a chain into row (with halos) or batch tiles, then Concat, to cut peak memory; `channels` "
               "(only on a device that streams weights from flash, the `npu`) splits a Conv/MatMul/Gemm along its "
               "output channels, each block with its slice of the weights (QDQ blocks stay integer kernels), so the "
               "device holds one block's weights at a time")
    params = {
        "tiles": Param(4, (2, 4, 8), "how many executions the chain is split into"),
        "axis": Param("height", ("height", "batch", "channels"),
                      "split the image rows (with halos), the batch, or a layer's output channels (its weights)"),
    }


    def words(self, params, scope=""):
        return (f"{params.get('tiles')} {params.get('axis')} tiles",
                f"run the chain as {params.get('tiles')} executions on tiles split along the {params.get('axis')}")

    def sites(self, model, params, target):
        if params["axis"] == "channels":
            if not target.extra.get("weights_streamed"):
                return []       # resident weights: a split only adds launches
            return cached(model, f"tiling.sites.channels.{params['tiles']}", lambda m: self._weight_sites(m, params))
        return cached(model, f"tiling.sites.{params['axis']}.{params['tiles']}", lambda m: self._sites(m, params))

    def _weight_sites(self, model, params):
        g = model.graph
        inits = {i.name: i for i in g.initializer}
        producer, consumers = wiring(g)
        heavy = []
        for n in g.node:
            cout = splittable(n, inits, producer, consumers)
            if cout is not None and cout >= 2 * params["tiles"]:
                w = inits[n.input[1]] if n.input[1] in inits else inits[producer[n.input[1]].input[0]]
                heavy.append((math.prod(w.dims) * onnx.helper.tensor_dtype_to_np_dtype(w.data_type).itemsize, n.name))
        if not heavy:
            return []
        heavy.sort(key=lambda h: (-h[0], h[1]))
        sites = [Site((heavy[0][1],), f"weights@{heavy[0][1]}")]
        over = tuple(name for size, name in heavy if size > heavy[0][0] / params["tiles"])
        if len(over) > 1:
            sites.append(Site(over, f"weights@{len(over)} layers"))
        return sites

    def _sites(self, model, params):
        C, chains = cached(model, f"tiling.{params['axis']}", lambda m: _analysis(m, params["axis"]))
        ax = 0 if params["axis"] == "batch" else 2
        spans = []
        for c in chains:
            i, j, gain = C.best_span(c, params["tiles"])
            span = c[i:j + 1]
            if gain > 0 and C.infos[span[-1].output[0]].shape[ax] >= 2 * params["tiles"]:
                spans.append((gain, span))
        spans.sort(key=lambda s: -s[0])
        return [Site(tuple(n.name for n in span), f"chain@{span[0].name}") for _, span in spans[:MAX_SITES]]

    def legal(self, model, site, params, target):
        joins = ("Concat",) if params["axis"] == "channels" else ("Slice", "Concat")
        missing = missing_ops(target, *joins)
        if missing:
            return f"target {target.name} has no {'/'.join(missing)} op to cut and join tiles"
        if opset_of(model) < 10:
            return "Slice with tensor starts/ends needs opset >= 10"
        return None

    def apply(self, model, site, params, ctx):
        if params["axis"] == "channels":
            for name in site.nodes:
                model = split_channels(model, name, params["tiles"])
            return model
        return tile(model, site.nodes[0], site.nodes[-1], params["tiles"], params["axis"])
