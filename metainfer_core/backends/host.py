"""The measured CPU host: every execution path installed on this machine behind one backend.

Kernels are micro-benchmarked, and unbound plans run, on the default path (ONNX Runtime with
the target's settings, as users run it today); a plan bound to another path (metadata written
by the `binding` action) compiles on that path's backend. Each path describes itself with its
own TargetInfo, so its records live under a fingerprint version of their own."""
from __future__ import annotations

from functools import cached_property

import onnx

from metainfer_core.backends.base import Backend, Compiled, TargetInfo
from metainfer_core.backends.ort_backend import OrtBackend
from metainfer_core.backends.paths import DEFAULT_PATH, ExecutionPath, offered_paths


class HostBackend(OrtBackend):
    @cached_property
    def paths(self) -> list[ExecutionPath]:
        """The spec's paths, less OpenVINO precisions this CPU has no datapath for."""
        paths = offered_paths(self.spec)
        if any(p.runtime == "openvino" for p in paths):
            from metainfer_core.backends.ov_backend import device_precisions

            have = device_precisions()
            paths = [p for p in paths if p.runtime != "openvino" or p.precision in have]
        return paths

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
            from metainfer_core.backends.ov_backend import OpenVinoBackend

            spec = {**self.spec, **(self.spec.get("execution_paths", {}).get(path.runtime) or {}),
                    "inference_precision": path.precision}
            cache[path] = OpenVinoBackend(name=self.name, measurement=self.measurement, spec=spec, seed=self.seed)
        return cache[path]

    def compile(self, model: onnx.ModelProto) -> Compiled:
        path = ExecutionPath.of(model)
        return super().compile(model) if path == DEFAULT_PATH else self.path_backend(path).compile(model)
