"""Tensor shapes: bind deployment input shapes, infer the rest, and check nothing is unknown."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, shape_inference

from metainfer_core.errors import MetaInferError
from metainfer_core.ir.graph_utils import Shape, clone, describe, iter_graphs, tensor_shapes
from metainfer_core.ir.runs import cpu_session
from metainfer_core.ir.tensors import random_feeds
from metainfer_core.normalize.messages import first_line


def real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs a caller feeds (an input with an initializer is a default-valued weight)."""
    weights = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in weights]


def unknown_negative_dims(model: onnx.ModelProto) -> onnx.ModelProto:
    """Dims declared with a negative size => unknown dims (no value, no symbol).

    Old exporters (Paddle2ONNX, early tf2onnx) write -1 for a dynamic axis; ONNX sizes are
    non-negative, so -1 would otherwise read as a static size that no binding may change and no
    input can have. Covers the signature and value_info of the main graph and every subgraph.
    """
    if not any(d.dim_value < 0 for d in _all_dims(model)):
        return model
    model = clone(model)
    for dim in _all_dims(model):
        if dim.HasField("dim_value") and dim.dim_value < 0:
            dim.Clear()
    return model


def _all_dims(model: onnx.ModelProto) -> list:  # type: ignore[type-arg]
    dims = []
    for graph in iter_graphs(model.graph):
        for vi in [*graph.input, *graph.output, *graph.value_info]:
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                dims.extend(vi.type.tensor_type.shape.dim)
    return dims


def bind_input_shapes(model: onnx.ModelProto, input_shapes: dict[str, list[int | None]] | None) -> onnx.ModelProto:
    """Set the given inputs' dims to the given sizes (None: the axis stays as declared, symbolic
    where it varies over the shape range); dims already static must agree."""
    if not input_shapes:
        return model
    model = clone(model)
    inputs = {i.name: i for i in real_inputs(model)}
    for name, sizes in input_shapes.items():
        if name not in inputs:
            raise MetaInferError(
                f"model.input_shapes names input '{name}', but the model's inputs are "
                f"{sorted(inputs)}; use one of those names."
            )
        if not all(s is None or isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sizes):
            raise MetaInferError(
                f"model.input_shapes gives input '{name}' the shape {list(sizes)}; every size must be "
                "a positive integer, e.g. [1, 3, 224, 224]."
            )
        tensor_type = inputs[name].type.tensor_type
        dims = tensor_type.shape.dim
        if tensor_type.HasField("shape") and len(dims) != len(sizes):
            raise MetaInferError(
                f"model.input_shapes gives input '{name}' rank {len(sizes)} ({list(sizes)}), but the "
                f"model declares rank {len(dims)} ({show_dims(dims)}); give exactly {len(dims)} sizes."
            )
        for axis, (dim, size) in enumerate(zip(dims, sizes)):
            if size is not None and dim.HasField("dim_value") and dim.dim_value != size:
                raise MetaInferError(
                    f"model.input_shapes gives input '{name}' size {size} on axis {axis}, but the model "
                    f"fixes that axis to {dim.dim_value} ({show_dims(dims)}); only symbolic axes can be bound."
                )
        symbols = [d.dim_param if d.HasField("dim_param") else None for d in dims]
        tensor_type.shape.Clear()
        for k, size in enumerate(sizes):
            dim = tensor_type.shape.dim.add()
            if size is not None:
                dim.dim_value = size
            elif k < len(symbols) and symbols[k]:
                dim.dim_param = symbols[k]
    del model.graph.value_info[:]  # inferred from the old symbolic shapes; inferred again later
    return model


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX shape inference, strict and with data propagation (also runs inside subgraphs)."""
    try:
        return shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as exc:  # InferenceError names the node: "(op_type:Conv, node name: c1): ..."
        raise MetaInferError(
            f"Shape inference found inconsistent tensor types or shapes: {first_line(exc)}. Check that "
            "model.input_shapes matches what the model expects, or re-export the model."
        ) from None


def symbolic_inputs(model: onnx.ModelProto) -> dict[str, Shape]:
    """Every fed input's dims: int when static, the symbol (or '?' when unnamed) when dynamic."""
    shapes = tensor_shapes(model.graph)
    return {
        i.name: [d if d is not None else "?" for d in shapes[i.name]]
        for i in real_inputs(model)
        if shapes.get(i.name) is not None
    }


def unbound_inputs(model: onnx.ModelProto, input_shapes: dict[str, list[int]] | None) -> dict[str, Shape | None]:
    """Fed inputs that stay dynamic once `input_shapes` is bound: their dims (str where symbolic,
    '?' where unknown), or None when even the rank is unknown. Cheap: no inference, no rewrite,
    so a static-shape target can refuse a model before normalize spends time on it."""
    bound = bind_input_shapes(unknown_negative_dims(model), input_shapes)
    dims = tensor_shapes(bound.graph)
    unbound: dict[str, Shape | None] = {}
    for vi in real_inputs(bound):
        shape = dims.get(vi.name)
        if shape is None or not all(isinstance(d, int) for d in shape):
            unbound[vi.name] = None if shape is None else [d if d is not None else "?" for d in shape]
    return unbound


