"""The measured CPU host: every execution path installed on this machine behind one backend.

Kernels are micro-benchmarked, and unbound plans run, on the default path (ONNX Runtime with
the target's settings, as users run it today); a plan bound to another path (metadata written
by the `binding` action) compiles on the backend its runtime builds (backends/runtimes/). Each
path describes itself with its own TargetInfo, so its records live under a fingerprint version
of their own."""
from __future__ import annotations

from functools import cached_property

import onnx

from metainfer_core.backends.base import Backend, Compiled, TargetInfo
from metainfer_core.backends.ort_backend import OrtBackend
from metainfer_core.backends.paths import ExecutionPath, offered_paths
from metainfer_core.backends.runtimes import runtime_of


class HostBackend(OrtBackend):
    @cached_property
    def paths(self) -> list[ExecutionPath]:
        """The spec's paths, less the precisions their runtime has no datapath for on this CPU
        (asked once per runtime, and only of runtimes the spec lists)."""
        have: dict[str, set[str]] = {}

        def here(path: ExecutionPath) -> bool:
            if path.runtime not in have:
                have[path.runtime] = runtime_of(path.runtime).cpu_precisions()
            return path.precision in have[path.runtime]

        return [p for p in offered_paths(self.spec) if p.is_default or here(p)]

    @property
    def info(self) -> TargetInfo:
        base = super().info
        extra = {**base.extra, "execution_paths": [p.label for p in self.paths]}
        return TargetInfo(**{**base.__dict__, "extra": extra})

    def path_backend(self, path: ExecutionPath) -> Backend:
        """The backend that runs plans bound to `path` (this one for the default path)."""
        if path.is_default:
            return self
        if path not in self.paths:
            raise ValueError(f"execution path {path.label} is not offered by target {self.name} "
                             f"(offered: {[p.label for p in self.paths]})")
        cache = self.__dict__.setdefault("_path_backends", {})
        if path not in cache:
            spec = {**self.spec, **(self.spec.get("execution_paths", {}).get(path.runtime) or {})}
            cache[path] = runtime_of(path.runtime).backend(path, self.name, self.measurement, spec, self.seed)
        return cache[path]

    def path_failure(self, model: onnx.ModelProto, feeds: dict, runs_at: dict) -> tuple[str, str] | None:
        """(label, error) of the first execution path other than the default that cannot run
        `model` on `feeds` (compiled for their shapes, run once) but runs it on `runs_at` (a path
        that cannot run the model at all is not failing at these shapes); None where none."""
        def error(path: ExecutionPath, bound: onnx.ModelProto, f: dict) -> str | None:
            try:
                self.path_backend(path).compile(bound).run(f)
                return None
            except Exception as exc:  # noqa: BLE001 - why it fails is the answer
                return (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:200]

        for path in self.paths:
            if path.is_default:
                continue
            bound = onnx.ModelProto()
            bound.CopyFrom(model)
            path.write_to(bound)
            why = error(path, bound, feeds)
            if why is not None and error(path, bound, runs_at) is None:
                return path.label, why
        return None

    def compile(self, model: onnx.ModelProto) -> Compiled:
        path = ExecutionPath.of(model)
        return super().compile(model) if path.is_default else self.path_backend(path).compile(model)
