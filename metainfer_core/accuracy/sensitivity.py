"""Accuracy loss of a low-precision plan, estimated without running the plan.

A node's sensitivity stands for the loss (the run's accuracy metric against the fp32
reference, 1 - cosine similarity by default) of the model with that node alone in low
precision; a plan's loss is estimated as the sum of the sensitivities of the nodes its lossy
steps lower. Summing is sound to first order: 1 - cos(y, y + e) ~ |e_perp|^2 / (2 |y|^2), and
the squared norms of independent errors add. A sensitivity is split into the node's own part
(its arithmetic) and the rounding of each tensor it touches: a plan rounds a tensor once
however many of its nodes touch it, so the estimate counts each tensor's part once, and
lowering more nodes never lowers it.

Lowering one node at a time costs a whole-model run per node, more than a search can spend on a
real graph, so each precision (fp16, bf16, int8) is measured from one lowering of its whole
scope, run plainly (the loss of lowering everything, which the table is
scaled to) and once traced (`_Trace`): every copy of every activation exposed, beside an fp32
twin of each rewritten node reading what the lowered node reads, compared with the fp32
activations (one exposed run, shared by the variants). The twin separates the error a node
adds from the error it is handed, and shows how much of the error at each tensor reaches the
graph outputs. Where the lowered graph cannot be traced, the variant falls back to probing
contiguous blocks of nodes (at most `max_probes`, fewer on large graphs). Another variant of a
precision already traced (int8 with other parameters) keeps that split over nodes and tensors,
scaled to its own whole-scope loss: one plain run.

A layer whose values overflow in a precision (inf/NaN where fp32 is finite) cannot take it: a
finding (`overflows`, `findings()`), counted as OVERFLOW_LOSS and kept out of the lowering
while the rest is measured, never a NaN in an estimate nor a numpy warning.

The search ranks by these estimates; its best candidates get an exact check (a real run), and
verify measures the chosen few on the target anyway."""
from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np
import onnx
from onnx import helper

from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.actions import ACTIONS, ActionContext, Site, Step
from metainfer_core.actions.base import DERIVED, derived, infos_of, origins
from metainfer_core.ir.graph_utils import clone, subgraphs, with_outputs
from metainfer_core.ir.runs import exposed_runs
from metainfer_core.ir.tensors import tensor_infos

MAX_PROBES = 48
PROBE_NODE_BUDGET = 6000        # probes x graph nodes per variant: a probe runs the whole graph
MIN_PROBES = 8
# the trace reads as many validation inputs as keep one run's fp32 activations within this (at
# least one): a large graph's tensors give stable error statistics from one input, while the
# loss to scale to always comes from every input
TRACE_BYTES = 512 << 20
MIN_TRACED = 0.5                # share of the scope's nodes the one-pass table must trace, else blocks
# what a layer whose low-precision values overflow (inf / NaN) counts as lowered alone: the loss
# the default metric gives a non-finite output, so every plan lowering it breaks the bound
OVERFLOW_LOSS = 1.0
# parameters that pick nodes or the tool that writes them, not how a node's values are rounded
_NOT_NUMERIC = ("scope", "float_layers", "engine")
# ops whose output sums their inputs: absolute errors add (for the others, relative errors do)
_SUMS = {"Add", "Sub", "Sum", "Concat"}