def incomplete_tensors(model: onnx.ModelProto) -> list[str]:
    """Main-graph tensors (node outputs, graph outputs) with no dtype or rank after inference."""
    graph = model.graph
    types = {vi.name: vi.type for vi in [*graph.value_info, *graph.input, *graph.output]}
    weights = {t.name for t in graph.initializer}
    names = [o for node in graph.node for o in node.output if o] + [o.name for o in graph.output]
    return list(dict.fromkeys(n for n in names if n not in weights and _missing(types.get(n))))


def fill_from_run(model: onnx.ModelProto, seed: int = 0, runs: int = 3,
                  feeds: list[dict[str, np.ndarray]] | None = None) -> tuple[onnx.ModelProto, list[str]]:
    """Types ONNX shape inference cannot follow (the outputs of Loop/Scan bodies, contrib-domain
    ops), read off ONNX Runtime runs (run_tensors) and written to value_info. Returns the model
    and the tensors it filled; nothing when the runtime cannot run it."""
    missing = incomplete_tensors(model)
    if not missing:
        return model, []
    seen = run_tensors(model, missing, seed, runs, feeds)
    out = clone(model)
    graph_outputs = {o.name: o for o in out.graph.output}
    filled = []
    for name in missing:
        observed = observed_type(model, [run.get(name) for run in seen])
        if observed is None:
            continue
        if name in graph_outputs:
            graph_outputs[name].type.CopyFrom(observed)
        else:
            out.graph.value_info.append(helper.make_value_info(name, observed))
        filled.append(name)
    return out, filled


def run_tensors(model: onnx.ModelProto, names: list[str], seed: int = 0, runs: int = 3,
                feeds: list[dict[str, np.ndarray]] | None = None) -> list[dict[str, np.ndarray]]:
    """The values of main-graph tensors `names` in ONNX Runtime runs (no graph optimization): on
    the user's `feeds` (the first `runs` of them) when given, else on seeded random inputs. One
    dict per run; none when the runtime cannot run the model."""
    probe = clone(model)
    outputs = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in outputs)
    try:
        import onnxruntime as ort

        session = cpu_session(probe, ort.GraphOptimizationLevel.ORT_DISABLE_ALL, threads=0)
        got = [o.name for o in session.get_outputs()]
        wanted = {i.name for i in session.get_inputs()}
        samples = [{k: v for k, v in f.items() if k in wanted} for f in feeds[:runs]] if feeds else \
            [random_feeds(model, seed + k) for k in range(runs)]
        return [dict(zip(got, session.run(None, sample))) for sample in samples]
    except Exception:  # noqa: BLE001 - the callers' checks name the tensor and what to do
        return []


def observed_type(model: onnx.ModelProto, values: list) -> onnx.TypeProto | None:  # type: ignore[type-arg]
    """The tensor type runs of `model` show for one tensor (`values`, one per run): its sizes
    where the inputs are static and every run agrees, else only its rank (a data-dependent trip
    count, or symbolic inputs: one run's sizes say nothing about another's). None when a run
    lacks it or the runs disagree on dtype or rank."""
    if not values or not all(isinstance(v, np.ndarray) for v in values) \
            or len({(v.dtype, v.ndim) for v in values}) != 1:
        return None
    static = all(isinstance(d, int) for dims in symbolic_inputs(model).values() for d in dims)
    dims = [sizes.pop() if static and len(sizes := {v.shape[a] for v in values}) == 1 else None
            for a in range(values[0].ndim)]
    return helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(values[0].dtype), dims)


def check_complete(model: onnx.ModelProto) -> None:
    """Raise for the first main-graph tensor (inputs, node outputs, outputs) with no dtype or rank."""
    graph = model.graph
    types = {vi.name: vi.type for vi in [*graph.value_info, *graph.input, *graph.output]}
    weights = {t.name for t in graph.initializer}
    tensors = [(i.name, "a graph input") for i in graph.input]
    for node in graph.node:
        origin = f"of node {describe(node)} ({node.op_type})"
        tensors += [(o, f"output {k} {origin}") for k, o in enumerate(node.output) if o]
    tensors += [(o.name, "a graph output") for o in graph.output]
    for name, origin in tensors:
        missing = None if name in weights else _missing(types.get(name))
        if missing:
            raise MetaInferError(
                f"Tensor '{name}' ({origin}) has an unknown {missing} after shape inference, so the "
                "normalized model is incomplete; bind the model's dynamic inputs with "
                "model.input_shapes, or replace the op that ONNX shape inference cannot follow."
            )


def _missing(type_proto: onnx.TypeProto | None) -> str | None:
    if type_proto is None or not type_proto.HasField("tensor_type"):
        # sequences / maps / optionals carry their own element types; only tensors need a rank
        return "dtype and rank" if type_proto is None or not type_proto.WhichOneof("value") else None
    if type_proto.tensor_type.elem_type == onnx.TensorProto.UNDEFINED:
        return "dtype"
    return None if type_proto.tensor_type.HasField("shape") else "rank"


def show_dims(dims) -> str:  # type: ignore[no-untyped-def]
    return "[" + ", ".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims) + "]"
