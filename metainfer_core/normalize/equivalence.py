"""Numerical equivalence of two models on seeded random inputs, both run by ONNX Runtime (CPU)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from metainfer_core.errors import MetaInferError
from metainfer_core.normalize.messages import first_line
from metainfer_core.normalize.shapes import real_inputs


def random_inputs(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    """One array per fed input: unbound symbolic dims set to 1; floats standard normal, integers in
    [0, 4) (small, so they stay valid as indices or counts), booleans random."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for vi in real_inputs(model):
        tensor_type = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise MetaInferError(
                f"Input '{vi.name}' is not a tensor, so no random value can be made for the "
                "equivalence check; normalize supports tensor inputs only: re-export with tensor inputs."
            )
        dims = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor_type.shape.dim]
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        if dtype == np.bool_:
            feeds[vi.name] = np.asarray(rng.random(dims) < 0.5)
        elif np.issubdtype(dtype, np.integer):
            feeds[vi.name] = rng.integers(0, 4, dims).astype(dtype)
        elif np.issubdtype(dtype, np.floating):
            feeds[vi.name] = rng.standard_normal(dims).astype(dtype)
        else:
            raise MetaInferError(
                f"Input '{vi.name}' has dtype {dtype}, for which no random value can be made for the "
                "equivalence check; normalize supports numeric and bool inputs only."
            )
    return feeds


def run_model(model: onnx.ModelProto, feeds: dict[str, np.ndarray], label: str) -> dict[str, np.ndarray]:
    """All outputs of `model` on `feeds`, by name; `label` says which model, for errors."""
    options = ort.SessionOptions()
    options.log_severity_level = 3  # warnings about the model are not ours to print
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        wanted = {i.name for i in session.get_inputs()}
        values = session.run(None, {k: v for k, v in feeds.items() if k in wanted})
    except Exception as exc:  # ORT raises its own Fail/InvalidGraph/NotImplemented types
        raise MetaInferError(
            f"ONNX Runtime could not run the {label} model for the equivalence check ({first_line(exc)}); "
            "the model needs inputs random values cannot stand for, or an op ONNX Runtime lacks. Unbound "
            "symbolic dims are run at size 1: if the model needs other sizes, bind them with "
            "model.input_shapes={<input>:[dims]}."
        ) from None
    return {o.name: v for o, v in zip(session.get_outputs(), values)}


def max_abs_errors(
    reference: onnx.ModelProto, candidate: onnx.ModelProto, rtol: float, atol: float, seed: int
) -> dict[str, float]:
    """Max |reference - candidate| per output; raises when an output is not allclose."""
    feeds = random_inputs(reference, seed)
    expected = run_model(reference, feeds, "original")
    actual = run_model(candidate, feeds, "normalized")
    errors: dict[str, float] = {}
    for name, want in expected.items():
        got = np.asarray(actual.get(name))
        want = np.asarray(want)
        if got.shape != want.shape:
            raise MetaInferError(
                f"Normalization changed output '{name}' from shape {list(want.shape)} to "
                f"{list(got.shape)}; this is a normalize bug: report it with the model."
            )
        if np.issubdtype(want.dtype, np.number):
            diff = np.abs(want.astype(np.float64) - got.astype(np.float64))
            errors[name] = float(np.nanmax(diff)) if diff.size and not np.all(np.isnan(diff)) else 0.0
            same = np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        else:
            same = bool(np.array_equal(got, want))
            errors[name] = 0.0 if same else float("inf")
        if not same:
            raise MetaInferError(
                f"The normalized model's output '{name}' differs from the original's (max abs error "
                f"{errors[name]:.3g}, rtol={rtol}, atol={atol}); this is a normalize bug: report it "
                "with the model, or loosen rtol/atol if the difference is rounding."
            )
    return errors
