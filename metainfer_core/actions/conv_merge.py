"""Adjacent convolution merge (lossless up to float rounding). Two patterns:

chain:    Conv_a(x) -> Conv_b(1x1, stride 1, no pad, group 1)  =>  one Conv with
          W = W_b . W_a and b = W_b . b_a + b_b (nothing nonlinear between: the 1x1 conv is a
          per-pixel linear map, so it composes with any conv, padding included).
siblings: Conv_i(x) sharing the input x, same stride and dilation, group 1  =>  one Conv
          whose output channels are the concatenated outputs, then Split(axis 1). A smaller
          odd kernel is zero-padded to the largest one when its padding centres it (a 1x1
          pad 0 beside a 3x3 pad 1: a residual shortcut beside its block's first conv).
          MatMuls sharing their input and holding constant weights merge the same way
          (concatenated weight columns, Split on the last axis: the Q/K/V projections).

Merged nodes are named "<a>&<b>" so later steps know where they came from."""
from __future__ import annotations


import numpy as np
import onnx
from onnx import helper, numpy_helper

from metainfer_core.actions.base import MERGED, Action, Param, Site, cached, missing_ops, opset_of, wiring
from metainfer_core.ir.graph_utils import attr_value, clone

_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)


def _const(inits: dict[str, onnx.TensorProto], name: str) -> np.ndarray | None:
    t = inits.get(name)
    return numpy_helper.to_array(t) if t is not None and t.data_type in _FLOATS else None


def _conv_geometry(n: onnx.NodeProto, w: np.ndarray) -> dict | None:
    """Kernel, strides, pads, dilations of a plain 2-D conv (None: not mergeable)."""
    if attr_value(n, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or w.ndim != 4:
        return None
    k = list(w.shape[2:])
    return {"k": k, "s": list(attr_value(n, "strides", [1, 1])), "d": list(attr_value(n, "dilations", [1, 1])),
            "p": list(attr_value(n, "pads", [0, 0, 0, 0])), "g": attr_value(n, "group", 1)}


class _Graph:
    def __init__(self, model: onnx.ModelProto):
        g = model.graph
        self.inits = {i.name: i for i in g.initializer}
        self.outputs = {o.name for o in g.output}
        _, self.consumers = wiring(g)
        self.nodes = list(g.node)


def chain_pairs(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, onnx.NodeProto]]:
    G = _Graph(model)
    pairs, used = [], set()
    for a in G.nodes:
        if a.op_type != "Conv" or len(a.input) < 2 or id(a) in used:
            continue
        wa = _const(G.inits, a.input[1])
        users = G.consumers.get(a.output[0], [])
        if wa is None or len(users) != 1 or a.output[0] in G.outputs:
            continue
        b = users[0]
        if b.op_type != "Conv" or b.input[0] != a.output[0] or len(b.input) < 2 or id(b) in used:
            continue
        wb = _const(G.inits, b.input[1])
        ga, gb = _conv_geometry(a, wa) if wa is not None else None, _conv_geometry(b, wb) if wb is not None else None
        if ga is None or gb is None or ga["g"] != 1 or gb != {"k": [1, 1], "s": [1, 1], "d": [1, 1], "p": [0, 0, 0, 0], "g": 1}:
            continue
        if len(a.input) > 2 and _const(G.inits, a.input[2]) is None or len(b.input) > 2 and _const(G.inits, b.input[2]) is None:
            continue
        pairs.append((a, b))
        used |= {id(a), id(b)}
    return pairs


def _centred(geom: dict, k: list[int]) -> list[int] | None:
    """Pads that centre a smaller odd kernel inside kernel k, or None if it does not fit."""
    pads = []
    for i, (ks, kl) in enumerate(zip(geom["k"], k)):
        if (kl - ks) % 2 or ks % 2 == 0 or geom["d"][i] != 1:
            return None
        off = (kl - ks) // 2
        pads.append((geom["p"][i] + off, geom["p"][i + 2] + off))
    return [pads[0][0], pads[1][0], pads[0][1], pads[1][1]]


def sibling_groups(model: onnx.ModelProto) -> list[list[onnx.NodeProto]]:
    G = _Graph(model)
    groups = []
    for x, users in G.consumers.items():
        if x in G.inits:
            continue
        convs = []
        for n in users:
            if n.op_type == "Conv" and n.input[0] == x and len(n.input) >= 2:
                w = _const(G.inits, n.input[1])
                g = _conv_geometry(n, w) if w is not None else None
                if g is not None and g["g"] == 1 and (len(n.input) < 3 or _const(G.inits, n.input[2]) is not None):
                    convs.append((n, g))
        # one group per (stride, dilation, padded geometry): the largest kernel sets the frame
        convs.sort(key=lambda c: -int(np.prod(c[1]["k"])))
        frames: list[tuple[dict, list]] = []
        for n, g in convs:
            for frame, members in frames:
                pads = _centred(g, frame["k"])
                if g["s"] == frame["s"] and g["d"] == frame["d"] and pads == frame["p"]:
                    members.append(n)
                    break
            else:
                frames.append((g, [n]))
        groups += [members for _, members in frames if len(members) > 1]
        mms = [n for n in users if n.op_type == "MatMul" and n.input[0] == x and n.input[1] in G.inits
               and _const(G.inits, n.input[1]) is not None and _const(G.inits, n.input[1]).ndim == 2]
        if len(mms) > 1:
            groups.append(mms)
    return groups


