"""A candidate's predicted latency: the learned cost model's whole-graph prediction, scaled by
the anchor (the default plan measured over predicted), by its graph's own anchor where that
graph (or its graph family) was timed on the default path, minus what double buffering hides
on a modeled device; bound to another execution path, times that path's ratio for its graph
family (search/path_costs.py). A rewrite adding or removing a node that runs a body (Loop, Scan,
If) is timed on the default path instead. A lossless rewrite's predicted gain is the default path's: bound
to another path, a rewritten graph is predicted as the graph before its rewrites runs there
(Candidate.rewrite_gain); on the default path one whose predicted gain alone would lead the
search is timed first. Layers a lowered precision keeps float run at the path's float ratio."""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx

from metainfer_core.actions.base import kernels_of, origins
from metainfer_core.backends.base import TargetInfo
from metainfer_core.backends.overlap import Transfers, hidden_ms
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.ir.kernels import Kernel
from metainfer_core.predictor import CostModel
from metainfer_core.search.candidate import Candidate
from metainfer_core.search.clock import Clock
from metainfer_core.search.path_costs import PathCosts, graph_class, unbound

# a lossless rewrite predicted to gain at least this over the graph it rewrites is timed where its
# gain would lead the search (claims_the_lead): within verify's noise it would not matter
REWRITE_TIMED_GAIN = 0.05


def _with_bodies(model: onnx.ModelProto) -> list[str]:
    """The main graph's nodes that run a body (a Loop, Scan or If): the predictor prices each as
    one kernel, not its body's work run per step, so a rewrite that adds or removes one is
    timed, not predicted (its prediction is off by the body's cost, the anchor's whole scale)."""
    return sorted(n.op_type for n in model.graph.node if any(a.type == onnx.AttributeProto.GRAPH for a in n.attribute))


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


