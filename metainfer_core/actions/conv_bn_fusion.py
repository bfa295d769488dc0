"""Conv -> BatchNormalization  =>  Conv with folded weights and bias (lossless).

Normalization already folds every foldable pair; the action exists for graphs normalized
without folding and for pairs that become adjacent after another rewrite."""
from __future__ import annotations

from metainfer_core.actions.base import Action, Site
from metainfer_core.normalize.passes import fold_conv_bn


class ConvBnFusion(Action):
    name = "conv_bn_fusion"

    def sites(self, model, params, target):
        producer = {o: n for n in model.graph.node for o in n.output}
        pairs = [(producer[n.input[0]].name, n.name) for n in model.graph.node
                 if n.op_type == "BatchNormalization" and n.input[0] in producer and producer[n.input[0]].op_type == "Conv"]
        return [Site(tuple(x for p in pairs for x in p), "all")] if pairs else []

    def legal(self, model, site, params, target):
        return None

    def apply(self, model, site, params, ctx):
        folded, _ = fold_conv_bn.run(model)
        return folded
