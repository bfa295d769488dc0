"""Memory reuse strategy (lossless, numerics untouched): records the buffer-sharing policy the
device runtime must use for activations in the model's metadata_props
(`metainfer.memory_strategy`): `none` (a buffer per tensor), `greedy` (greedy by size offsets)
or `first_fit` (first-fit offsets in execution order); see metainfer_core.ir.memory. The planner
and the simulator honour it; without it the target runtime's default applies.

Illegal on a measured ONNX Runtime target: its arena planner is its own and the measured
backend does not read the record."""
from __future__ import annotations

from metainfer_core.actions.base import Action, Param, Site
from metainfer_core.ir.directives import STRATEGY_KEY, model_meta, set_model_meta
from metainfer_core.ir.graph_utils import clone
from metainfer_core.ir.memory import DEFAULT_STRATEGY, STRATEGIES


def current_strategy(model, target) -> str:
    return model_meta(model, STRATEGY_KEY) or target.extra.get("memory_strategy", DEFAULT_STRATEGY)


class MemoryReuse(Action):
    name = "memory_reuse"
    summary = "the buffer-sharing policy the planner and device honour (model metadata)"
    params = {"strategy": Param("greedy", STRATEGIES, "how activations share the arena")}


    def words(self, params, scope=""):
        return (f"{params.get('strategy')} buffer reuse",
                f"share activation buffers ({params.get('strategy')} arena offsets)")

    def sites(self, model, params, target):
        if current_strategy(model, target) == params["strategy"]:
            return []
        return [Site((), params["strategy"])]

    def legal(self, model, site, params, target):
        if not target.extra.get("schedulable"):
            return f"target {target.name} plans its own memory (the measured runtime does not read the record)"
        return None

    def keeps_graph(self, params):
        return True

    def apply(self, model, site, params, ctx):
        out = clone(model)
        set_model_meta(out, STRATEGY_KEY, params["strategy"])
        return out
