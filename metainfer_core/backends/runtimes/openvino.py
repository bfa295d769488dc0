"""OpenVINO's CPU plugin, reading the ONNX graph directly. Its precision is a setting
(INFERENCE_PRECISION_HINT), offered where the plugin reports the CPU's datapath for it; its own
int8 form quantizes only what quantized ops read, which ONNX Runtime runs in float."""
from __future__ import annotations

from typing import Any

from metainfer_core.backends.runtimes.base import Runtime
from metainfer_core.backends.runtimes.registry import register


@register
class OpenVino(Runtime):
    name = "openvino"
    packages = ("openvino",)
    precisions = ("f32", "bf16", "f16")
    sets_precision = True
    native_int8_forms = ("inputs",)

    def cpu_precisions(self) -> set[str]:
        from metainfer_core.backends.ov_backend import device_precisions

        return device_precisions()

    def serving_options(self, cores: int, concurrency: int, rows: int = 1) -> list[dict[str, Any]]:
        """One compiled model, as many infer requests as requests in flight: the LATENCY hint (one
        stream on every core), and for several requests the THROUGHPUT hint with the streams
        the plugin picks and with 2, 4, ... streams up to the requests (or the cores). Requests
        are not combined into calls (`rows` unused): the path compiles each input shape apart,
        and a call of a few requests' rows is a shape of its own."""
        from metainfer_core.serving.options import doublings

        out: list[dict[str, Any]] = [{"performance_hint": "LATENCY", "num_streams": 1, "intra_op_threads": cores}]
        if concurrency > 1:
            out.append({"performance_hint": "THROUGHPUT", "intra_op_threads": cores})
            out += [{"performance_hint": "THROUGHPUT", "num_streams": n, "intra_op_threads": cores}
                    for n in doublings(min(concurrency, cores)) if n > 1]
        return out

    def backend(self, path, name, measurement, spec, seed=0):
        from metainfer_core.backends.ov_backend import OpenVinoBackend

        return OpenVinoBackend(name=name, measurement=measurement, spec={**spec, "inference_precision": path.precision},
                               seed=seed)

    def peak_session(self, options: dict[str, Any]):
        import openvino as ov

        core = ov.Core()
        core.get_property("CPU", "FULL_DEVICE_NAME")          # loads the plugin
        config = options["config"]

        def open_session(model_path, feeds):
            # read as the path compiles it (ov_backend: from bytes): OpenVINO's ONNX reader of a
            # file path refuses some Loop bodies it reads from bytes
            with open(model_path, "rb") as f:
                model = core.read_model(f.read(), b"")
            model.reshape({k: list(v.shape) for k, v in feeds.items()})
            return core.compile_model(model, "CPU", config).create_infer_request().infer

        return open_session
