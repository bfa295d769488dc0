"""Declared shapes are hints: a graph output or value_info whose declared dtype or shape
contradicts what the graph computes (by ONNX shape inference, or where inference cannot follow,
by an ONNX Runtime run) is replaced by the computed one, with a warning naming the tensor, so a
stale declaration never stops a strict check. Exporters write stale ones, whatever way the graph
computes the shape: a text recognizer may declare [1, 'seqlen'] for a [T, 1, C] output reshaped to a target
built from Shape/Gather/Concat arithmetic."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import shape_inference

from metainfer_core.ir.graph_utils import clone, iter_graphs
from metainfer_core.normalize.shapes import observed_type, run_tensors, show_dims, symbolic_inputs

RUNS = 2  # two seeds, so a data-dependent size is not taken for a static one


def reconcile_declared_shapes(model: onnx.ModelProto, seed: int = 0,
                              feeds: list[dict[str, np.ndarray]] | None = None) -> tuple[onnx.ModelProto, list[str]]:
    """Replace every output or value_info (of the main graph and of If/Loop/Scan bodies) whose
    declared type contradicts the computed one (another rank, another static size, another
    dtype). Computed by non-strict inference from the inputs alone (declarations removed); a
    main-graph tensor inference leaves without a shape (or, with static inputs, without a size
    the declaration fixes) is checked against ONNX Runtime runs on `feeds` (else seeded random
    inputs). A dim the computation leaves open keeps its declared symbol or size. Returns the
    model and one warning per tensor replaced."""
    declared = [(k, kind, entries, j, vi) for k, graph in enumerate(iter_graphs(model.graph))
                for kind, entries in (("graph output", "output"), ("value_info", "value_info"))
                for j, vi in enumerate(getattr(graph, entries)) if vi.type.HasField("tensor_type")]
    if not declared:
        return model, []
    computed = _inferred(model)
    if computed is None:
        return model, []  # strict inference later says what is wrong
    source = dict.fromkeys(computed, "the graph computes")
    static = all(isinstance(d, int) for dims in symbolic_inputs(model).values() for d in dims)
    unverified = [vi.name for k, _, _, _, vi in declared if k == 0 and _unverified(vi.type, computed.get(vi.name), static)]
    if unverified:
        runs = run_tensors(model, unverified, seed, RUNS, feeds)
        for name in unverified:
            observed = observed_type(model, [run.get(name) for run in runs]) if runs else None
            if observed is not None:
                computed[name], source[name] = observed, "ONNX Runtime computes"
    out, warnings = None, []
    for k, kind, entries, j, vi in declared:
        want = computed.get(vi.name)
        if want is None or not _contradicts(vi.type, want):
            continue
        out = out or clone(model)
        fixed = _merged(vi.type, want)
        where = kind if k == 0 else f"{kind} of a subgraph"
        warnings.append(f"the declared {_type_text(vi.type)} of {where} '{vi.name}' contradicts what "
                        f"{source[vi.name]} ({_type_text(want)}): replaced by {_type_text(fixed)}")
        getattr(list(iter_graphs(out.graph))[k], entries)[j].type.CopyFrom(fixed)
    return (out or model), warnings


def reconcile_with_run(model: onnx.ModelProto, outputs: list[dict[str, np.ndarray]]) -> tuple[onnx.ModelProto, list[str]]:
    """Graph outputs whose declared rank, static sizes or dtype contradict what ONNX Runtime
    computed on `outputs` (one dict per run) take the run's: its sizes where the inputs are
    static and every run agrees, else its rank. Returns the model and one warning per output."""
    if not outputs:
        return model, []
    out, warnings = None, []
    for k, o in enumerate(model.graph.output):
        seen = observed_type(model, [run.get(o.name) for run in outputs])
        if not o.type.HasField("tensor_type") or seen is None or not _contradicts(o.type, seen):
            continue
        out = out or clone(model)
        fixed = _merged(o.type, seen)
        warnings.append(f"the declared {_type_text(o.type)} of graph output '{o.name}' contradicts what ONNX Runtime "
                        f"computes ({_type_text(seen)}): replaced by {_type_text(fixed)}")
        out.graph.output[k].type.CopyFrom(fixed)
    return (out or model), warnings


def _inferred(model: onnx.ModelProto) -> dict[str, onnx.TypeProto] | None:
    """Tensor types (main graph and bodies) non-strict inference computes with every
    declaration removed."""
    probe = clone(model)
    for graph in iter_graphs(probe.graph):
        del graph.value_info[:]
        for o in graph.output:
            if o.type.HasField("tensor_type"):
                o.type.tensor_type.Clear()
    try:
        inferred = shape_inference.infer_shapes(probe, check_type=False, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - strict inference later reports what is wrong
        return None
    return {vi.name: vi.type for graph in iter_graphs(inferred.graph) for vi in [*graph.value_info, *graph.output]
            if vi.type.HasField("tensor_type")}


def _unverified(declared: onnx.TypeProto, computed: onnx.TypeProto | None, static: bool) -> bool:
    """Inference leaves open what the declaration fixes: no computed shape (a declared one could
    be of another rank), or with static inputs an unknown size where the declaration has one."""
    a = declared.tensor_type
    if not a.HasField("shape"):
        return computed is None or not computed.tensor_type.elem_type
    if computed is None or not computed.tensor_type.HasField("shape"):
        return True
    b = computed.tensor_type.shape.dim
    return static and len(a.shape.dim) == len(b) and any(
        x.HasField("dim_value") and not y.HasField("dim_value") for x, y in zip(a.shape.dim, b))


def _contradicts(declared: onnx.TypeProto, computed: onnx.TypeProto) -> bool:
    a, b = declared.tensor_type, computed.tensor_type
    if a.elem_type and b.elem_type and a.elem_type != b.elem_type:
        return True
    if not a.HasField("shape") or not b.HasField("shape"):
        return False
    if len(a.shape.dim) != len(b.shape.dim):
        return True
    return any(x.HasField("dim_value") and y.HasField("dim_value") and x.dim_value != y.dim_value
               for x, y in zip(a.shape.dim, b.shape.dim))


def _merged(declared: onnx.TypeProto, computed: onnx.TypeProto) -> onnx.TypeProto:
    """The computed type; where the ranks agree, a dim the computation leaves open keeps the
    declared symbol (or size)."""
    fixed = onnx.TypeProto()
    fixed.CopyFrom(computed)
    a, b = declared.tensor_type, fixed.tensor_type
    if not b.elem_type:
        b.elem_type = a.elem_type
    if a.HasField("shape") and b.HasField("shape") and len(a.shape.dim) == len(b.shape.dim):
        for x, y in zip(a.shape.dim, b.shape.dim):
            if not y.HasField("dim_value") and not y.dim_param and (x.HasField("dim_value") or x.dim_param):
                y.CopyFrom(x)
    return fixed


def _type_text(type_proto: onnx.TypeProto) -> str:
    t = type_proto.tensor_type
    dtype = onnx.TensorProto.DataType.Name(t.elem_type).lower() if t.elem_type else "?"
    return f"{dtype} {show_dims(t.shape.dim)}" if t.HasField("shape") else f"{dtype} (rank unknown)"
