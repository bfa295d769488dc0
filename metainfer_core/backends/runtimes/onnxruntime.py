"""ONNX Runtime (its execution providers as the target lists them): the host's default path.
It has no precision setting, it computes in the graph's own types, so its path is named by the
runtime alone."""
from __future__ import annotations

from typing import Any

from metainfer_core.backends.runtimes.base import Runtime
from metainfer_core.backends.runtimes.registry import register


@register
class OnnxRuntime(Runtime):
    name = "onnxruntime"
    packages = ("onnxruntime",)
    default = True

    def backend(self, path, name, measurement, spec, seed=0):
        from metainfer_core.backends.ort_backend import OrtBackend

        return OrtBackend(name=name, measurement=measurement, spec=spec, seed=seed)

    def peak_session(self, options: dict[str, Any]):
        import onnxruntime as ort

        from metainfer_core.ir.tensors import ORT_LOG_SEVERITY

        def open_session(model_path, feeds):
            so = ort.SessionOptions()
            so.intra_op_num_threads = options["intra_op_threads"]
            so.inter_op_num_threads = 1
            so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, options["graph_optimization_level"])
            so.log_severity_level = ORT_LOG_SEVERITY
            sess = ort.InferenceSession(model_path, so, providers=options["providers"])
            return lambda run_feeds: sess.run(None, run_feeds)

        return open_session
