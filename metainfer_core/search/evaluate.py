"""Scores candidates without running them on the target: latency from the learned cost model
(its whole-graph prediction, CostModel.predict_ms; minus, where the plan double-buffers host<->device transfers, the part of each transfer that
hides behind the previous kernel), peak memory from the liveness planner under the plan's
buffer-sharing policy, accuracy loss from per-node sensitivity measured once per model
(accuracy/sensitivity.py; lossless candidates are exact). Each candidate also gets its operator
binding: which kernels the device runs and which fall back to the host, and why. A candidate
bound to another execution path gets its graph's prediction times that path's measured latency
ratio, its peak memory the planner's through that path's fit on measured runs (runtime
footprint included: predictor/model/path_memory.py), and the accuracy loss the path adds (search/path_costs.py); its exact check runs there.
A lossy graph timed on the default path (measuring a path for it does that) is anchored there
like the unchanged model, bound or not; a graph of its family (PathCosts.family) not timed
itself takes its anchor. Float layers a lowered precision keeps run at the path's float ratio.
A lossless rewrite's predicted gain is the default path's: bound to another path, a rewritten
graph is predicted as the graph before its rewrites runs there (Candidate.rewrite_gain); on
the default path one whose predicted gain alone would lead the search is timed first."""
from __future__ import annotations

import time
import weakref
from collections import defaultdict
from typing import Callable

import numpy as np
import onnx

from metainfer_core.accuracy.metric import plan_loss, run_cpu
from metainfer_core.accuracy.sensitivity import MAX_PROBES, Sensitivity
from metainfer_core.actions import ACTIONS, ActionContext, Site, Step
from metainfer_core.actions.base import infos_of, kernels_of, origins
from metainfer_core.actions.float_layers import numeric_steps, provide_ranking, share_of
from metainfer_core.backends.base import TargetInfo
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.ir.directives import double_buffered
from metainfer_core.ir.kernels import Kernel, bind, crossings
from metainfer_core.ir.memory import DEFAULT_STRATEGY, model_strategy, plan_memory
from metainfer_core.predictor import CostModel
from metainfer_core.predictor.model.path_memory import MemoryFit
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.path_costs import PathCosts, graph_class, unbound
from metainfer_core.search.score import Weights, memory_base, violation


def per_kernel_ms(cost_model: CostModel, kernels: list[Kernel]) -> np.ndarray:
    """The predictor's latency per kernel (one batched call when the model offers it)."""
    each = getattr(cost_model, "predict_kernels_ms", None)
    if each is not None:
        return np.asarray(each(kernels), dtype=float)
    return np.array([cost_model.predict_ms([k]) for k in kernels], dtype=float)


def graph_ms(cost_model: CostModel, kernels: list[Kernel], infos) -> float:
    """The predictor's whole-graph latency (given the tensor facts when it takes them)."""
    try:
        return float(cost_model.predict_ms(kernels, infos))
    except TypeError:
        return float(cost_model.predict_ms(kernels))


# a precision's sensitivity costs about this many times the fp32 pass every precision shares
# (a plain run per input, a traced run of twice the graph, the error statistics)
PASSES_PER_PRECISION = 5
CALIBRATES = "calibration"     # the sort of an expansion whose rewrite calibrates (Action.calibrates)
# a lossless rewrite predicted to gain at least this over the graph it rewrites is timed where its
# gain would lead the search (Evaluator._claims_the_lead): within verify's noise it would not matter
REWRITE_TIMED_GAIN = 0.05


