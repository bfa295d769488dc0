"""normalize stage: load any ONNX model and rewrite it to the canonical, checked IR."""

from metainfer_core.normalize.loader import load_model
from metainfer_core.normalize.opset import CANONICAL_OPSET
from metainfer_core.normalize.pipeline import NORMALIZE_PASSES, NormalizeResult, normalize
from metainfer_core.normalize.shapes import unbound_inputs

__all__ = ["CANONICAL_OPSET", "NORMALIZE_PASSES", "NormalizeResult", "load_model", "normalize", "unbound_inputs"]
