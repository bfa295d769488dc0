"""normalize: any loaded ONNX model -> the canonical, shape-complete, equivalent model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx

from metainfer_core.errors import MetaInferError
from metainfer_core.normalize.declared import reconcile_declared_shapes, reconcile_with_run
from metainfer_core.normalize.equivalence import max_abs_errors
from metainfer_core.ir.graph_utils import Shape, clone, topological_sort
from metainfer_core.ir.tensors import carry_tuned_shapes, set_tuned_shapes
from metainfer_core.normalize.opset import default_opset, to_canonical_opset
from metainfer_core.normalize.passes import (
    cancel_transposes,
    constant_folding,
    cse,
    eliminate_identity,
    fold_bias_add,
    fold_conv_bn,
    initializer_inputs,
    layout,
    merge_reshapes,
    name_nodes,
    softmax_axis,
)
from metainfer_core.normalize.shapes import (
    bind_input_shapes,
    check_complete,
    fill_from_run,
    infer_shapes,
    symbolic_inputs,
    unknown_negative_dims,
)

Pass = Callable[[onnx.ModelProto], tuple[onnx.ModelProto, int]]

ORT_MIN_OPSET = 7  # the oldest ai.onnx opset ONNX Runtime has kernels for

# Weights become constants first so every later rewrite can see them; folding runs before the
# pattern rewrites so their constant operands exist; CSE last merges what the others made equal.
NORMALIZE_PASSES: list[tuple[str, Pass]] = [
    ("initializer_inputs", initializer_inputs.run),
    ("eliminate_identity", eliminate_identity.run),
    ("constant_folding", constant_folding.run),
    ("fold_conv_bn", fold_conv_bn.run),
    ("fold_bias_add", fold_bias_add.run),
    ("cancel_transposes", cancel_transposes.run),
    ("merge_reshapes", merge_reshapes.run),
    ("softmax_axis", softmax_axis.run),
    ("layout", layout.run),
    ("cse", cse.run),
]


@dataclass
class NormalizeResult:
    model: onnx.ModelProto
    log: list[dict]  # {"pass", "round", "changes"} per pass run
    nodes_before: int
    nodes_after: int
    opset_from: int
    opset_to: int
    symbolic_dims: dict[str, Shape]  # input -> dims, str where symbolic
    max_abs_err: dict[str, float]  # output -> max |normalized - original|
    warnings: list[str] = field(default_factory=list)  # declared shapes replaced by computed ones, ...
    real_inputs: bool = False  # the equivalence check and shape filling ran on the caller's feeds


def normalize(
    model: onnx.ModelProto,
    input_shapes: dict[str, list[int]] | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    seed: int = 0,
    max_rounds: int = 10,
    feeds: list[dict[str, np.ndarray]] | None = None,
    tuned: dict[str, list[int]] | None = None,
) -> NormalizeResult:
    """Read -1 dims as unknown, bind shapes, replace declared shapes the graph contradicts,
    upgrade the opset, rewrite to a fixed point, sort, check completeness, then check the result
    against the (bound) original: on `feeds` (the user's samples, data.inputs) when given, else
    on seeded random inputs (integers within what the graph allows). `input_shapes` binds
    (None: the axis stays symbolic); `tuned` gives the sizes symbolic dims are tuned at, recorded
    in the result's metadata (ir.tensors.TUNED_SHAPES) and read by every later analysis."""
    bound = bind_input_shapes(unknown_negative_dims(model), input_shapes)
    if tuned:
        bound = set_tuned_shapes(clone(bound) if bound is model else bound, tuned)
    log: list[dict] = []
    warnings: list[str] = []
    bound = _reconciled(bound, seed, feeds, warnings, log, 0)
    work, opset_from = to_canonical_opset(bound)
    work = carry_tuned_shapes(bound, work)
    reference = bound
    if opset_from < ORT_MIN_OPSET:
        # ONNX Runtime has no kernels for these opsets: the equivalence check compares against
        # the model as ONNX's version converter upgraded it, so it checks the passes, not the converter
        reference = work
        log.append({"pass": "equivalence_reference", "round": 0, "changes": 0,
                    "note": f"opset {opset_from} cannot run on ONNX Runtime; compared with its opset "
                            f"{default_opset(work)} conversion"})
    for round_no in range(1, max_rounds + 1):
        work = _strict_inference(work, seed, feeds, warnings, log, round_no)  # passes read value_info
        total = 0
        for name, run in NORMALIZE_PASSES:
            work, changes = run(work)
            log.append({"pass": name, "round": round_no, "changes": changes})
            total += changes
        if total == 0:
            break
    work, renamed = name_nodes.run(topological_sort(work))
    log.append({"pass": "name_nodes", "round": 0, "changes": renamed})
    work = _strict_inference(work, seed, feeds, warnings, log, round_no + 1)
    work, filled = fill_from_run(work, seed, feeds=feeds)
    log.append({"pass": "shapes_from_run", "round": 0, "changes": len(filled), "tensors": filled})
    check_complete(work)
    outputs: list[dict[str, np.ndarray]] = []
    errors = max_abs_errors(reference, work, rtol=rtol, atol=atol, seed=seed, feeds=feeds, outputs=outputs)
    work, run_warnings = reconcile_with_run(work, outputs)
    work = carry_tuned_shapes(bound, work)
    if run_warnings:
        log.append({"pass": "declared_shapes_from_run", "round": 0, "changes": len(run_warnings),
                    "warnings": list(run_warnings)})
    return NormalizeResult(
        model=work,
        log=log,
        nodes_before=len(model.graph.node),
        nodes_after=len(work.graph.node),
        opset_from=opset_from,
        opset_to=default_opset(work),
        symbolic_dims=symbolic_inputs(work),
        max_abs_err=errors,
        warnings=warnings + run_warnings,
        real_inputs=bool(feeds),
    )


def _reconciled(model: onnx.ModelProto, seed: int, feeds: list[dict[str, np.ndarray]] | None,
                warnings: list[str], log: list[dict], round_no: int) -> onnx.ModelProto:
    model, replaced = reconcile_declared_shapes(model, seed, feeds)
    if replaced:
        warnings.extend(replaced)
        log.append({"pass": "declared_shapes", "round": round_no, "changes": len(replaced), "warnings": replaced})
    return model


def _strict_inference(model: onnx.ModelProto, seed: int, feeds: list[dict[str, np.ndarray]] | None,
                      warnings: list[str], log: list[dict], round_no: int) -> onnx.ModelProto:
    """Strict shape inference; where it fails, declarations that the upgraded or rewritten graph
    now shows to be stale (inference follows an LSTM's sequence length only at a newer opset, a
    Reshape target only once folded to a constant) are replaced first and inference run again."""
    try:
        return infer_shapes(model)
    except MetaInferError:
        before = len(warnings)
        model = _reconciled(model, seed, feeds, warnings, log, round_no)
        if len(warnings) == before:
            raise
        return infer_shapes(model)
