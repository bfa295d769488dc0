"""Anchor kernel (Conv/ConvTranspose/MatMul/Gemm) -> element-wise epilogue kernels  =>  one
fusion group, marked on the nodes as metadata `metainfer.fusion_group` (lossless: the math is
unchanged). With span=layers the group may run on through further anchors (conv -> conv ->
...): the layer fusion of dataflow accelerators, which stream one layer's output through line
buffers into the next, legal only on targets whose spec says `fuse_layers`. A device compiler
launches a group as one kernel whose intermediates stay on chip; the simulator honours the
marks. ONNX Runtime on the CPU fuses by itself, so the action is illegal there."""
from __future__ import annotations

from collections import defaultdict

import onnx

from metainfer_core.actions.base import Action, Param, Site, cached, kernels_of
from metainfer_core.ir.directives import FUSION_KEY, node_meta, set_node_meta
from metainfer_core.ir.graph_utils import clone
from metainfer_core.ir.kernels import Kernel, group_kernels, is_adapter, is_format_node, is_precision_cast

ANCHORS = {"Conv", "ConvTranspose", "MatMul", "Gemm"}
EPILOGUES = {"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Add", "Mul", "Sub",
             "Div", "BatchNormalization", "Erf"}


def _chains(model: onnx.ModelProto, max_depth: int, supported: set[str] | None,
            layers: bool = False, kernels: list[Kernel] | None = None) -> list[list[Kernel]]:
    kernels = kernels if kernels is not None else group_kernels(model)
    users: dict[str, list[int]] = defaultdict(list)
    for i, k in enumerate(kernels):
        for t in k.inputs:
            users[t].append(i)
    graph_outputs = {o.name for o in model.graph.output}

    def free(k: Kernel) -> bool:
        # layout adapters and bf16 storage Casts belong to the kernel, not to the device op set
        ops = {n.op_type for n in k.nodes if not is_adapter(n) and not is_precision_cast(n)}
        fused = any(node_meta(n, FUSION_KEY) is not None for n in k.nodes)
        return not fused and (supported is None or ops <= supported)

    def depth_of(k: Kernel) -> int:
        return len(k.op_type.split("+"))

    def followable(k: Kernel) -> bool:
        return k.op_type in EPILOGUES or (layers and k.op_type in ANCHORS | EPILOGUES)

    chains = []
    taken: set[int] = set()
    for i, k in enumerate(kernels):
        if i in taken or k.op_type not in ANCHORS or not free(k):
            continue
        chain, depth, cur = [k], depth_of(k), k
        while len(cur.outputs) == 1 and cur.outputs[0] not in graph_outputs and len(users[cur.outputs[0]]) == 1:
            j = users[cur.outputs[0]][0]
            nxt = kernels[j]
            if j in taken or not followable(nxt) or not free(nxt) or depth + depth_of(nxt) > max_depth:
                break
            chain.append(nxt)
            taken.add(j)
            depth += depth_of(nxt)
            cur = nxt
        if len(chain) > 1:
            chains.append(chain)
    return chains


class FuseChain(Action):
    name = "fuse_chain"
    summary = ("marks an anchor (Conv/MatMul/Gemm) and its element-wise epilogue (or, with `layers`, consecutive "
               "convs) as one fusion group (node metadata), within the target's fusion depth and op set; illegal on "
               "`cpu`, whose runtime fuses by itself")
    params = {"max_depth": Param(4, (2, 3, 4, 6, 8), "most ops one fused kernel may hold"),
              "span": Param("epilogue", ("epilogue", "layers"),
                            "one anchor and its element-wise epilogue, or consecutive layers too")}


    def words(self, params, scope=""):
        if params.get("span") == "layers":
            return "fused layers", f"fuse consecutive layers into streaming kernels of up to {params.get('max_depth')} ops"
        return ("fused epilogues", "fuse each Conv/MatMul/Gemm with its element-wise epilogue into one kernel of up to "
                f"{params.get('max_depth')} ops")

    def sites(self, model, params, target):
        depth = min(params["max_depth"], target.max_fusion_depth)
        supported = set(target.supported_ops) if target.supported_ops is not None else None
        chains = cached(model, f"fuse_chain.{depth}.{params['span']}.{sorted(supported or [])}",
                        lambda m: _chains(m, depth, supported, params["span"] == "layers", kernels_of(m)))
        return [Site(tuple(n.name for c in chains for k in c for n in k.nodes), "all")] if chains else []

    def legal(self, model, site, params, target):
        if target.max_fusion_depth < 2:
            return f"target {target.name} takes no fusion directives (its runtime fuses by itself)"
        if params["max_depth"] > target.max_fusion_depth:
            return f"max_depth {params['max_depth']} exceeds {target.name}'s fusion depth {target.max_fusion_depth}"
        if params["span"] == "layers" and not target.extra.get("fuse_layers"):
            return f"target {target.name} does not fuse consecutive layers (no dataflow pipeline)"
        return None

    def apply(self, model, site, params, ctx):
        out = clone(model)
        in_site = set(site.nodes)
        by_name = {n.name: n for n in out.graph.node}
        supported = set(ctx.target.supported_ops) if ctx.target and ctx.target.supported_ops is not None else None
        existing = {node_meta(n, FUSION_KEY) for n in model.graph.node} - {None}
        serial = 0
        # the chains of the input graph (its kernels are cached), tagged by node name in the copy
        for chain in _chains(model, params["max_depth"], supported, params["span"] == "layers", kernels_of(model)):
            # only the ops carry the tag: QDQ nodes and layout adapters follow their op into the group,
            # so fusing before or after int8 / layout gives the same graph
            names = [n.name for k in chain for n in k.nodes if not is_format_node(n) and not is_adapter(n)]
            if not set(names) <= in_site:
                continue
            while f"fg{serial}" in existing:
                serial += 1
            tag = f"fg{serial}"
            existing.add(tag)
            for name in names:
                set_node_meta(by_name[name], FUSION_KEY, tag)
        return out
