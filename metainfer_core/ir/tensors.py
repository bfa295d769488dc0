"""Concrete tensor facts (dtype, shape, size) for every tensor of a model's main graph.

Shapes come from ONNX shape inference. A graph that keeps symbolic input dims (it serves a range
of shapes) carries the sizes it is tuned at in its metadata (`TUNED_SHAPES`): analysis, costs and
random inputs read its tensors at those sizes. Symbolic dims with no tuned size count as 1."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import json

import numpy as np
import onnx
from onnx import helper

from metainfer_core.ir import constant_folding

TUNED_SHAPES = "metainfer.tuned_shapes"    # metadata key: {input: [sizes]} the graph is tuned at


def tuned_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """{input: sizes} the model's symbolic input dims are tuned at (empty when none recorded)."""
    raw = next((p.value for p in model.metadata_props if p.key == TUNED_SHAPES), None)
    return json.loads(raw) if raw else {}


def set_tuned_shapes(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> onnx.ModelProto:
    """Record in place the sizes `model`'s symbolic input dims are tuned at; returns `model`."""
    keep = [p for p in model.metadata_props if p.key != TUNED_SHAPES]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    if shapes:
        model.metadata_props.add(key=TUNED_SHAPES, value=json.dumps({k: [int(d) for d in v] for k, v in shapes.items()}))
    return model


def carry_tuned_shapes(source: onnx.ModelProto, model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` (a rewrite of `source` that may have dropped its metadata) with source's tuned sizes."""
    shapes = tuned_shapes(source)
    return set_tuned_shapes(model, shapes) if shapes and tuned_shapes(model) != shapes else model


def tuned_view(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` itself when it records no tuned sizes, else a copy whose symbolic input dims are
    set to them (what shape inference reads to give every tensor concrete sizes)."""
    shapes = tuned_shapes(model)
    if not shapes:
        return model
    view = onnx.ModelProto()
    view.CopyFrom(model)
    for vi in view.graph.input:
        _set_sizes(vi, shapes.get(vi.name))
    return view


def _set_sizes(vi: onnx.ValueInfoProto, sizes: list[int] | None) -> None:
    """Give `vi`'s symbolic (or unknown) dims the sizes `sizes` lists, in place."""
    if sizes is None or not vi.type.tensor_type.HasField("shape") or len(vi.type.tensor_type.shape.dim) != len(sizes):
        return
    for dim, size in zip(vi.type.tensor_type.shape.dim, sizes):
        if not (dim.HasField("dim_value") and dim.dim_value > 0):
            dim.Clear()
            dim.dim_value = size


# ONNX Runtime's own log lines (warnings about the model, "[E:onnxruntime:...] Non-zero status
# code" when a run fails) are not ours to print: the failure reaches the caller as an exception
# whose text says the same. Severity 3 (ERROR) still prints the error lines, so sessions log
# only fatal ones.
ORT_LOG_SEVERITY = 4


def quiet_session_options(**settings):  # type: ignore[no-untyped-def]
    """onnxruntime.SessionOptions that keep ONNX Runtime's C++ log off the terminal, with the
    given attributes set (e.g. graph_optimization_level=..., intra_op_num_threads=1)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = ORT_LOG_SEVERITY
    for key, value in settings.items():
        setattr(options, key, value)
    return options


@dataclass(frozen=True)
class TensorInfo:
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


def _dims(type_proto: onnx.TypeProto) -> tuple[int, ...] | None:
    if not type_proto.tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in type_proto.tensor_type.shape.dim)


def tensor_infos(model: onnx.ModelProto) -> dict[str, TensorInfo]:
    """Name -> TensorInfo for inputs, initializers, node outputs (after shape inference)."""
    view = tuned_view(model)
    inferred = onnx.shape_inference.infer_shapes(view, data_prop=True)
    for _ in range(FOLD_ROUNDS if view is not model else 0):
        if not _unknown_dims(inferred):
            break
        # sizes computed by shape arithmetic ONNX inference does not follow (Range, ...): folded at
        # the tuned sizes, as a graph bound at them would have been by normalize
        view, folded = constant_folding.run(view)
        if not folded:
            break
        inferred = onnx.shape_inference.infer_shapes(view, data_prop=True)
    g = inferred.graph
    out: dict[str, TensorInfo] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or tt.elem_type == 0:
            continue
        dims = _dims(vi.type)
        if dims is not None:
            out[vi.name] = TensorInfo(np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)), dims)
    for init in g.initializer:
        out[init.name] = TensorInfo(np.dtype(helper.tensor_dtype_to_np_dtype(init.data_type)), tuple(init.dims))
    return out


FOLD_ROUNDS = 3


def _unknown_dims(model: onnx.ModelProto) -> bool:
    """A main-graph tensor whose inferred shape has a dim with no size."""
    return any(vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")
               and any(not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)
               for vi in [*model.graph.value_info, *model.graph.output])


def input_feeds_spec(model: onnx.ModelProto, shapes: dict[str, list[int]] | None = None) -> dict[str, TensorInfo]:
    """The graph inputs a caller must feed (initializers excluded), as declared (shape inference
    never changes a graph input), symbolic dims at `shapes`' sizes, else their tuned sizes, else 1."""
    inits = {i.name for i in model.graph.initializer}
    sizes = {**tuned_shapes(model), **(shapes or {})}
    spec: dict[str, TensorInfo] = {}
    for declared in model.graph.input:
        if declared.name in inits:
            continue
        vi = onnx.ValueInfoProto()
        vi.CopyFrom(declared)
        _set_sizes(vi, sizes.get(vi.name))
        dims = _dims(vi.type) if vi.type.HasField("tensor_type") else None
        if dims is None or vi.type.tensor_type.elem_type == 0:
            raise ValueError(f"input {vi.name}: the model declares no tensor dtype and shape for it")
        spec[vi.name] = TensorInfo(np.dtype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)), dims)
    return spec


