"""What every graph action declares: its name (the key in conf/action_space/*.yaml), its
parameters with their search domain, where it can apply (`sites`), whether it may apply on a
target (`legal` returns a reason when not), and the rewrite itself (`apply`)."""
from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from metainfer_core.backends.base import TargetInfo


@dataclass(frozen=True)
class Param:
    default: Any
    domain: tuple[Any, ...]
    description: str


@dataclass(frozen=True)
class Site:
    """Where an action applies: node names (empty: the whole graph in scope) and a label."""
    nodes: tuple[str, ...]
    label: str


@dataclass
class ActionContext:
    """What an apply may need beyond the graph: the target, calibration inputs."""
    target: TargetInfo | None = None
    calibration_feeds: list[dict[str, np.ndarray]] = field(default_factory=list)


@dataclass(frozen=True)
class Step:
    """One applied action: the plan records these."""
    kind: str
    site: Site
    params: tuple[tuple[str, Any], ...]

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "nodes": list(self.site.nodes), "scope": self.site.label,
                "params": dict(self.params)}


class Action(ABC):
    name: str
    lossy: bool = False
    params: dict[str, Param] = {}

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

    @abstractmethod
    def sites(self, model: onnx.ModelProto, params: dict[str, Any], target: TargetInfo) -> list[Site]:
        """Where the action can apply on this target (sites it could never run are left out)."""

    @abstractmethod
    def legal(self, model: onnx.ModelProto, site: Site, params: dict[str, Any], target: TargetInfo) -> str | None:
        """None when the action may apply; else the reason it may not."""

    @abstractmethod
    def apply(self, model: onnx.ModelProto, site: Site, params: dict[str, Any], ctx: ActionContext) -> onnx.ModelProto: ...


def has_op(model: onnx.ModelProto, *ops: str) -> bool:
    return any(n.op_type in ops for n in model.graph.node)


def float_dtypes(model: onnx.ModelProto) -> set[int]:
    types = {i.data_type for i in model.graph.initializer}
    types |= {v.type.tensor_type.elem_type for v in list(model.graph.value_info) + list(model.graph.input)}
    return types
