"""Load an ONNX file, with its external-data weights, or say clearly why it cannot be used."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx.external_data_helper import ExternalDataInfo, load_external_data_for_model, uses_external_data

from metainfer_core.errors import MetaInferError
from metainfer_core.ir.graph_utils import iter_graphs
from metainfer_core.normalize.messages import first_line

# A ModelProto is serialised whole by protobuf, which caps a message at 2 GiB.
_MAX_BYTES = 2**31 - 1


def load_model(path: str | Path) -> onnx.ModelProto:
    path = Path(path)
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise MetaInferError(f"Model file '{path}' {what}; pass the path of an .onnx file (model.path=<file.onnx>).")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError and friends for non-ONNX bytes
        raise MetaInferError(
            f"Model file '{path}' is not a readable ONNX model (decoding failed: {first_line(exc)}); "
            "the file is corrupt, truncated or not ONNX: re-export or re-download it."
        ) from None
    if not model.opset_import or not model.graph.output or not model.graph.node:
        raise MetaInferError(
            f"Model file '{path}' decodes to an empty ONNX graph (no nodes, outputs or opset), so it is "
            "corrupt, truncated or not ONNX: re-export or re-download it."
        )
    _load_weights(model, path)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        problem = _wiring_problem(model.graph)
        raise MetaInferError(
            f"Model file '{path}' is not a valid ONNX model ({problem or first_line(exc)}); "
            "it may be truncated or written by a broken exporter: re-export it."
        ) from None
    return model


def _wiring_problem(graph: onnx.GraphProto) -> str | None:
    """What the checker's "must be topologically sorted" means here: an input no node, graph
    input or initializer produces (dangling), or nodes that feed each other (a cycle)."""
    produced = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output if o}
    for node in graph.node:
        for name in node.input:
            if name and name not in produced and name not in producer:
                return (f"node '{node.name or node.op_type}' ({node.op_type}) reads tensor '{name}', which no node, "
                        "graph input or initializer produces")
    # Kahn's algorithm: the nodes never freed lie on (or behind) a cycle
    waiting = {id(n): sum(1 for i in n.input if i in producer) for n in graph.node}
    consumers: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            if i in producer:
                consumers.setdefault(i, []).append(n)
    ready = [n for n in graph.node if waiting[id(n)] == 0]
    while ready:
        for o in ready.pop().output:
            for c in consumers.get(o, []):
                waiting[id(c)] -= 1
                if waiting[id(c)] == 0:
                    ready.append(c)
    stuck = [n.name or n.op_type for n in graph.node if waiting[id(n)] > 0]
    if stuck:
        return (f"nodes {stuck[:5]}{' ...' if len(stuck) > 5 else ''} never get their inputs: they lie on or behind a "
                "cycle, each waiting for another's output")
    return None


def _load_weights(model: onnx.ModelProto, path: Path) -> None:
    """Read external-data tensors from the model's folder, checking files and size first."""
    folder = path.parent
    total = path.stat().st_size
    seen: set[Path] = set()
    for tensor in _all_tensors(model):
        if not uses_external_data(tensor):
            continue
        location = folder / ExternalDataInfo(tensor).location
        if not location.is_file():
            raise MetaInferError(
                f"Weight '{tensor.name}' of model '{path}' is stored in external file '{location}', which "
                "does not exist; copy the model's external-data files next to the .onnx file."
            )
        if location not in seen:
            seen.add(location)
            total += location.stat().st_size
    if total > _MAX_BYTES:
        raise MetaInferError(
            f"Model '{path}' with its weights is {total / 2**30:.1f} GiB; models over 2 GiB are not "
            "supported by normalize: use a smaller model or split it."
        )
    try:
        load_external_data_for_model(model, str(folder))
    except Exception as exc:  # bad offsets/lengths or unreadable files
        raise MetaInferError(
            f"External weights of model '{path}' could not be read ({first_line(exc)}); "
            "re-save the model with its external-data files."
        ) from None


def _all_tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    tensors: list[onnx.TensorProto] = []
    for graph in iter_graphs(model.graph):
        tensors.extend(graph.initializer)
        for node in graph.node:
            for attr in node.attribute:
                tensors.extend([attr.t] if attr.HasField("t") else attr.tensors)
    return tensors
