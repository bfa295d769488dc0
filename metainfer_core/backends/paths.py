"""Execution paths: which runtime runs a plan, with the settings of that runtime that change
speed. A plan names its path in the model's metadata (`metainfer.execution_path`, written by
the `binding` action); a graph without it runs on the target's default path (the runtime that
declares itself the host's default, with the target's settings). A target lists the paths its
host offers in its spec (`execution_paths`); a path whose package is not installed is not
offered. What each runtime is lives in its own module (metainfer_core/backends/runtimes/)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import onnx

from metainfer_core.backends.runtimes import registry
from metainfer_core.ir.directives import PATH_KEY, model_meta, set_model_meta


def _default_runtime() -> str:
    return registry.default_runtime().name


@dataclass(frozen=True)
class ExecutionPath:
    runtime: str = field(default_factory=_default_runtime)
    precision: str = "f32"          # the runtime's inference precision, where it has such a setting

    @property
    def label(self) -> str:
        """`runtime:precision`, or the runtime alone where it has no precision setting."""
        runtime = registry.find(self.runtime)
        return self.runtime if runtime is not None and not runtime.sets_precision else f"{self.runtime}:{self.precision}"

    @property
    def is_default(self) -> bool:
        return self == default_path()

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
        return ExecutionPath(**json.loads(raw)) if raw else default_path()

    @staticmethod
    def parse(label: str) -> "ExecutionPath":
        runtime, _, precision = label.partition(":")
        return ExecutionPath(runtime, precision or "f32")


def default_path() -> ExecutionPath:
    return ExecutionPath()


def __getattr__(name: str) -> Any:
    # read from the registry when asked, not at import: the runtime modules load after this one
    if name == "DEFAULT_PATH":
        return default_path()
    if name == "RUNTIMES":
        return registry.runtime_names()
    if name == "PRECISIONS":
        return registry.precisions()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def installed(runtime: str) -> bool:
    """Whether a runtime of that name is declared and its packages are importable here."""
    declared = registry.find(runtime)
    return declared is not None and declared.installed()


def offered_paths(spec: dict[str, Any]) -> list[ExecutionPath]:
    """The paths a target's spec lists (`execution_paths: {runtime: {precisions: [...]}}`) whose
    runtime is installed; the default path always."""
    default = default_path()
    out = [default]
    for runtime, conf in (spec.get("execution_paths") or {}).items():
        if runtime == default.runtime or not installed(runtime):
            continue
        for precision in (conf or {}).get("precisions", ["f32"]):
            out.append(ExecutionPath(runtime, precision))
    return out


def missing_paths(spec: dict[str, Any]) -> list[str]:
    """The packages the spec's runtimes need that are not installed (for the one-paragraph
    error); a runtime no module declares is named itself."""
    missing: list[str] = []
    for runtime in spec.get("execution_paths") or {}:
        declared = registry.find(runtime)
        missing += [p for p in (declared.missing_packages() if declared else [runtime]) if p not in missing]
    return missing
