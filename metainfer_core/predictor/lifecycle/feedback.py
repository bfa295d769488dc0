"""Runtime data from deployments: measured latencies of a deployed plan go back into the
fingerprint library as whole-model runs (source `runtime`), which fine-tuning and the next
re-profiling learn from. Verify writes its own measurements the same way, with the
prediction beside them (the predictor's calibration signal)."""
from __future__ import annotations

import numpy as np
import onnx

from metainfer_core.backends.base import TargetInfo, Timing
from metainfer_core.backends.paths import ExecutionPath
from metainfer_core.fingerprint.library import FingerprintLibrary, PlanRun
from metainfer_core.ir.graph_hash import graph_hash
from metainfer_core.predictor.features.plan_graph import describe
from metainfer_core.predictor.model.path_memory import PLANNED_KEY


def runtime_run(model: onnx.ModelProto, model_name: str, latencies_ms: list[float], label: str = "deployed",
                peak_mem_bytes: int | None = None, predicted_ms: float | None = None,
                predictor: str | None = None, planned_peak_bytes: int | None = None) -> PlanRun:
    """planned_peak_bytes: the liveness planner's peak for the plan, kept beside the measured one
    (each path's MemoryFit learns from the pairs)."""
    if not latencies_ms or min(latencies_ms) <= 0:
        raise ValueError("latencies_ms needs at least one positive latency in milliseconds")
    graph = describe(model)
    if planned_peak_bytes:
        graph[PLANNED_KEY] = int(planned_peak_bytes)
    return PlanRun(model=model_name, plan_key=graph_hash(model), label=label, graph=graph,
                   timing=Timing.from_samples(list(latencies_ms)), source="runtime", peak_mem_bytes=peak_mem_bytes,
                   predicted_ms=predicted_ms, predictor=predictor)


def record_runtime(library: FingerprintLibrary, info: TargetInfo, runs: list[PlanRun]) -> int:
    """Append runtime observations under the target's current fingerprint version."""
    return library.add_plan_runs(info, runs)


def calibration_ratio(runs: list[dict]) -> float | None:
    """Median measured/predicted latency over runtime runs that carry a prediction: 1 when the
    predictor is calibrated; its drift away from 1 marks the predictor stale."""
    ratios = [r["median_ms"] / r["predicted_ms"] for r in runs if r.get("predicted_ms")]
    return float(np.median(ratios)) if ratios else None


def record_verified_runs(library: FingerprintLibrary, backend, prepared, outcome, verified,
                         predictor_version: str) -> dict:
    """Write every verified plan's measured latency, with its prediction, back to the library
    as runtime runs (fine-tuning learns from them) and return the calibration ratio."""
    pairs = [(outcome.default, verified.baseline, "default")]
    pairs += [(c, v, v.label) for c, v in zip(verified.plans, verified.candidates)]
    by_path: dict[ExecutionPath, list] = {}
    for c, v, label in pairs:
        if v.ok and v.samples_ms:
            predicted = c.latency_ms
            by_path.setdefault(ExecutionPath.of(c.model), []).append(
                runtime_run(c.model, prepared.name, v.samples_ms, f"verify:{label}", v.peak_mem_bytes,
                            predicted if predicted == predicted else None, predictor_version,   # NaN: not predicted
                            c.planned_peak_bytes))
    for path, runs in by_path.items():     # each path's runs under its own fingerprint version
        info = backend.info if path.is_default else backend.path_backend(path).info
        record_runtime(library, info, runs)
    # the predictor's calibration: default-path runs (other paths' predictions carry a measured ratio)
    runs = by_path.get(ExecutionPath(), [])
    ratio = calibration_ratio([{"median_ms": r.timing.median_ms, "predicted_ms": r.predicted_ms} for r in runs])
    return {"runs_recorded": sum(len(r) for r in by_path.values()), "measured_over_predicted": ratio,
            "runs_by_path": {p.label: len(r) for p, r in by_path.items()}}