# --- integer inputs: the values the graph can take -------------------------------------------

DEFAULT_INT_RANGE = (0, 4)   # small: valid as most indices and counts
_PASS_THROUGH = {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Expand", "Transpose"}
_INDEX_OPS = {"Gather": 1, "GatherElements": 1}      # op -> the input slot holding indices
_COMPARE = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor", "Where"}
_SHAPE_SLOTS = {("Reshape", 1), ("Expand", 1), ("Tile", 1), ("ConstantOfShape", 0), ("Range", 0), ("Range", 1),
                ("Range", 2), ("Slice", 1), ("Slice", 2), ("Slice", 3), ("Slice", 4), ("Pad", 1), ("TopK", 1),
                ("Resize", 3), ("Upsample", 1), ("OneHot", 1), ("Split", 1), ("Squeeze", 1), ("Unsqueeze", 1)}


@dataclass(frozen=True)
class IntRange:
    low: int
    high: int       # exclusive
    why: str        # what in the graph set it, for messages

    def __str__(self) -> str:
        return f"[{self.low}, {self.high})"


def integer_input_ranges(model: onnx.ModelProto) -> dict[str, IntRange]:
    """Fed integer input -> the range random values for it are drawn from, as the graph tells:
    an input that indexes a Gather (directly or through Cast/Unsqueeze/Reshape/Flatten/...)
    stays within [0, rows) of the data it indexes (the smallest table where it indexes
    several); one compared with constants (a mask, a type id) in [0, 2); one used as a shape,
    a count or slice bounds in [1, 4); any other in DEFAULT_INT_RANGE."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    fed = [vi for vi in g.input if vi.name not in inits and vi.type.HasField("tensor_type")
           and np.dtype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type or 1)).kind in "iu"]
    if not fed:
        return {}
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = defaultdict(list)
    for node in g.node:
        for slot, name in enumerate(node.input):
            consumers[name].append((node, slot))
    constants = inits | {o for n in g.node if n.op_type == "Constant" for o in n.output}
    shapes: dict[str, list[int | None]] | None = None

    def rows(node: onnx.NodeProto) -> int | None:
        nonlocal shapes
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if shapes is None:
            shapes = _declared_shapes(model)
        dims = shapes.get(node.input[0])
        if dims is None or not -len(dims) <= axis < len(dims):
            return None
        size = dims[axis]
        return size if isinstance(size, int) and size > 0 else None

    out: dict[str, IntRange] = {}
    for vi in fed:
        table, compared, shape_like, unknown_table = None, False, False, False
        seen, stack = {vi.name}, [vi.name]
        while stack:
            tensor = stack.pop()
            for node, slot in consumers.get(tensor, []):
                if node.op_type in _PASS_THROUGH and slot == 0:
                    for o in node.output[:1]:
                        if o and o not in seen:
                            seen.add(o)
                            stack.append(o)
                elif _INDEX_OPS.get(node.op_type) == slot:
                    size = rows(node)
                    if size is None:
                        unknown_table = True
                    else:
                        table = size if table is None else min(table, size)
                elif node.op_type in _COMPARE and any(i in constants for i in node.input if i != tensor):
                    compared = True
                elif (node.op_type, slot) in _SHAPE_SLOTS:
                    shape_like = True
        if table is not None:
            high = min(table, 2) if compared else table
            out[vi.name] = IntRange(0, high, f"indices of a Gather over {table} rows")
        elif compared:
            out[vi.name] = IntRange(0, 2, "compared with constants")
        elif shape_like:
            out[vi.name] = IntRange(1, 4, "used as a shape or count")
        else:
            why = "indices of a Gather whose table size is unknown" if unknown_table else "no use that bounds it"
            out[vi.name] = IntRange(*DEFAULT_INT_RANGE, why)
    return out


def _declared_shapes(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    """Static dims of the main graph's tensors: initializers, declared value_info, and ONNX shape
    inference (lenient: a model it cannot follow keeps what is declared)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - declared shapes only
        inferred = model
    g = inferred.graph
    out: dict[str, list[int | None]] = {}
    for vi in [*g.input, *g.value_info, *g.output]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
    for node in g.node:
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                out[node.output[0]] = list(value.dims)
    out.update({t.name: list(t.dims) for t in g.initializer})
    return out


def random_integers(rng: np.random.Generator, shape, dtype: np.dtype, span: IntRange | None):  # type: ignore[no-untyped-def]
    low, high = (span.low, span.high) if span is not None else DEFAULT_INT_RANGE
    info = np.iinfo(dtype)
    low, high = max(low, int(info.min)), min(high, int(info.max) + 1)
    return rng.integers(low, max(high, low + 1), size=shape).astype(dtype)


def random_feeds(model: onnx.ModelProto, seed: int = 0, shapes: dict[str, list[int]] | None = None
                 ) -> dict[str, np.ndarray]:
    """Seeded random inputs: normal floats, integers within what the graph allows
    (integer_input_ranges), random booleans; at the tuned sizes, or `shapes` where given."""
    rng = np.random.default_rng(seed)
    feeds = {}
    spec = input_feeds_spec(model, shapes)
    ranges = integer_input_ranges(model) if any(i.dtype.kind in "iu" for i in spec.values()) else {}
    for name, info in spec.items():
        if info.dtype.kind == "f":
            feeds[name] = rng.standard_normal(info.shape).astype(info.dtype)
        elif info.dtype.kind in "iu":
            feeds[name] = random_integers(rng, info.shape, info.dtype, ranges.get(name))
        elif info.dtype.kind == "b":
            feeds[name] = rng.integers(0, 2, size=info.shape).astype(bool)
        else:
            raise ValueError(f"input {name}: cannot generate random data of dtype {info.dtype}")
    return feeds
