"""What many tests share that is not a test: backends built from conf/ (the modeled targets'
own YAML, the host with OpenVINO beside ONNX Runtime), an in-memory twin of the predictor, and
the weights the search tests score with. Imported by the tests; holds no tests itself."""
from __future__ import annotations

import numpy as np

from metainfer_core.backends import create_backend
from metainfer_core.search import Weights
from app.compose import target_backend

# the host target as conf/target/cpu.yaml has it, OpenVINO's CPU plugin offered beside ONNX Runtime
HOST_SPEC = {"providers": ["CPUExecutionProvider"], "intra_op_threads": 1, "memory_limit_bytes": 1 << 33,
             "execution_paths": {"openvino": {"precisions": ["f32", "bf16"], "performance_hint": "LATENCY"}}}
BALANCED = Weights(1.0, 0.3, 1.0, 0.02)


def backend(name: str, **spec_changes):
    """The backend of target `name` from conf/target/<name>.yaml, with spec entries overridden."""
    return target_backend(name, **spec_changes)


def host():
    return create_backend("metainfer_core.backends.host.HostBackend", "cpu", "measured", HOST_SPEC)


class FakeCostModel:
    """In-memory twin of the predictor: a fixed cost per kernel."""
    def predict_kernels_ms(self, kernels):
        return np.array([0.01 + k.flops * 1e-9 for k in kernels])

    def predict_ms(self, kernels, infos=None):
        return float(self.predict_kernels_ms(kernels).sum())
