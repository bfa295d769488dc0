"""Concrete tensor facts (dtype, shape, size) for every tensor of a model's main graph.

Shapes come from ONNX shape inference; symbolic dims that are still unbound count as 1, the
deployment size used for profiling and verification when the user binds nothing."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper


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
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
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


def input_feeds_spec(model: onnx.ModelProto) -> dict[str, TensorInfo]:
    """The graph inputs a caller must feed (initializers excluded)."""
    inits = {i.name for i in model.graph.initializer}
    infos = tensor_infos(model)
    return {i.name: infos[i.name] for i in model.graph.input if i.name not in inits}


def random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs: normal floats, small non-negative integers, random booleans."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, info in input_feeds_spec(model).items():
        if info.dtype.kind == "f":
            feeds[name] = rng.standard_normal(info.shape).astype(info.dtype)
        elif info.dtype.kind in "iu":
            feeds[name] = rng.integers(0, 4, size=info.shape).astype(info.dtype)
        elif info.dtype.kind == "b":
            feeds[name] = rng.integers(0, 2, size=info.shape).astype(bool)
        else:
            raise ValueError(f"input {name}: cannot generate random data of dtype {info.dtype}")
    return feeds
