"""What every graph action declares: its name (the key in conf/action_space/*.yaml), its
parameters with their search domain, where it can apply (`sites`), whether it may apply on a
target (`legal` returns a reason when not), and the rewrite itself (`apply`)."""
from __future__ import annotations

import functools
import itertools
from abc import ABC, abstractmethod
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import onnx

from metainfer_core.backends.base import TargetInfo
from metainfer_core.ir.graph_utils import node_reads


@dataclass(frozen=True)
class Param:
    default: Any
    domain: tuple[Any, ...]
    description: str
    # False for a parameter that picks nodes or the tool that writes them, not how a node's
    # values are rounded: a precision's sensitivity table is shared across its values
    numeric: bool = True

    def __post_init__(self):
        if self.default not in self.domain:
            raise ValueError(f"parameter default {self.default!r} is not in its search domain {list(self.domain)}")


@dataclass(frozen=True)
class Site:
    """Where an action applies: node names (empty: the whole graph in scope) and a label."""
    nodes: tuple[str, ...]
    label: str


@dataclass
class ActionContext:
    """What an apply may need beyond the graph: the target, calibration inputs, and a cache
    the actions share within one run (e.g. calibrated tensor ranges, computed once)."""
    target: TargetInfo | None = None
    calibration_feeds: list[dict[str, np.ndarray]] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """One applied action: the plan records these."""
    kind: str
    site: Site
    params: tuple[tuple[str, Any], ...]

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "nodes": list(self.site.nodes), "scope": self.site.label,
                "params": dict(self.params)}


def _filling_defaults(method):
    """Callers may leave parameters out: the declared defaults fill them in."""
    @functools.wraps(method)
    def wrapper(self, model, site_or_params, *rest):
        if method.__name__ == "sites":
            return method(self, model, self.with_defaults(site_or_params), *rest)
        params, *tail = rest
        return method(self, model, site_or_params, self.with_defaults(params), *tail)
    return wrapper


