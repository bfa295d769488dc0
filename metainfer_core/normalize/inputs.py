"""The user's input samples (data.inputs: an .npz with one array per model input, keyed by the
input's name, first axis the samples), checked against the model's inputs, so every stage that
runs the model, normalize included, runs it on real values.

Samples of different shapes (text of several lengths, images of several widths) come in groups,
one shape each: arrays keyed `<input>/<group>` (`ids/short`, `ids/long`; labels `labels/short`),
every input with the same groups and, within a group, the same number of samples."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from metainfer_core.errors import MetaInferError
from metainfer_core.ir.tensors import input_feeds_spec
from metainfer_core.normalize.shapes import real_inputs

Feeds = dict[str, np.ndarray]


def load_samples(path: str) -> dict[str, np.ndarray]:
    """The .npz's arrays by name, refused (MetaInferError) when they cannot serve as samples."""
    samples, problem = _read(path)
    if problem:
        raise MetaInferError(problem)
    return samples


def samples_problem(path: str) -> str | None:
    """Why data.inputs=`path` cannot serve as validation and calibration samples, or None: not
    an .npz (an .npy holds one unnamed array), no array, an array of no real numbers (complex:
    its imaginary part would be dropped; strings, objects), NaN or Inf values, no sample, or a
    sample of size 0. Checked by the settings (before a run starts) with what the model needs
    (names, dtypes, shapes) left to sample_feeds; remembered per file version."""
    p = Path(path)
    try:
        st = p.stat()
        key = (str(p.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    if key is not None and key in _CHECKED:
        return _CHECKED[key]
    problem = _read(path)[1]
    if key is not None:
        _CHECKED[key] = problem
    return problem


_CHECKED: dict[tuple[str, int, int], str | None] = {}
_SAVE = "numpy.savez(path, <input name>=<array of samples>, ...)"


def _read(path: str) -> tuple[dict[str, np.ndarray], str | None]:
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except OSError as exc:
        return {}, f"data.inputs={path} cannot be read ({exc}); give a readable .npz saved with {_SAVE}."
    if not magic.startswith(b"PK") and magic != b"\x93NUMPY":   # neither a zip (.npz) nor an .npy
        return {}, f"data.inputs={path} is not an .npz file (not a zip archive of arrays); save the samples with {_SAVE}."
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - a zip/pickle/format error: say which file and what it must be
        return {}, f"data.inputs={path} cannot be read as an .npz ({exc}); save it with {_SAVE}."
    if isinstance(loaded, np.ndarray):
        return {}, (f"data.inputs={path} is an .npy file (one unnamed array of shape {list(loaded.shape)}), not an "
                    f".npz with one array per model input keyed by the input's name; save the samples with {_SAVE} "
                    "and pass that .npz.")
    try:
        with loaded as data:
            samples = {k: np.asarray(data[k]) for k in data.files}
    except Exception as exc:  # noqa: BLE001 - a member that does not load (object arrays need pickle)
        return {}, f"data.inputs={path} cannot be read as an .npz ({exc}); save it with {_SAVE} (numeric arrays)."
    if not samples:
        return samples, f"data.inputs={path} holds no array; save one array per model input with {_SAVE}."
    for k, arr in samples.items():
        problem = _array_problem(arr)
        if problem:
            return samples, f"data.inputs={path}: array {k!r} {problem}."
    return samples, None


def _array_problem(arr: np.ndarray) -> str | None:
    shape = list(arr.shape)
    if arr.dtype.kind == "c":
        return (f"is complex ({arr.dtype}, shape {shape}); model inputs are real and its imaginary part would be "
                "dropped: save real arrays (e.g. the real and imaginary parts as the model takes them, or "
                "numpy.real(a) if the imaginary part is meant to be zero)")
    if arr.dtype.kind not in "biuf":
        return f"has dtype {arr.dtype}, not numbers; save numeric arrays (float, integer or bool) of samples"
    if arr.ndim >= 1 and shape[0] == 0:
        return (f"holds no sample (shape {shape}: its first axis, the sample index, is empty); give at least one "
                "sample per model input")
    if arr.ndim >= 2 and arr.size == 0:
        return (f"has shape {shape}: each sample is of size 0 (a dim is 0), which no model can run on; give "
                "samples whose every dim is at least 1")
    if arr.dtype.kind == "f":
        nan, inf = np.isnan(arr), np.isinf(arr)
        if nan.any() or inf.any():
            bad = nan | inf
            first = int(np.argwhere(bad)[0][0]) if arr.ndim >= 1 else 0
            samples = int(bad.reshape(len(arr), -1).any(axis=1).sum()) if arr.ndim >= 1 else 1
            return (f"holds {int(nan.sum())} NaN and {int(inf.sum())} Inf value(s) in {samples} sample(s), the first "
                    f"at sample {first}; accuracy against the fp32 reference cannot be measured on them: replace or "
                    "drop those samples")
    return None


GROUP = "/"    # `<input>/<group>`: one group of samples of one shape


def sample_groups(samples: dict[str, np.ndarray], path: str) -> dict[str, dict[str, np.ndarray]]:
    """{group: {input: its samples}}; one group "" when no key names a group. A malformed file
    (an input both plain and grouped, groups that differ between inputs, a group whose inputs
    hold different sample counts) is refused (MetaInferError)."""
    grouped = {k for k in samples if GROUP in k}
    if not grouped:
        return {"": samples}
    plain = {k for k in samples if GROUP not in k}
    both = sorted(plain & {k.split(GROUP, 1)[0] for k in grouped})
    if both:
        raise MetaInferError(f"data.inputs={path} holds {both} both as one array and in groups ('<input>/<group>'); "
                             "keep one form per input: groups for samples of several shapes, one group per shape.")
    groups: dict[str, dict[str, np.ndarray]] = {}
    for key in sorted(grouped):
        name, group = key.split(GROUP, 1)
        groups.setdefault(group, {})[name] = samples[key]
    names = {g: sorted(v) for g, v in groups.items()}
    if len({tuple(v) for v in names.values()}) > 1:
        listed = "; ".join(f"{g}: {v}" for g, v in names.items())
        raise MetaInferError(f"data.inputs={path}: its groups do not hold the same arrays ({listed}); every group "
                             "needs one array per model input ('<input>/<group>'), with the labels, if any, as "
                             "'labels/<group>'.")
    for g, arrays in groups.items():
        counts = {k: len(v) for k, v in arrays.items() if np.ndim(v) >= 1}
        if len(set(counts.values())) > 1:
            raise MetaInferError(f"data.inputs={path}: group {g!r} holds different numbers of samples per array "
                                 f"({counts}); each array of a group holds the same samples, first axis the sample.")
    return groups


def fit_to_shape(arr: np.ndarray, shape: list[int]) -> np.ndarray:
    """A real sample brought to another shape of the range: cropped along an axis where `shape`
    is shorter, repeated (tiled) where it is longer. Its values stay real (audio stays in its
    range, ids in the vocabulary, a mask a mask), which random values of another distribution
    are not: an int8 plan calibrated on real values would be judged on values it clips."""
    out = np.asarray(arr)
    for axis, size in enumerate(shape):
        if out.shape[axis] != size:
            out = np.take(out, np.arange(size) % out.shape[axis], axis=axis)
    return out


def fit_samples(model: onnx.ModelProto, samples: dict[str, np.ndarray], shapes: dict[str, list[int]]
                ) -> tuple[dict[str, np.ndarray], list[str]]:
    """`samples` (first axis the sample) brought to `shapes` along the axes the model leaves
    symbolic (fit_to_shape: cropped or tiled), as a static-shape target's bucket needs them; a
    mismatch on a static axis is left for sample_feeds to refuse. Returns (the samples, the
    inputs fitted, in words)."""
    declared = {vi.name: [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                          for d in vi.type.tensor_type.shape.dim] for vi in real_inputs(model)}
    out, said = dict(samples), []
    for name, shape in shapes.items():
        arr, dims = samples.get(name), declared.get(name)
        if arr is None or dims is None or arr.ndim != len(shape) + 1 or list(arr.shape[1:]) == list(shape) \
                or any(d is not None and d != n for d, n in zip(dims, arr.shape[1:])):
            continue
        out[name] = np.stack([fit_to_shape(a, shape) for a in arr])
        said.append(f"{name} {list(arr.shape[1:])} -> {list(shape)}")
    return out, said


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


def sample_feeds(model: onnx.ModelProto, samples: dict[str, np.ndarray], path: str, labels_key: str,
                 shapes: dict[str, list[int]] | None = None) -> tuple[list[Feeds], np.ndarray | None]:
    """One feed per sample, each array cast to its input's dtype and checked against its
    (bound or tuned, else `shapes`') shape; plus the labels when the .npz has them."""
    spec = input_feeds_spec(model, shapes)
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
