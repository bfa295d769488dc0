"""A model file's name when `model.name` is not given: the name every record of its runs carries
(run folders, MLflow experiment, registry, plan). Many packages ship `model.onnx` or
`onnx/model_quantized.onnx`; their stems alone would file different models together, so a generic
stem takes the nearest distinctive folder above it, else the graph's own name."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

# words that say nothing about which model a file holds
_GENERIC = frozenset(
    "model models onnx net network graph export exported best last final weights main default output outputs "
    "out saved inference infer quantized quant int8 uint8 fp16 fp32 float16 float32 opt optimized sim simplified "
    "encoder decoder merged with past tmp temp checkpoint checkpoints dist build artifacts assets data files "
    "resources res src lib site packages torch jit tf2onnx".split()
)


def default_model_name(path: str | Path) -> str:
    """The file's stem when it names the model; for a generic stem (`model`, `model_int8`), the
    nearest folder above it that is not generic joined with the stem (`sentiment_v2/onnx/model.onnx`
    -> `sentiment_v2_model`); with none, the graph's name when distinctive; else the stem and a
    short hash of the file's absolute path, so two different files never share a name by accident."""
    p = Path(path).resolve()
    stem = _clean(p.stem) or "model"
    if not _generic(stem):
        return stem
    for folder in p.parents:
        name = _clean(folder.name)
        if name and not _generic(name):
            return f"{name}_{stem}"
    graph = _clean(_graph_name(p))
    if graph and not _generic(graph):
        return f"{graph}_{stem}"
    return f"{stem}_{hashlib.sha256(str(p).encode()).hexdigest()[:6]}"


def _generic(name: str) -> bool:
    words = [w for w in re.split(r"[_\-.+]+", name.lower()) if w]
    return all(w in _GENERIC or w.isdigit() for w in words)


def _clean(text: str) -> str:
    """Only what a folder name, an MLflow experiment and a registry name all take."""
    return re.sub(r"[^A-Za-z0-9_.\-+]+", "_", text).strip("_.")


def _graph_name(path: Path) -> str:
    try:
        import onnx

        return onnx.load(path, load_external_data=False).graph.name
    except Exception:  # noqa: BLE001 - an unreadable file is refused later, with its own message
        return ""
