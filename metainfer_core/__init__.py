"""meta-infer core library: plain Python, no Prefect / Hydra / MLflow imports."""
import os as _os

# ONNX Runtime's telemetry off (it queues events in ~/.cache/Microsoft/DeveloperTools/.onnxruntime):
# read when onnxruntime is imported, which no module of this package does before this line runs;
# onnxruntime.disable_telemetry_events() does not stop that queue.
_os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