class Action(ABC):
    """An action declares what the search, the accuracy estimates and plan.md need to know of
    it, so none of them names an action: its order among the expansions (`width`), whether it
    chooses the execution path (`binds_path`), the kind a plan using it is (`kind_label`,
    `native_runtime`, `outside`), its words for people (`words`), and, for a choice that lowers
    part of what it could, its pruning and measuring hooks (`whole`, `pruned`, `fits_by_runs`,
    `prepare_search`, `known_loss`). The defaults fit a plain lossless rewrite."""
    name: str
    summary: str = ""           # what it rewrites, one line (docs/actions.md's table)
    lossy: bool = False
    params: dict[str, Param] = {}
    width: int = 32             # bits of the numbers it computes in: the narrowest is tried first within a turn
    binds_path: bool = False    # it chooses the runtime that runs the plan (a lossy graph is scored bound at once)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for meth in ("sites", "legal", "apply"):
            if meth in cls.__dict__:
                setattr(cls, meth, _filling_defaults(cls.__dict__[meth]))

    def with_defaults(self, params: dict[str, Any] | None) -> dict[str, Any]:
        return {**{k: p.default for k, p in self.params.items()}, **(params or {})}

    def keeps_graph(self, params: dict[str, Any]) -> bool:
        """True when apply changes only plan-wide metadata, never a node (the search then
        reuses the input's analysis for the output)."""
        return False

    def calibrates(self, params: dict[str, Any]) -> str | None:
        """Who runs the graph in apply (an outside quantizer calibrating on the inputs), None
        when nobody does: seconds on a large graph, so the search prices it apart from a
        rewrite, and each quantizer apart from the others."""
        return None

    def kind_label(self, params: dict[str, Any]) -> str:
        """What kind of plan a step of this choice makes: plans of one kind are one measurement's
        worth to verify (the predictor cannot tell them apart)."""
        return self.name

    def native_runtime(self, params: dict[str, Any]) -> str | None:
        """The runtime whose own form this choice writes (a plan bound there is one choice, not two)."""
        return None

    def outside(self, params: dict[str, Any]) -> bool:
        """Whether an outside tool writes the graph (the graphs users get from those tools, which
        the predictor reads worst: verified first among the explored)."""
        return bool(self.calibrates(params))

    def words(self, params: dict[str, Any], scope: str = "") -> tuple[str, str]:
        """(a short name, what it does in words), for plan.md and the terminal summary; `scope`:
        the step's site label as plan.json records it."""
        return self.name, self.name.replace("_", " ")

    def whole(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """For a choice that leaves part of its site as it was: the same choice doing all of it
        (its scored plan prices this one); None for every other choice."""
        return None

    def fits_by_runs(self, params: dict[str, Any]) -> bool:
        """Whether narrowing this choice runs the graph (more than a rewrite and its scoring)."""
        return False

    def pruned(self, params: dict[str, Any], whole: Any, view: Any) -> str | None:
        """Why this choice cannot pay, given `whole` (the scored plan of `whole(params)`, None
        when there is none) and `view` (the search's figures: `base_score`, `max_loss`,
        `weights`, `zero_loss_score(c)`, `fastest_bound(c, default)`, `resolution`); None to try it."""
        return None

    def prepare_search(self, cache: dict, estimates: Any) -> None:
        """Before a search: leave in the actions' shared `cache` what narrowing needs from the
        search's accuracy `estimates` (`table(kind, params)`, `estimate(steps)`,
        `measured_loss(key, lowered)`, `known_loss(key)`, `kernel_costs()`, `max_loss`, `model`,
        `ctx`: search/accuracy_estimate.py)."""

    def known_loss(self, step: "Step", estimates: Any) -> float | None:
        """A loss measured for this lone step while narrowing (it replaces the estimate), if any."""
        return None

    def choices(self, domain_override: dict[str, list[Any]] | None = None) -> list[dict[str, Any]]:
        """Every parameter combination of the (possibly config-narrowed) search domain."""
        domain_override = domain_override or {}
        unknown = set(domain_override) - set(self.params)
        if unknown:
            raise ValueError(f"action {self.name} has no parameter(s) {sorted(unknown)}; it has {sorted(self.params)}")
        names = sorted(self.params)
        domains = []
        for n in names:
            values = domain_override.get(n, self.params[n].domain)
            values = list(values) if isinstance(values, (list, tuple)) else [values]
            bad = [v for v in values if v not in self.params[n].domain]
            if bad:
                raise ValueError(f"action {self.name}.{n}: {bad} not in its domain {list(self.params[n].domain)}")
            domains.append(values)
        return [dict(zip(names, combo)) for combo in itertools.product(*domains)]

    def narrow(self, site: Site, params: dict[str, Any], cache: dict | None) -> Site | None:
        """The site as this run's context narrows it (`cache`: the actions' shared cache, where
        a search leaves what it measured); None drops it. Most actions take the site as it is."""
        return site

    @abstractmethod
    def sites(self, model: onnx.ModelProto, params: dict[str, Any], target: TargetInfo) -> list[Site]:
        """Where the action can apply on this target (sites it could never run are left out)."""

    @abstractmethod
    def legal(self, model: onnx.ModelProto, site: Site, params: dict[str, Any], target: TargetInfo) -> str | None:
        """None when the action may apply; else the reason it may not."""

    @abstractmethod
    def apply(self, model: onnx.ModelProto, site: Site, params: dict[str, Any], ctx: ActionContext) -> onnx.ModelProto: ...


def wiring(graph: onnx.GraphProto) -> tuple[dict[str, onnx.NodeProto], defaultdict[str, list[onnx.NodeProto]]]:
    """(tensor -> the node writing it, tensor -> the nodes reading it as a direct input)."""
    producer = {o: n for n in graph.node for o in n.output}
    consumers: defaultdict[str, list[onnx.NodeProto]] = defaultdict(list)
    for n in graph.node:
        for i in n.input:
            consumers[i].append(n)
    return producer, consumers


def has_op(model: onnx.ModelProto, *ops: str) -> bool:
    return any(n.op_type in ops for n in model.graph.node)


def float_dtypes(model: onnx.ModelProto) -> set[int]:
    types = {i.data_type for i in model.graph.initializer}
    types |= {v.type.tensor_type.elem_type for v in list(model.graph.value_info) + list(model.graph.input)}
    return types


# Derived tensor and node names: "<origin>|<what>" for a tensor or node an action derives from
# one original ("Conv_3|tile1", "x|nhwc"), "<a>&<b>" for one merged from several. Lets later
# steps find the original (calibrated ranges, per-node sensitivity) without extra bookkeeping.
DERIVED, MERGED = "|", "&"


def derived(name: str, what: str) -> str:
    return f"{name}{DERIVED}{what}"


def origins(name: str) -> list[str]:
    """The original names a derived name comes from (itself when it is not derived)."""
    return [o.split(DERIVED)[0] for o in name.split(DERIVED)[0].split(MERGED)] if name else []


def opset_of(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def lowered(model: onnx.ModelProto) -> str | None:
    """Why the graph is no longer a plain fp32 graph (lossy actions do not stack)."""
    if has_op(model, "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger"):
        return "the graph is already quantized"
    if any(i.data_type in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16) for i in model.graph.initializer):
        return "the graph already holds reduced-precision floats"
    return None


def missing_ops(target: TargetInfo, *ops: str) -> list[str]:
    """Ops a rewrite would add that the target's op set lacks (none when it runs every op)."""
    return [] if target.supported_ops is None else [o for o in ops if o not in target.supported_ops]


_ANALYSES: OrderedDict[tuple[int, str], tuple[onnx.ModelProto, Any]] = OrderedDict()
_MAX_ANALYSES = 256


def cached(model: onnx.ModelProto, key: str, compute: Callable[[onnx.ModelProto], Any]) -> Any:
    """compute(model), remembered for this model object: a search asks every action for its
    sites on each beam state, once per parameter choice; the analysis behind them is the same.
    Entries hold the model, so its id cannot be reused while cached; the model must not be
    edited in place afterwards (actions never do: they return rewritten copies)."""
    k = (id(model), key)
    hit = _ANALYSES.get(k)
    if hit is not None and hit[0] is model:
        _ANALYSES.move_to_end(k)
        return hit[1]
    value = compute(model)
    _ANALYSES[k] = (model, value)
    while len(_ANALYSES) > _MAX_ANALYSES:
        _ANALYSES.popitem(last=False)
    return value


def infos_of(model: onnx.ModelProto):
    """tensor_infos(model), cached for this model object (see `cached`)."""
    from metainfer_core.ir.tensors import tensor_infos

    return cached(model, "infos", tensor_infos)


def kernels_of(model: onnx.ModelProto):
    """group_kernels(model), cached for this model object (see `cached`)."""
    from metainfer_core.ir.kernels import group_kernels

    return cached(model, "kernels", lambda m: group_kernels(m, infos_of(m)))


def share_analysis(child: onnx.ModelProto, parent: onnx.ModelProto) -> None:
    """Let `child`, whose graph is `parent`'s unchanged, reuse parent's cached analyses."""
    for key in ("infos", "kernels"):
        hit = _ANALYSES.get((id(parent), key))
        if hit is not None and hit[0] is parent:
            _ANALYSES[(id(child), key)] = (child, hit[1])


def commit_rewrite(graph: onnx.GraphProto, new_inits: list[onnx.TensorProto], head: list[onnx.NodeProto] = (),
                   before: dict[int, list[onnx.NodeProto]] | None = None,
                   after: dict[int, list[onnx.NodeProto]] | None = None, drop: set[int] = frozenset()) -> None:
    """Install a rewrite: `head` nodes first, then every kept node of the graph with the nodes
    a rewrite placed before / after it (keyed by id(node)); add the new initializers, drop those
    nothing reads any more (subgraph reads count), and drop value_info (re-inferred where needed)."""
    before, after = before or {}, after or {}
    nodes = list(head)
    for n in graph.node:
        if id(n) in drop:
            continue
        nodes.extend(before.get(id(n), []))
        nodes.append(n)
        nodes.extend(after.get(id(n), []))
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(new_inits)
    used = {t for n in graph.node for t in node_reads(n)} | {o.name for o in graph.output}
    keep = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    del graph.value_info[:]
