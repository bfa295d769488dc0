"""The user's input samples (data.inputs: an .npz with one array per model input, keyed by the
input's name, first axis the samples), checked against the model's inputs, so every stage that
runs the model, normalize included, runs it on real values."""
from __future__ import annotations

import numpy as np
import onnx

from metainfer_core.errors import MetaInferError
from metainfer_core.normalize.shapes import real_inputs
from metainfer_core.tensors import input_feeds_spec

Feeds = dict[str, np.ndarray]


def load_samples(path: str) -> dict[str, np.ndarray]:
    """The .npz's arrays by name."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: np.asarray(data[k]) for k in data.files}
    except Exception as exc:  # noqa: BLE001 - a zip/pickle/format error: say which file and what it must be
        raise MetaInferError(f"data.inputs={path} cannot be read as an .npz ({exc}); save it with "
                             "numpy.savez(path, <input name>=<array of samples>, ...).") from None


def sample_shapes(model: onnx.ModelProto, samples: dict[str, np.ndarray],
                  input_shapes: dict[str, list[int]] | None) -> tuple[dict[str, list[int]] | None, dict[str, list[int]]]:
    """`input_shapes` plus, for every fed input with a symbolic or unknown dim that it does not
    bind, the shape of that input's first sample (when the ranks agree): the samples are what
    the model will run on. Returns (the shapes to bind, the ones taken from the samples)."""
    given = dict(input_shapes or {})
    taken: dict[str, list[int]] = {}
    for vi in real_inputs(model):
        if vi.name in given or vi.name not in samples or not vi.type.HasField("tensor_type"):
            continue
        tensor_type = vi.type.tensor_type
        arr = samples[vi.name]
        if not tensor_type.HasField("shape") or arr.ndim < 1:
            continue
        dims = tensor_type.shape.dim
        if all(d.HasField("dim_value") and d.dim_value > 0 for d in dims) or arr.ndim - 1 != len(dims):
            continue
        shape = [int(x) for x in arr.shape[1:]]
        if all(not (d.HasField("dim_value") and d.dim_value > 0) or d.dim_value == x for d, x in zip(dims, shape)) \
                and all(x >= 1 for x in shape):
            taken[vi.name] = shape
    given.update(taken)
    return (given or None), taken


def sample_feeds(model: onnx.ModelProto, samples: dict[str, np.ndarray], path: str, labels_key: str
                 ) -> tuple[list[Feeds], np.ndarray | None]:
    """One feed per sample, each array cast to its input's dtype and checked against its
    (bound) shape; plus the labels when the .npz has them."""
    spec = input_feeds_spec(model)
    missing = sorted(set(spec) - set(samples))
    if missing:
        raise MetaInferError(f"data.inputs={path} has no array for model input(s) {missing} "
                             f"(it has {sorted(samples)}). Save one array per input, keyed by the input's name.")
    scalar = sorted(k for k in spec if samples[k].ndim == 0)
    if scalar:
        raise MetaInferError(f"data.inputs={path}: the array(s) for {scalar} are scalars; each array's first axis "
                             "holds the samples (an input of shape [1, 8] takes an array of shape [n, 1, 8]).")
    n = min(len(samples[k]) for k in spec)
    if n == 0:
        raise MetaInferError(f"data.inputs={path} holds no sample (an array's first axis is empty).")
    feeds = []
    for i in range(n):
        feed = {}
        for k, info in spec.items():
            arr = np.asarray(samples[k][i])
            arr = arr.astype(info.dtype)
            if tuple(arr.shape) != info.shape:
                raise MetaInferError(f"data.inputs: sample {i} of input {k!r} has shape {list(arr.shape)}, the model "
                                     f"(after binding) expects {list(info.shape)}. Bind matching sizes with "
                                     f"model.input_shapes or fix the .npz.")
            feed[k] = arr
        feeds.append(feed)
    labels = np.asarray(samples[labels_key])[:n] if labels_key in samples else None
    return feeds, labels
