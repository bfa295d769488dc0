"""Conv -> BatchNormalization  =>  Conv with folded weights and bias (lossless), one pair per
site.

Normalization already folds every foldable pair; the action exists for graphs normalized
without folding and for pairs that become adjacent after another rewrite."""
from __future__ import annotations

from metainfer_core.actions.base import Action, Site
from metainfer_core.ir.graph_utils import GraphIndex, sweep
from metainfer_core.normalize.passes import fold_conv_bn


class ConvBnFusion(Action):
    name = "conv_bn_fusion"
    summary = "Conv → BatchNormalization into one Conv"


    def words(self, params, scope=""):
        return "BN folded", "fold BatchNormalization into the Conv before it"

    def sites(self, model, params, target):
        producer = {o: n for n in model.graph.node for o in n.output}
        return [Site((producer[n.input[0]].name, n.name), producer[n.input[0]].name) for n in model.graph.node
                if n.op_type == "BatchNormalization" and n.input[0] in producer
                and producer[n.input[0]].op_type == "Conv"]

    def legal(self, model, site, params, target):
        index = GraphIndex(model.graph)
        conv = next((n for n in model.graph.node if n.name == site.nodes[0]), None)
        return "the convolution is gone" if conv is None else fold_conv_bn.check(index, conv)

    def apply(self, model, site, params, ctx):
        folded, _ = sweep(model, lambda index, node: fold_conv_bn.rewrite(index, node) if node.name == site.nodes[0]
                          else 0)
        return folded
