"""Numerical equivalence of two models, both run by ONNX Runtime (CPU): on the user's inputs
(data.inputs) when given, else on seeded random inputs that respect what the graph tells about
its integer inputs (metainfer_core.ir.tensors.integer_input_ranges)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from metainfer_core.errors import MetaInferError
from metainfer_core.ir.runs import cpu_session
from metainfer_core.ir.tensors import IntRange, integer_input_ranges, random_integers, tuned_shapes
from metainfer_core.normalize.messages import first_line
from metainfer_core.normalize.shapes import real_inputs

Feeds = dict[str, np.ndarray]
MAX_SAMPLES = 4     # real samples the check runs (a few cover the paths; all would cost a run each)


def random_inputs(model: onnx.ModelProto, seed: int) -> Feeds:
    """One array per fed input: symbolic dims at their tuned sizes (else 1); floats standard normal, integers
    within what the graph allows (indices of a Gather within its table, compared values in
    [0, 2), others in [0, 4)), booleans random."""
    rng = np.random.default_rng(seed)
    feeds: Feeds = {}
    ranges: dict[str, IntRange] | None = None
    for vi in real_inputs(model):
        tensor_type = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise MetaInferError(
                f"Input '{vi.name}' is not a tensor, so no random value can be made for the "
                "equivalence check; normalize supports tensor inputs only: re-export with tensor inputs."
            )
        tuned = tuned_shapes(model).get(vi.name)
        dims = [d.dim_value if d.HasField("dim_value") else tuned[k] if tuned and len(tuned) == len(
            tensor_type.shape.dim) else 1 for k, d in enumerate(tensor_type.shape.dim)]
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        if dtype == np.bool_:
            feeds[vi.name] = np.asarray(rng.random(dims) < 0.5)
        elif np.issubdtype(dtype, np.integer):
            ranges = integer_input_ranges(model) if ranges is None else ranges
            feeds[vi.name] = random_integers(rng, dims, dtype, ranges.get(vi.name))
        elif np.issubdtype(dtype, np.floating):
            feeds[vi.name] = rng.standard_normal(dims).astype(dtype)
        else:
            raise MetaInferError(
                f"Input '{vi.name}' has dtype {dtype}, for which no random value can be made for the "
                "equivalence check; normalize supports numeric and bool inputs only."
            )
    return feeds


def integer_inputs_note(model: onnx.ModelProto) -> str:
    """' Integer input(s) ... were fed random values ...' for an error about a run on random
    inputs; '' when the model has no integer input."""
    ranges = integer_input_ranges(model)
    if not ranges:
        return ""
    listed = ", ".join(f"'{name}' in {span} ({span.why})" for name, span in ranges.items())
    return (f" Integer input(s) {listed} were fed random values; if they must hold real ids, lengths or "
            "positions, pass real values with data.inputs=<file.npz> (one array per input, keyed by its name, "
            "first axis the samples).")


def run_model(model: onnx.ModelProto, feeds: Feeds, label: str, real: bool = False) -> dict[str, np.ndarray]:
    """All outputs of `model` on `feeds`, by name; `label` says which model, for errors; `real`:
    the feeds are the user's (data.inputs), not random."""
    try:
        session = cpu_session(model, threads=0)
        wanted = {i.name for i in session.get_inputs()}
        values = session.run(None, {k: v for k, v in feeds.items() if k in wanted})
    except Exception as exc:  # ORT raises its own Fail/InvalidGraph/NotImplemented types
        if real:
            raise MetaInferError(
                f"ONNX Runtime could not run the {label} model for the equivalence check on the inputs of "
                f"data.inputs ({first_line(exc)}); check that the .npz holds what the model expects (its inputs' "
                "dtypes, shapes and value ranges), or that ONNX Runtime has every op of the model."
            ) from None
        raise MetaInferError(
            f"ONNX Runtime could not run the {label} model for the equivalence check ({first_line(exc)}); "
            "the model needs inputs random values cannot stand for, or an op ONNX Runtime lacks. Symbolic "
            "dims are run at their tuned sizes (model.input_shapes, else the samples', else the middle of "
            "model.shape_range, else 1): if the model needs other sizes, give them with "
            "model.input_shapes={<input>:[dims]}." + integer_inputs_note(model)
        ) from None
    return {o.name: v for o, v in zip(session.get_outputs(), values)}


def max_abs_errors(
    reference: onnx.ModelProto, candidate: onnx.ModelProto, rtol: float, atol: float, seed: int,
    feeds: list[Feeds] | None = None, outputs: list[dict[str, np.ndarray]] | None = None,
) -> dict[str, float]:
    """Max |reference - candidate| per output over the samples (the user's `feeds`, at most
    MAX_SAMPLES of them, else one seeded random input); raises when an output is not allclose.
    `outputs`, when given, receives the candidate's outputs per sample."""
    real = bool(feeds)
    samples = list(feeds[:MAX_SAMPLES]) if feeds else [random_inputs(reference, seed)]
    errors: dict[str, float] = {}
    for sample in samples:
        expected = run_model(reference, sample, "original", real)
        actual = run_model(candidate, sample, "normalized", real)
        if outputs is not None:
            outputs.append(actual)
        for name, err in _compare(expected, actual, rtol, atol).items():
            errors[name] = max(errors.get(name, 0.0), err)
    return errors


def _compare(expected: dict[str, np.ndarray], actual: dict[str, np.ndarray], rtol: float, atol: float
             ) -> dict[str, float]:
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
