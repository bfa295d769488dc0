"""Float32 -> float16 substitution (lossy): the nodes in scope compute in float16; their float
weights become float16 initializers, a Cast to float16 brings each fp32 tensor into the scope
and a Cast to float32 takes each result out of it (graph inputs and outputs keep fp32, as
ONNX Runtime's converter does with keep_io_types). Legal where the target has a float16
datapath.

Written directly, in one pass: ONNX Runtime's float16 converter walks the graph in Python and
costs a large fraction of a second on a large graph, too slow to apply inside a search. Ops whose float inputs
are not all data (Resize's roi and scales) or whose types are fixed by attributes (Cast,
Constant, ConstantOfShape, random generators) stay in fp32 behind the boundary Casts; on
ONNX Runtime's CPU provider, fp16 ops without an fp16 kernel run in fp32 between Casts the
runtime inserts, so the numerics stay those of fp16 storage."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from metainfer_core.actions.base import Action, Param, Site, commit_rewrite, derived, infos_of, lowered, wiring
from metainfer_core.ir.graph_utils import clone

COMPUTE_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")
# ops whose every float input and output may be float16 (ONNX type constraints allow it)
HALF_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm", "Relu", "Clip", "Add", "Mul", "Sub", "Div", "Sigmoid", "Tanh",
            "LeakyRelu", "HardSigmoid", "HardSwish", "Erf", "Exp", "Sqrt", "Pow", "Neg", "Abs", "MaxPool",
            "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Concat", "Flatten", "Reshape", "Transpose",
            "Softmax", "LayerNormalization", "BatchNormalization", "Split", "Slice", "Squeeze", "Unsqueeze",
            "ReduceMean", "ReduceSum", "Identity", "Gather", "Where", "Max", "Min", "Resize", "Expand", "Tile"}
FLOAT_ONLY_INPUTS = {"Resize": {1, 2}}      # roi, scales stay float32
_F32, _F16 = TensorProto.FLOAT, TensorProto.FLOAT16
_FP16_MAX = 65504.0


def is_float32_model(model: onnx.ModelProto) -> bool:
    return any(i.data_type == _F32 for i in model.graph.initializer) and lowered(model) is None


def scope_nodes(model: onnx.ModelProto, scope: str, exclude=("Transpose",)) -> tuple[str, ...]:
    """Nodes in a precision scope: every node, or only Conv/MatMul/Gemm (layout Transposes
    and other data movement keep the precision of what they move)."""
    return tuple(n.name for n in model.graph.node
                 if (scope == "all" and n.op_type not in exclude) or n.op_type in COMPUTE_OPS)


def lossy_sites(model: onnx.ModelProto, scope: str) -> list[Site]:
    if not is_float32_model(model) or not any(n.op_type in COMPUTE_OPS for n in model.graph.node):
        return []
    return [Site(scope_nodes(model, scope), scope)]


def to_fp16(model: onnx.ModelProto, nodes: set[str]) -> onnx.ModelProto:
    infos = infos_of(model)
    out = clone(model)
    g = out.graph
    inits = {i.name: i for i in g.initializer}
    graph_outputs = {o.name for o in g.output}

    def f32(t: str) -> bool:
        return bool(t) and t in infos and infos[t].dtype == np.float32

    half = [n for n in g.node if n.name in nodes and n.op_type in HALF_OPS and n.domain in ("", "ai.onnx")
            and any(f32(t) for t in n.input)]
    half_ids = {id(n) for n in half}
    producer, consumers = wiring(g)
    after: dict[int, list[onnx.NodeProto]] = defaultdict(list)
    head: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []
    halves: dict[str, str] = {}                # fp32 tensor or weight -> its fp16 twin

    def twin(t: str) -> str:
        if t not in halves:
            halves[t] = derived(t, "fp16")
            if t in inits:
                w = np.clip(numpy_helper.to_array(inits[t]), -_FP16_MAX, _FP16_MAX).astype(np.float16)
                new_inits.append(numpy_helper.from_array(w, halves[t]))
            else:
                p = producer.get(t)
                (after[id(p)] if p is not None else head).append(
                    helper.make_node("Cast", [t], [halves[t]], name=derived(t, "to_fp16"), to=_F16))
        return halves[t]

    for n in half:               # topological: a producer in scope is rewritten before its readers
        keep32 = FLOAT_ONLY_INPUTS.get(n.op_type, set())
        for slot, t in enumerate(list(n.input)):
            if slot not in keep32 and f32(t):
                n.input[slot] = twin(t)
        for slot, y in enumerate(list(n.output)):
            if not f32(y):
                continue
            n.output[slot] = halves.setdefault(y, derived(y, "fp16"))
            # fp32 readers outside the scope, and graph outputs, read it back under its own name
            if y in graph_outputs or any(id(c) not in half_ids for c in consumers[y]):
                after[id(n)].append(helper.make_node("Cast", [n.output[slot]], [y], name=derived(y, "to_fp32"), to=_F32))
    commit_rewrite(g, new_inits, head=head, after=after)
    return out          # value_info dropped: shapes are inferred where they are needed


class Fp16(Action):
    name = "fp16"
    summary = "float16 weights and tensors, Casts at the boundary"
    lossy = True
    width = 16
    params = {"scope": Param("all", ("all", "compute"), "every float node, or only Conv/MatMul/Gemm",
                           numeric=False)}


    def words(self, params, scope=""):
        return "fp16", "compute in float16 (inputs and outputs stay float32)"

    def sites(self, model, params, target):
        return lossy_sites(model, params["scope"])

    def legal(self, model, site, params, target):
        if "float16" not in target.dtypes:
            return f"target {target.name} has no float16 datapath"
        return lowered(model)

    def apply(self, model, site, params, ctx):
        return to_fp16(model, set(site.nodes))
