"""Transpose(p) -> Transpose(q)  =>  Transpose(q o p), or nothing when it is the identity
(lossless). Layout rewrites and exporters leave such pairs behind."""
from __future__ import annotations

from metainfer_core.actions.base import Action, Site
from metainfer_core.normalize.passes import cancel_transposes


class TransposeCancel(Action):
    name = "transpose_cancel"

    def sites(self, model, params, target):
        producer = {o: n for n in model.graph.node for o in n.output}
        nodes = [n.name for n in model.graph.node if n.op_type == "Transpose" and n.input[0] in producer
                 and producer[n.input[0]].op_type == "Transpose"]
        return [Site(tuple(nodes), "all")] if nodes else []

    def legal(self, model, site, params, target):
        return None

    def apply(self, model, site, params, ctx):
        rewritten, _ = cancel_transposes.run(model)
        return rewritten
