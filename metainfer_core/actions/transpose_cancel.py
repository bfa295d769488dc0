"""Transpose(p) -> Transpose(q)  =>  Transpose(q o p), or nothing when it is the identity
(lossless). Layout rewrites and exporters leave such pairs behind. The layout action's
adapters (Transposes marked `metainfer.layout=adapter`, part of a channels-last kernel) are
left alone: cancelling them would silently turn those kernels back to channels-first."""
from __future__ import annotations

from metainfer_core.actions.base import Action, Site
from metainfer_core.kernels import is_adapter
from metainfer_core.normalize.graph_utils import clone
from metainfer_core.normalize.passes import cancel_transposes

_HIDDEN = "metainfer.hidden"     # a domain the pass does not match: adapters sit out the rewrite


class TransposeCancel(Action):
    name = "transpose_cancel"

    def sites(self, model, params, target):
        producer = {o: n for n in model.graph.node for o in n.output}
        nodes = [n.name for n in model.graph.node if n.op_type == "Transpose" and not is_adapter(n)
                 and n.input[0] in producer and producer[n.input[0]].op_type == "Transpose"
                 and not is_adapter(producer[n.input[0]])]
        return [Site(tuple(nodes), "all")] if nodes else []

    def legal(self, model, site, params, target):
        return None

    def apply(self, model, site, params, ctx):
        hidden = clone(model)
        adapters = [n for n in hidden.graph.node if is_adapter(n)]
        for n in adapters:
            n.domain = _HIDDEN
        rewritten, _ = cancel_transposes.run(hidden)
        for n in rewritten.graph.node:
            if n.domain == _HIDDEN:
                n.domain = ""
        return rewritten
