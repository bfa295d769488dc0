"""Float32 -> bfloat16 substitution (lossy), emulated: every tensor the ops in scope exchange is
held in bfloat16 (Cast to bf16 after the producer, Cast back to fp32 before each op), the
weights of Conv/MatMul/Gemm are stored in bf16, and each op computes in fp32, which is what a
bf16 datapath does (bf16 operands, fp32 accumulation, bf16 result). The Casts are marked
`metainfer.precision=bfloat16`, so the kernel grouper sees one bf16 kernel per op.

ONNX Runtime's CPU provider has few bf16 kernels, so the action is legal only on targets whose
spec has a bfloat16 datapath; their numerics here are ONNX Runtime's Casts (round to nearest
even) around fp32 ops: the accuracy effect is real, the speed is the simulator's."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from metainfer_core.actions.base import Action, Param, commit_rewrite, derived, infos_of, lowered, wiring
from metainfer_core.actions.fp16 import COMPUTE_OPS, lossy_sites
from metainfer_core.ir.directives import PRECISION_KEY, set_node_meta
from metainfer_core.ir.graph_utils import clone

_BF16 = "bfloat16"


def _cast(src: str, dst: str, to: int, name: str) -> onnx.NodeProto:
    node = helper.make_node("Cast", [src], [dst], name=name, to=to)
    set_node_meta(node, PRECISION_KEY, _BF16)
    return node


def to_bf16(model: onnx.ModelProto, nodes: set[str]) -> onnx.ModelProto:
    out = clone(model)
    g = out.graph
    infos = infos_of(model)
    inits = {i.name: i for i in g.initializer}
    graph_outputs = {o.name for o in g.output}

    def is_act(t: str) -> bool:
        return bool(t) and t in infos and infos[t].dtype == np.float32 and t not in inits

    chosen = [n for n in g.node if n.name in nodes and len(n.output) == 1 and is_act(n.output[0])
              and any(is_act(i) for i in n.input)]
    chosen_ids = {id(n) for n in chosen}
    producer, consumers = wiring(g)
    before: dict[int, list[onnx.NodeProto]] = defaultdict(list)
    after: dict[int, list[onnx.NodeProto]] = defaultdict(list)
    head: list[onnx.NodeProto] = []
    held: dict[str, str] = {}          # fp32 tensor -> its bf16 copy
    new_inits = []

    def bf16_copy(t: str) -> str:
        """The bf16 tensor holding t: written after t's producer (the graph start for inputs)."""
        if t not in held:
            p = producer.get(t)
            held[t] = derived(t, "bf16")
            (after[id(p)] if p is not None else head).append(_cast(t, held[t], TensorProto.BFLOAT16, derived(t, "to_bf16")))
        return held[t]

    for n in chosen:
        for slot, t in enumerate(list(n.input)):
            if is_act(t):
                src = bf16_copy(t)
                n.input[slot] = derived(t, f"f32.{n.name}")
                before[id(n)].append(_cast(src, n.input[slot], TensorProto.FLOAT, derived(t, f"from_bf16.{n.name}")))
            elif slot == 1 and t in inits and n.op_type in COMPUTE_OPS and inits[t].data_type == TensorProto.FLOAT:
                w = numpy_helper.to_array(inits[t])
                stored = derived(t, "bf16")
                new_inits.append(helper.make_tensor(stored, TensorProto.BFLOAT16, w.shape, _bf16_bits(w), raw=True))
                n.input[slot] = derived(t, f"f32.{n.name}")
                before[id(n)].append(_cast(stored, n.input[slot], TensorProto.FLOAT, derived(t, f"from_bf16.{n.name}")))
        y = n.output[0]
        n.output[0] = derived(y, "f")
        held[y] = derived(y, "bf16")
        after[id(n)].append(_cast(n.output[0], held[y], TensorProto.BFLOAT16, derived(y, "to_bf16")))
        # fp32 readers outside the scope (and graph outputs) read y back in fp32
        if y in graph_outputs or any(id(c) not in chosen_ids for c in consumers[y]):
            after[id(n)].append(_cast(held[y], y, TensorProto.FLOAT, derived(y, "from_bf16")))
    commit_rewrite(g, new_inits, head=head, before=before, after=after)
    return out          # value_info dropped: shapes are inferred where they are needed


def _bf16_bits(w: np.ndarray) -> bytes:
    """Round-to-nearest-even float32 -> bfloat16, as raw little-endian bytes."""
    bits = np.ascontiguousarray(w, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16).tobytes()


class Bf16(Action):
    name = "bf16"
    summary = "bfloat16 kernels (emulated numerics), only where the target has a bf16 datapath"
    lossy = True
    width = 16
    params = {"scope": Param("all", ("all", "compute"), "every float node, or only Conv/MatMul/Gemm",
                           numeric=False)}


    def words(self, params, scope=""):
        return "bf16", "compute in bfloat16 (fp32 accumulation)"

    def sites(self, model, params, target):
        return lossy_sites(model, params["scope"])

    def legal(self, model, site, params, target):
        if _BF16 not in target.dtypes:
            return (f"target {target.name} has no bfloat16 datapath (bf16 is offered only where the device "
                    "computes it: ONNX Runtime's CPU provider lacks most bf16 kernels)")
        return lowered(model)

    def apply(self, model, site, params, ctx):
        return to_bf16(model, set(site.nodes))
