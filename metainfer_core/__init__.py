"""meta-infer core library: plain Python, no Prefect / Hydra / MLflow imports."""
import os as _os

# ONNX Runtime's telemetry off (it queues events in ~/.cache/Microsoft/DeveloperTools/.onnxruntime):
# read when onnxruntime is imported, which no module of this package does before this line runs;
# onnxruntime.disable_telemetry_events() does not stop that queue.
_os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

# OpenVINO's usage telemetry off: `import openvino` loads its converter, which counts runs in
# ~/intel/ and sends events from a forked process; with threads running, that fork can deadlock
# (the run then hangs at exit, joining it). Without the package, OpenVINO uses its own stub.
import sys as _sys  # noqa: E402
_sys.modules.setdefault("openvino_telemetry", None)
