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
scaled to) and once traced (`Trace`, accuracy/trace.py): every copy of every activation exposed, beside an fp32
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

from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.actions import ACTIONS, ActionContext, Site, Step
from metainfer_core.accuracy.parts import Parts
from metainfer_core.accuracy.tensor_error import CHANNEL_SPREAD, channel_spread_ratio, floored, sq, sq_err
from metainfer_core.accuracy.trace import Trace
from metainfer_core.actions.base import infos_of, origins
from metainfer_core.ir.graph_utils import subgraphs, with_outputs
from metainfer_core.ir.runs import exposed_runs

MAX_PROBES = 48
PROBE_NODE_BUDGET = 6000        # probes x graph nodes per variant: a probe runs the whole graph
MIN_PROBES = 8
# the trace reads as many validation inputs as keep one run's fp32 activations within this (at
# least one): a large graph's tensors give stable error statistics from one input, while the
# loss to scale to always comes from every input. Small, because the traced graph exposes two or
# three copies of each activation per input: on a large detector, three inputs
# made the first precision's table cost most of the search's share
TRACE_BYTES = 128 << 20
# what a layer whose low-precision values overflow (inf / NaN) counts as lowered alone: the loss
# the default metric gives a non-finite output, so every plan lowering it breaks the bound
OVERFLOW_LOSS = 1.0


class Sensitivity:
    def __init__(self, model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]],
                 reference: list[list[np.ndarray]], ctx: ActionContext, max_probes: int = MAX_PROBES,
                 loss_fn: Callable = plan_loss, now: Callable[[], float] = time.perf_counter):
        """now: the clock its `seconds` are read on (the search's budget prices them)."""
        self.model, self.feeds, self.reference, self.ctx = model, feeds, reference, ctx
        self.now = now
        self.loss_fn = loss_fn
        self.max_probes = max_probes
        self.tables: dict[tuple, dict[str, float]] = {}     # variant -> node -> sensitivity alone
        self.parts: dict[tuple, Parts] = {}
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
        """What changes a node's numerics: the precision and its numeric parameters (Param.numeric),
        not which nodes nor who writes them: an outside quantizer's graph is ranked by meta-infer's
        own form of the same placement (re-quantizing per layer with it would cost seconds each)."""
        declared = ACTIONS[kind].params if kind in ACTIONS else {}
        return (kind,) + tuple(sorted((k, v) for k, v in params.items() if k not in declared or declared[k].numeric))

    def knows(self, kind: str, params: dict) -> bool:
        """Whether this variant's sensitivities are measured already (re-used by every plan)."""
        return self.variant(kind, params) in self.parts

    def table(self, kind: str, params: dict) -> dict[str, float]:
        """Node -> its sensitivity lowered alone, for this variant (measured on first use)."""
        return self._parts(kind, params).table()

    def _parts(self, kind: str, params: dict) -> "Parts":
        key = self.variant(kind, params)
        if key not in self.parts:
            t0 = self.now()
            # a low-precision probe may overflow: a finding (self.overflows), not a library warning
            with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
                self.parts[key] = self._measure(kind, params)
            self.tables[key] = self.parts[key].table()
            self.seconds += self.now() - t0
        return self.parts[key]

    def _measure(self, kind: str, params: dict) -> "Parts":
        action = ACTIONS[kind]
        # the variant's numbers on every node it can lower, written by meta-infer's own rewrite
        probe_params = {k: v for k, v in params.items() if k not in action.params or action.params[k].numeric}
        if "scope" in action.params:
            probe_params["scope"] = "all"
        sites = action.sites(self.model, probe_params, self.ctx.target)
        nodes = list(sites[0].nodes) if sites else []
        if not nodes:
            return Parts()
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
            parts = Parts.spread(self._blocks(action, probe_params, nodes, key), self._touches())
        for n in self.overflows.get(key, []):
            parts.own[n], parts.rounding[n] = OVERFLOW_LOSS, {}
        return parts

    def _rescaled(self, action, params: dict, nodes: list[str], shared: tuple) -> "Parts | None":
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

    def _one_pass(self, action, params: dict, nodes: list[str]) -> "Parts | None":
        by_name = {n.name: n for n in self.model.graph.node}
        if any(subgraphs(by_name[n]) for n in nodes if n in by_name):
            return None         # control flow in scope: the tensors inside its bodies are not exposed
        culprits: list[str] = []
        for _ in range(OVERFLOW_ROUNDS):
            lowered = action.apply(self.model, Site(tuple(nodes), "all"), params, self.ctx)
            outputs = self._run(lowered)
            trace = Trace(self.model, lowered, self._acts())
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
            return Parts()
        loss = float(self.loss_fn(self.reference, outputs))
        if not math.isfinite(loss):
            return None
        parts = trace.attribute(nodes)
        if parts is None:
            return None
        total = parts.estimate(parts.own)
        if total > 0 and math.isfinite(total):
            return parts.scaled(loss / total)
        even = Parts()             # nothing measurable inside: the loss shared evenly
        even.own = {n: loss / max(len(parts.own), 1) for n in parts.own}
        return even

    def prepare(self) -> float:
        """Measure what every variant shares (the fp32 activations and their norms) now; its
        seconds, a yardstick for what a variant will cost on this graph."""
        t0 = self.now()
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            self._norms()
        spent = self.now() - t0
        self.seconds += spent
        return spent

    def _norms(self) -> None:
        if self._den is None:
            fp32 = self._fp32_values()
            self._den = {t: sum(sq(f[t]) for f in fp32) for t in fp32[0]} if fp32 else {}
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

    def _measure_trace(self, trace: "Trace") -> None:
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
                    num[t] = num.get(t, 0.0) + sq_err(ref[o], v)
            for a, b in trace.pairs:
                if a in values and b in values and np.shape(values[a]) == np.shape(values[b]):
                    pair[(a, b)] = pair.get((a, b), 0.0) + sq_err(values[b], values[a])
            del values, run
        self.probes += 1

        trace.chan = {t for t, d in den.items() if channel_spread_ratio(d) > CHANNEL_SPREAD}
        floors = {t: floored(d) for t, d in den.items()}

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