class Evaluator:
    def __init__(self, cost_model: CostModel, target: TargetInfo, weights: Weights, max_loss: float,
                 feeds: list[dict[str, np.ndarray]], reference: list[list[np.ndarray]], lossy: set[str],
                 ctx: ActionContext | None = None, max_probes: int = MAX_PROBES, loss_fn: Callable = plan_loss,
                 paths: PathCosts | None = None, anchor_ms: float | None = None,
                 memory: dict[ExecutionPath, MemoryFit] | None = None,
                 timer: Callable[[onnx.ModelProto], float] | None = None):
        """anchor_ms: the default plan's latency measured on the target (search/anchor.py): every
        prediction is scaled by it over the default's prediction. memory: per execution path, the
        fit from planned to measured peak (a path without one: as planned). timer: a graph's
        latency on the default path (ms), measured; a lossy graph of a family nothing anchors yet
        is timed with it (on a measured target)."""
        self.loss_fn, self.paths, self.memory, self.timer = loss_fn, paths, memory or {}, timer
        self.anchor_ms, self.scale = anchor_ms, 1.0
        self.predicted_default_ms: float | None = None      # before the anchor scaled it
        self.cost_model, self.target, self.weights, self.max_loss = cost_model, target, weights, max_loss
        self.feeds, self.reference, self.lossy = feeds, reference, lossy
        self.ctx = ctx or ActionContext(target=target, calibration_feeds=feeds)
        self.max_probes = max_probes
        self.sensitivity: Sensitivity | None = None
        self._fit_losses: dict[tuple, float] = {}       # int8 float_layers=fit: exact losses probed
        self._float_costs: dict[str, float] | None = None
        # per lossy graph timed on the default path (its unbound Candidate.key): measured over
        # predicted (_path_cost)
        self.graph_anchors: dict[str, float] = {}
        # per lossy graph family (PathCosts.family): its first timed graph's anchor, for the
        # family's graphs not timed themselves
        self.family_anchors: dict[tuple, float] = {}
        self._untimed: set[tuple] = set()      # families the timer failed on (not tried again)
        # per PathCosts.key whose graph was measured rewritten (Candidate.rewrite_gain): its latency
        # on the path over its root's predicted on the default path; the measured ratio is over
        # the rewritten graph's own (a tiled fp16 graph ran several times its root there)
        self.path_rates: dict[tuple, float] = {}
        self.base_latency = 1.0
        self.base_mem = 1
        self.base_score: float | None = None     # the default plan's (set_baseline)
        self.lead: float | None = None           # the best score within the bounds so far (evaluate)
        self.timings: dict[str, float] = defaultdict(float)
        self.modeled = target.measurement == "modeled"

    def measure(self, c: Candidate, parent: Candidate | None = None, origin: Candidate | None = None,
                whole: Candidate | None = None) -> Candidate:
        """parent: a candidate with the very same graph (only plan-wide metadata differs), whose
        latency prediction is then reused: the predictor sees kernels, and they are the same.
        origin: the plan `c` is a step from; a lossless step keeps its anchor (a tiling of an
        anchored int8 graph is misread as that graph is, where unanchored it was predicted
        several times apart from it). whole: for a precision step keeping layers float, the same step lowering
        them all; its anchor carries over to the part still lowered (float_layer_anchor)."""
        t0 = time.perf_counter()
        m = c.model
        infos = infos_of(m)
        kernels = kernels_of(m)
        # binding: a measured target runs everything itself; a modeled one binds per kernel
        reasons = bind(kernels, self.target.supported_ops, self.target.dtypes) if self.modeled else [None] * len(kernels)
        on_device = [r is None for r in reasons]
        c.binding = {"device": on_device.count(True),
                     "host": [{"kernel": k.op_type, "nodes": k.node_names[:4], "reason": r}
                              for k, r in zip(kernels, reasons) if r is not None]}
        double = self.modeled and double_buffered(m)
        latency = parent.graph_latency_ms if parent is not None else \
            graph_ms(self.cost_model, kernels, infos) * self.scale
        c.graph_latency_ms = latency
        staging = 0
        streamed = bool(self.target.extra.get("weights_streamed"))
        if double and (self.target.extra.get("link_gbps") or streamed):
            # each load (inputs over the link, streamed weights from flash) streams while the
            # kernel before it runs: that much of it is hidden
            per = per_kernel_ms(self.cost_model, kernels)
            moved = crossings(kernels, infos, on_device)
            link_gbps = float(self.target.extra.get("link_gbps") or 0)
            load_ms = np.asarray(moved, dtype=float) / (link_gbps * 1e6) if link_gbps else np.zeros(len(moved))
            run_ms = per
            if streamed:
                weight_gbps = float(self.target.extra.get("weight_gbps") or 0)
                if weight_gbps:
                    weights = np.asarray([k.bytes_weights if dev else 0 for k, dev in zip(kernels, on_device)], float)
                    weight_ms = weights / (weight_gbps * 1e6)
                    load_ms = load_ms + weight_ms
                    # a kernel was profiled with its own weight load: the next load hides behind
                    # the rest of it only (a kernel waiting on flash computes nothing)
                    run_ms = np.maximum(per - weight_ms, 0.0)
            latency -= float(np.minimum(load_ms[1:], run_ms[:-1]).sum()) if len(per) > 1 else 0.0
            staging = max(moved, default=0)
        path = ExecutionPath.of(m)
        cost, fresh = None, False
        graph_key = parent.key if parent is not None else c.key     # a plan-wide step keeps its parent's graph
        if not path.is_default:
            cost, fresh = self._path_cost(c, path, latency, graph_key)
        anchor = self.graph_anchors.get(graph_key)
        share = 0.0
        if anchor is None and origin is not None and c.steps and c.steps[-1].kind not in self.lossy:
            anchor, share = origin.graph_anchor, origin.float_share
        if anchor is None and whole is not None:
            anchor, share = self.float_layer_anchor(c, whole, latency)
        if anchor is None:
            family = PathCosts.family(m)
            anchor = self.family_anchors.get(family)
            if anchor is None and self.timer is not None and latency > 0 and any(s.kind in self.lossy for s in c.steps):
                anchor = self._timed_anchor(m, family, graph_key, latency)
        c.graph_anchor = 1.0 if anchor is None else anchor
        c.float_share = share
        latency *= c.graph_anchor
        c.rewrite_gain = self._rewrite_gain(c, parent, origin, latency)
        if cost is not None and cost.error is None:
            root_ms = latency / c.rewrite_gain
            key = PathCosts.key(path, m) if fresh or self.path_rates else None     # a walk of the graph
            if fresh and share == 0.0 and c.rewrite_gain != 1.0 and root_ms > 0:
                self.path_rates[key] = cost.path_ms / root_ms
            latency = root_ms * self._path_ratio(path, self.path_rates.get(key, cost.ratio), share)
        c.latency_ms = latency
        inits = {i.name for i in m.graph.initializer}
        plan = plan_memory(kernels, infos, [i.name for i in m.graph.input if i.name not in inits],
                           model_strategy(m, self.target.extra.get("memory_strategy", DEFAULT_STRATEGY)),
                           {o.name for o in m.graph.output},
                           extra_bytes=staging, streamed_weights=streamed, double_buffer=double)
        c.planned_peak_bytes = plan.peak_bytes
        fit = self.memory.get(path)
        c.peak_mem_bytes = fit.predict(plan.peak_bytes) if fit is not None else plan.peak_bytes
        self.timings["evaluate_s"] += time.perf_counter() - t0
        if any(s.kind in self.lossy for s in c.steps):
            if self.sensitivity is None:
                raise RuntimeError("set_baseline() first: sensitivities are measured on the default plan")
            c.accuracy_exact = False
            c.accuracy_deferred = not self._worth_estimating(c, cost)
            if c.accuracy_deferred:
                c.accuracy_loss = 0.0
                self.timings["estimates_deferred"] += 1
            else:
                self._estimate(c)
        if cost is not None:
            c.accuracy_loss += cost.added_loss
            c.accuracy_exact = c.accuracy_exact and not path.lossy
        return c

    def _estimate(self, c: Candidate) -> None:
        before = self.sensitivity.seconds
        c.accuracy_loss = self._estimated_loss(numeric_steps(c.steps))
        c.accuracy_deferred = False
        self.timings["sensitivity_s"] += self.sensitivity.seconds - before

    def _fit_key(self, params: dict, nodes) -> tuple:
        # per engine: the estimate is meta-infer's form's for all, a run is of the engine's graph
        return Sensitivity.variant("int8", params), params.get("engine"), frozenset(o for n in nodes for o in origins(n))

    def _estimated_loss(self, steps: tuple[Step, ...]) -> float:
        """A plan's loss by the sensitivities; a lone int8 step on a node set a fit measured has
        that measure instead (the estimate it corrected may run several times off)."""
        lossy = [s for s in steps if s.kind in self.lossy]
        if len(lossy) == 1 and lossy[0].kind == "int8":
            measured = self._fit_losses.get(self._fit_key(dict(lossy[0].params), lossy[0].site.nodes))
            if measured is not None:
                return measured
        return self.sensitivity.estimate(steps)

    def _worth_estimating(self, c: Candidate, cost) -> bool:
        """Whether `c`'s accuracy estimate is worth what it costs now: always where its
        precisions' sensitivities are measured (adding them up is cheap); else only where the
        plan could beat the default even losing nothing. A plan that cannot is scored at zero
        loss (a lower bound: it ranks below the default either way) and a new precision's
        sensitivity (traced runs of the whole graph, seconds on a large model) waits for a plan
        that needs it: a descendant, another path, or an exact check (which measures the loss)."""
        if self.base_score is None or all(self.sensitivity.knows(s.kind, dict(s.params))
                                          for s in c.steps if s.kind in self.lossy):
            return True
        added = cost.added_loss if cost is not None else 0.0
        best_case = self.weights.score(c.latency_ms / max(self.base_latency, 1e-9), c.peak_mem_bytes / self.base_mem,
                                       added, c.changes)
        return best_case < self.base_score

    def measuring_s(self) -> float:
        """Seconds spent so far measuring what candidates re-use: sensitivities, path costs and
        graphs timed for their anchor."""
        return self.precision_s() + (self.paths.seconds if self.paths is not None else 0.0) + self.timings["anchors_s"]

    def precision_s(self) -> float:
        """Seconds spent so far measuring precisions: sensitivities and float-layer fits."""
        return (self.sensitivity.seconds if self.sensitivity is not None else 0.0) + self.timings["float_fit_s"]

    def fresh_cost_prior_s(self, lossy: bool = True) -> dict[str, float]:
        """What measuring something new likely costs before any was, per sort (measures_anew,
        and a rewrite that calibrates):
        a new execution path a few runs of the default plan per validation input at its
        predicted latency (measured targets); a new precision at least that and, where the
        search may lower precision, a few times what the sensitivities' shared fp32 pass took
        (measured now: it is needed by the first precision anyway)."""
        runs = 0.0 if self.modeled else self.base_latency / 1e3 * (len(self.feeds) + 4)
        shared = self.sensitivity.prepare() if lossy and self.sensitivity is not None else 0.0
        precision = max(runs, PASSES_PER_PRECISION * shared)
        # an outside quantizer's calibration (int8 engine nncf) runs the graph about as often
        return {"path": runs, "precision": precision, CALIBRATES: precision}

    def measures_anew(self, state: Candidate, action, params: dict) -> str | None:
        """What scoring `action` on `state` would measure anew: "precision" (its sensitivity),
        "path" (an execution path on a class of graph), or None. Seconds on a large model, where
        a re-used measurement costs nothing; a path costs a few runs where a precision's
        sensitivity costs traced runs of the whole graph, so the two are priced apart."""
        if action.lossy and self.sensitivity is not None and not self.sensitivity.knows(action.name, params):
            return "precision"
        if action.name == "binding" and self.paths is not None \
                and not self.paths.knows(action.path(action.with_defaults(params)), state.model):
            return "path"
        return None

    def _path_cost(self, c: Candidate, path: ExecutionPath, predicted_ms: float, graph_key: str):
        """The path's cost for `c`'s graph (predicted_ms: its prediction on the default path;
        graph_key: the unbound graph's key). Measuring a path for a class's first graph times that
        graph on the default path too: a lossy one is then anchored there (measured / predicted),
        as the unchanged model is; the predictor reads an outside quantizer's graph worst. Only
        that graph: the predictor's error differs across a class (two fp16 scopes predicted several
        times apart ran alike). Plain float graphs keep the whole-model anchor (timed longer).
        Returns (the cost, whether this call measured it)."""
        if self.paths is None:
            raise RuntimeError(f"candidate bound to {path.label}, but the evaluator measures no execution paths")
        before = self.paths.seconds
        fresh = not self.paths.knows(path, c.model)
        cost = self.paths.cost(c.model)
        if fresh and graph_class(c.model) != "fp32" and predicted_ms > 0 and cost.plain_ms > 0:
            self.graph_anchors.setdefault(graph_key, cost.plain_ms / predicted_ms)
            self.family_anchors.setdefault(PathCosts.family(c.model), cost.plain_ms / predicted_ms)
        self.timings["paths_s"] += self.paths.seconds - before
        c.binding["path"] = path.label
        c.binding["path_ratio"] = cost.ratio
        if cost.error is not None:
            c.binding["path_error"] = cost.error
        return cost, fresh

    def _timed_anchor(self, m, family: tuple, graph_key: str, predicted_ms: float) -> float | None:
        """A lossy graph whose family nothing anchors yet, timed on the default path: measured
        over predicted anchors it and its family. Left to the predictor, an outside quantizer's
        int8 graph (scope all) was predicted several times its measured latency, and so ranked out."""
        if family in self._untimed:
            return None
        measured = self._timed(unbound(m))
        if measured is None:
            self._untimed.add(family)
            return None
        anchor = measured / predicted_ms
        self.graph_anchors[graph_key] = anchor
        self.family_anchors[family] = anchor
        return anchor

    def _timed(self, m: onnx.ModelProto) -> float | None:
        """`m`'s latency on the default path (the timer), counted as anchor timing; None where
        the default path cannot run it (that graph fails its own exact check)."""
        t0 = time.perf_counter()
        try:
            measured = self.timer(m)
        except Exception:  # noqa: BLE001 - a graph the default path cannot run fails its own exact check
            return None
        finally:
            self.timings["anchors_s"] += time.perf_counter() - t0
        self.timings["anchors_timed"] += 1
        return measured

    def set_baseline(self, default: Candidate) -> None:
        # the same default again (the stage sizes the search, then searches): its tables still hold
        if self.sensitivity is None or self.sensitivity.model is not default.model:
            self.sensitivity = Sensitivity(default.model, self.feeds, self.reference, self.ctx, self.max_probes,
                                           self.loss_fn)
            self._float_costs = None
            self.graph_anchors, self.family_anchors, self._untimed, self.path_rates = {}, {}, set(), {}
            if self.paths is not None:      # graphs whose default-path outputs are known need no runs there
                self.paths.know(default.model, self.reference)
                self.sensitivity.on_run = self.paths.know
        # int8's float_layers: its most sensitive layers by the table the estimates use (measured
        # once per int8 variant, on first use); held weakly, as the cache outlives the search
        me = weakref.ref(self)
        provide_ranking(self.ctx.cache, lambda params: me().sensitivity.table("int8", params),
                        lambda params, nodes, exact: me().int8_share(params, nodes, exact),
                        lambda: me().float_costs())
        self.scale = 1.0
        self.measure(default)
        if self.anchor_ms and default.latency_ms > 0:
            # the default's own prediction scaled is the anchor (a measured target: no path, no staging)
            self.predicted_default_ms = default.latency_ms
            self.scale = self.anchor_ms / default.latency_ms
            default.graph_latency_ms = default.latency_ms = self.anchor_ms
        self.base_latency = default.latency_ms
        self.base_mem = memory_base(default.peak_mem_bytes, self.target.memory_limit_bytes,
                                    self.target.memory_budget, self.weights.memory_floor)
        self.base_score = self.finish(default).score
        self.lead = self.base_score

    def float_costs(self) -> dict[str, float]:
        """Per node of the default graph, the predictor's latency of the kernel it is in (ms):
        what keeping that node float costs, as int8's fit weighs it (computed once)."""
        if self._float_costs is None:
            kernels = kernels_of(self.sensitivity.model)
            self._float_costs = {n: float(ms) for k, ms in zip(kernels, per_kernel_ms(self.cost_model, kernels))
                                 for n in k.node_names}
        return self._float_costs

    def float_layer_anchor(self, c: Candidate, whole: Candidate, latency_ms: float) -> tuple[float, float]:
        """(anchor, float share) of a plan keeping some of a precision's layers float, from the
        anchor of the same step lowering them all (`whole`): that one on the share of `c`'s
        predicted latency (latency_ms) still lowered, none (1, the default's) on the float
        layers' share; the share is of the anchored latency. Left unanchored, the float-layer
        variants of an int8 graph anchored well below 1 were predicted at about twice its latency
        and ranked behind plans they beat in verify."""
        floats = set(whole.steps[-1].site.nodes) - set(c.steps[-1].site.nodes)
        if self.sensitivity is None or latency_ms <= 0 or not floats:
            return whole.graph_anchor, 0.0
        costs = self.float_costs()
        float_ms = sum(costs.get(o, 0.0) for n in floats for o in origins(n)) * self.scale
        share = min(1.0, float_ms / latency_ms)
        anchor = whole.graph_anchor * (1.0 - share) + share
        return anchor, share / anchor

    def _rewrite_gain(self, c: Candidate, parent: Candidate | None, origin: Candidate | None,
                      default_ms: float) -> float:
        """`c`'s Candidate.rewrite_gain (default_ms: its anchored latency on the default path). A
        tiling's gain is the default path's: OpenVINO ran a tiled int8 graph as it ran the untiled
        one, where that gain carried through the path's ratio predicted it at about half of it."""
        if parent is not None:
            return parent.rewrite_gain
        if origin is None or not c.steps or c.steps[-1].kind in self.lossy:
            return 1.0
        before = origin.graph_latency_ms * origin.graph_anchor
        return origin.rewrite_gain * default_ms / before if before > 0 and default_ms > 0 else origin.rewrite_gain

    def _path_ratio(self, path: ExecutionPath, class_ratio: float, float_share: float) -> float:
        """The ratio a bound plan's latency takes: its graph class's, measured on a graph lowered
        whole; the layers a lowered precision kept float run at the path's plain-float ratio
        (OpenVINO runs an int8 graph's float layers as its float graph's: an int8 plan keeping
        many layers float was predicted at its int8 ratio, several times too fast)."""
        plain = self.paths.ratio(path) if float_share > 0 else None
        if plain is not None:
            plain = self.path_rates.get((path, "fp32", ()), plain)
        return class_ratio if plain is None else (1.0 - float_share) * class_ratio + float_share * plain

    def int8_share(self, params: dict, nodes: tuple[str, ...], exact: bool) -> float:
        """The loss of int8 (`params`, without float_layers) on just these nodes as a share of the
        bound: by the estimate, or (exact) by a run of the default graph so lowered on the
        validation inputs, on its execution path (remembered per node set)."""
        if not exact:
            step = Step("int8", Site(nodes, "fit"), tuple(sorted(params.items())))
            return share_of(self.sensitivity.estimate((step,)), self.max_loss)
        key = self._fit_key(params, nodes)
        if key not in self._fit_losses:
            t0 = time.perf_counter()
            origin_site = Site(tuple(sorted(key[2])), "fit")
            lowered = ACTIONS["int8"].apply(self.sensitivity.model, origin_site, params, self.ctx)
            # on the path the form runs on (OpenVINO's int8 kernels round otherwise than ORT's reading)
            bound = self.paths is not None and not ExecutionPath.of(lowered).is_default
            outputs = self.paths.run(lowered) if bound else run_cpu(lowered, self.feeds)
            self._fit_losses[key] = float(self.loss_fn(self.reference, outputs))
            self.timings["float_fit_s"] += time.perf_counter() - t0
        return share_of(self._fit_losses[key], self.max_loss)

    def finish(self, c: Candidate) -> Candidate:
        c.score = self.weights.score(c.latency_ms / max(self.base_latency, 1e-9), c.peak_mem_bytes / self.base_mem,
                                     c.accuracy_loss, c.changes)
        c.violation = violation(c.peak_mem_bytes, self.target.memory_limit_bytes, c.accuracy_loss, self.max_loss)
        if c.binding.get("path_error"):
            c.violation = f"execution path: {c.binding['path']} failed ({c.binding['path_error']})"
        return c

    def evaluate(self, c: Candidate, parent: Candidate | None = None, origin: Candidate | None = None,
                 whole: Candidate | None = None) -> Candidate:
        self.finish(self.measure(c, parent, origin, whole))
        if self._claims_the_lead(c, parent, origin):
            self._time_rewrite(c)
        if not c.violation and self.lead is not None:
            self.lead = min(self.lead, c.score)
        return c

    def _claims_the_lead(self, c: Candidate, parent: Candidate | None, origin: Candidate | None) -> bool:
        """Whether `c` is a lossless rewrite, on the default path, that leads every plan scored
        so far on its predicted gain alone (REWRITE_TIMED_GAIN at least over the graph it
        rewrites), its graph not timed: the predictor reads a whole-graph rewrite worst (an
        int8 graph tiled 8 ways was predicted at about half the untiled graph's latency and ran
        slower than it), and a lead claimed on such a gain takes a verify slot from a real plan."""
        if self.timer is None or self.lead is None or parent is not None or origin is None or c.violation:
            return False
        if not c.steps or c.steps[-1].kind in self.lossy or c.key in self.graph_anchors or c.graph_latency_ms <= 0:
            return False
        step_gain = c.rewrite_gain / origin.rewrite_gain if origin.rewrite_gain > 0 else 1.0
        return step_gain < 1.0 - REWRITE_TIMED_GAIN and c.score < self.lead and ExecutionPath.of(c.model).is_default

    def _time_rewrite(self, c: Candidate) -> None:
        """`c` timed on the default path: its anchor and its rewrite gain become measured ones."""
        measured = self._timed(c.model)
        if measured is None:
            return
        anchor = measured / c.graph_latency_ms
        self.graph_anchors[c.key] = anchor
        c.rewrite_gain *= anchor / c.graph_anchor
        c.latency_ms *= anchor / c.graph_anchor
        c.graph_anchor = anchor
        self.finish(c)

    def reanchor(self, c: Candidate) -> Candidate:
        """Re-score `c` by its anchor where binding its graph (or, for an unanchored graph, one of
        its family) timed it after `c` was scored."""
        anchor = self.graph_anchors.get(c.key)
        if anchor is None and c.graph_anchor == 1.0 and c.float_share == 0.0 and self.family_anchors:
            anchor = self.family_anchors.get(PathCosts.family(c.model))     # scored before its family was timed
        if anchor is not None and anchor != c.graph_anchor:
            c.latency_ms *= anchor / c.graph_anchor
            c.graph_anchor = anchor
            self.finish(c)
            if c.accuracy_deferred and c.score < self.base_score and ExecutionPath.of(c.model).is_default:
                # scored at zero loss as unable to beat the default, it now can: a plan ranked
                # on a loss never estimated would lead the search into a graph over the bound
                self._estimate(c)
                self.finish(c)
        return c

    def exact(self, c: Candidate) -> Candidate:
        """Replace an estimated accuracy loss by the measured one (a CPU run) and re-score."""
        if not c.accuracy_exact:
            t0 = time.perf_counter()
            bound = self.paths is not None and not ExecutionPath.of(c.model).is_default
            outputs = self.paths.run(c.model) if bound else run_cpu(c.model, self.feeds)
            c.accuracy_loss = self.loss_fn(self.reference, outputs)
            c.accuracy_exact = True
            self.finish(c)
            self.timings["exact_s"] += time.perf_counter() - t0
        return c
