"""The traced lowering (Trace): a lowered graph with every copy of every activation exposed and an
fp32 twin beside each rewritten node, so that one run attributes the error to the nodes that add
it (accuracy/sensitivity.py's one-pass table)."""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper

from metainfer_core.accuracy.parts import Parts
from metainfer_core.accuracy.tensor_error import floored
from metainfer_core.actions.base import DERIVED, derived
from metainfer_core.ir.graph_utils import clone, subgraphs, with_outputs
from metainfer_core.ir.tensors import tensor_infos

MIN_TRACED = 0.5                # share of the scope's nodes the one-pass table must trace, else blocks
# ops whose output sums their inputs: absolute errors add (for the others, relative errors do)
_SUMS = {"Add", "Sub", "Sum", "Concat"}


def _origin(name: str, acts: set[str]) -> str | None:
    """The fp32 activation a lowered tensor stands for: itself, or the longest prefix it was
    derived from ("x|dq.Conv_3" -> "x")."""
    if name in acts:
        return name
    best = None
    i = name.find(DERIVED)
    while i > 0:
        if name[:i] in acts:
            best = name[:i]
        i = name.find(DERIVED, i + 1)
    return best


class Trace:
    """The lowered graph with, exposed as outputs, one copy of each kind of every fp32
    activation ("x", its rounded copies "x|dq.<reader>", "x|fp16", "x|f32.<reader>", the raw
    result "x|f"), and beside it an fp32 twin ("y|sens.prop") of each rewritten node, reading
    what the lowered node reads. A node the rewrite removed (int8 folds a Relu into the op before
    it) is traced with that op: its twin chains the two, and they share what the chain adds."""

    PROP = "sens.prop"

    def __init__(self, fp32: onnx.ModelProto, lowered: onnx.ModelProto, acts: list[str]):
        self.fp32 = fp32
        self.acts = set(acts)
        self.den: dict[str, np.ndarray] = {}    # activation -> squared norm of its fp32 values per channel
        self.chan: set[str] = set()             # activations whose errors are measured per channel
        self.size: dict[str, int] = {}          # activation -> element count
        self.r: dict[str, float] = {}           # exposed tensor -> relative squared error against fp32
        self.diff: dict[tuple[str, str], float] = {}    # (a, b) -> |a - b|^2 relative to a's activation
        self.overflowed: set[str] = set()       # activations some lowered copy of which is not finite
        g, lg = fp32.graph, lowered.graph
        linfos = tensor_infos(lowered)
        inits = {i.name: i for i in g.initializer}
        have = {o for n in lg.node for o in n.output} | {i.name for i in lg.input} | {i.name for i in lg.initializer}
        self.inputs = [i.name for i in lg.input if i.name in self.acts]
        producer = {o: n.name for n in g.node for o in n.output}
        node_names = set(producer.values())
        writer = {o: n.name for n in lg.node for o in n.output}
        self.outputs = {n.name: [y for y in n.output if y in self.acts] for n in g.node}
        self.stands_for: dict[str, str] = {}    # exposed tensor -> the activation it is a copy of
        self.copies: dict[str, list[str]] = {}  # activation -> its exposed copies, one per kind
        self.rep: dict[str, str] = {}           # any copy -> the exposed one of its kind (per-reader copies are alike)
        kinds: dict[tuple[str, str], str] = {}
        for t in [i.name for i in lg.input] + [o for n in lg.node for o in n.output]:
            o = _origin(t, self.acts)
            if o is None or not (t in self.inputs or (t in linfos and linfos[t].dtype in (np.float32, np.float16))):
                continue
            if writer.get(t) in node_names and writer[t] != producer.get(o):
                continue        # another node's result under o's name (the op a Relu was folded into)
            kind = t[len(o):].split(".", 1)[0]
            if (o, kind) not in kinds:
                kinds[(o, kind)] = t
                self.copies.setdefault(o, []).append(t)
                self.stands_for[t] = o
            self.rep[t] = kinds[(o, kind)]
        twins = {n.name: n for n in lg.node}
        extra_inits: dict[str, onnx.TensorProto] = {}
        added: list[onnx.NodeProto] = []
        casts: dict[str, str] = {}
        self.reads: dict[str, list[tuple[str, str]]] = {}   # node -> (fp32 input, exposed tensor it reads)
        self.chain: dict[str, list[str]] = {}               # node -> the removed nodes traced with it
        self.prop: dict[str, str] = {}                      # activation -> its twin's output
        self.raw: dict[str, str] = {}                       # activation -> what the lowered node writes
        self.unchanged: set[str] = set()
        self.op_type = {n.name: n.op_type for n in g.node}
        for n in g.node:
            twin = twins.get(n.name)
            if twin is not None and twin.op_type == n.op_type and list(twin.input) == list(n.input) \
                    and list(twin.output) == list(n.output):
                self.unchanged.add(n.name)      # its output is its own twin
                self.reads[n.name] = [(x, self.rep.get(x, x)) for x in n.input if x in self.acts]
                self.chain[n.name] = []
                continue
            if subgraphs(n):
                continue
            new_inputs, reads, chain, ok = [], [], [], True
            for slot, x in enumerate(n.input):
                if not x or x in inits or x not in self.acts:
                    if x and x in inits and x not in have:
                        extra_inits[x] = inits[x]           # the fp32 weight the rewrite replaced
                    elif x and x not in inits and x not in have:
                        ok = False                          # an integer tensor the lowered graph lacks
                        break
                    new_inputs.append(x)
                    continue
                read = None
                if twin is not None and slot < len(twin.input) and twin.input[slot] in self.rep \
                        and _origin(twin.input[slot], self.acts) == x:
                    read = twin.input[slot]
                elif x in self.rep:
                    read = x
                elif x in self.prop:            # no copy of x: its producer was folded into this node
                    p = producer[x]
                    chain += self.chain.get(p, []) + [p]
                    reads.append((x, self.prop[x]))
                    new_inputs.append(self.prop[x])
                    continue
                elif self.copies.get(x):
                    read = self.copies[x][0]
                if read is None:
                    ok = False
                    break
                src = self.rep[read]
                reads.append((x, src))
                if src in linfos and linfos[src].dtype != np.float32:
                    if src not in casts:
                        casts[src] = derived(src, "sens.f32")
                        added.append(helper.make_node("Cast", [src], [casts[src]], name=casts[src],
                                                      to=onnx.TensorProto.FLOAT))
                    src = casts[src]
                new_inputs.append(src)
            if not ok:
                continue
            copy = onnx.NodeProto()
            copy.CopyFrom(n)
            copy.name = derived(n.name, self.PROP)
            del copy.input[:]
            copy.input.extend(new_inputs)
            del copy.output[:]
            copy.output.extend(derived(y, self.PROP) if y else "" for y in n.output)
            added.append(copy)
            for slot, y in enumerate(n.output):
                if not y:
                    continue
                self.prop[y] = derived(y, self.PROP)
                if twin is not None and slot < len(twin.output) and twin.output[slot] in self.rep \
                        and _origin(twin.output[slot], self.acts) == y:
                    self.raw[y] = self.rep[twin.output[slot]]
            self.reads[n.name], self.chain[n.name] = reads, chain
        model = clone(lowered)
        model.graph.initializer.extend(extra_inits.values())
        model.graph.node.extend(added)
        expose = {t: (onnx.TensorProto.FLOAT16 if linfos[t].dtype == np.float16 else onnx.TensorProto.FLOAT)
                  for t in self.stands_for if t not in self.inputs}
        for y, t in self.prop.items():
            if y in self.acts:
                expose[t] = onnx.TensorProto.FLOAT
                self.stands_for[t] = y
        self.exposed = list(expose)
        self.model = with_outputs(model, expose)
        self.pairs = sorted(self._pairs())

    # what the attribution compares, directly (a difference of two errors against fp32 would
    # drown a node's small own error in the large one it reads in)
    def _rounded(self, y: str) -> list[str]:
        return [c for c in self.copies.get(y, []) if c != self.raw.get(y)]

    def _unrounded(self, x: str, read: str) -> str | None:
        """The copy of x before the rounding the reader's copy went through (None: none exposed,
        or the reader reads its producer's twin)."""
        if read not in self.rep:
            return None
        base = self.raw.get(x) or self.rep.get(x)
        return base if base is not None and base != read else None

    def _own(self, y: str) -> tuple[str, str] | None:
        out = self.raw.get(y) or next(iter(self._rounded(y)), None)
        return (out, self.prop[y]) if out is not None and y in self.prop else None

    def _pairs(self) -> set[tuple[str, str]]:
        pairs = set()
        for name, reads in self.reads.items():
            if name in self.unchanged:
                continue
            for y in self.outputs.get(name, []):
                if self._own(y):
                    pairs.add(self._own(y))
                if y in self.raw:
                    pairs.update((c, self.raw[y]) for c in self._rounded(y))
            for x, t in reads:
                base = self._unrounded(x, t)
                if base is not None:
                    pairs.add((t, base))
        return pairs

    def _gains(self, n: onnx.NodeProto, outs: list[str], gain: dict[str, float]) -> list[float]:
        """Per input n reads, the gain from its relative squared error to the graph outputs
        through n. Through a sum (Add, Sub, Sum, Concat), fresh error in one input reaches the
        output in proportion to that input's size beside the output's (a residual branch small
        beside the skip path passes on little); through any other node as measured: what its
        twin passes on over what it reads in, shared by its inputs."""
        reads = self.reads[n.name]
        r_in = [self.r.get(t, 0.0) for _, t in reads]
        total = [0.0] * len(reads)
        for y in outs:
            if n.op_type in _SUMS and y in self.den:
                share = [self._share(x, y) for x, _ in reads]
            else:
                through = self.r.get(self.rep.get(y, y) if n.name in self.unchanged else self.prop.get(y, ""))
                share = [through / sum(r_in) if through is not None and sum(r_in) > 0 else 1.0] * len(reads)
            for i, sh in enumerate(share):
                total[i] += sh * gain.get(y, 0.0)
        return total

    def _share(self, x: str, y: str) -> float:
        """The part of fresh error in a summand x that its sum y shows, in relative terms: x's
        size over y's (a broadcast summand counts as often as it is repeated), per channel where
        y's error is measured per channel."""
        dx, dy = self.den.get(x), floored(self.den[y])
        if dx is None or not (dy > 0).any():
            return 0.0
        repeat = max(self.size.get(y, 1) / max(self.size.get(x, 1), 1), 1.0)
        if y not in self.chan or dx.shape != dy.shape:
            return float(dx.sum() * repeat / dy.sum())
        keep = dy > 0
        if x in self.chan:          # x's error spread over its channels as x is
            return float(np.mean(dx[keep] / dy[keep]))
        return float(dx.sum() / dx.size * np.mean(1.0 / dy[keep]))     # spread evenly

    def attribute(self, nodes: list[str]) -> "Parts | None":
        """What each scope node would add lowered alone, in relative squared error at the graph
        outputs: its own error x the gain from its output, and the rounding of each tensor it
        reads or writes x the gain from that tensor (the tensor's part: a plan rounds it once,
        however many of its nodes touch it). Nodes the rewrite left in fp32 add nothing; None
        when too few scope nodes can be traced."""
        g = self.fp32.graph
        gain: dict[str, float] = {o.name: 1.0 for o in g.output}
        down: dict[str, list[float]] = {}
        for n in reversed(g.node):
            outs = self.outputs[n.name]
            if n.name not in self.reads:        # untraced: error passes on as it came in
                for x in n.input:
                    if x in self.acts:
                        gain[x] = gain.get(x, 0.0) + sum(gain.get(y, 0.0) for y in outs)
                continue
            down[n.name] = self._gains(n, outs, gain)
            for (x, _), d in zip(self.reads[n.name], down[n.name]):
                gain[x] = gain.get(x, 0.0) + d
        parts = Parts()
        traced: set[str] = set()
        scope = set(nodes)
        for name in nodes:
            if name in self.unchanged:
                parts.own[name] = 0.0
                traced.add(name)

        def put(members: list[str], t: str | None, value: float) -> None:
            """An own part is shared by the nodes it comes from; a tensor's part is each one's
            whole (the plan counts it once)."""
            for m in members:
                if t is None:
                    parts.own[m] = parts.own.get(m, 0.0) + value / len(members)
                else:
                    mine = parts.rounding.setdefault(m, {})
                    mine[t] = mine.get(t, 0.0) + value

        for n in g.node:
            outs = self.outputs[n.name]
            if n.name not in self.reads or n.name in self.unchanged or not any(self.copies.get(y) for y in outs):
                continue                        # a removed node is counted with the one it was folded into
            members = [m for m in self.chain[n.name] + [n.name] if m in scope]
            if not members:
                continue
            for m in members:
                parts.own.setdefault(m, 0.0)
                traced.add(m)
            for y in outs:
                own = self._own(y)
                value = gain.get(y, 0.0) * (self.diff.get(own, 0.0) if own else 0.0)
                # a chain's own error includes its output's rounding: every node of it rounds y
                put(members, None if len(members) == 1 or y in self.raw else y, value)
                if y in self.raw:
                    put(members, y, gain.get(y, 0.0) * max((self.diff.get((c, self.raw[y]), 0.0)
                                                            for c in self._rounded(y)), default=0.0))
            for m in self.chain[n.name] + [n.name]:
                for (x, t), d in zip(self.reads[m], down[m]):
                    base = self._unrounded(x, t)
                    if base is not None:
                        put([m] if m in scope else members, x, d * self.diff.get((t, base), 0.0))
                    elif t in self.rep and x not in self.raw and self._own(x):
                        # x comes rounded out of a chain, whose own error is all that is known of
                        # the rounding: a reader lowered alone would round x too
                        put([m] if m in scope else members, x, d * self.diff.get(self._own(x), 0.0))
        values = [parts.alone(n) for n in traced]
        if len(traced) < MIN_TRACED * len(nodes) or not all(math.isfinite(v) for v in values):
            return None
        fill = float(np.median(values)) if values else 0.0
        names = {n.name for n in g.node}
        for n in nodes:
            if n in names and n not in parts.own:
                parts.own[n] = fill
        return parts