def _merge_chain(model: onnx.ModelProto, a_name: str, b_name: str) -> None:
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    a = next(n for n in g.node if n.name == a_name)
    b = next(n for n in g.node if n.name == b_name)
    wa = numpy_helper.to_array(inits[a.input[1]]).astype(np.float64)
    wb = numpy_helper.to_array(inits[b.input[1]]).astype(np.float64)[:, :, 0, 0]
    dtype = numpy_helper.to_array(inits[a.input[1]]).dtype
    ba = numpy_helper.to_array(inits[a.input[2]]).astype(np.float64) if len(a.input) > 2 and a.input[2] else np.zeros(wa.shape[0])
    bb = numpy_helper.to_array(inits[b.input[2]]).astype(np.float64) if len(b.input) > 2 and b.input[2] else np.zeros(wb.shape[0])
    w = np.einsum("oc,cikl->oikl", wb, wa)
    bias = wb @ ba + bb
    name = f"{a.name}{MERGED}{b.name}"
    g.initializer.extend([numpy_helper.from_array(w.astype(dtype), f"{name}.weight"),
                          numpy_helper.from_array(bias.astype(dtype), f"{name}.bias")])
    merged = helper.make_node("Conv", [a.input[0], f"{name}.weight", f"{name}.bias"], [b.output[0]], name=name)
    merged.attribute.extend(x for x in a.attribute)
    merged.metadata_props.extend(a.metadata_props)
    nodes = [merged if n is a else n for n in g.node if n is not b]
    del g.node[:]
    g.node.extend(nodes)


def _merge_siblings(model: onnx.ModelProto, names: list[str]) -> None:
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    members = [n for n in g.node if n.name in set(names)]
    name = MERGED.join(n.name for n in members)
    out = MERGED.join(n.output[0] for n in members)
    first = members[0]
    if first.op_type == "MatMul":
        ws = [numpy_helper.to_array(inits[n.input[1]]) for n in members]
        merged = helper.make_node("MatMul", [first.input[0], f"{name}.weight"], [out], name=name)
        g.initializer.append(numpy_helper.from_array(np.concatenate(ws, axis=1), f"{name}.weight"))
        sizes, axis = [w.shape[1] for w in ws], -1
    else:
        geoms = [_conv_geometry(n, numpy_helper.to_array(inits[n.input[1]])) for n in members]
        frame = max(geoms, key=lambda q: int(np.prod(q["k"])))
        ws, bs = [], []
        for n, q in zip(members, geoms):
            w = numpy_helper.to_array(inits[n.input[1]])
            dh, dw = (frame["k"][0] - q["k"][0]) // 2, (frame["k"][1] - q["k"][1]) // 2
            ws.append(np.pad(w, ((0, 0), (0, 0), (dh, dh), (dw, dw))))
            bs.append(numpy_helper.to_array(inits[n.input[2]]) if len(n.input) > 2 and n.input[2]
                      else np.zeros(w.shape[0], w.dtype))
        g.initializer.extend([numpy_helper.from_array(np.concatenate(ws, axis=0), f"{name}.weight"),
                              numpy_helper.from_array(np.concatenate(bs, axis=0), f"{name}.bias")])
        merged = helper.make_node("Conv", [first.input[0], f"{name}.weight", f"{name}.bias"], [out], name=name,
                                  kernel_shape=frame["k"], strides=frame["s"], dilations=frame["d"], pads=frame["p"])
        sizes, axis = [w.shape[0] for w in ws], 1
    merged.metadata_props.extend(first.metadata_props)
    if opset_of(model) >= 13:
        g.initializer.append(numpy_helper.from_array(np.array(sizes, np.int64), f"{name}.split"))
        split = helper.make_node("Split", [out, f"{name}.split"], [n.output[0] for n in members], name=f"{name}|split",
                                 axis=axis)
    else:
        split = helper.make_node("Split", [out], [n.output[0] for n in members], name=f"{name}|split", axis=axis,
                                 split=sizes)
    first_pos = min(i for i, n in enumerate(g.node) if n in members)
    keep = [n for n in g.node if n not in members]
    keep[first_pos:first_pos] = [merged, split]
    del g.node[:]
    g.node.extend(keep)


def _prune_initializers(model: onnx.ModelProto) -> None:
    used = {i for n in model.graph.node for i in n.input}
    keep = [i for i in model.graph.initializer if i.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)


class ConvMerge(Action):
    name = "conv_merge"
    summary = ("a conv followed by a 1x1 conv into one conv; convs (or MatMuls) sharing an input into one plus a "
               "Split")
    params = {"pattern": Param("chain", ("chain", "siblings"),
                               "merge a 1x1 conv into the conv before it, or convs/MatMuls sharing one input")}


    def words(self, params, scope=""):
        return "convs merged", ("merge sibling convolutions that read the same input into one"
                                if params.get("pattern") == "siblings" else
                                "merge a convolution with the 1x1 convolution after it")

    def sites(self, model, params, target):
        if params["pattern"] == "chain":
            nodes = [n.name for pair in cached(model, "conv_merge.chain", chain_pairs) for n in pair]
        else:
            nodes = [n.name for grp in cached(model, "conv_merge.siblings", sibling_groups) for n in grp]
        return [Site(tuple(nodes), "all")] if nodes else []

    def legal(self, model, site, params, target):
        if params["pattern"] == "siblings" and missing_ops(target, "Split"):
            return f"target {target.name} has no Split op for the merged convolution's outputs"
        return None

    def apply(self, model, site, params, ctx):
        out = clone(model)
        wanted = set(site.nodes)
        if params["pattern"] == "chain":
            for a, b in chain_pairs(out):
                if a.name in wanted and b.name in wanted:
                    _merge_chain(out, a.name, b.name)
        else:
            for grp in sibling_groups(out):
                names = [n.name for n in grp if n.name in wanted]
                if len(names) > 1:
                    _merge_siblings(out, names)
        _prune_initializers(out)
        del out.graph.value_info[:]
        return out          # value_info dropped: shapes are inferred where they are needed
