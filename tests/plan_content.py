"""plan.json's content with made-up figures, complete enough for read_plan (and so for
load_plan): for tests that lay out a run folder by hand."""
from __future__ import annotations

from typing import Any

from metainfer_core.plan.schema import PLAN_SCHEMA

_METRICS = ("latency_ms", "p90_ms", "peak_mem_bytes", "accuracy_loss", "compile_s")


def plan_content(**fields: Any) -> dict[str, Any]:
    """A rolled-back plan of model `net` on `cpu` with no figures; `fields` replace its keys."""
    return {"schema": PLAN_SCHEMA,
            "model": {"name": "net", "source": "file:net.onnx", "sha256": "0" * 64},
            "target": {"name": "cpu", "measurement": "measured", "firmware": "-", "driver": "-", "runtime": "-"},
            "fingerprint_version": "cpu-0", "weights": {}, "decision": "rolled_back", "reason": "-", "actions": [],
            "predicted": dict.fromkeys(("latency_ms", "peak_mem_bytes", "accuracy_loss", "score")),
            "measured": metrics(), "baseline": metrics(), "timings": {}, "artifact": "model.onnx",
            "mlflow_run_id": None, **fields}


def metrics(**figures: Any) -> dict[str, Any]:
    """A plan's measured figures (what verify reports), those not given null."""
    return {**dict.fromkeys(_METRICS), **figures}
