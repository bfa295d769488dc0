"""Bring a model to the canonical ai.onnx opset, and refuse ops nothing downstream can run."""

from __future__ import annotations

import onnx
from onnx import helper, version_converter

from metainfer_core.errors import MetaInferError
from metainfer_core.ir.graph_utils import AI_ONNX, describe, iter_graphs
from metainfer_core.normalize.legacy_prelu import keep_channel_slopes
from metainfer_core.normalize.legacy_resize import keep_old_semantics
from metainfer_core.normalize.messages import first_line

CANONICAL_OPSET = 17

# Domains ONNX Runtime has kernels for; ops of any other domain only run if the model defines them.
RUNNABLE_DOMAINS = frozenset(
    {
        "",
        "ai.onnx",
        "ai.onnx.ml",
        "ai.onnx.preview.training",
        "com.microsoft",
        "com.microsoft.experimental",
        "com.microsoft.nchwc",
    }
)


def to_canonical_opset(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """Upgrade the ai.onnx opset to CANONICAL_OPSET; a newer model is kept as it is, since
    downgrading loses ops. Returns the model and the opset it came with."""
    check_domains(model)
    version = default_opset(model)
    if version >= CANONICAL_OPSET:
        return model, version
    try:
        converted = version_converter.convert_version(model, CANONICAL_OPSET)
    except Exception as exc:  # the converter raises RuntimeError/InferenceError with C++ context
        raise MetaInferError(_explain_failure(model, version, exc)) from None
    # the converter leaves the IR version alone; raise it to the one this opset was released with
    minimum = helper.find_min_ir_version_for([helper.make_opsetid("", CANONICAL_OPSET)])
    converted.ir_version = max(converted.ir_version, minimum)
    keep_old_semantics(converted, version)  # the converter drops pre-11 Resize coordinates
    keep_channel_slopes(converted, version)  # and keeps pre-7 per-channel PRelu slopes flat
    return converted, version


def default_opset(model: onnx.ModelProto) -> int:
    for opset in model.opset_import:
        if opset.domain in AI_ONNX:
            return opset.version
    raise MetaInferError(
        "The model declares no ai.onnx opset in opset_import, so its operators have no defined "
        "meaning; re-export it with an opset (11 or newer)."
    )


def check_domains(model: onnx.ModelProto) -> None:
    """Raise for the first node whose domain ONNX Runtime has no kernels for."""
    local_functions = {(f.domain, f.name) for f in model.functions}
    for graph in iter_graphs(model.graph):
        for node in graph.node:
            if node.domain not in RUNNABLE_DOMAINS and (node.domain, node.op_type) not in local_functions:
                raise MetaInferError(
                    f"Node {describe(node)} has op type '{node.op_type}' in custom domain '{node.domain}', "
                    "which ONNX Runtime cannot run and the model does not define as a function; "
                    "re-export the model with standard ONNX ops, or add the op as a model-local function."
                )


def _explain_failure(model: onnx.ModelProto, version: int, exc: Exception) -> str:
    """Find the first node that cannot be converted on its own, and say why."""
    for graph in iter_graphs(model.graph):
        for node in graph.node:
            if node.domain not in AI_ONNX:
                continue
            reason = _node_failure(node, version)
            if reason:
                return (
                    f"Node {describe(node)} (op {node.op_type}) cannot be converted from opset {version} to "
                    f"{CANONICAL_OPSET}: {reason}; replace it with supported ops and re-export the model."
                )
    return (
        f"The model cannot be converted from opset {version} to {CANONICAL_OPSET} "
        f"({_converter_reason(exc)}); re-export it at opset {CANONICAL_OPSET}."
    )


def _node_failure(node: onnx.NodeProto, version: int) -> str | None:
    if not onnx.defs.has(node.op_type):
        return f"'{node.op_type}' is not an ai.onnx operator"
    probe = helper.make_model(
        helper.make_graph(
            [node],
            "probe",
            [helper.make_value_info(n, onnx.TypeProto()) for n in node.input if n],
            [helper.make_value_info(n, onnx.TypeProto()) for n in node.output if n],
        ),
        opset_imports=[helper.make_opsetid("", version)],
    )
    try:
        version_converter.convert_version(probe, CANONICAL_OPSET)
    except Exception as exc:
        return _converter_reason(exc)
    return None


def _converter_reason(exc: Exception) -> str:
    """The converter's message without its C++ file/assertion prefix."""
    return first_line(exc).split("failed: ", 1)[-1]
