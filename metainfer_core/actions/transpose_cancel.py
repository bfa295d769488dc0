"""Transpose(p) -> Transpose(q)  =>  Transpose(q o p), or nothing when it is the identity
(lossless), one pair per site. Layout rewrites and exporters leave such pairs behind. The layout
action's adapters (Transposes marked `metainfer.layout=adapter`, part of a channels-last kernel)
are no site: cancelling them would silently turn those kernels back to channels-first."""
from __future__ import annotations

from metainfer_core.actions.base import Action, Site
from metainfer_core.ir.graph_utils import sweep
from metainfer_core.ir.kernels import is_adapter
from metainfer_core.normalize.passes import cancel_transposes


class TransposeCancel(Action):
    name = "transpose_cancel"
    summary = "Transpose pairs composed or removed"


    def words(self, params, scope=""):
        return "transposes cancelled", "cancel back-to-back Transposes"

    def sites(self, model, params, target):
        producer = {o: n for n in model.graph.node for o in n.output}
        return [Site((producer[n.input[0]].name, n.name), n.name) for n in model.graph.node
                if n.op_type == "Transpose" and not is_adapter(n) and n.input[0] in producer
                and producer[n.input[0]].op_type == "Transpose" and not is_adapter(producer[n.input[0]])]

    def legal(self, model, site, params, target):
        return None

    def apply(self, model, site, params, ctx):
        """The site's second Transpose merges with its first (the pass's rule, on that node only)."""
        rewritten, _ = sweep(model, lambda index, node: cancel_transposes.rewrite(index, node)
                             if node.name == site.nodes[-1] else 0)
        return rewritten