class LatencyEstimates:
    def __init__(self, cost_model: CostModel, target: TargetInfo, lossy: set[str], paths: PathCosts | None,
                 timer: Callable[[onnx.ModelProto], float] | None, timings: dict, clock: Clock):
        """timer: a graph's latency on the default path (ms), measured; a lossy graph of a family
        nothing anchors yet is timed with it (on a measured target)."""
        self.cost_model, self.target, self.lossy, self.paths, self.timer = cost_model, target, lossy, paths, timer
        self.timings, self.clock = timings, clock
        self.transfers = Transfers.of(target)
        self.scale = 1.0
        self.reset(None)

    def reset(self, default_model: onnx.ModelProto | None) -> None:
        self.default_model = default_model
        self._float_costs: dict[str, float] | None = None
        # per lossy graph timed on the default path (its unbound Candidate.key): measured over predicted
        self.graph_anchors: dict[str, float] = {}
        # per graph family (PathCosts.family): its first timed graph's anchor, for the family's
        # graphs not timed themselves
        self.family_anchors: dict[tuple, float] = {}
        self._untimed: set[tuple] = set()      # families the timer failed on (not tried again)
        # per PathCosts.key whose graph was measured rewritten: its latency on the path over its
        # root's predicted on the default path
        self.path_rates: dict[tuple, float] = {}

    def predict(self, c: Candidate, kernels, infos, on_device: list[bool], double: bool,
                parent: Candidate | None, origin: Candidate | None, whole: Candidate | None):
        """Set `c`'s latency figures; returns (the staging buffer double buffering needs, the
        path's cost where `c` is bound to another path, else None)."""
        m = c.model
        latency = parent.graph_latency_ms if parent is not None else graph_ms(self.cost_model, kernels, infos) * self.scale
        c.graph_latency_ms = latency
        staging = 0
        if double and self.transfers.any:
            hidden, staging = hidden_ms(self.transfers, kernels, infos, on_device, per_kernel_ms(self.cost_model, kernels))
            latency -= hidden
        path = ExecutionPath.of(m)
        cost, fresh = None, False
        graph_key = parent.key if parent is not None else c.key     # a plan-wide step keeps its parent's graph
        if not path.is_default:
            cost, fresh = self._path_cost(c, path, latency, graph_key)
        anchor = self.graph_anchors.get(graph_key)
        share = 0.0
        if anchor is None and parent is None and origin is not None and self.timer is not None and latency > 0 \
                and _with_bodies(m) != _with_bodies(origin.model):
            anchor = self._timed_graph(m, graph_key, latency)
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
            latency = root_ms * self.path_ratio(path, self.path_rates.get(key, cost.ratio), share)
        c.latency_ms = latency
        return staging, cost

    def _path_cost(self, c: Candidate, path: ExecutionPath, predicted_ms: float, graph_key: str):
        """The path's cost for `c`'s graph (predicted_ms: its prediction on the default path;
        graph_key: the unbound graph's key). Measuring a path for a family's first graph times
        that graph on the default path too: a lossy one is then anchored there (measured /
        predicted), as the unchanged model is. Plain float graphs keep the whole-model anchor.
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
        over predicted anchors it and its family (an outside quantizer's graph is the one the
        predictor reads worst)."""
        if family in self._untimed:
            return None
        anchor = self._timed_graph(m, graph_key, predicted_ms)
        if anchor is None:
            self._untimed.add(family)
            return None
        self.family_anchors[family] = anchor
        return anchor

    def _timed_graph(self, m, graph_key: str, predicted_ms: float) -> float | None:
        """`m` timed on the default path: measured over predicted anchors that graph (None where
        the default path cannot run it)."""
        measured = self.timed(unbound(m))
        if measured is None:
            return None
        self.graph_anchors[graph_key] = measured / predicted_ms
        return self.graph_anchors[graph_key]

    def timed(self, m: onnx.ModelProto) -> float | None:
        """`m`'s latency on the default path (the timer), counted as anchor timing; None where
        the default path cannot run it (that graph fails its own exact check)."""
        t0 = self.clock.now()
        try:
            measured = self.timer(m)
        except Exception:  # noqa: BLE001 - a graph the default path cannot run fails its own exact check
            return None
        finally:
            self.timings["anchors_s"] += self.clock.now() - t0
        self.timings["anchors_timed"] += 1
        return measured

    def kernel_costs(self) -> dict[str, float]:
        """Per node of the default graph, the predictor's latency of the kernel it is in (ms):
        what keeping that node float costs (computed once)."""
        if self._float_costs is None:
            kernels = kernels_of(self.default_model)
            self._float_costs = {n: float(ms) for k, ms in zip(kernels, per_kernel_ms(self.cost_model, kernels))
                                 for n in k.node_names}
        return self._float_costs

    def float_layer_anchor(self, c: Candidate, whole: Candidate, latency_ms: float) -> tuple[float, float]:
        """(anchor, float share) of a plan keeping some of a precision's layers float, from the
        anchor of the same step lowering them all (`whole`): that one on the share of `c`'s
        predicted latency (latency_ms) still lowered, none (1, the default's) on the float
        layers' share; the share is of the anchored latency."""
        floats = set(whole.steps[-1].site.nodes) - set(c.steps[-1].site.nodes)
        if self.default_model is None or latency_ms <= 0 or not floats:
            return whole.graph_anchor, 0.0
        costs = self.kernel_costs()
        float_ms = sum(costs.get(o, 0.0) for n in floats for o in origins(n)) * self.scale
        share = min(1.0, float_ms / latency_ms)
        anchor = whole.graph_anchor * (1.0 - share) + share
        return anchor, share / anchor

    def _rewrite_gain(self, c: Candidate, parent: Candidate | None, origin: Candidate | None,
                      default_ms: float) -> float:
        """`c`'s Candidate.rewrite_gain (default_ms: its anchored latency on the default path)."""
        if parent is not None:
            return parent.rewrite_gain
        if origin is None or not c.steps or c.steps[-1].kind in self.lossy:
            return 1.0
        before = origin.graph_latency_ms * origin.graph_anchor
        return origin.rewrite_gain * default_ms / before if before > 0 and default_ms > 0 else origin.rewrite_gain

    def path_ratio(self, path: ExecutionPath, family_ratio: float, float_share: float) -> float:
        """The ratio a bound plan's latency takes: its graph family's, measured on a graph lowered
        whole; the layers a lowered precision kept float run at the path's plain-float ratio."""
        plain = self.paths.ratio(path) if float_share > 0 else None
        if plain is not None:
            plain = self.path_rates.get((path, "fp32", ()), plain)
        return family_ratio if plain is None else (1.0 - float_share) * family_ratio + float_share * plain

    def claims_the_lead(self, c: Candidate, parent: Candidate | None, origin: Candidate | None,
                        lead: float | None) -> bool:
        """Whether `c` is a lossless rewrite, on the default path, that leads every plan scored
        so far on its predicted gain alone (REWRITE_TIMED_GAIN at least over the graph it
        rewrites), its graph not timed: the predictor reads a whole-graph rewrite worst, and a
        lead claimed on such a gain takes a verify slot from a real plan."""
        if self.timer is None or lead is None or parent is not None or origin is None or c.violation:
            return False
        if not c.steps or c.steps[-1].kind in self.lossy or c.key in self.graph_anchors or c.graph_latency_ms <= 0:
            return False
        step_gain = c.rewrite_gain / origin.rewrite_gain if origin.rewrite_gain > 0 else 1.0
        return step_gain < 1.0 - REWRITE_TIMED_GAIN and c.score < lead and ExecutionPath.of(c.model).is_default

    def time_rewrite(self, c: Candidate) -> bool:
        """`c` timed on the default path: its anchor and its rewrite gain become measured ones."""
        measured = self.timed(c.model)
        if measured is None:
            return False
        anchor = measured / c.graph_latency_ms
        self.graph_anchors[c.key] = anchor
        c.rewrite_gain *= anchor / c.graph_anchor
        c.latency_ms *= anchor / c.graph_anchor
        c.graph_anchor = anchor
        return True

    def reanchor(self, c: Candidate) -> bool:
        """Re-scale `c` by its anchor where binding its graph (or, for an unanchored graph, one of
        its family) timed it after `c` was scored; whether it changed."""
        anchor = self.graph_anchors.get(c.key)
        if anchor is None and c.graph_anchor == 1.0 and c.float_share == 0.0 and self.family_anchors:
            anchor = self.family_anchors.get(PathCosts.family(c.model))     # scored before its family was timed
        if anchor is None or anchor == c.graph_anchor:
            return False
        c.latency_ms *= anchor / c.graph_anchor
        c.graph_anchor = anchor
        return True