class Sensitivity:
    def __init__(self, model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]],
                 reference: list[list[np.ndarray]], ctx: ActionContext, max_probes: int = MAX_PROBES,
                 loss_fn: Callable = plan_loss):
        self.model, self.feeds, self.reference, self.ctx = model, feeds, reference, ctx
        self.loss_fn = loss_fn
        self.max_probes = max_probes
        self.tables: dict[tuple, dict[str, float]] = {}     # variant -> node -> sensitivity alone
        self.parts: dict[tuple, _Parts] = {}
        self.methods: dict[tuple, str] = {}     # variant -> "one-pass" or "blocks": how its table was measured
        self.overflows: dict[tuple, list[str]] = {}  # variant -> nodes whose values overflow in it (a finding)
        # told each lowered graph's validation outputs (the search's path costs re-use them)
        self.on_run: Callable[[onnx.ModelProto, list], None] | None = None
        self.probes = 0                         # whole-model runs on the validation inputs
        self.seconds = 0.0
        self._touch: dict[str, set[str]] | None = None
        self._activations: list[str] | None = None
        self._fp32: list[dict[str, np.ndarray]] | None = None
        self._den: dict[str, np.ndarray] | None = None  # fp32 activation -> squared norm per channel
        self._size: dict[str, int] = {}

    @staticmethod
    def variant(kind: str, params: dict) -> tuple:
        """What changes a node's numerics: the precision and its parameters, not which nodes
        (the scope, int8's float_layers), nor int8's engine: NNCF's graph is ranked by meta-infer's
        own form of the same placement (re-quantizing per layer with NNCF would cost seconds each)."""
        return (kind,) + tuple(sorted((k, v) for k, v in params.items() if k not in _NOT_NUMERIC))

    def knows(self, kind: str, params: dict) -> bool:
        """Whether this variant's sensitivities are measured already (re-used by every plan)."""
        return self.variant(kind, params) in self.parts

    def table(self, kind: str, params: dict) -> dict[str, float]:
        """Node -> its sensitivity lowered alone, for this variant (measured on first use)."""
        return self._parts(kind, params).table()

    def _parts(self, kind: str, params: dict) -> "_Parts":
        key = self.variant(kind, params)
        if key not in self.parts:
            t0 = time.perf_counter()
            # a low-precision probe may overflow: a finding (self.overflows), not a library warning
            with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
                self.parts[key] = self._measure(kind, params)
            self.tables[key] = self.parts[key].table()
            self.seconds += time.perf_counter() - t0
        return self.parts[key]

    def _measure(self, kind: str, params: dict) -> "_Parts":
        action = ACTIONS[kind]
        probe_params = dict(params, scope="all") if "scope" in action.params else dict(params)
        probe_params.pop("engine", None)        # meta-infer's own rewrite (variant)
        sites = action.sites(self.model, probe_params, self.ctx.target)
        nodes = list(sites[0].nodes) if sites else []
        if not nodes:
            return _Parts()
        key = self.variant(kind, params)
        shared = next((k for k, how in self.methods.items() if k[0] == kind and how == "one-pass"), None)
        if shared is not None:
            parts = self._rescaled(action, probe_params, nodes, shared)
            if parts is not None:
                self.methods[key] = "scaled"
                return parts
        try:
            parts = self._one_pass(action, probe_params, nodes)
        except Exception:  # noqa: BLE001 - a lowered graph the trace cannot take: probe blocks instead
            parts = None
        self.methods[key] = "one-pass" if parts is not None else "blocks"
        if parts is None:
            parts = _Parts.spread(self._blocks(action, probe_params, nodes, key), self._touches())
        for n in self.overflows.get(key, []):
            parts.own[n], parts.rounding[n] = OVERFLOW_LOSS, {}
        return parts

    def _rescaled(self, action, params: dict, nodes: list[str], shared: tuple) -> "_Parts | None":
        """Another variant of a precision whose per-node sensitivities are traced already (int8
        with other activation types or placements): the same split over nodes and tensors,
        scaled to this variant's own whole-scope loss, one plain run (the layers found to
        overflow in that precision stay out of the lowering, as they did there)."""
        known = self.parts[shared]
        keep = [n for n in nodes if n not in set(self.overflows.get(shared, []))]
        total = known.estimate(set(keep) & set(known.own))
        if not keep or not (total > 0 and math.isfinite(total)):
            return None
        lowered = action.apply(self.model, Site(tuple(keep), "all"), params, self.ctx)
        outputs = self._run(lowered)
        if not _finite(outputs) and _finite(self.reference):
            return None
        loss = float(self.loss_fn(self.reference, outputs))
        if not math.isfinite(loss):
            return None
        parts = known.scaled(loss / total)
        self.overflows[self.variant(action.name, params)] = list(self.overflows.get(shared, []))
        for n in self.overflows.get(shared, []):
            parts.own[n], parts.rounding[n] = OVERFLOW_LOSS, {}
        return parts

    def _run(self, lowered: onnx.ModelProto) -> list[list[np.ndarray]]:
        outputs = run_cpu(lowered, self.feeds)
        self.probes += 1
        if self.on_run is not None:
            self.on_run(lowered, outputs)
        return outputs

    def findings(self) -> list[str]:
        """One line per variant some layers cannot take (their values overflow in it)."""
        return [f"{' '.join(map(str, (key[0],) + tuple(f'{k}={v}' for k, v in key[1:])))}: {len(nodes)} layer(s) "
                f"overflow (inf/NaN) when lowered ({', '.join(nodes[:5])}{', ...' if len(nodes) > 5 else ''}): "
                f"they cannot take that precision; plans lowering them are estimated at loss {OVERFLOW_LOSS:g}"
                for key, nodes in self.overflows.items() if nodes]

    # --- one pass: the whole scope lowered and traced -------------------------------------

    def _one_pass(self, action, params: dict, nodes: list[str]) -> "_Parts | None":
        by_name = {n.name: n for n in self.model.graph.node}
        if any(subgraphs(by_name[n]) for n in nodes if n in by_name):
            return None         # control flow in scope: the tensors inside its bodies are not exposed
        culprits: list[str] = []
        for _ in range(OVERFLOW_ROUNDS):
            lowered = action.apply(self.model, Site(tuple(nodes), "all"), params, self.ctx)
            outputs = self._run(lowered)
            trace = _Trace(self.model, lowered, self._acts())
            self._measure_trace(trace)
            # values that overflow in this precision: where they start is a finding (those layers
            # cannot take it), kept out of the lowering; the rest is measured as usual
            found = _starts(self.model, trace.overflowed, set(nodes))
            if not found:
                break
            culprits += found
            nodes = [n for n in nodes if n not in found]
            if not nodes:
                break
        else:
            return None
        if trace.overflowed and not found or not _finite(outputs) and _finite(self.reference):
            return None
        self.overflows[self.variant(action.name, params)] = culprits
        if not nodes:
            return _Parts()
        loss = float(self.loss_fn(self.reference, outputs))
        if not math.isfinite(loss):
            return None
        parts = trace.attribute(nodes)
        if parts is None:
            return None
        total = parts.estimate(parts.own)
        if total > 0 and math.isfinite(total):
            return parts.scaled(loss / total)
        even = _Parts()             # nothing measurable inside: the loss shared evenly
        even.own = {n: loss / max(len(parts.own), 1) for n in parts.own}
        return even

    def prepare(self) -> float:
        """Measure what every variant shares (the fp32 activations and their norms) now; its
        seconds, a yardstick for what a variant will cost on this graph."""
        t0 = time.perf_counter()
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            self._norms()
        spent = time.perf_counter() - t0
        self.seconds += spent
        return spent

    def _norms(self) -> None:
        if self._den is None:
            fp32 = self._fp32_values()
            self._den = {t: sum(_sq(f[t]) for f in fp32) for t in fp32[0]} if fp32 else {}
            self._size = {t: int(np.size(v)) for t, v in fp32[0].items()} if fp32 else {}

    def _acts(self) -> list[str]:
        """The fp32 graph's float32 activations (graph inputs and node outputs)."""
        if self._activations is None:
            infos = infos_of(self.model)
            inits = {i.name for i in self.model.graph.initializer}
            names = [i.name for i in self.model.graph.input] + [o for n in self.model.graph.node for o in n.output]
            self._activations = [t for t in dict.fromkeys(names)
                                 if t and t not in inits and t in infos and infos[t].dtype == np.float32]
        return self._activations

    def _fp32_values(self) -> list[dict[str, np.ndarray]]:
        """Every fp32 activation, per traced validation input (TRACE_BYTES): one exposed run,
        kept for every variant."""
        if self._fp32 is not None:
            return self._fp32
        inputs = {i.name for i in self.model.graph.input}
        names = [t for t in self._acts() if t not in inputs]
        probe = with_outputs(self.model, {t: onnx.TensorProto.FLOAT for t in names})
        values: list[dict[str, np.ndarray]] = []
        for f, run in zip(self.feeds, exposed_runs(probe, names, self.feeds)):
            values.append({**{k: v for k, v in f.items() if k in inputs}, **dict(zip(names, run))})
            if sum(v.nbytes for d in values for v in d.values()) * (len(values) + 1) / len(values) > TRACE_BYTES:
                break
        self.probes += 1
        self._fp32 = values
        return values

    def _measure_trace(self, trace: "_Trace") -> None:
        """One run of the traced graph: each exposed tensor's squared error against the fp32
        activation it stands for, and the squared differences the trace asks for, each over
        the activation's squared norm (sums over the validation inputs)."""
        fp32 = self._fp32_values()
        self._norms()
        den, trace.size = self._den, self._size
        num: dict[str, float] = {}
        pair: dict[tuple[str, str], float] = {}
        names = list(trace.exposed)
        traced = self.feeds[:len(fp32)]
        for s, (feed, run) in enumerate(zip(traced, exposed_runs(trace.model, names, traced))):
            ref = fp32[s]
            values = dict(zip(names, run))
            values.update({t: feed[t] for t in trace.inputs if t in feed})
            for t, v in values.items():
                o = trace.stands_for.get(t, t)
                if o in ref and np.shape(v) == np.shape(ref[o]):
                    if not np.isfinite(v).all() and np.isfinite(ref[o]).all():
                        trace.overflowed.add(o)     # a finding, not an error to attribute
                        continue
                    num[t] = num.get(t, 0.0) + _sq_err(ref[o], v)
            for a, b in trace.pairs:
                if a in values and b in values and np.shape(values[a]) == np.shape(values[b]):
                    pair[(a, b)] = pair.get((a, b), 0.0) + _sq_err(values[b], values[a])
            del values, run
        self.probes += 1

        trace.chan = {t for t, d in den.items() if _spread(d) > CHANNEL_SPREAD}
        floors = {t: _floored(d) for t, d in den.items()}

        def rel(e: np.ndarray, t: str) -> float:
            o = trace.stands_for.get(t, t)
            d = floors.get(o)
            if d is None or d.shape != e.shape or not (d > 0).any():
                return 0.0
            return float(np.mean(e[d > 0] / d[d > 0])) if o in trace.chan else float(e.sum() / d.sum())

        trace.den = den
        trace.r = {t: rel(e, t) for t, e in num.items()}
        trace.diff = {(a, b): rel(e, a) for (a, b), e in pair.items()}

    # --- the fallback: blocks of nodes lowered alone, one whole-model run each ----------------

    def _blocks(self, action, probe_params: dict, nodes: list[str], key: tuple) -> dict[str, float]:
        budget = max(MIN_PROBES, PROBE_NODE_BUDGET // max(len(self.model.graph.node), 1))
        n_blocks = min(len(nodes), self.max_probes, budget)
        per_node: dict[str, float] = {}
        for block in np.array_split(np.array(nodes, dtype=object), n_blocks):
            block = tuple(str(b) for b in block)
            try:
                lowered = action.apply(self.model, Site(block, "probe"), probe_params, self.ctx)
                outputs = run_cpu(lowered, self.feeds)
                loss = float(self.loss_fn(self.reference, outputs))
            except Exception:  # noqa: BLE001 - a node the rewrite refuses alone adds no estimate
                continue
            self.probes += 1
            if not math.isfinite(loss) or (not _finite(outputs) and _finite(self.reference)):
                self.overflows.setdefault(key, []).extend(block)    # the block overflows: a finding
                continue
            for name in block:
                per_node[name] = loss / len(block)
        return per_node

    def _touches(self) -> dict[str, set[str]]:
        if self._touch is None:
            inits = {i.name for i in self.model.graph.initializer}
            self._touch = {n.name: {t for t in list(n.input) + list(n.output) if t and t not in inits}
                           for n in self.model.graph.node}
        return self._touch

    def estimate(self, steps: tuple[Step, ...]) -> float:
        """The lowered nodes' sensitivities added up, each tensor's rounding once: a lone node's
        sensitivity includes rounding its inputs and output, while the plan rounds each tensor
        once however many lowered nodes touch it."""
        total = 0.0
        for s in steps:
            if not ACTIONS[s.kind].lossy:
                continue
            parts = self._parts(s.kind, dict(s.params))
            total += parts.estimate({o for name in s.site.nodes for o in origins(name)} & set(parts.own))
        return total if math.isfinite(total) else 1.0


OVERFLOW_ROUNDS = 3     # lowerings that leave out the layers found overflowing, before the blocks fallback


def _starts(model: onnx.ModelProto, overflowed: set[str], scope: set[str]) -> list[str]:
    """Where an overflow starts: the lowered nodes that write or read an overflowed activation
    none of which comes overflowed out of another lowered node (a node reading a value its own
    rounding overflows is one)."""
    producer = {o: n.name for n in model.graph.node for o in n.output}
    return [n.name for n in model.graph.node if n.name in scope
            and any(t in overflowed for t in list(n.output) + list(n.input))
            and not any(x in overflowed and producer.get(x) in scope for x in n.input)]


def _finite(outputs: list[list[np.ndarray]]) -> bool:
    return all(np.isfinite(o).all() for sample in outputs for o in sample
               if np.issubdtype(np.asarray(o).dtype, np.floating))


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


class _Trace:
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
        dx, dy = self.den.get(x), _floored(self.den[y])
        if dx is None or not (dy > 0).any():
            return 0.0
        repeat = max(self.size.get(y, 1) / max(self.size.get(x, 1), 1), 1.0)
        if y not in self.chan or dx.shape != dy.shape:
            return float(dx.sum() * repeat / dy.sum())
        keep = dy > 0
        if x in self.chan:          # x's error spread over its channels as x is
            return float(np.mean(dx[keep] / dy[keep]))
        return float(dx.sum() / dx.size * np.mean(1.0 / dy[keep]))     # spread evenly

    def attribute(self, nodes: list[str]) -> "_Parts | None":
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
        parts = _Parts()
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


class _Parts:
    """A variant's sensitivities split into what is a node's own (its arithmetic) and what is a
    tensor's rounding: a plan's estimate adds the own parts of the nodes it lowers and, once
    per tensor, the largest rounding part any of them has for it, so lowering more nodes never
    lowers the estimate."""

    def __init__(self) -> None:
        self.own: dict[str, float] = {}
        self.rounding: dict[str, dict[str, float]] = {}

    def alone(self, n: str) -> float:
        """The node's sensitivity lowered alone."""
        return self.own.get(n, 0.0) + sum(self.rounding.get(n, {}).values())

    def table(self) -> dict[str, float]:
        return {n: self.alone(n) for n in self.own}

    def estimate(self, covered) -> float:
        worst: dict[str, float] = {}
        total = 0.0
        for n in covered:
            total += self.own.get(n, 0.0)
            for t, v in self.rounding.get(n, {}).items():
                worst[t] = max(worst.get(t, 0.0), v)
        return total + sum(worst.values())

    def scaled(self, k: float) -> "_Parts":
        out = _Parts()
        out.own = {n: v * k for n, v in self.own.items()}
        out.rounding = {n: {t: v * k for t, v in r.items()} for n, r in self.rounding.items()}
        return out

    @classmethod
    def spread(cls, table: dict[str, float], touch: dict[str, set[str]]) -> "_Parts":
        """Per-node losses (block probes) as parts: each node's spread evenly over its tensors."""
        parts = cls()
        for n, v in table.items():
            ts = touch.get(n)
            parts.own[n] = 0.0 if ts else v
            if ts:
                parts.rounding[n] = {t: v / len(ts) for t in ts}
        return parts


# errors are relative to the whole tensor, and per channel (axis 1, as the accuracy guard's
# channel_error) in a tensor whose channels' energies differ by more than CHANNEL_SPREAD: there a
# whole-tensor norm would not see small channels wiped out next to a large one by a coarse scale;
# channels far below the median (dead ones) are measured against a floor, not against ~0
CHANNEL_SPREAD = 1e3


def _spread(den: np.ndarray) -> float:
    median = float(np.median(den)) if den.size else 0.0
    return float(den.max()) / median if median > 0 else (float("inf") if den.size and den.max() > 0 else 1.0)


# the error statistics read a strided sample of about this many elements of a larger tensor
# (per-channel sums scaled up by the sampling factor): a large graph's activations give stable
# relative errors from a sample, and reading them whole cost more than the runs
SAMPLED = 1 << 20


def _view(a: np.ndarray) -> tuple[np.ndarray, float]:
    """a as (batch, channel, rest), every step-th element of rest (a step sharing no factor with
    the last axis, so a channels-last tensor's channels are all sampled), and rest's size over
    the sample's."""
    a = np.asarray(a)
    a3 = a.reshape(1, 1, -1) if a.ndim < 2 else a.reshape(a.shape[0], a.shape[1], -1)
    step = min(max(1, -(-a3.size // SAMPLED)), a3.shape[2] or 1)
    while step > 1 and math.gcd(step, a.shape[-1] if a.ndim else 1) != 1:
        step += 1
    v = a3[:, :, ::step]
    return v, (a3.shape[2] / v.shape[2]) if v.shape[2] else 1.0


def _channels(a: np.ndarray) -> np.ndarray:
    """Sum of squares per channel (axis 1; one value for a tensor of rank < 2), from the sample."""
    v, k = _view(a)
    return np.square(np.asarray(v, dtype=np.float32)).sum(axis=(0, 2), dtype=np.float64) * k


def _floored(den: np.ndarray) -> np.ndarray:
    return np.maximum(den, 1e-4 * float(np.median(den))) if den.size else den


def _sq(v: np.ndarray) -> np.ndarray:
    total = _channels(v)
    return np.where(np.isfinite(total), total, 0.0)


def _sq_err(ref: np.ndarray, low: np.ndarray) -> np.ndarray:
    """|low - ref|^2 per channel (float32 differences: these tensors are large, and the sums
    need no more); a non-finite channel counts as large as the tensor's channel itself."""
    (r, k), (lo, _) = _view(ref), _view(low)
    total = np.square(np.subtract(lo, r, dtype=np.float32)).sum(axis=(0, 2), dtype=np.float64) * k
    bad = ~np.isfinite(total)
    if bad.any():
        total[bad] = np.maximum(_sq(ref)[bad], 1.0)
    return total
