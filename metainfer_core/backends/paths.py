"""Execution paths: which runtime runs a plan, with the settings of that runtime that change
speed. A plan names its path in the model's metadata (`metainfer.execution_path`, written by
the `binding` action); a graph without it runs on the target's default path (ONNX Runtime with
default settings on `cpu`). A target lists the paths its host offers in its spec
(`execution_paths`); a path whose package is not installed is not offered."""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from typing import Any

import onnx

from metainfer_core.ir.directives import PATH_KEY, model_meta, set_model_meta

RUNTIMES = ("onnxruntime", "openvino")
PRECISIONS = ("f32", "bf16", "f16")
_PACKAGES = {"onnxruntime": "onnxruntime", "openvino": "openvino"}


@dataclass(frozen=True)
class ExecutionPath:
    runtime: str = "onnxruntime"
    precision: str = "f32"          # the runtime's inference precision (OpenVINO's INFERENCE_PRECISION_HINT)

    @property
    def label(self) -> str:
        return self.runtime if self.runtime == "onnxruntime" else f"{self.runtime}:{self.precision}"

    @property
    def is_default(self) -> bool:
        return self == DEFAULT_PATH

    @property
    def lossy(self) -> bool:
        """Computing below fp32 changes the numerics: scored with its measured accuracy loss."""
        return self.precision != "f32"

    def as_dict(self) -> dict[str, str]:
        return {"runtime": self.runtime, "precision": self.precision}

    def write_to(self, model: onnx.ModelProto) -> None:
        """Names this path in `model`'s metadata, in place (what `of` reads)."""
        set_model_meta(model, PATH_KEY, json.dumps(self.as_dict()))

    @staticmethod
    def of(model: onnx.ModelProto) -> "ExecutionPath":
        raw = model_meta(model, PATH_KEY)
        return ExecutionPath(**json.loads(raw)) if raw else DEFAULT_PATH

    @staticmethod
    def parse(label: str) -> "ExecutionPath":
        runtime, _, precision = label.partition(":")
        return ExecutionPath(runtime, precision or "f32")


DEFAULT_PATH = ExecutionPath()


def installed(runtime: str) -> bool:
    return importlib.util.find_spec(_PACKAGES.get(runtime, runtime)) is not None


def offered_paths(spec: dict[str, Any]) -> list[ExecutionPath]:
    """The paths a target's spec lists (`execution_paths: {runtime: {precisions: [...]}}`) whose
    runtime is installed; the default path always."""
    out = [DEFAULT_PATH]
    for runtime, conf in (spec.get("execution_paths") or {}).items():
        if runtime == "onnxruntime" or not installed(runtime):
            continue
        for precision in (conf or {}).get("precisions", ["f32"]):
            out.append(ExecutionPath(runtime, precision))
    return out


def missing_paths(spec: dict[str, Any]) -> list[str]:
    """Runtimes the spec lists that are not installed (for the one-paragraph error)."""
    return [r for r in (spec.get("execution_paths") or {}) if not installed(r)]
