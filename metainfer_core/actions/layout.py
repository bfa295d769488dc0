"""Data layout transformation NCHW -> NHWC (lossless): each maximal region of 4-D ops that can
run channels-last holds its tensors in NHWC, with one Transpose where the region reads a
channels-first tensor and one where it hands one back.

Inside a region, element-wise ops run on NHWC tensors as they are (a per-channel constant
operand is permuted with them) and Concat moves its axis from 1 to 3. Conv and pooling are
channels-first by ONNX's definition, so each is written Transpose -> op -> Transpose with both
Transposes marked `metainfer.layout=adapter` and the op `metainfer.layout=NHWC`: a device
compiler (and metainfer's kernel grouper) runs the three as one channels-last kernel. ONNX
Runtime executes the adapters for real, which is why the action is legal only where the
target prefers the layout, i.e. a modeled device whose kernels read it natively.

The boundary Transposes are ordinary kernels: where the op set has no Transpose they are bound
to the host (the host reorders the input before upload). Requires float or per-tensor QDQ
activations; per-channel quantized activations keep their layout."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from onnx import helper, numpy_helper

from metainfer_core.actions.base import Action, Param, Site, cached, commit_rewrite, derived, infos_of, wiring
from metainfer_core.ir.directives import ADAPTER, LAYOUT_KEY, node_meta, set_node_meta
from metainfer_core.ir.graph_utils import attr_value, clone
from metainfer_core.ir.kernels import TO_NCHW, TO_NHWC
from metainfer_core.ir.tensors import tensor_infos

SENSITIVE = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}
UNARY = {"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Erf", "Cast", "Identity",
         "QuantizeLinear", "DequantizeLinear", "Neg", "Abs", "Sqrt", "Exp"}
BINARY = {"Add", "Mul", "Sub", "Div", "Max", "Min"}


class _View:
    def __init__(self, model: onnx.ModelProto, infos=None):
        g = model.graph
        self.g = g
        self.infos = infos if infos is not None else tensor_infos(model)
        self.inits = {i.name: i for i in g.initializer}
        self.producer, self.consumers = wiring(g)
        self.outputs = {o.name for o in g.output}

    def is_4d(self, t: str) -> bool:
        return t in self.infos and len(self.infos[t].shape) == 4 and t not in self.inits

    def activations(self, n: onnx.NodeProto) -> list[int]:
        """Input slots that carry a region tensor (the rest are parameters)."""
        if n.op_type in SENSITIVE:
            return [0]
        if n.op_type in ("QuantizeLinear", "DequantizeLinear", "Clip"):
            return [0]
        return [i for i, t in enumerate(n.input) if t and self.is_4d(t)]

    def convertible(self, n: onnx.NodeProto) -> bool:
        if len(n.output) != 1 or not self.is_4d(n.output[0]) or node_meta(n, LAYOUT_KEY):
            return False
        if n.op_type in SENSITIVE:
            return self.is_4d(n.input[0]) and attr_value(n, "auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET")
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            scale = self.inits.get(n.input[1])
            return scale is not None and int(np.prod(scale.dims)) == 1 and self.is_4d(n.input[0])
        if n.op_type in UNARY:
            return self.is_4d(n.input[0]) and all(not t or t in self.inits for t in n.input[1:])
        if n.op_type in BINARY:
            return all(self.is_4d(t) or self._permutable(t) for t in n.input)
        if n.op_type == "Concat":
            return all(self.is_4d(t) for t in n.input) and attr_value(n, "axis") in (1, -3)
        return False

    def _permutable(self, t: str) -> bool:
        if t not in self.inits:
            return False
        dims = list(self.inits[t].dims)
        return len(dims) <= 1 and (not dims or dims[0] == 1) or len(dims) in (3, 4)


def regions(model: onnx.ModelProto, infos=None) -> list[list[onnx.NodeProto]]:
    """Maximal connected sets of convertible nodes holding at least one layout-sensitive op."""
    v = _View(model, infos)
    ok = {id(n) for n in v.g.node if v.convertible(n)}
    seen: set[int] = set()
    out = []
    for start in v.g.node:
        if id(start) not in ok or id(start) in seen:
            continue
        region, stack = [], [start]
        seen.add(id(start))
        while stack:
            n = stack.pop()
            region.append(n)
            near = [v.producer.get(n.input[i]) for i in v.activations(n)]
            near += [c for c in v.consumers.get(n.output[0], []) if n.output[0] in [c.input[i] for i in v.activations(c)]]
            for m in near:
                if m is not None and id(m) in ok and id(m) not in seen:
                    seen.add(id(m))
                    stack.append(m)
        if any(n.op_type in SENSITIVE for n in region):
            order = {id(n): i for i, n in enumerate(v.g.node)}
            out.append(sorted(region, key=lambda n: order[id(n)]))
    return out


def _transpose(src: str, dst: str, perm: list[int], name: str, adapter: bool) -> onnx.NodeProto:
    t = helper.make_node("Transpose", [src], [dst], name=name, perm=perm)
    if adapter:
        set_node_meta(t, LAYOUT_KEY, ADAPTER)
    return t


def to_nhwc(model: onnx.ModelProto, node_names: set[str]) -> onnx.ModelProto:
    out = clone(model)
    v = _View(out, infos_of(model))      # the copy has the input's tensors
    g = out.graph
    before: dict[int, list[onnx.NodeProto]] = defaultdict(list)
    after: dict[int, list[onnx.NodeProto]] = defaultdict(list)
    head: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []
    entries: dict[str, str] = {}                     # channels-first tensor read by a region -> NHWC copy
    for region in regions(out):
        if not {n.name for n in region} <= node_names:
            continue
        inside = {id(n) for n in region}
        produced = {n.output[0] for n in region}
        rename: dict[str, str] = {}                  # region tensor -> its NHWC name
        for n in region:
            y = n.output[0]
            leaves = y in v.outputs or any(id(c) not in inside for c in v.consumers.get(y, []))
            rename[y] = derived(y, "nhwc") if leaves else y
            if leaves:     # hand it back channels-first under its own name
                after[id(n)].append(_transpose(rename[y], y, TO_NCHW, derived(y, "to_nchw"), adapter=False))
        for n in region:
            for slot in v.activations(n):
                t = n.input[slot]
                if t in produced:
                    src = rename[t]
                else:          # read from outside: one entry Transpose per tensor
                    if t not in entries:
                        entries[t] = derived(t, "nhwc")
                        p = v.producer.get(t)
                        (after[id(p)] if p is not None else head).append(
                            _transpose(t, entries[t], TO_NHWC, derived(t, "to_nhwc"), adapter=False))
                    src = entries[t]
                if n.op_type in SENSITIVE:
                    adapted = derived(t, f"nchw.{n.name}")
                    before[id(n)].append(_transpose(src, adapted, TO_NCHW, derived(n.name, "in"), adapter=True))
                    n.input[slot] = adapted
                else:
                    n.input[slot] = src
            if n.op_type in BINARY:      # per-channel constants follow the tensors
                for slot, t in enumerate(n.input):
                    if t in v.inits and len(v.inits[t].dims) in (3, 4):
                        arr = numpy_helper.to_array(v.inits[t])
                        arr = arr.reshape((1,) * (4 - arr.ndim) + arr.shape).transpose(TO_NHWC)
                        name = derived(t, f"nhwc.{n.name}")
                        new_inits.append(numpy_helper.from_array(arr, name))
                        n.input[slot] = name
            if n.op_type == "Concat":
                for a in n.attribute:
                    if a.name == "axis":
                        a.i = 3
            y = n.output[0]
            if n.op_type in SENSITIVE:
                n.output[0] = derived(y, "nchw")
                set_node_meta(n, LAYOUT_KEY, "NHWC")
                after[id(n)].insert(0, _transpose(n.output[0], rename[y], TO_NHWC, derived(n.name, "out"), adapter=True))
            else:
                n.output[0] = rename[y]
    commit_rewrite(g, new_inits, head=head, before=before, after=after)
    return out          # value_info dropped: shapes are inferred where they are needed


class Layout(Action):
    name = "layout"
    summary = "channels-last regions with one Transpose in and out; legal where the target prefers NHWC"
    params = {"layout": Param("NHWC", ("NHWC",), "the channels-last layout the device's kernels read natively")}


    def words(self, params, scope=""):
        return "NHWC", f"run in the channels-last layout {params.get('layout', 'NHWC')}"

    def sites(self, model, params, target):
        nodes = [n.name for r in cached(model, "layout.regions", lambda m: regions(m, infos_of(m))) for n in r]
        return [Site(tuple(nodes), "all")] if nodes else []

    def legal(self, model, site, params, target):
        if target.preferred_layout != params["layout"]:
            return (f"target {target.name} prefers {target.preferred_layout}, the graph's layout already "
                    f"(its runtime picks kernel layouts itself)")
        return None

    def apply(self, model, site, params, ctx):
        return to_nhwc(model, set(site.nodes))
